//! The mini-batch sparse gradient.
//!
//! The gradient of a mini-batch touches only the features its rows contain. It is built in a
//! dense accumulator plus a bitset of touched keys, both reused across rounds: no allocation or
//! hashing per element, and reading the bitset in order yields the keys already sorted.

pub use crate::sparse::SparseGrad;

use super::{margin, MarginLoss};
use crate::data::Dataset;

/// Loss statistics of one mini-batch, computed alongside its gradient.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchStats {
    /// Sum of the data loss over the batch rows (before the update).
    pub loss_sum: f64,
    /// Number of rows.
    pub rows: usize,
}

/// Reusable buffers for [`GradientWorkspace::minibatch`].
pub struct GradientWorkspace {
    acc: crate::mem::ZeroedArray<f32>,
    touched: Vec<u64>,
}

impl GradientWorkspace {
    /// Buffers for a model of dimension `dim`.
    pub fn new(dim: u32) -> Self {
        GradientWorkspace {
            acc: crate::mem::ZeroedArray::new(dim as usize),
            touched: vec![0; (dim as usize).div_ceil(64)],
        }
    }

    /// The gradient of the mean loss over `rows` of `data` plus `λ w_k` on every touched key `k`
    /// but the intercept's, written into `out` (sorted keys). Returns the batch loss statistics.
    pub fn minibatch(
        &mut self,
        data: &Dataset,
        rows: &[u32],
        weights: &[f32],
        loss: &dyn MarginLoss,
        l2: L2,
        out: &mut SparseGrad,
    ) -> BatchStats {
        out.clear();
        let mut loss_sum = 0.0;
        if rows.is_empty() {
            return BatchStats::default();
        }
        let scale = 1.0 / rows.len() as f32;
        for (i, &r) in rows.iter().enumerate() {
            // Prefetch the next row's weights and accumulator cells: they are scattered over the
            // model and dominate the cost of this loop.
            if let Some(&next) = rows.get(i + PREFETCH_ROWS) {
                for &k in data.row(next as usize).0 {
                    prefetch(&weights[k as usize]);
                    prefetch(&self.acc[k as usize]);
                }
            }
            let r = r as usize;
            let (keys, vals) = data.row(r);
            let m = margin(weights, keys, vals);
            let y = loss.target(data.labels[r]);
            loss_sum += loss.value(m, y);
            let d = loss.derivative(m, y) * scale;
            for (&k, &v) in keys.iter().zip(vals) {
                let k = k as usize;
                self.acc[k] += d * v;
                self.touched[k >> 6] |= 1u64 << (k & 63);
            }
        }
        for (w, word) in self.touched.iter_mut().enumerate() {
            let mut bits = *word;
            if bits == 0 {
                continue;
            }
            *word = 0;
            while bits != 0 {
                let k = (w << 6) | bits.trailing_zeros() as usize;
                bits &= bits - 1;
                out.keys.push(k as u32);
                out.values.push(self.acc[k] + l2.derivative(k, weights[k]));
                self.acc[k] = 0.0;
            }
        }
        BatchStats {
            loss_sum,
            rows: rows.len(),
        }
    }
}

/// L2 regularisation `λ/2 · Σ w_k²` over every weight but the intercept's, which is left free
/// (an unregularised bias, as in LIBLINEAR's `-B` and scikit-learn's `fit_intercept`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct L2 {
    /// λ.
    pub lambda: f32,
    /// The intercept's key, exempt from the penalty.
    pub intercept: Option<u32>,
}

impl L2 {
    /// The penalty's derivative at weight `w` of key `k`.
    #[inline]
    pub fn derivative(self, k: usize, w: f32) -> f32 {
        if self.intercept == Some(k as u32) {
            0.0
        } else {
            self.lambda * w
        }
    }
}

/// How many rows ahead the gradient loop prefetches (measured on the epoch benchmark).
const PREFETCH_ROWS: usize = 4;

/// Hints the CPU to load the cache line holding `x` (a no-op where unsupported).
#[inline(always)]
fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint with no effect on memory; any address is allowed.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            x as *const T as *const i8,
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Loss;

    fn toy() -> Dataset {
        let mut d = Dataset::new(6);
        d.push_row(&[0, 2, 5], &[1.0, -0.5, 2.0], 1.0);
        d.push_row(&[1, 2], &[0.3, 1.5], -1.0);
        d.push_row(&[2, 4, 5], &[0.7, 1.0, -1.2], 1.0);
        d.push_row(&[0, 3], &[-2.0, 0.4], 0.5);
        d
    }

    fn objective(d: &Dataset, rows: &[u32], w: &[f32], loss: Loss, l2: L2, touched: &[u32]) -> f64 {
        let data: f64 = rows
            .iter()
            .map(|&r| {
                let (k, v) = d.row(r as usize);
                loss.value(margin(w, k, v), loss.target(d.labels[r as usize]))
            })
            .sum::<f64>()
            / rows.len() as f64;
        data + touched
            .iter()
            .filter(|&&k| l2.intercept != Some(k))
            .map(|&k| 0.5 * l2.lambda as f64 * (w[k as usize] as f64).powi(2))
            .sum::<f64>()
    }

    #[test]
    fn every_loss_gradient_matches_finite_differences() {
        let d = toy();
        let rows = [0u32, 1, 2, 3];
        let w = [0.1f32, -0.2, 0.3, 0.05, -0.4, 0.25];
        // The intercept (key 2 here) is exempt from λ: a penalty on it would move its
        // derivative by λ·w_2 = 0.03, far above the tolerance.
        let l2s = [None, Some(2)].map(|intercept| L2 {
            lambda: 0.1,
            intercept,
        });
        for (loss, l2) in [Loss::Logistic, Loss::Hinge, Loss::Squared]
            .into_iter()
            .flat_map(|loss| l2s.map(|l2| (loss, l2)))
        {
            let mut ws = GradientWorkspace::new(6);
            let mut g = SparseGrad::default();
            let stats = ws.minibatch(&d, &rows, &w, &loss, l2, &mut g);
            assert_eq!(stats.rows, 4);
            assert_eq!(g.keys, vec![0, 1, 2, 3, 4, 5]);
            for (i, &k) in g.keys.iter().enumerate() {
                let h = 1e-3f32;
                let (mut wp, mut wm) = (w, w);
                wp[k as usize] += h;
                wm[k as usize] -= h;
                let num = (objective(&d, &rows, &wp, loss, l2, &g.keys)
                    - objective(&d, &rows, &wm, loss, l2, &g.keys))
                    / (2.0 * h as f64);
                assert!(
                    (num - g.values[i] as f64).abs() < 2e-3,
                    "{loss:?} {l2:?} key {k}: {num} vs {}",
                    g.values[i]
                );
            }
        }
    }

    #[test]
    fn gradient_touches_only_batch_keys_and_workspace_resets() {
        let d = toy();
        let w = [0.0f32; 6];
        let mut ws = GradientWorkspace::new(6);
        let mut g = SparseGrad::default();
        ws.minibatch(&d, &[1], &w, &Loss::Logistic, L2::default(), &mut g);
        assert_eq!(g.keys, vec![1, 2]);
        let first = g.clone();
        ws.minibatch(&d, &[1], &w, &Loss::Logistic, L2::default(), &mut g);
        assert_eq!(g, first, "the accumulator must be cleared between batches");
    }

    #[test]
    fn sorted_merge_adds_scaled() {
        let mut a = SparseGrad {
            keys: vec![1, 4, 9],
            values: vec![1.0, 2.0, 3.0],
        };
        let b = SparseGrad {
            keys: vec![0, 4, 10],
            values: vec![1.0, 1.0, 1.0],
        };
        a.add_scaled(&b, 0.5, &mut SparseGrad::default());
        assert_eq!(a.keys, vec![0, 1, 4, 9, 10]);
        assert_eq!(a.values, vec![0.5, 1.0, 2.5, 3.0, 0.5]);
    }
}
