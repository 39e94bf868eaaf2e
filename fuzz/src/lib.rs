//! What the fuzz targets run: everything gradflow reads from a peer or a file, fed arbitrary
//! bytes. A target fails on a panic, on any single allocation over 256 MiB
//! (`-malloc_limit_mb=256`) and on an input slower than the time limit (`-timeout`); `run.sh`
//! sets both. On success each target also checks what the input decoded to, so a decoder that
//! returns garbage instead of an error fails too.

use std::cell::RefCell;
use std::path::Path;

use gradflow::codec::{build_codec, Codec, CodecSpec, CODEC_NAMES};
use gradflow::data::cache;
use gradflow::data::libsvm::{parse_libsvm, LibsvmOptions};
use gradflow::data::partition::RowFilter;
use gradflow::data::table::{encode_file, parse_rows, stream_map, CsvLines, FeatureMap, TableSpec};
use gradflow::data::LineRows;
use gradflow::exchange::pull::Request;
use gradflow::exchange::{read_f32s, Aggregator, Envelope, PULL_REQUEST};
use gradflow::handshake::{answer, greet, Credentials};
use gradflow::job::Job;
use gradflow::model::file::ModelFile;
use gradflow::sparse::SparseGrad;

/// Dimension the envelope target's receiver expects.
pub const ENVELOPE_DIM: u32 = 1 << 20;

/// Feature limit the model file target reads with (its weights take 4 bytes a feature).
pub const MODEL_MAX_DIM: u32 = 1 << 25;

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

/// The job dimension the decoders' receiving path checks messages against.
pub const JOB_DIM: u32 = 100_001;

/// Decodes `data` as a message of codec `name`: alone (any dimension the message declares),
/// and as a receiver does, against the job's dimension ([`Envelope::pairs`]).
pub fn decode(name: &str, data: &[u8]) {
    CODECS.with_borrow_mut(|codecs| {
        let codec = &mut codecs.iter_mut().find(|(n, _)| *n == name).unwrap().1;
        let mut out = SparseGrad::default();
        if let Ok(dim) = codec.decode(data, &mut out) {
            check_decoded(name, dim, &out);
        }
        let received = Envelope {
            dest: 0,
            src: 1,
            rows: 1,
            kind: 0,
            payload: data.to_vec(),
            local: None,
        };
        if let Ok(g) = received.pairs(codec.as_mut(), JOB_DIM, &mut out) {
            check_decoded(name, JOB_DIM, g);
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
            ..LibsvmOptions::default()
        },
        LibsvmOptions {
            zero_based: false,
            dim: Some(100),
            ignore_beyond_dim: true,
            ..LibsvmOptions::default()
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

/// An IDX pair: the first byte is the length of the labels file, which follows; the images
/// file is the rest. A dataset read has labels among the classes, indices below its dimension
/// and pixel values in (0, 1].
pub fn idx(data: &[u8]) {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let (labels, images) = rest.split_at((cut as usize).min(rest.len()));
    let (mut images, mut labels) = (images, labels);
    let read = gradflow::data::idx::parse_idx(
        (&mut images, Path::new("fuzz-images")),
        (&mut labels, Path::new("fuzz-labels")),
        4096,
        Some(10),
    );
    if let Ok(d) = read {
        assert_eq!(d.row_ptr.len(), d.labels.len() + 1);
        assert!(d.labels.iter().all(|&l| (0.0..10.0).contains(&l)));
        assert!(d.indices.iter().all(|&i| i < d.dim) && d.dim <= 4096);
        assert!(d.values.iter().all(|&v| v > 0.0 && v <= 1.0));
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

/// The feature map the table target encodes with: every kind of feature (categorical,
/// standardised and bucketised numbers, date parts, a cross), a vocabulary with "other" keys.
pub const TABLE_MAP: &str = r#"
dim = 0
numeric = [{ count = 4, mean = 1.0, std = 2.0, edges = [] }, { count = 4, mean = 0.0, std = 1.0, edges = [0.5, 2.0] }]
vocabulary = [["a", "b"], ["1", "2"], ["0", "3"], ["0", "1", "2"], ["a\u001f1"]]

[spec]
delimiter = ","
missing = ["", "NA"]

[spec.label]
column = "y"
above = 0.5

[spec.features]
categorical = ["c"]
numeric = [{ column = "x", transform = "standardize" }, { column = "z", transform = "bucket", buckets = 3 }]
datetime = [{ column = "t", parts = ["month", "dow"] }]
crosses = [["c", "t.month"]]
min_count = 2
"#;

thread_local! {
    static TABLE: (tempfile::TempDir, FeatureMap) = {
        let mut map: FeatureMap = toml::from_str(TABLE_MAP).expect("the fuzz map parses");
        map = FeatureMap::new(map.spec, map.numeric, map.vocabulary);
        (memory_dir(), map)
    };
}

/// A temporary directory in memory (tmpfs) where there is one: a disk under load can stall a
/// file's open or write past the one-second limit, which is not the reader's time.
fn memory_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir());
    dir.expect("a temporary directory")
}

/// A CSV table read and encoded through a feature map, as `predict` does; the rows it accepts
/// have sorted keys below the map's dimension and finite values.
pub fn table(data: &[u8]) {
    encoded_table("fuzz.csv", data)
}

/// A Parquet table (footer, pages, types, nulls) read and encoded as [`table`]'s CSV is, by
/// the Apache Arrow crates' reader under gradflow's checks.
pub fn parquet_table(data: &[u8]) {
    // A panic the reader contains (the crate's, on a malformed file) is the reader's error,
    // not a crash: libfuzzer-sys's hook, which aborts, sees only the others.
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let abort = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !gradflow::data::table::parquet::panic_is_contained() {
                abort(info)
            }
        }));
    });
    encoded_table("fuzz.parquet", data)
}

/// `data` as the file `name`, read and encoded through the fuzz map; the rows it accepts are
/// checked.
fn encoded_table(name: &str, data: &[u8]) {
    TABLE.with(|(dir, map)| {
        let path = dir.path().join(name);
        std::fs::write(&path, data).expect("write the input");
        if let Ok(e) = encode_file(map, &path, Some("c")) {
            let d = &e.data;
            assert_eq!(d.row_ptr.len(), d.labels.len() + 1);
            assert_eq!(e.ids.len(), d.rows());
            for r in 0..d.rows() {
                let (k, v) = d.row(r);
                assert!(k.windows(2).all(|w| w[0] < w[1]) && k.iter().all(|&k| k < map.dim));
                assert!(v.iter().all(|v| v.is_finite()), "non-finite feature");
            }
        }
    })
}

/// The spec of a table read as a stream: the fuzz map's columns, every feature hashed (a
/// stream's map has no statistics), a text column, and `log1p`.
pub const STREAM_SPEC: &str = r#"
delimiter = ","
missing = ["", "NA"]

[label]
column = "y"
equals = "1"

[features]
categorical = ["c"]
numeric = [{ column = "x", transform = "log1p" }, { column = "z" }]
datetime = [{ column = "t", parts = ["month", "dow"] }]
text = [{ column = "c", hash_bits = 6, ngrams = 2 }]
crosses = [["c", "t.month"]]
hash_bits = 8
"#;

/// Lines of a CSV stream (the first its header) read one by one, as a stream's reader reads
/// them; the rows it accepts have sorted keys below the map's dimension and finite values.
pub fn table_lines(data: &[u8]) {
    thread_local! {
        static MAP: FeatureMap = {
            let spec: TableSpec = toml::from_str(STREAM_SPEC).expect("the stream spec parses");
            stream_map(&spec).expect("a stream's map")
        };
    }
    MAP.with(|map| {
        let mut lines = CsvLines::new(map, true).expect("no joins to read");
        let mut split = data.split_inclusive(|&b| b == b'\n');
        let Some(header) = split.next() else { return };
        if lines.header(header).is_err() {
            return;
        }
        for line in split.filter(|l| l.ends_with(b"\n")) {
            if let Ok(Some(label)) = lines.parse(line) {
                assert!(label == 1.0 || label == -1.0, "label {label}");
                let (k, v) = lines.features();
                assert!(k.windows(2).all(|w| w[0] < w[1]) && k.iter().all(|&k| k < map.dim));
                assert!(v.iter().all(|v| v.is_finite()), "non-finite feature");
            }
        }
    })
}

/// A model file, then its feature map if it has one.
pub fn model_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // A model's weights are dense: a few bytes declaring `dim N` allocate 4N bytes, bounded by
    // the reader's limit (the job's `data.max_dim`), not by the file's size. Under the fuzzer's
    // 256 MiB allocation limit the reader's limit is 2^25 features.
    if let Ok(m) = ModelFile::parse_limited(text, MODEL_MAX_DIM) {
        assert!(m.intercept.is_none_or(|k| (k as usize) < m.weights.len()));
        // A built-in model the file names fits its weights: features of `width` weights (the
        // linear model's `classes`), the intercept's first key one of a feature's, then the
        // dense ones.
        if let Ok(model) = m.builtin_model() {
            let (width, dense) = (model.width() as usize, model.dense() as usize);
            let features = m.weights.len().checked_sub(dense);
            assert!(features.is_some_and(|f| f % width == 0));
            assert!(m.intercept.is_none_or(|i| i as usize % width == 0));
        }
        let _ = m.builtin_loss();
        if let Some(f) = &m.features {
            let _ = toml::from_str::<FeatureMap>(f);
        }
    }
}

/// A prepared rows file (`data prepare`'s binary output).
pub fn rows_file(data: &[u8]) {
    if let Ok((dim, rows)) = parse_rows(data, Path::new("fuzz.bin")) {
        for r in rows {
            assert_eq!(r.keys.len(), r.values.len());
            assert!(r.keys.windows(2).all(|w| w[0] < w[1]) && r.keys.iter().all(|&k| k < dim));
        }
    }
}

/// A row cache file (`data.cache`), read in place from a memory map: the input is the file,
/// read under the key it holds (bytes 8-16), so that a mutated file reaches the rows. What
/// it accepts must hold: offsets rising to the nonzeros, keys ascending below the dimension,
/// values and labels finite.
pub fn cache_file(data: &[u8]) {
    thread_local! {
        static DIR: tempfile::TempDir = memory_dir();
    }
    let key = data
        .get(8..16)
        .map_or(0, |k| u64::from_le_bytes(k.try_into().expect("8")));
    DIR.with(|dir| {
        let path = dir.path().join("c.gfcache");
        // A new file each time, as the cache writes it: a file mapped by an earlier input is
        // never changed in place.
        let tmp = dir.path().join("c.tmp");
        std::fs::write(&tmp, data).expect("writing the input");
        std::fs::rename(&tmp, &path).expect("renaming the input");
        if let Ok(rows) = cache::read(&path, key) {
            for d in [&rows.train, &rows.test] {
                assert_eq!(d.dim, rows.dim);
                assert_eq!(d.row_ptr.len(), d.rows() + 1);
                assert_eq!((d.row_ptr[0], d.row_ptr[d.rows()]), (0, d.nnz()));
                assert_eq!(d.values.len(), d.nnz());
                for i in 0..d.rows() {
                    let (k, v) = d.row(i);
                    assert!(k.windows(2).all(|w| w[0] < w[1]) && k.iter().all(|&k| k < d.dim));
                    assert!(v.iter().all(|v| v.is_finite()));
                }
                assert!(d.labels.iter().all(|l| l.is_finite()));
            }
        }
    });
}

/// What a peer sends in a cluster handshake: the first byte picks the side that reads the
/// rest (even: process 0 listening for process 1; odd: process 1 greeting process 0). The
/// secret is not in the input and both sides add a fresh nonce to what is authenticated, so
/// no input may ever be accepted.
pub fn handshake(data: &[u8]) {
    let Some((&side, rest)) = data.split_first() else {
        return;
    };
    let identity = gradflow::handshake::Identity::default().field("job", "fuzz");
    let cred = Credentials::new(identity, Some("fuzz secret"));
    let mut peer = Peer {
        input: rest,
        output: Vec::new(),
    };
    if side % 2 == 0 {
        assert!(
            answer(&mut peer, 0, 2, &cred).is_err(),
            "listener accepted a forgery"
        );
    } else {
        assert!(
            greet(&mut peer, 1, 0, &cred).is_err(),
            "connector accepted a forgery"
        );
    }
}

/// The job of the checkpoint target: a 64-feature model with Adam, `topk` and its residual,
/// and a lossy `sharded` downlink, so that every part of a worker file has state to restore.
pub const CHECKPOINT_JOB: &str = r#"
[data.synth]
rows = 100
dim = 64
nnz = 4
[optimizer]
kind = "adam"
lr = 0.01
[train]
compressor = { name = "topk", ratio = 0.5 }
memory = "residual"
downlink = { name = "topk", ratio = 0.5 }
"#;

/// The job id, round, worker and worker count of the checkpoint target's files.
pub const CHECKPOINT_FILE: gradflow::dataflow::checkpoint::WorkerSlot =
    gradflow::dataflow::checkpoint::WorkerSlot {
        job: [5; 16],
        round: 40,
        worker: 1,
        workers: 2,
    };

/// The plan of [`CHECKPOINT_JOB`].
pub fn checkpoint_plan() -> gradflow::dataflow::TrainPlan {
    let job = Job::parse(CHECKPOINT_JOB, Path::new("fuzz.toml"), &[]).expect("the job parses");
    job.plan(64, 1)
}

thread_local! {
    static CHECKPOINT_PLAN: gradflow::dataflow::TrainPlan = checkpoint_plan();
}

/// What a checkpoint directory holds, with a correct checksum (what someone who can write
/// there could make): the first byte picks a worker file (even; the rest is its state, sealed
/// here) or the rows log (odd; the next two bytes are the row count, the rest the log, its
/// mark covering all of it). Restoring must fail with an error or leave a state of the plan's
/// shape.
pub fn checkpoint(data: &[u8]) {
    use gradflow::dataflow::checkpoint::{read_rows, restore_worker_from, seal, RowsMark};
    use gradflow::dataflow::WorkerState;
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    if kind % 2 == 0 {
        CHECKPOINT_PLAN.with(|plan| {
            let state = WorkerState::shared(plan);
            let st = &mut *state.borrow_mut();
            let path = Path::new("worker-0001.bin");
            if restore_worker_from(&seal(rest), path, CHECKPOINT_FILE, st).is_ok() {
                assert_eq!(st.model.weights.len(), 64);
            }
        })
    } else if rest.len() >= 2 {
        let rows = u16::from_le_bytes([rest[0], rest[1]]) as u64;
        let log = &rest[2..];
        let mut seen = 0u64;
        let read = read_rows(log, "rows.bin", &RowsMark::covering(log, rows), |_| {
            seen += 1
        });
        if read.is_ok() {
            assert_eq!(seen, rows);
        }
    }
}

/// A connection that reads from the input and keeps what is written to it.
struct Peer<'a> {
    input: &'a [u8],
    output: Vec<u8>,
}

impl std::io::Read for Peer<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.input.read(buf)
    }
}

impl std::io::Write for Peer<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
