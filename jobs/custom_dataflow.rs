//! A training job written as a dataflow program: the standard steps (gradient, exchange,
//! metrics) assembled by hand, with an operator of our own on the feedback edge that logs the
//! model changes leaving each worker, round by round.
//!
//! The program is the whole `gradflow` command line with this loop in place of the standard
//! one: threads, TCP clusters (`--processes`, `--hostfile`, the `cluster` launcher), failure
//! supervision, bytes on the wire, the metrics CSV, the model file and `--set` overrides.
//!
//!   cargo run --release --example custom_dataflow -- train jobs/quickstart.toml -w 2
//!   cargo run --release --example custom_dataflow -- cluster jobs/quickstart.toml -n 2
//!
//! `log_every = N` in an environment variable `CUSTOM_LOG_EVERY` (default 50) sets how often
//! worker 0 logs; `CUSTOM_FAIL_AT = R` makes the logging operator fail at round R, to show that
//! a failing operator of a program stops every process with its message.

use std::sync::Arc;

use gradflow::dataflow::{RoundStream, Training};
use gradflow::exchange::Envelope;
use timely::dataflow::operators::{ConnectLoop, LoopVariable};

fn main() -> std::process::ExitCode {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let log_every = env("CUSTOM_LOG_EVERY").unwrap_or(50).max(1);
    let fail_at = env("CUSTOM_FAIL_AT");
    gradflow::cli::main_with(Arc::new(move |scope, mut training: Training| {
        let index = scope.index();
        let supervisor = training.supervisor().clone();
        scope.iterative::<u64, _, _>(|inner| {
            let (feedback, changes) =
                inner.loop_variable::<Vec<Envelope>>(training.plan().feedback_delay());
            let (grads, stats) = training.gradient(changes);
            training
                .exchange(grads)
                // Our own operator on the feedback edge: the model changes leaving this worker.
                .inspect_rounds(move |round, changes| {
                    if fail_at == Some(round) {
                        supervisor.fail(format!("custom operator: asked to fail at round {round}"));
                    }
                    if index == 0 && round % log_every == log_every - 1 {
                        let bytes: usize = changes.iter().map(|e| e.payload.len()).sum();
                        let n = changes.len();
                        println!("custom: worker 0, round {round}: {n} change messages, {bytes} B");
                    }
                })
                .connect_loop(feedback);
            training.collect(stats);
        });
        training.handle()
    }))
}
