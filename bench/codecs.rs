//! Encode and decode of every codec and key coder on one gradient: D = 29,000,000,
//! d = 1,000,000 uniform keys, Laplace(0, 0.01) values (the setting of the SketchML reference
//! measurements). One core.
//!
//!   cargo bench --bench codecs                 (all)
//!   cargo bench --bench codecs -- sketchml     (one)

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use gradflow::codec::bits::{BitReader, BitWriter};
use gradflow::codec::keys::KeyCoding;
use gradflow::codec::measure::synth_gradient;
use gradflow::codec::{build_codec, CodecSpec, EncodeContext, CODEC_NAMES};
use gradflow::sparse::SparseGrad;

const DIM: u32 = 29_000_000;
const KEYS: usize = 1_000_000;

fn codecs(c: &mut Criterion) {
    let g = synth_gradient(DIM, KEYS, 0.01, 1);
    let mut group = c.benchmark_group("codec");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(KEYS as u64));
    for name in CODEC_NAMES {
        let mut codec = build_codec(&CodecSpec::with_defaults(name).unwrap()).unwrap();
        let ctx = EncodeContext {
            seed: 1,
            round: 0,
            worker: 0,
            piece: 0,
        };
        // Encoded once here too, so that a filter selecting only the decode has a message.
        let mut buf = Vec::new();
        codec
            .encode(&g.keys, &g.values, DIM, ctx, &mut buf)
            .unwrap();
        group.bench_function(format!("{name}/encode"), |b| {
            b.iter(|| {
                buf.clear();
                codec
                    .encode(&g.keys, &g.values, DIM, ctx, &mut buf)
                    .unwrap();
            })
        });
        let mut out = SparseGrad::default();
        group.bench_function(format!("{name}/decode"), |b| {
            b.iter(|| codec.decode(&buf, &mut out).unwrap())
        });
    }
    group.finish();
}

fn key_coders(c: &mut Criterion) {
    let g = synth_gradient(DIM, KEYS, 0.01, 1);
    let mut group = c.benchmark_group("keys");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(KEYS as u64));
    for coder in KeyCoding::ALL {
        let mut buf = Vec::new();
        let mut w = BitWriter::new(&mut buf);
        coder.encode(&g.keys, &mut w);
        w.finish();
        group.bench_function(format!("{}/encode", coder.name()), |b| {
            b.iter(|| {
                buf.clear();
                let mut w = BitWriter::new(&mut buf);
                coder.encode(&g.keys, &mut w);
                w.finish()
            })
        });
        let mut out = Vec::new();
        group.bench_function(format!("{}/decode", coder.name()), |b| {
            b.iter(|| {
                coder
                    .decode(KEYS, DIM, &mut BitReader::new(&buf), &mut out)
                    .unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, codecs, key_coders);
criterion_main!(benches);
