//! What the fuzz targets run: everything gradflow reads from a peer or a file, fed arbitrary
//! bytes. A target fails on a panic, on any single allocation over 256 MiB
//! (`-malloc_limit_mb=256`) and on an input slower than the time limit (`-timeout`); `run.sh`
//! sets both. On success each target also checks what the input decoded to, so a decoder that
//! returns garbage instead of an error fails too.

use std::cell::RefCell;
use std::path::Path;

use gradflow::codec::{build_codec, Codec, CodecSpec, CODEC_NAMES};
use gradflow::data::libsvm::{parse_libsvm, LibsvmOptions};
use gradflow::data::partition::RowFilter;
use gradflow::exchange::pull::Request;
use gradflow::exchange::{read_f32s, Aggregator, Envelope, PULL_REQUEST};
use gradflow::job::Job;
use gradflow::sparse::SparseGrad;

/// Dimension the envelope target's receiver expects.
pub const ENVELOPE_DIM: u32 = 1 << 20;

/// A codec with default parameters (decoders read their parameters from the message).
pub fn codec(name: &str) -> Box<dyn Codec> {
    build_codec(&CodecSpec::with_defaults(name).expect("a registered codec")).expect("defaults")
}

thread_local! {
    static CODECS: RefCell<Vec<(&'static str, Box<dyn Codec>)>> =
        RefCell::new(CODEC_NAMES.iter().map(|&n| (n, codec(n))).collect());
}

/// Checks what a decoder accepted: as many values as keys, keys strictly increasing and below
/// the dimension, values finite.
fn check_decoded(name: &str, dim: u32, g: &SparseGrad) {
    assert_eq!(
        g.keys.len(),
        g.values.len(),
        "{name}: keys and values differ in number"
    );
    assert!(
        g.keys.windows(2).all(|w| w[0] < w[1]),
        "{name}: keys not increasing"
    );
    assert!(
        g.keys.iter().all(|&k| k < dim),
        "{name}: key beyond dimension {dim}"
    );
    assert!(
        g.values.iter().all(|v| v.is_finite()),
        "{name}: non-finite value"
    );
}

/// Decodes `data` as a message of codec `name`.
pub fn decode(name: &str, data: &[u8]) {
    CODECS.with_borrow_mut(|codecs| {
        let codec = &mut codecs.iter_mut().find(|(n, _)| *n == name).unwrap().1;
        let mut out = SparseGrad::default();
        if let Ok(dim) = codec.decode(data, &mut out) {
            check_decoded(name, dim, &out);
        }
    })
}

/// The receiving path of the exchange: `data` as the bincode bytes timely carries, then the
/// payload as a pull request, as a gradient message for every codec's aggregator, and as a
/// slice of f32 values.
pub fn envelope(data: &[u8]) {
    let Ok(envelope) = bincode::deserialize::<Envelope>(data) else {
        return;
    };
    if envelope.kind == PULL_REQUEST {
        if let Ok(Request::Keys(keys)) = Request::decode(&envelope.payload, ENVELOPE_DIM) {
            assert!(keys.windows(2).all(|w| w[0] < w[1]) && keys.iter().all(|&k| k < ENVELOPE_DIM));
        }
        return;
    }
    CODECS.with_borrow_mut(|codecs| {
        let mut aggregator = Aggregator::default();
        for (name, codec) in codecs.iter_mut() {
            let mut msgs = [envelope.clone()];
            if let Ok(sum) = aggregator.aggregate(codec.as_mut(), &mut msgs, ENVELOPE_DIM) {
                check_decoded(name, ENVELOPE_DIM, sum);
            }
        }
    });
    let mut values = Vec::new();
    let _ = read_f32s(&envelope.payload, envelope.payload.len() / 4, &mut values);
}

/// A LibSVM file: one-based with the dimension taken from the file, and zero-based with a
/// declared dimension.
pub fn libsvm(data: &[u8]) {
    for opts in [
        LibsvmOptions::default(),
        LibsvmOptions {
            zero_based: true,
            dim: Some(1000),
            ignore_beyond_dim: false,
        },
        LibsvmOptions {
            zero_based: false,
            dim: Some(100),
            ignore_beyond_dim: true,
        },
    ] {
        if let Ok(split) = parse_libsvm(data, Path::new("fuzz.svm"), &opts, &RowFilter::all()) {
            let d = &split.train;
            assert_eq!(d.row_ptr.len(), d.labels.len() + 1);
            assert!(
                d.indices.iter().all(|&i| i < d.dim),
                "index beyond dimension"
            );
            assert!(opts.dim.is_none_or(|dim| d.dim == dim));
        }
    }
}

/// A job file, then what the CLI derives from it before training.
pub fn job(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(job) = Job::parse(text, Path::new("fuzz.toml"), &[]) {
        let _ = job.describe_exchange();
        let _ = job.memory();
        assert!(job.rounds_per_epoch() >= 1);
    }
}
