//! Early stopping as a dataflow program: the standard gradient, exchange and metrics steps, plus
//! two operators of our own on the loop's statistics, one that logs every test evaluation and
//! one that decides to stop once the test loss has not improved for a number of evaluations.
//! The decision goes to every worker around a loop variable, so that all of them end at the
//! same round (`Training::gradient_until`).
//!
//!   cargo run --release --example early_stopping -- train jobs/quickstart.toml -w 2 \
//!       --set train.epochs=20 --set train.eval_every=25
//!   cargo run --release --example early_stopping -- cluster jobs/quickstart.toml -n 2
//!
//! Environment: `EARLY_STOP_PATIENCE` (evaluations without improvement before stopping,
//! default 2) and `EARLY_STOP_MIN_DELTA` (how much lower than the best so far a test loss must
//! be to count as an improvement, default 0).
//!
//! The decision about the evaluation after round `q` is made at round `q + 1` (its statistics
//! carry it) and reaches the gradient step one round later (`LAG`), so training ends at round
//! `q + 2`: the model is evaluated once more there, and that is the model the run writes.

use std::sync::Arc;

use gradflow::dataflow::{Evaluation, Training};
use gradflow::exchange::Envelope;
use timely::dataflow::operators::vec::{Broadcast, Map};
use timely::dataflow::operators::{ConnectLoop, Inspect, LoopVariable};

/// Rounds between a decision and the round it ends: each round waits for the decisions made
/// this many rounds before it, so a larger lag lets workers run further ahead of worker 0.
const LAG: u64 = 1;

/// Stop once `patience` evaluations in a row have not beaten the best test loss by `min_delta`.
struct Patience {
    patience: u32,
    min_delta: f64,
    best: f64,
    without_improvement: u32,
}

impl Patience {
    fn decide(&mut self, e: &Evaluation) -> Option<String> {
        let loss = e.test.loss?;
        if loss < self.best - self.min_delta {
            (self.best, self.without_improvement) = (loss, 0);
            return None;
        }
        self.without_improvement += 1;
        (self.without_improvement >= self.patience).then(|| {
            format!(
                "test loss {loss:.5} after round {}, no better than {:.5} for {} evaluations",
                e.round, self.best, self.patience
            )
        })
    }
}

fn main() -> std::process::ExitCode {
    let env = |name: &str| std::env::var(name).ok();
    let patience = env("EARLY_STOP_PATIENCE").and_then(|v| v.parse().ok());
    let min_delta = env("EARLY_STOP_MIN_DELTA").and_then(|v| v.parse().ok());
    gradflow::cli::main_with(Arc::new(move |scope, mut training: Training| {
        let mut rule = Patience {
            patience: patience.unwrap_or(2).max(1),
            min_delta: min_delta.unwrap_or(0.0),
            best: f64::INFINITY,
            without_improvement: 0,
        };
        scope.iterative::<u64, _, _>(|inner| {
            let (feedback, changes) =
                inner.loop_variable::<Vec<Envelope>>(training.plan().feedback_delay());
            let (stop_edge, stop) = inner.loop_variable::<Vec<String>>(LAG);
            let (grads, stats) = training.gradient_until(changes, stop);
            training.exchange(grads).connect_loop(feedback);
            training
                .evaluations(&stats)
                // Our own log of every evaluation (worker 0 holds them all).
                .inspect(|e| {
                    let loss = e.test.loss.unwrap_or(f64::NAN);
                    println!(
                        "eval: round {}, epoch {}, test loss {loss:.5}",
                        e.round, e.epoch
                    );
                })
                // The decision, sent to every worker.
                .flat_map(move |e| rule.decide(&e))
                .broadcast()
                .connect_loop(stop_edge);
            training.collect(stats);
        });
        training.handle()
    }))
}
