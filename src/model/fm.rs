//! Factorization machines (Rendle, "Factorization Machines", ICDM 2010): one output,
//! `ŷ = Σᵢ wᵢxᵢ + ½ Σ_f [(Σᵢ v_{i,f} xᵢ)² − Σᵢ v²_{i,f} xᵢ²]` (eq. 1, rewritten as in Lemma 3.1:
//! O(nnz·k) per row), whose gradient is `∂ŷ/∂wᵢ = xᵢ` and
//! `∂ŷ/∂v_{i,f} = xᵢ (Σⱼ v_{j,f} xⱼ − v_{i,f} xᵢ)` (eq. 4). Feature `i` owns `1 + k` keys:
//! `wᵢ`, then `v_{i,1..k}`. The intercept feature is the bias `w₀`: its factors take no part.

use super::gradient::{Accumulator, Batch};
use super::Model;

/// A factorization machine of `factors` factors per feature.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fm {
    factors: u32,
    /// Standard deviation of the factors' initial values.
    init_std: f32,
    /// The intercept's feature, whose factors are left out.
    intercept: Option<u32>,
}

impl Fm {
    /// A factorization machine of `factors` factors (at least 1), initialised N(0, `init_std`);
    /// `intercept` is the intercept's feature, if the model has one.
    pub fn new(factors: u32, init_std: f32, intercept: Option<u32>) -> Fm {
        Fm {
            factors: factors.max(1),
            init_std,
            intercept,
        }
    }

    /// Row `(keys, vals)`'s output, with the factor sums `Σᵢ v_{i,f} xᵢ` left in `sums`.
    #[inline]
    fn output(&self, weights: &[f32], keys: &[u32], vals: &[f32], scratch: &mut [f32]) -> f32 {
        let (width, k) = (1 + self.factors as usize, self.factors as usize);
        // Per factor: Σᵢ v_{i,f} xᵢ and Σᵢ v²_{i,f} xᵢ², element-wise so that the loop vectorises
        // over f (one running sum of squares would be a serial float reduction).
        let (sums, squares) = scratch[..2 * k].split_at_mut(k);
        sums.fill(0.0);
        squares.fill(0.0);
        let mut linear = 0.0f32;
        for (&i, &x) in keys.iter().zip(vals) {
            let base = i as usize * width;
            linear += weights[base] * x;
            if Some(i) == self.intercept {
                continue;
            }
            let v = &weights[base + 1..base + width];
            for ((s, q), &v) in sums.iter_mut().zip(squares.iter_mut()).zip(v) {
                let vx = v * x;
                *s += vx;
                *q += vx * vx;
            }
        }
        let pairs: f32 = sums.iter().zip(&*squares).map(|(s, q)| s * s - q).sum();
        linear + 0.5 * pairs
    }
}

impl Model for Fm {
    fn name(&self) -> &str {
        "fm"
    }

    fn spec(&self) -> String {
        format!("fm:{}", self.factors)
    }

    fn outputs(&self) -> u32 {
        1
    }

    fn width(&self) -> u32 {
        1 + self.factors
    }

    /// The factors are N(0, `init_std`); the linear weights and the intercept's factors 0.
    fn initial(&self, seed: u64, _dim: u32, key: u32) -> f32 {
        let width = self.width();
        if key.is_multiple_of(width) || Some(key / width) == self.intercept {
            return 0.0;
        }
        self.init_std * super::seeded_normal(seed, key as u64)
    }

    fn renumbered(&self, intercept: Option<u32>) -> Option<super::ModelFn> {
        Some(super::ModelFn::new(Fm { intercept, ..*self }))
    }

    fn forward(
        &self,
        weights: &[f32],
        keys: &[u32],
        vals: &[f32],
        outputs: &mut [f32],
        scratch: &mut Vec<f32>,
    ) {
        scratch.resize(2 * self.factors as usize, 0.0);
        outputs[0] = self.output(weights, keys, vals, scratch);
    }

    fn accumulate(&self, batch: &Batch, sums: &mut Accumulator) -> f64 {
        let width = 1 + self.factors as usize;
        let mut scratch = std::mem::take(&mut sums.scratch);
        scratch.resize(2 * self.factors as usize, 0.0);
        let (mut loss_sum, mut d) = (0.0, [0.0f32]);
        for &r in batch.rows {
            let r = r as usize;
            let (keys, vals) = batch.data.row(r);
            let y = self.output(batch.weights, keys, vals, &mut scratch);
            let factor_sums = &scratch[..width - 1];
            loss_sum += batch.loss.row(&[y], batch.data.labels[r], &mut d);
            let g = d[0] * batch.scale;
            for (&i, &x) in keys.iter().zip(vals) {
                let base = i as usize * width;
                let gx = g * x;
                sums.add(base, gx);
                if Some(i) == self.intercept {
                    continue;
                }
                // ∂ŷ/∂v_{i,f} = xᵢ Σⱼ v_{j,f} xⱼ − v_{i,f} xᵢ² (eq. 4), a run of adjacent keys.
                let v = &batch.weights[base + 1..base + width];
                let run = sums.run(base + 1, width - 1);
                for ((a, &s), &v) in run.iter_mut().zip(factor_sums).zip(v) {
                    *a += gx * (s - v * x);
                }
            }
        }
        sums.scratch = scratch;
        loss_sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Dataset;
    use crate::model::gradient::{GradientWorkspace, L2};
    use crate::model::{Loss, ModelLoss, SparseGrad};

    /// The output by the definition (eq. 1): every pair of the row's features.
    fn by_pairs(fm: &Fm, w: &[f32], keys: &[u32], vals: &[f32]) -> f64 {
        let width = fm.width() as usize;
        let v = |i: u32, f: usize| w[i as usize * width + 1 + f] as f64;
        let mut y: f64 = keys
            .iter()
            .zip(vals)
            .map(|(&i, &x)| w[i as usize * width] as f64 * x as f64)
            .sum();
        for a in 0..keys.len() {
            for b in a + 1..keys.len() {
                let (i, j) = (keys[a], keys[b]);
                if Some(i) == fm.intercept || Some(j) == fm.intercept {
                    continue;
                }
                let dot: f64 = (0..fm.factors as usize).map(|f| v(i, f) * v(j, f)).sum();
                y += dot * vals[a] as f64 * vals[b] as f64;
            }
        }
        y
    }

    fn toy() -> Dataset {
        let mut d = Dataset::new(5);
        d.push_row(&[0, 2, 4], &[1.0, -0.5, 1.0], 1.0);
        d.push_row(&[1, 2, 3, 4], &[0.3, 1.5, 2.0, 1.0], -1.0);
        d.push_row(&[0, 1, 3, 4], &[0.7, 1.0, -1.2, 1.0], 1.0);
        d
    }

    #[test]
    fn the_output_is_the_sum_over_pairs_and_the_gradient_its_finite_differences() {
        let fm = Fm::new(3, 0.5, Some(4));
        let mut w = vec![0.0f32; 5 * 4];
        fm.init(7, &mut w);
        for (i, x) in w.iter_mut().enumerate().step_by(4) {
            *x = 0.1 * i as f32 - 0.5; // the linear weights
        }
        assert!(
            w[16 + 1..20].iter().all(|v| *v == 0.0),
            "the bias has no factors"
        );
        let d = toy();
        let mut scratch = Vec::new();
        for r in 0..d.rows() {
            let (k, v) = d.row(r);
            let mut y = [0.0f32];
            fm.forward(&w, k, v, &mut y, &mut scratch);
            let exact = by_pairs(&fm, &w, k, v);
            assert!(
                (y[0] as f64 - exact).abs() < 1e-5,
                "row {r}: {} vs {exact}",
                y[0]
            );
        }
        let rows = [0u32, 1, 2];
        let loss = Loss::Logistic;
        let objective = |w: &[f32]| -> f64 {
            let mut out = [0.0f32; 1];
            let mut scratch = Vec::new();
            rows.iter()
                .map(|&r| {
                    let (k, v) = d.row(r as usize);
                    fm.forward(w, k, v, &mut out, &mut scratch);
                    loss.row(&out, d.labels[r as usize], &mut [0.0])
                })
                .sum::<f64>()
                / rows.len() as f64
        };
        let mut ws = GradientWorkspace::new(w.len() as u32);
        let mut g = SparseGrad::default();
        ws.minibatch(&d, &rows, &w, &fm, &loss, L2::default(), &mut g);
        // Every key of every feature the rows hold, but the bias's factors.
        assert_eq!(g.len(), 4 * 4 + 1);
        crate::model::gradient::assert_finite_differences(&g, &w, objective);
    }

    #[test]
    fn initial_factors_are_seeded_normal_and_the_same_for_a_key_everywhere() {
        let fm = Fm::new(8, 0.1, None);
        let (mut a, mut b) = (vec![0.0f32; 9 * 2000], vec![0.0f32; 9 * 2000]);
        fm.init(42, &mut a);
        fm.init(42, &mut b);
        assert_eq!(a, b);
        let factors: Vec<f64> = (0..a.len())
            .filter(|k| k % 9 != 0)
            .map(|k| a[k] as f64)
            .collect();
        assert!(
            (0..a.len()).step_by(9).all(|k| a[k] == 0.0),
            "linear weights start at 0"
        );
        let n = factors.len() as f64;
        let mean = factors.iter().sum::<f64>() / n;
        let std = (factors.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!(
            mean.abs() < 0.005 && (std - 0.1).abs() < 0.005,
            "{mean} {std}"
        );
        let mut c = vec![0.0f32; 9 * 2000];
        fm.init(43, &mut c);
        assert_ne!(a, c, "another seed, other factors");
    }
}
