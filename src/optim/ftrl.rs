//! FTRL-Proximal (McMahan et al., "Ad Click Prediction: a View from the Trenches", KDD 2013,
//! Algorithm 1), per key `i`, with `α = lr`:
//!
//! ```text
//! σ = (√(n + g²) − √n) / α;   z ← z + g − σ·w;   n ← n + g²
//! w = 0                                           if |z| ≤ λ1
//! w = −(z − sgn(z)·λ1) / ((β + √n)/α + λ2)        otherwise
//! ```
//!
//! L1 (`l1`) makes weights exactly zero, so a click model keeps only the features that earn
//! their place; each key's rate `α / (β + √n)` falls as it is seen, as AdaGrad's does.
//!
//! The rule yields changes, as every rule does: it keeps the weight it last produced for each
//! key (`w` above, a third array) and returns `w_new − w`, which a replica adds to its weight.
//! Added to a weight that started at zero, a weight that should be zero is then exactly zero.
//! A model whose weights start elsewhere (a warm start, the factors of `fm` and `mlp`) moves
//! from there by the same changes: FTRL-Proximal centred on the starting point.

use super::registry::FromConfig;
use super::{restore_arrays, save_arrays, OptimizerConfig, UpdateRule};
use crate::mem::ZeroedArray;

/// FTRL-Proximal over the keys `lo..hi`.
pub struct Ftrl {
    alpha: f32,
    beta: f32,
    l1: f32,
    l2: f32,
    lo: u32,
    z: ZeroedArray<f32>,
    n: ZeroedArray<f32>,
    /// The weight this rule last produced for each key (the sum of its changes).
    w: ZeroedArray<f32>,
}

impl FromConfig for Ftrl {
    const STATE_BYTES: u64 = 12;
    const STATE: &'static str = "FTRL's z, n and last weight";

    fn from_config(cfg: &OptimizerConfig, lo: u32, hi: u32) -> Self {
        let len = (hi - lo) as usize;
        Ftrl {
            alpha: cfg.lr,
            beta: cfg.beta,
            l1: cfg.l1,
            l2: cfg.l2,
            lo,
            z: ZeroedArray::new(len),
            n: ZeroedArray::new(len),
            w: ZeroedArray::new(len),
        }
    }
}

impl UpdateRule for Ftrl {
    fn step(&mut self, _step: u64, keys: &[u32], grads: &[f32], changes: &mut Vec<f32>) {
        changes.clear();
        for (&k, &g) in keys.iter().zip(grads) {
            let i = (k - self.lo) as usize;
            let (w, n) = (self.w[i], self.n[i]);
            let root = (n + g * g).sqrt();
            let sigma = (root - n.sqrt()) / self.alpha;
            let z = self.z[i] + g - sigma * w;
            self.z[i] = z;
            self.n[i] = n + g * g;
            let next = if z.abs() <= self.l1 {
                0.0
            } else {
                -(z - self.l1.copysign(z)) / ((self.beta + root) / self.alpha + self.l2)
            };
            let change = next - w;
            // What a replica's weight becomes: `w + change`, exactly 0 when `next` is.
            self.w[i] = w + change;
            changes.push(change);
        }
    }

    fn save(&self) -> Option<Vec<u8>> {
        Some(save_arrays(&[&self.z, &self.n, &self.w]))
    }

    fn restore(&mut self, saved: &[u8]) -> Result<(), String> {
        let arrays: &mut [&mut [f32]] = &mut [&mut self.z, &mut self.n, &mut self.w];
        restore_arrays(saved, arrays, "FTRL's state")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::{apply, OptimizerKind};

    fn ftrl(l1: f32) -> Ftrl {
        let cfg = OptimizerConfig {
            kind: OptimizerKind::Ftrl,
            lr: 0.5,
            beta: 1.0,
            l1,
            l2: 0.2,
            ..OptimizerConfig::default()
        };
        Ftrl::from_config(&cfg, 0, 3)
    }

    /// Algorithm 1 by hand (α 0.5, β 1, λ1 0.1, λ2 0.2): three gradients of one key, the
    /// third bringing |z| under λ1, where the weight is exactly 0.
    #[test]
    fn ftrl_matches_hand_computation_and_l1_gives_exact_zeros() {
        let mut opt = ftrl(0.1);
        let mut w = vec![0.0f32; 3];
        // g = 0.6: σ = 0.6/0.5 = 1.2, z = 0.6, n = 0.36, w = -(0.6-0.1)/((1+0.6)/0.5+0.2) = -0.5/3.4.
        apply(&mut opt, 0, &[1], &[0.6], &mut w);
        assert!((w[1] + 0.5 / 3.4).abs() < 1e-6, "{}", w[1]);
        // g = -0.3: σ = (√0.45 - 0.6)/0.5, z = 0.3 - σ·w, w = -(z - 0.1)/((1 + √0.45)/0.5 + 0.2).
        let sigma = (0.45f64.sqrt() - 0.6) / 0.5;
        let z = 0.3 + sigma * (0.5 / 3.4);
        let expected = -(z - 0.1) / ((1.0 + 0.45f64.sqrt()) / 0.5 + 0.2);
        apply(&mut opt, 1, &[1], &[-0.3], &mut w);
        assert!(
            (w[1] as f64 - expected).abs() < 1e-6,
            "{} vs {expected}",
            w[1]
        );
        // g = -0.4: σ = (√0.61 - √0.45)/0.5, z = z - 0.4 - σ·w ≈ -0.065, within λ1: w = 0.
        let sigma = (0.61f64.sqrt() - 0.45f64.sqrt()) / 0.5;
        let z = z - 0.4 - sigma * expected;
        assert!(z.abs() < 0.1, "{z}");
        apply(&mut opt, 2, &[1], &[-0.4], &mut w);
        assert_eq!(w[1].to_bits(), 0, "{}", w[1]);
        assert_eq!((w[0], w[2]), (0.0, 0.0));
        // Without L1 the same steps leave a weight (of the sign of -z).
        let mut plain = ftrl(0.0);
        let mut v = vec![0.0f32; 3];
        for (t, g) in [0.6, -0.3, -0.4].into_iter().enumerate() {
            apply(&mut plain, t as u64, &[1], &[g], &mut v);
        }
        assert!(v[1] > 0.0, "{}", v[1]);
    }

    /// Many random steps on many keys: every weight the rule says is zero is exactly zero in
    /// the replica that added its changes, and the replica equals the rule's own weights bit
    /// for bit.
    #[test]
    fn a_replica_holds_exactly_the_rules_weights() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let cfg = OptimizerConfig {
            kind: OptimizerKind::Ftrl,
            lr: 0.3,
            l1: 6.0,
            ..OptimizerConfig::default()
        };
        let mut opt = Ftrl::from_config(&cfg, 0, 50);
        let mut w = vec![0.0f32; 50];
        let keys: Vec<u32> = (0..50).collect();
        for t in 0..40 {
            // Keys drift apart: key k's gradients lean by (k - 25)/50.
            let lean = |k: u32| (k as f32 - 25.0) / 50.0;
            let grads: Vec<f32> = (keys.iter())
                .map(|&k| rng.random_range(-1.0..1.0) + lean(k))
                .collect();
            apply(&mut opt, t, &keys, &grads, &mut w);
        }
        let zeros = w.iter().filter(|x| x.to_bits() == 0).count();
        assert!((5..45).contains(&zeros), "{zeros} exact zeros of 50");
        for (i, &x) in w.iter().enumerate() {
            assert_eq!(x.to_bits(), opt.w[i].to_bits(), "key {i}");
            let zero = opt.z[i].abs() <= cfg.l1;
            assert_eq!(zero, x == 0.0, "key {i}: z {} w {x}", opt.z[i]);
        }
    }
}
