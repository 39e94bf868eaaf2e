//! A training job written as a dataflow program: the loop is assembled by hand from gradflow's
//! operators (`gradient`, `aggregate`, `collect`), with one operator of our own spliced into
//! the feedback edge that counts the model updates crossing it each round.
//!
//!   cargo run --release --example custom_dataflow -- 2      (2 worker threads)

use std::cell::RefCell;
use std::rc::Rc;

use gradflow::data::synth::{ctr, CtrParams};
use gradflow::data::RowFilter;
use gradflow::dataflow::{aggregate, collect, gradient, Supervisor, WorkerData, WorkerState};
use gradflow::exchange::Envelope;
use gradflow::job::Job;
use gradflow::metrics::epoch_line;
use gradflow::optim::{OptimizerConfig, OptimizerKind};
use timely::dataflow::operators::{ConnectLoop, Inspect, LoopVariable};

fn main() {
    let workers: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let params = CtrParams {
        rows: 20_000,
        dim: 50_000,
        ..CtrParams::default()
    };
    // The plan every worker shares: a default job with our own optimizer settings.
    let mut job = Job {
        optimizer: OptimizerConfig {
            kind: OptimizerKind::Adam,
            lr: 0.05,
            ..Default::default()
        },
        ..Job::default()
    };
    job.train.epochs = 5;
    job.train.seed = 3;
    let plan = job.plan(params.dim, workers);
    let supervisor = Supervisor::new();
    timely::execute(timely::Config::process(workers), move |worker| {
        let (index, peers) = (worker.index(), worker.peers());
        // Each worker keeps its share of the generated rows, 20% held out for testing.
        let all = ctr(&params);
        let filter = RowFilter {
            worker: index,
            workers: peers,
            test_fraction: 0.2,
            seed: plan.seed,
            tail_from: None,
        };
        let (train, test) = all.split(&filter);
        let data = WorkerData {
            train,
            test,
            ..Default::default()
        };
        let state = WorkerState::shared(&plan);
        let rows = Rc::new(RefCell::new(Vec::new()));
        let sup = supervisor.clone();
        let plan = plan.clone();
        worker.dataflow::<(), _, _>(|scope| {
            scope.iterative::<u64, _, _>(|inner| {
                let (handle, updates) = inner.loop_variable::<Vec<Envelope>>(1);
                let (grads, stats) = gradient(updates, &plan, data, state.clone(), sup.clone(), None);
                aggregate(grads, &plan, state.clone(), sup.clone())
                    // Our own operator on the feedback edge: log the model changes leaving this worker.
                    .inspect_core(move |event| {
                        if let (0, Ok((stamp, batch))) = (index, event) {
                            let round = stamp.iter().next().map_or(0, |t| t.inner);
                            if round % 10 == 9 {
                                let bytes: usize = batch.iter().map(|e| e.payload.len()).sum();
                                println!("worker 0, round {round:>3}: {} change messages, {bytes} payload bytes", batch.len());
                            }
                        }
                    })
                    .connect_loop(handle);
                let observer: Box<dyn FnMut(&gradflow::metrics::MetricsRow)> = Box::new(|row| {
                    if row.kind == "epoch" {
                        println!("{}", epoch_line(row));
                    }
                });
                collect(stats, &plan, rows.clone(), observer);
            });
        });
        while worker.step_or_park(None) {}
        if let Some(e) = sup.message() {
            eprintln!("error: {e}");
        }
    })
    .expect("timely runs");
}
