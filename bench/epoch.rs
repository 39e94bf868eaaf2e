//! Epoch time of the training dataflow on one worker, no network.
//!
//! 150,000 rows x 1,000,000 features, ~40 nonzeros per row (the CTR-like generator), 10%
//! mini-batches (10 rounds), Adam, logistic loss. One iteration = one epoch run as a timely
//! dataflow on this thread (data cloned outside the timing).
//!
//!   cargo bench --bench epoch
//!
//! Target: <= 0.15 s per epoch on one core (scikit-learn's SGDClassifier: 0.11 s on such a set).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};

use gradflow::data::synth::{ctr, CtrParams};
use gradflow::data::Dataset;
use gradflow::dataflow::{build_training, Supervisor, Training, WorkerData};
use gradflow::job::Job;

fn epoch(c: &mut Criterion) {
    let rows: usize = std::env::var("GRADFLOW_BENCH_ROWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150_000);
    let params = CtrParams {
        rows,
        dim: 1_000_000,
        nnz: 40,
        ..CtrParams::default()
    };
    let train = ctr(&params);
    eprintln!(
        "data: {} rows, {} features, {:.1} nonzeros per row",
        train.rows(),
        train.dim,
        train.nnz() as f64 / train.rows() as f64
    );
    let mut job = Job::default(); // logistic, Adam, sharded, no compression
    job.train.batch_fraction = 0.1;
    job.train.epochs = 1;
    job.train.seed = 1;
    let plan = job.plan(params.dim, 1);
    let mut group = c.benchmark_group("epoch");
    group.sample_size(10);
    group.bench_function("150k_x_1M_adam_1_worker", |b| {
        b.iter_batched(
            || WorkerData {
                train: train.clone(),
                test: Dataset::new(params.dim),
                ..Default::default()
            },
            |data| {
                let plan = plan.clone();
                timely::execute_directly(move |worker| {
                    worker.dataflow::<(), _, _>(|scope| {
                        let t =
                            Training::new(&plan, data, Supervisor::new(), None, Box::new(|_| {}));
                        build_training(scope, t);
                    });
                })
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, epoch);
criterion_main!(benches);
