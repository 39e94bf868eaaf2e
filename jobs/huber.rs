//! A job program with a loss of its own: Huber regression (Huber 1964), squared near the
//! target and linear beyond `δ`, so that a few huge labels (flights hours late) pull the model
//! less than under the squared loss. The loss plugs into the standard loop through the
//! `MarginLoss` trait; no operator is copied.
//!
//!   cargo run --release --example huber -- train jobs/delays.toml -w 2
//!   cargo run --release --example huber -- cluster jobs/delays.toml -n 2
//!
//! `HUBER_DELTA` (default 15: minutes) sets `δ`.

use std::sync::Arc;

use gradflow::dataflow::{build_training, Training};
use gradflow::model::MarginLoss;

/// Huber's loss of the residual `r = m - y`: `r²/2` for `|r| <= δ`, `δ(|r| - δ/2)` beyond.
#[derive(Debug)]
struct Huber {
    delta: f32,
}

impl MarginLoss for Huber {
    fn name(&self) -> &str {
        "huber"
    }

    fn is_classification(&self) -> bool {
        false
    }

    fn value(&self, m: f32, y: f32) -> f64 {
        let (r, d) = (((m - y) as f64).abs(), self.delta as f64);
        if r <= d {
            0.5 * r * r
        } else {
            d * (r - 0.5 * d)
        }
    }

    fn derivative(&self, m: f32, y: f32) -> f32 {
        (m - y).clamp(-self.delta, self.delta)
    }
}

fn main() -> std::process::ExitCode {
    let delta = std::env::var("HUBER_DELTA")
        .ok()
        .and_then(|v| v.parse::<f32>().ok())
        .filter(|d| *d > 0.0)
        .unwrap_or(15.0);
    gradflow::cli::main_with(Arc::new(move |scope, mut training: Training| {
        training.set_loss(Huber { delta });
        build_training(scope, training)
    }))
}
