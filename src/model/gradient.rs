//! The mini-batch sparse gradient.
//!
//! The gradient of a mini-batch touches only the features its rows contain. It is built in a
//! dense accumulator plus a bitset of touched keys, both reused across rounds: no allocation or
//! hashing per element, and reading the bitset in order yields the keys already sorted.

pub use crate::sparse::SparseGrad;

use super::{Model, ModelLoss};
use crate::data::Dataset;

/// Loss statistics of one mini-batch, computed alongside its gradient.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchStats {
    /// Sum of the data loss over the batch rows (before the update).
    pub loss_sum: f64,
    /// Number of rows.
    pub rows: usize,
}

/// Where a model adds a mini-batch's gradient: a dense accumulator and a bitset of the keys
/// it touched, cleared as the gradient is extracted, plus scratch room for the model's
/// per-row values (its outputs and their derivatives, hidden sums), reused from batch to batch.
pub struct Accumulator {
    acc: crate::mem::ZeroedArray<f32>,
    touched: Vec<u64>,
    /// The model's per-row buffers.
    pub scratch: Vec<f32>,
}

impl Accumulator {
    /// Adds `x` to key `k`'s sum.
    #[inline(always)]
    pub fn add(&mut self, k: usize, x: f32) {
        self.acc[k] += x;
        self.touched[k >> 6] |= 1u64 << (k & 63);
    }

    /// The sums of keys `start .. start + len`, marked touched: a model adds a run of adjacent
    /// keys (a feature's factors) in one loop the compiler can vectorise.
    #[inline(always)]
    pub fn run(&mut self, start: usize, len: usize) -> &mut [f32] {
        crate::sparse::set_bits(&mut self.touched, start, len);
        &mut self.acc[start..start + len]
    }

    /// Hints the CPU to load key `k`'s sum (a gradient loop's prefetch of a later row).
    #[inline(always)]
    pub fn prefetch(&self, k: usize) {
        prefetch(&self.acc[k]);
    }
}

/// Reusable buffers for [`GradientWorkspace::minibatch`].
pub struct GradientWorkspace {
    sums: Accumulator,
}

impl GradientWorkspace {
    /// Buffers for a model of dimension `dim` (keys: features × weights per feature).
    pub fn new(dim: u32) -> Self {
        GradientWorkspace {
            sums: Accumulator {
                acc: crate::mem::ZeroedArray::new(dim as usize),
                touched: vec![0; (dim as usize).div_ceil(64)],
                scratch: Vec::new(),
            },
        }
    }

    /// Makes room for a model of dimension `dim` (a batch's view of the model, whose size
    /// changes from batch to batch: [`super::Compact`]); the buffers only grow.
    pub fn fit(&mut self, dim: u32) {
        if (dim as usize) > self.sums.acc.len() {
            let scratch = std::mem::take(&mut self.sums.scratch);
            *self = GradientWorkspace::new(dim.next_power_of_two());
            self.sums.scratch = scratch;
        }
    }

    /// The gradient of the mean loss over `rows` of `data` under `model` plus `λ w_k` on every
    /// touched key `k` but the intercept's, written into `out` (sorted keys). Returns the batch
    /// loss statistics.
    #[allow(clippy::too_many_arguments)]
    pub fn minibatch(
        &mut self,
        data: &Dataset,
        rows: &[u32],
        weights: &[f32],
        model: &dyn Model,
        loss: &dyn ModelLoss,
        l2: L2,
        out: &mut SparseGrad,
    ) -> BatchStats {
        out.clear();
        if rows.is_empty() {
            return BatchStats::default();
        }
        let batch = Batch {
            data,
            rows,
            weights,
            loss,
            scale: 1.0 / rows.len() as f32,
        };
        let loss_sum = model.accumulate(&batch, &mut self.sums);
        let sums = &mut self.sums;
        extract_touched(&mut sums.touched, &mut sums.acc, weights, l2, out);
        BatchStats {
            loss_sum,
            rows: rows.len(),
        }
    }
}

/// [`extract`], 16 keys at a time where the CPU has AVX-512 ([`extract_avx512`]).
fn extract_touched(
    touched: &mut [u64],
    acc: &mut [f32],
    weights: &[f32],
    l2: L2,
    out: &mut SparseGrad,
) {
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::avx512() && l2.factors.is_none() {
        // SAFETY: the CPU has AVX-512F and POPCNT.
        unsafe { extract_avx512(touched, acc, weights, l2, out) };
        return;
    }
    extract(touched, acc, weights, l2, out);
}

/// Moves the touched keys' sums out of the accumulator into `out` (empty), in key order, each
/// plus its L2 derivative, and clears the accumulator and the bitset behind them.
fn extract(touched: &mut [u64], acc: &mut [f32], weights: &[f32], l2: L2, out: &mut SparseGrad) {
    for (w, word) in touched.iter_mut().enumerate() {
        let mut bits = std::mem::take(word);
        while bits != 0 {
            let k = (w << 6) | bits.trailing_zeros() as usize;
            bits &= bits - 1;
            out.keys.push(k as u32);
            out.values.push(acc[k] + l2.derivative(k, weights[k]));
            acc[k] = 0.0;
        }
    }
}

/// [`extract`] 16 keys at a time: a block's accumulator cells and weights are one load each
/// (a cache line of each), its penalised sums one multiply and add, and the touched ones are
/// packed together by `vpcompressd`/`vpcompressps` (register form, then a whole-register
/// store into spare room; the memory form is microcoded on AMD). The same operations as the
/// scalar loop on the same values (`λ·w`, or `+0.0` for intercept keys, added to the sum), so
/// the same bits. Blocks that reach past the weights go key by key.
///
/// # Safety
/// The CPU has AVX-512F and POPCNT.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,popcnt")]
unsafe fn extract_avx512(
    touched: &mut [u64],
    acc: &mut [f32],
    weights: &[f32],
    l2: L2,
    out: &mut SparseGrad,
) {
    use std::arch::x86_64::*;
    let count: usize = touched.iter().map(|w| w.count_ones() as usize).sum();
    // Each whole-register store writes 16 lanes from the current end.
    out.keys.reserve(count + 16);
    out.values.reserve(count + 16);
    let (keys_out, values_out) = (out.keys.as_mut_ptr(), out.values.as_mut_ptr());
    let mut n = out.keys.len();
    let vector_end = acc.len().min(weights.len());
    let lambda = _mm512_set1_ps(l2.lambda);
    // The intercept's keys are not penalised (none without an intercept: an empty range).
    let (free_start, free_end) = l2.intercept.unwrap_or((u32::MAX, u32::MAX));
    let (free_start, free_end) = (
        _mm512_set1_epi32(free_start as i32),
        _mm512_set1_epi32(free_end as i32),
    );
    let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (w, word) in touched.iter_mut().enumerate() {
        let bits = std::mem::take(word);
        if bits == 0 {
            continue;
        }
        for quarter in 0..4 {
            let mask = (bits >> (16 * quarter)) as u16;
            if mask == 0 {
                continue;
            }
            let base = (w << 6) + 16 * quarter;
            if base + 16 > vector_end {
                let mut rest = mask;
                while rest != 0 {
                    let k = base + rest.trailing_zeros() as usize;
                    rest &= rest - 1;
                    // SAFETY: `n < count`, within the reserved room.
                    unsafe {
                        keys_out.add(n).write(k as u32);
                        values_out
                            .add(n)
                            .write(acc[k] + l2.derivative(k, weights[k]));
                    }
                    acc[k] = 0.0;
                    n += 1;
                }
                continue;
            }
            // SAFETY: the block is inside `acc` and `weights`; the stores write 16 lanes at
            // `n <= count`, inside the room reserved for `count + 16`.
            unsafe {
                let cells = acc.as_mut_ptr().add(base);
                let sums = _mm512_loadu_ps(cells);
                let w = _mm512_loadu_ps(weights.as_ptr().add(base));
                let keys = _mm512_add_epi32(_mm512_set1_epi32(base as i32), lanes);
                let penalised = _mm512_cmplt_epu32_mask(keys, free_start)
                    | _mm512_cmpge_epu32_mask(keys, free_end);
                let values = _mm512_add_ps(sums, _mm512_maskz_mul_ps(penalised, lambda, w));
                _mm512_storeu_si512(
                    keys_out.add(n).cast(),
                    _mm512_maskz_compress_epi32(mask, keys),
                );
                _mm512_storeu_ps(values_out.add(n), _mm512_maskz_compress_ps(mask, values));
                _mm512_storeu_ps(cells, _mm512_setzero_ps());
            }
            n += mask.count_ones() as usize;
        }
    }
    // SAFETY: every position below `n` was written (each block's compressed lanes come
    // first in its store, and the next block's store starts at its own first free position).
    unsafe {
        out.keys.set_len(n);
        out.values.set_len(n);
    }
}

/// What a model's gradient over one mini-batch reads: its rows of `data`, the weights, the
/// loss, and `1 / rows`, the mean's scale.
pub struct Batch<'a> {
    /// The worker's training rows.
    pub data: &'a Dataset,
    /// The batch: positions in `data`.
    pub rows: &'a [u32],
    /// The model's weights.
    pub weights: &'a [f32],
    /// The loss of a row's outputs.
    pub loss: &'a dyn ModelLoss,
    /// `1 / rows.len()`: each row's gradient is scaled by it (the batch mean).
    pub scale: f32,
}

/// L2 regularisation `λ/2 · Σ w_k²` over every weight but the intercept's, which are left free
/// (an unregularised bias, as in LIBLINEAR's `-B` and scikit-learn's `fit_intercept`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct L2 {
    /// λ.
    pub lambda: f32,
    /// The intercept's keys `start .. end`, exempt from the penalty: the intercept is the
    /// model's last feature, with `width` keys (a network's dense weights after it are not
    /// exempt).
    pub intercept: Option<(u32, u32)>,
    /// `(λ_v, width)`: keys that are not a multiple of `width` (a factorization machine's
    /// factors) take `λ_v` instead of `λ`.
    pub factors: Option<(f32, u32)>,
}

impl L2 {
    /// The penalty's derivative at weight `w` of key `k`.
    #[inline]
    pub fn derivative(self, k: usize, w: f32) -> f32 {
        if self
            .intercept
            .is_some_and(|(a, b)| (a..b).contains(&(k as u32)))
        {
            0.0
        } else if let Some((lambda, _)) = self.factors.filter(|f| !(k as u32).is_multiple_of(f.1)) {
            lambda * w
        } else {
            self.lambda * w
        }
    }
}

/// Prefetches the cache lines of `span` (a row's keys or values: a line or two).
#[inline]
pub fn prefetch_span<T>(span: &[T]) {
    for line in span.chunks(64 / std::mem::size_of::<T>().max(1)) {
        prefetch(&line[0]);
    }
    if let Some(last) = span.last() {
        prefetch(last);
    }
}

/// Hints the CPU to load the cache line holding `x` (a no-op where unsupported).
#[inline(always)]
pub fn prefetch<T>(x: &T) {
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

/// Asserts that every value of gradient `g` of weights `w` is, within 2e-3, the central
/// difference (step 1e-3) of `objective` at its key.
#[cfg(test)]
pub(crate) fn assert_finite_differences(
    g: &SparseGrad,
    w: &[f32],
    objective: impl Fn(&[f32]) -> f64,
) {
    for (&k, &value) in g.keys.iter().zip(&g.values) {
        let h = 1e-3f32;
        let (mut up, mut down) = (w.to_vec(), w.to_vec());
        up[k as usize] += h;
        down[k as usize] -= h;
        let numeric = (objective(&up) - objective(&down)) / (2.0 * h as f64);
        assert!(
            (numeric - value as f64).abs() < 2e-3,
            "key {k}: {numeric} vs {value}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{margin, Linear, Loss, MarginLoss};

    /// A run marks exactly its keys, across word boundaries and whole words, as `add` would.
    #[test]
    fn a_run_marks_the_keys_add_would_mark() {
        for (start, len) in [
            (0, 1),
            (3, 8),
            (60, 9),
            (63, 1),
            (64, 64),
            (10, 200),
            (127, 0),
        ] {
            let ws = GradientWorkspace::new(300);
            let (mut by_run, mut by_add) = (ws.sums, GradientWorkspace::new(300).sums);
            for (j, a) in by_run.run(start, len).iter_mut().enumerate() {
                *a += j as f32 + 1.0;
            }
            for j in 0..len {
                by_add.add(start + j, j as f32 + 1.0);
            }
            assert_eq!(by_run.touched, by_add.touched, "{start} {len}");
            assert_eq!(&by_run.acc[..], &by_add.acc[..]);
        }
    }

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
                let y = MarginLoss::target(&loss, d.labels[r as usize]);
                loss.value(margin(w, k, v), y)
            })
            .sum::<f64>()
            / rows.len() as f64;
        data + touched
            .iter()
            .filter(|&&k| !l2.intercept.is_some_and(|(a, b)| (a..b).contains(&k)))
            .map(|&k| 0.5 * l2.lambda as f64 * (w[k as usize] as f64).powi(2))
            .sum::<f64>()
    }

    #[test]
    fn every_loss_gradient_matches_finite_differences() {
        let d = toy();
        let rows = [0u32, 1, 2, 3];
        let w = [0.1f32, -0.2, 0.3, 0.05, -0.4, 0.25];
        // The intercept (the last key, 5) is exempt from λ: a penalty on it would move its
        // derivative by λ·w_5 = 0.025, far above the tolerance.
        let l2s = [None, Some((5, 6))].map(|intercept| L2 {
            lambda: 0.1,
            intercept,
            factors: None,
        });
        for (loss, l2) in [Loss::Logistic, Loss::Hinge, Loss::Squared]
            .into_iter()
            .flat_map(|loss| l2s.map(|l2| (loss, l2)))
        {
            let mut ws = GradientWorkspace::new(6);
            let mut g = SparseGrad::default();
            let stats = ws.minibatch(&d, &rows, &w, &Linear::new(1), &loss, l2, &mut g);
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
    fn softmax_gradient_matches_finite_differences_with_k_keys_per_feature() {
        use crate::model::{margins, ModelLoss, Softmax};
        const K: usize = 3;
        let mut d = Dataset::new(4);
        d.push_row(&[0, 2, 3], &[1.0, -0.5, 1.0], 2.0);
        d.push_row(&[1, 3], &[0.3, 1.0], 0.0);
        d.push_row(&[0, 1, 3], &[0.7, 1.0, 1.0], 1.0);
        let loss = Softmax::new(K as u32);
        let rows = [0u32, 1, 2];
        // Feature 3 is the intercept: keys 9, 10, 11 are exempt from λ.
        let l2 = L2 {
            lambda: 0.1,
            intercept: Some((9, 12)),
            factors: None,
        };
        let w: Vec<f32> = (0..4 * K)
            .map(|k| ((k * 7 % 11) as f32 - 5.0) / 10.0)
            .collect();
        let objective = |w: &[f32]| {
            let mut m = [0.0f32; K];
            let mut scratch = [0.0f32; K];
            let data: f64 = rows
                .iter()
                .map(|&r| {
                    let (k, v) = d.row(r as usize);
                    margins(w, k, v, &mut m);
                    loss.row(&m, d.labels[r as usize], &mut scratch)
                })
                .sum::<f64>()
                / rows.len() as f64;
            data + (0..9)
                .map(|k| 0.5 * l2.lambda as f64 * (w[k] as f64).powi(2))
                .sum::<f64>()
        };
        let mut ws = GradientWorkspace::new(4 * K as u32);
        let mut g = SparseGrad::default();
        ws.minibatch(&d, &rows, &w, &Linear::new(K as u32), &loss, l2, &mut g);
        assert_eq!(
            g.keys,
            (0..12).collect::<Vec<u32>>(),
            "every feature × class"
        );
        assert_finite_differences(&g, &w, objective);
        // One row touches only its features' K keys each.
        ws.minibatch(&d, &[1], &w, &Linear::new(K as u32), &loss, l2, &mut g);
        assert_eq!(g.keys, vec![3, 4, 5, 9, 10, 11]);
    }

    #[test]
    fn factors_take_their_own_lambda_and_the_intercept_none() {
        // Features of width 3 (w, v1, v2); the intercept is feature 2 (keys 6..9).
        let l2 = L2 {
            lambda: 0.5,
            intercept: Some((6, 9)),
            factors: Some((0.25, 3)),
        };
        let d: Vec<f32> = (0..9).map(|k| l2.derivative(k, 2.0)).collect();
        assert_eq!(d, [1.0, 0.5, 0.5, 1.0, 0.5, 0.5, 0.0, 0.0, 0.0]);
        // The extraction applies them to the touched keys (the vector path stands aside).
        let mut ws = GradientWorkspace::new(9);
        let fm = crate::model::Fm::new(2, 0.1, Some(2));
        let mut w = vec![0.0f32; 9];
        fm.init(1, &mut w);
        let mut data = Dataset::new(3);
        data.push_row(&[0, 1, 2], &[0.0, 0.0, 1.0], 1.0);
        let mut g = SparseGrad::default();
        ws.minibatch(&data, &[0], &w, &fm, &Loss::Squared, l2, &mut g);
        // Rows of zeros but the bias: the data gradient is the bias's alone.
        for (&k, &v) in g.keys.iter().zip(&g.values) {
            if k < 6 {
                assert_eq!(v, l2.derivative(k as usize, w[k as usize]), "key {k}");
            }
        }
    }

    #[test]
    fn gradient_touches_only_batch_keys_and_workspace_resets() {
        let d = toy();
        let w = [0.0f32; 6];
        let mut ws = GradientWorkspace::new(6);
        let mut g = SparseGrad::default();
        let mut row_1 = |g: &mut SparseGrad| {
            let (model, loss) = (Linear::new(1), Loss::Logistic);
            ws.minibatch(&d, &[1], &w, &model, &loss, L2::default(), g)
        };
        row_1(&mut g);
        assert_eq!(g.keys, vec![1, 2]);
        let first = g.clone();
        row_1(&mut g);
        assert_eq!(g, first, "the accumulator must be cleared between batches");
    }

    /// The AVX-512 extraction gives the scalar one's keys and value bits and leaves the
    /// accumulator and the bitset as clear: dimensions around the block and word sizes, an
    /// intercept inside a block or none, λ zero or not, sums of ±0.0, every key or a few.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_extraction_equals_the_scalar_loop() {
        use rand::{RngExt, SeedableRng};
        if !crate::cpu::avx512_available() {
            return;
        }
        let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(11);
        for dim in [1usize, 15, 16, 17, 63, 64, 65, 100, 1000, 1037] {
            let (last, middle) = (dim as u32 - 1, (dim / 2) as u32);
            let intercepts = [None, Some((last, last + 1)), Some((middle, middle + 3))];
            for intercept in intercepts {
                for (lambda, density) in [(0.0f32, 0.5), (1e-3, 0.3), (0.5, 1.0), (0.1, 0.02)] {
                    let weights: Vec<f32> = (0..dim).map(|_| rng.random_range(-2.0..2.0)).collect();
                    let mut acc = vec![0.0f32; dim];
                    let mut touched = vec![0u64; dim.div_ceil(64)];
                    for (k, a) in acc.iter_mut().enumerate() {
                        if rng.random_bool(density) {
                            *a = match rng.random_range(0..4) {
                                0 => -0.0,
                                1 => 0.0,
                                _ => rng.random_range(-1.0..1.0),
                            };
                            touched[k >> 6] |= 1 << (k & 63);
                        }
                    }
                    let l2 = L2 {
                        lambda,
                        intercept,
                        factors: None,
                    };
                    let (mut acc2, mut touched2) = (acc.clone(), touched.clone());
                    let (mut scalar, mut vector) = (SparseGrad::default(), SparseGrad::default());
                    extract(&mut touched, &mut acc, &weights, l2, &mut scalar);
                    // SAFETY: checked above.
                    unsafe { extract_avx512(&mut touched2, &mut acc2, &weights, l2, &mut vector) };
                    let what = format!("dim {dim}, {l2:?}, density {density}");
                    assert_eq!(scalar.keys, vector.keys, "{what}");
                    let bits =
                        |g: &SparseGrad| g.values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&scalar), bits(&vector), "{what}");
                    assert!(
                        acc2.iter().all(|a| a.to_bits() == 0) && acc == acc2,
                        "{what}"
                    );
                    assert!(
                        touched2.iter().all(|&w| w == 0) && touched == touched2,
                        "{what}"
                    );
                }
            }
        }
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
