//! A job program with a model of its own: a linear model of the row scaled to unit length,
//! `m = w·x / ‖x‖`, so that a row with many features (a long text, a busy user) weighs no more
//! than a short one. The model plugs into the standard loop through the `Model` trait: its
//! forward pass (the outputs, for the test metrics and `predict`) and its batched gradient; no
//! operator is copied, and every exchange, codec and memory works with it. One line in `main`
//! registers it: `model.kind = "unit-length"` (or `--model unit-length`) then names it in job
//! files, `bench` suites and this program's `predict`.
//!
//!   cargo run --release --example own_model -- train jobs/quickstart.toml -w 2 --model unit-length
//!   cargo run --release --example own_model -- cluster jobs/quickstart.toml -n 2 --model unit-length

use gradflow::model::{Accumulator, Batch, Model};

/// `m = w·x / ‖x‖` (0 for an empty row), one weight per feature.
#[derive(Debug)]
struct UnitLength;

/// `1 / ‖x‖` of a row's values (0 for an empty or all-zero row).
fn inverse_norm(vals: &[f32]) -> f32 {
    let norm = vals.iter().map(|v| v * v).sum::<f32>().sqrt();
    if norm > 0.0 {
        1.0 / norm
    } else {
        0.0
    }
}

impl Model for UnitLength {
    fn name(&self) -> &str {
        "unit-length"
    }

    fn outputs(&self) -> u32 {
        1
    }

    fn width(&self) -> u32 {
        1
    }

    fn forward(
        &self,
        weights: &[f32],
        keys: &[u32],
        vals: &[f32],
        outputs: &mut [f32],
        _scratch: &mut Vec<f32>,
    ) {
        let dot: f32 = keys
            .iter()
            .zip(vals)
            .map(|(&k, &v)| weights[k as usize] * v)
            .sum();
        outputs[0] = dot * inverse_norm(vals);
    }

    fn accumulate(&self, batch: &Batch, sums: &mut Accumulator) -> f64 {
        let (mut loss_sum, mut m, mut d) = (0.0, [0.0f32], [0.0f32]);
        let mut scratch = Vec::new();
        for &r in batch.rows {
            let (keys, vals) = batch.data.row(r as usize);
            self.forward(batch.weights, keys, vals, &mut m, &mut scratch);
            loss_sum += batch.loss.row(&m, batch.data.labels[r as usize], &mut d);
            // dm/dw_k = x_k / ‖x‖.
            let scale = d[0] * batch.scale * inverse_norm(vals);
            for (&k, &v) in keys.iter().zip(vals) {
                sums.add(k as usize, scale * v);
            }
        }
        loss_sum
    }
}

fn main() -> std::process::ExitCode {
    gradflow::model::register("unit-length", |_| UnitLength);
    gradflow::cli::main()
}
