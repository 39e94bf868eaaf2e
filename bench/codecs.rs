//! Encode and decode of every codec and key coder, one core, Laplace(0, 0.01) values on
//! uniform keys, at four shapes: the SketchML reference measurements' gradient (D = 29,000,000,
//! d = 1,000,000), and the sizes training sends on a 100k-feature CTR set (D = 100,000): a
//! 1% batch's gradient (40,000 and 10,000 pairs) and one owner's piece of it under `sharded`
//! with 4 workers (2,500 pairs). Criterion's throughput is pairs per second, so the per-pair
//! cost of the small shapes against the large one shows each codec's fixed cost per message.
//!
//!   cargo bench --bench codecs                      (all)
//!   cargo bench --bench codecs -- sketchml          (one codec, every shape)
//!   cargo bench --bench codecs -- 'codec/10k/'      (one shape)
//!   cargo bench --bench codecs -- sum/               (summing a round's decoded messages)

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use gradflow::codec::bits::{BitReader, BitWriter};
use gradflow::codec::keys::KeyCoding;
use gradflow::codec::measure::synth_gradient;
use gradflow::codec::{build_codec, CodecSpec, EncodeContext, CODEC_NAMES};
use gradflow::sparse::{DenseSum, SparseGrad};

const DIM: u32 = 29_000_000;
const KEYS: usize = 1_000_000;

/// (name, dimension, pairs) of the shapes every codec runs at.
const SHAPES: [(&str, u32, usize); 4] = [
    ("1M", DIM, KEYS),
    ("40k", 100_000, 40_000),
    ("10k", 100_000, 10_000),
    ("2.5k", 100_000, 2_500),
];

fn codecs(c: &mut Criterion) {
    for (shape, dim, pairs) in SHAPES {
        let g = synth_gradient(dim, pairs, 0.01, 1);
        let mut group = c.benchmark_group(format!("codec/{shape}"));
        group
            .sample_size(if pairs >= KEYS { 10 } else { 50 })
            .throughput(Throughput::Elements(pairs as u64));
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
                .encode(&g.keys, &g.values, dim, ctx, &mut buf)
                .unwrap();
            group.bench_function(format!("{name}/encode"), |b| {
                b.iter(|| {
                    buf.clear();
                    codec
                        .encode(&g.keys, &g.values, dim, ctx, &mut buf)
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

/// Summing the decoded messages of a round: `W` workers' 10k-pair gradients of D = 100,000
/// (what `allgather` sums each round), by sorted merges into the sum so far and by a dense sum.
fn sums(c: &mut Criterion) {
    for workers in [4u64, 16] {
        let pieces: Vec<SparseGrad> = (0..workers)
            .map(|w| synth_gradient(100_000, 10_000, 0.01, w + 1))
            .collect();
        let weight = 1.0 / workers as f32;
        let mut group = c.benchmark_group(format!("sum/W={workers}"));
        group.throughput(Throughput::Elements(workers * 10_000));
        let (mut sum, mut scratch) = (SparseGrad::default(), SparseGrad::default());
        group.bench_function("merge", |b| {
            b.iter(|| {
                sum.clear();
                for p in &pieces {
                    sum.add_scaled(p, weight, &mut scratch);
                }
            })
        });
        let mut dense = DenseSum::new(100_000);
        group.bench_function("dense", |b| {
            b.iter(|| {
                for p in &pieces {
                    dense.add(&p.keys, &p.values, weight);
                }
                dense.take(&mut sum);
            })
        });
        group.finish();
    }
}

criterion_group!(benches, codecs, key_coders, sums);
criterion_main!(benches);
