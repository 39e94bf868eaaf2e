//! The linear model: `K` margins `m_c = Σ_f w[f·K + c] x_f` per row, one weight per feature and
//! output. With one output and the logistic, hinge or squared loss it is logistic regression,
//! a linear SVM or linear regression; with `K` outputs and [`super::Softmax`], multinomial
//! logistic regression.

use super::gradient::{prefetch, prefetch_span, Accumulator, Batch};
use super::{margin, margins, Model};

/// The linear model of `outputs` margins per row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linear {
    outputs: u32,
}

impl Linear {
    /// A linear model of `outputs` margins per row (1, or the classes of softmax).
    pub fn new(outputs: u32) -> Linear {
        Linear {
            outputs: outputs.max(1),
        }
    }
}

/// How many rows ahead the gradient loop prefetches (the best value on `cargo bench --bench
/// epoch`).
const PREFETCH_ROWS: usize = 4;

impl Model for Linear {
    fn name(&self) -> &str {
        "linear"
    }

    fn outputs(&self) -> u32 {
        self.outputs
    }

    fn width(&self) -> u32 {
        self.outputs
    }

    #[inline]
    fn forward(
        &self,
        weights: &[f32],
        keys: &[u32],
        vals: &[f32],
        outputs: &mut [f32],
        _scratch: &mut Vec<f32>,
    ) {
        margins(weights, keys, vals, outputs);
    }

    fn accumulate(&self, batch: &Batch, sums: &mut Accumulator) -> f64 {
        match self.outputs {
            1 => accumulate_one(batch, sums),
            k => accumulate_many(batch, k as usize, sums),
        }
    }
}

/// Adds the batch's `scale` times the loss's gradient over its rows into `sums`, for one
/// output; returns the loss sum.
fn accumulate_one(batch: &Batch, sums: &mut Accumulator) -> f64 {
    let mut loss_sum = 0.0;
    let mut d = 0.0f32;
    for (i, &r) in batch.rows.iter().enumerate() {
        prefetch_ahead(batch, sums, i);
        let r = r as usize;
        let (keys, vals) = batch.data.row(r);
        let m = margin(batch.weights, keys, vals);
        loss_sum += batch
            .loss
            .row(&[m], batch.data.labels[r], std::slice::from_mut(&mut d));
        let d = d * batch.scale;
        for (&k, &v) in keys.iter().zip(vals) {
            sums.add(k as usize, d * v);
        }
    }
    loss_sum
}

/// As [`accumulate_one`] for `outputs` outputs: feature `f`'s weights and sums are the
/// `outputs` consecutive keys from `f·outputs`.
fn accumulate_many(batch: &Batch, outputs: usize, sums: &mut Accumulator) -> f64 {
    let mut scratch = std::mem::take(&mut sums.scratch);
    scratch.resize(2 * outputs, 0.0);
    let (margins_, derivatives) = scratch.split_at_mut(outputs);
    let mut loss_sum = 0.0;
    for &r in batch.rows {
        let r = r as usize;
        let (keys, vals) = batch.data.row(r);
        margins(batch.weights, keys, vals, margins_);
        loss_sum += batch.loss.row(margins_, batch.data.labels[r], derivatives);
        for d in derivatives.iter_mut() {
            *d *= batch.scale;
        }
        for (&f, &v) in keys.iter().zip(vals) {
            let base = f as usize * outputs;
            for (c, &d) in derivatives.iter().enumerate() {
                sums.add(base + c, d * v);
            }
        }
    }
    sums.scratch = scratch;
    loss_sum
}

/// Prefetches for the rows after position `i` of the batch, in stages. The batch's rows are
/// scattered over the data and their keys over the model: each row would wait on memory for
/// its offsets, keys, values and label, then for its weights and accumulator cells. So: the
/// offsets and label 3·P rows ahead, the keys and values 2·P rows ahead (their offsets are in
/// cache by then), the weights and accumulator cells P rows ahead (their keys are). One output
/// only: on Fashion-MNIST's dense rows (softmax, 10 outputs) the same stages measured no gain
/// (0.357-0.383 s per epoch with and without), so the `K`-output loop does without.
#[inline(always)]
fn prefetch_ahead(batch: &Batch, sums: &Accumulator, i: usize) {
    let data = batch.data;
    if let Some(&ahead) = batch.rows.get(i + 3 * PREFETCH_ROWS) {
        prefetch(&data.row_ptr[ahead as usize]);
        prefetch(&data.labels[ahead as usize]);
    }
    if let Some(&ahead) = batch.rows.get(i + 2 * PREFETCH_ROWS) {
        let (lo, hi) = (
            data.row_ptr[ahead as usize],
            data.row_ptr[ahead as usize + 1],
        );
        if lo < hi {
            prefetch_span(&data.indices[lo..hi]);
            prefetch_span(&data.values[lo..hi]);
        }
    }
    if let Some(&next) = batch.rows.get(i + PREFETCH_ROWS) {
        for &k in data.row(next as usize).0 {
            prefetch(&batch.weights[k as usize]);
            sums.prefetch(k as usize);
        }
    }
}
