//! AdaGrad (Duchi, Hazan & Singer, JMLR 2011, the diagonal form of §1): per key, the sum of
//! the squared gradients so far, `G ← G + g²; w ← w − lr·g / (√G + ε)`. Each key's rate falls
//! as it is seen, so rare features (most of a click model's) keep large steps: Vowpal Wabbit's
//! adaptive update and Fwumious Wabbit's default.

use super::registry::FromConfig;
use super::{restore_arrays, save_arrays, OptimizerConfig, UpdateRule};
use crate::mem::ZeroedArray;

/// AdaGrad over the keys `lo..hi`.
pub struct AdaGrad {
    lr: f32,
    eps: f32,
    lo: u32,
    sum_sq: ZeroedArray<f32>,
}

impl FromConfig for AdaGrad {
    const STATE_BYTES: u64 = 4;
    const STATE: &'static str = "AdaGrad's sums of squares";

    fn from_config(cfg: &OptimizerConfig, lo: u32, hi: u32) -> Self {
        AdaGrad {
            lr: cfg.lr,
            eps: cfg.eps,
            lo,
            sum_sq: ZeroedArray::new((hi - lo) as usize),
        }
    }
}

impl UpdateRule for AdaGrad {
    fn step(&mut self, _step: u64, keys: &[u32], grads: &[f32], changes: &mut Vec<f32>) {
        changes.clear();
        for (&k, &g) in keys.iter().zip(grads) {
            let s = &mut self.sum_sq[(k - self.lo) as usize];
            *s += g * g;
            changes.push(-(self.lr * g / (s.sqrt() + self.eps)));
        }
    }

    fn save(&self) -> Option<Vec<u8>> {
        Some(save_arrays(&[&self.sum_sq]))
    }

    fn restore(&mut self, saved: &[u8]) -> Result<(), String> {
        restore_arrays(saved, &mut [&mut self.sum_sq], "AdaGrad's state")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::{apply, OptimizerKind};

    #[test]
    fn adagrad_matches_hand_computation() {
        let cfg = OptimizerConfig {
            kind: OptimizerKind::Adagrad,
            lr: 0.5,
            eps: 1e-10,
            ..OptimizerConfig::default()
        };
        let mut opt = AdaGrad::from_config(&cfg, 4, 8);
        let mut w = vec![0.0f32; 8];
        // g = 2: G = 4, w = -0.5·2/2 = -0.5.
        apply(&mut opt, 0, &[5], &[2.0], &mut w);
        assert!((w[5] + 0.5).abs() < 1e-7, "{}", w[5]);
        // g = -1: G = 5, w = -0.5 + 0.5/√5 (the rate fell from 0.25 to 0.2236 per unit).
        apply(&mut opt, 1, &[5, 6], &[-1.0, 1.0], &mut w);
        assert!((w[5] - (-0.5 + 0.5 / 5f32.sqrt())).abs() < 1e-6, "{}", w[5]);
        // A key seen first now takes the full first step: -0.5·1/1.
        assert!((w[6] + 0.5).abs() < 1e-7, "{}", w[6]);
        assert_eq!((w[4], w[7]), (0.0, 0.0));
    }
}
