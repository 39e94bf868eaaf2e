//! Heavy-ball momentum (Polyak): `u ← μ·u + g; w ← w − lr·u`, one `u` per key.

use super::registry::FromConfig;
use super::{restore_arrays, save_arrays, OptimizerConfig, UpdateRule};
use crate::mem::ZeroedArray;

/// Momentum over the keys `lo..hi`.
pub struct Momentum {
    lr: f32,
    mu: f32,
    lo: u32,
    velocity: ZeroedArray<f32>,
}

impl FromConfig for Momentum {
    const STATE_BYTES: u64 = 4;
    const STATE: &'static str = "momentum";

    fn from_config(cfg: &OptimizerConfig, lo: u32, hi: u32) -> Self {
        Momentum {
            lr: cfg.lr,
            mu: cfg.momentum,
            lo,
            velocity: ZeroedArray::new((hi - lo) as usize),
        }
    }
}

impl UpdateRule for Momentum {
    fn step(&mut self, _step: u64, keys: &[u32], grads: &[f32], changes: &mut Vec<f32>) {
        changes.clear();
        for (&k, &g) in keys.iter().zip(grads) {
            let u = &mut self.velocity[(k - self.lo) as usize];
            *u = self.mu * *u + g;
            changes.push(-(self.lr * *u));
        }
    }

    fn save(&self) -> Option<Vec<u8>> {
        Some(save_arrays(&[&self.velocity]))
    }

    fn restore(&mut self, saved: &[u8]) -> Result<(), String> {
        restore_arrays(saved, &mut [&mut self.velocity], "momentum's state")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::{apply, OptimizerKind};

    #[test]
    fn momentum_matches_hand_computation() {
        let cfg = OptimizerConfig {
            kind: OptimizerKind::Momentum,
            lr: 0.5,
            momentum: 0.9,
            ..OptimizerConfig::default()
        };
        let mut opt = Momentum::from_config(&cfg, 0, 4);
        let mut w = vec![1.0f32; 4];
        apply(&mut opt, 0, &[1, 3], &[1.0, -2.0], &mut w); // u = (1, -2)
        assert_eq!(w, vec![1.0, 0.5, 1.0, 2.0]);
        apply(&mut opt, 1, &[1], &[1.0], &mut w); // u1 = 0.9 + 1 = 1.9; key 3 keeps u = -2
        assert!((w[1] - (0.5 - 0.95)).abs() < 1e-6);
        assert_eq!(w[3], 2.0);
        apply(&mut opt, 2, &[3], &[0.0], &mut w); // u3 = -1.8
        assert!((w[3] - 2.9).abs() < 1e-6);
    }
}
