//! Adam (Kingma & Ba, 2015, Algorithm 1): first and second moments per key, bias-corrected by
//! the global step (the round number + 1), β1 0.9, β2 0.999, ε 1e-8 by default.

use super::registry::FromConfig;
use super::{restore_arrays, save_arrays, OptimizerConfig, UpdateRule};
use crate::mem::ZeroedArray;

/// Adam over the keys `lo..hi`.
pub struct Adam {
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    lo: u32,
    first: ZeroedArray<f32>,
    second: ZeroedArray<f32>,
}

impl FromConfig for Adam {
    const STATE_BYTES: u64 = 8;
    const STATE: &'static str = "Adam's moments";

    fn from_config(cfg: &OptimizerConfig, lo: u32, hi: u32) -> Self {
        let len = (hi - lo) as usize;
        Adam {
            lr: cfg.lr,
            beta1: cfg.beta1,
            beta2: cfg.beta2,
            eps: cfg.eps,
            lo,
            first: ZeroedArray::new(len),
            second: ZeroedArray::new(len),
        }
    }
}

impl UpdateRule for Adam {
    fn step(&mut self, step: u64, keys: &[u32], grads: &[f32], changes: &mut Vec<f32>) {
        let (b1, b2) = (self.beta1, self.beta2);
        let t = (step + 1) as i32;
        let bc1 = 1.0 - (b1 as f64).powi(t);
        let bc2 = 1.0 - (b2 as f64).powi(t);
        // lr_t = lr * sqrt(1 - β2^t) / (1 - β1^t), ε scaled alike (Kingma & Ba, §2 end).
        let lr_t = (self.lr as f64 * bc2.sqrt() / bc1) as f32;
        let eps_t = (self.eps as f64 * bc2.sqrt()) as f32;
        changes.clear();
        for (&k, &g) in keys.iter().zip(grads) {
            let i = (k - self.lo) as usize;
            let m = &mut self.first[i];
            *m = b1 * *m + (1.0 - b1) * g;
            let v = &mut self.second[i];
            *v = b2 * *v + (1.0 - b2) * g * g;
            changes.push(-(lr_t * self.first[i] / (self.second[i].sqrt() + eps_t)));
        }
    }

    fn save(&self) -> Option<Vec<u8>> {
        Some(save_arrays(&[&self.first, &self.second]))
    }

    fn restore(&mut self, saved: &[u8]) -> Result<(), String> {
        let arrays: &mut [&mut [f32]] = &mut [&mut self.first, &mut self.second];
        restore_arrays(saved, arrays, "Adam's moments")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::{apply, OptimizerKind};

    #[test]
    fn adam_matches_hand_computation() {
        let cfg = OptimizerConfig {
            kind: OptimizerKind::Adam,
            lr: 0.1,
            ..OptimizerConfig::default()
        };
        let mut opt = Adam::from_config(&cfg, 10, 20);
        let mut w = vec![0.0f32; 20];
        w[12] = 1.0;
        // Step 1, g = 0.5: m = 0.05, v = 0.00025, m̂ = 0.5, v̂ = 0.25, w -= 0.1 * 0.5 / (0.5 + 1e-8).
        apply(&mut opt, 0, &[12], &[0.5], &mut w);
        assert!((w[12] - 0.9).abs() < 1e-6, "{}", w[12]);
        // Step 2, g = -1: m = 0.045 - 0.1 = -0.055, v = 0.00024975 + 0.001 = 0.00124975,
        // m̂ = -0.055 / 0.19 = -0.289474, v̂ = 0.00124975 / 0.001999 = 0.625188, step = 0.1 * m̂ / sqrt(v̂)
        apply(&mut opt, 1, &[12], &[-1.0], &mut w);
        let expected = 0.9 + 0.1 * 0.289_474 / 0.625_188f64.sqrt();
        assert!(
            (w[12] as f64 - expected).abs() < 1e-5,
            "{} vs {expected}",
            w[12]
        );
        assert!(
            w.iter().enumerate().all(|(i, &x)| i == 12 || x == 0.0),
            "only touched keys move"
        );
    }
}
