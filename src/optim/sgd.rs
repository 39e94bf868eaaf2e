//! Plain SGD: `w ← w − lr_t·g` with `lr_t = lr / (1 + decay·t)` (`t` the round). No state.

use super::registry::FromConfig;
use super::{restore_arrays, save_arrays, OptimizerConfig, UpdateRule};

/// Plain SGD with a decaying rate.
pub struct Sgd {
    lr: f32,
    decay: f32,
}

impl FromConfig for Sgd {
    const STATE_BYTES: u64 = 0;
    const STATE: &'static str = "";

    fn from_config(cfg: &OptimizerConfig, _lo: u32, _hi: u32) -> Self {
        Sgd {
            lr: cfg.lr,
            decay: cfg.decay,
        }
    }
}

impl UpdateRule for Sgd {
    fn step(&mut self, step: u64, _keys: &[u32], grads: &[f32], changes: &mut Vec<f32>) {
        let lr = self.lr / (1.0 + self.decay * step as f32);
        changes.clear();
        changes.extend(grads.iter().map(|&g| -(lr * g)));
    }

    fn save(&self) -> Option<Vec<u8>> {
        Some(save_arrays(&[]))
    }

    fn restore(&mut self, saved: &[u8]) -> Result<(), String> {
        restore_arrays(saved, &mut [], "SGD's state")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optim::{apply, OptimizerKind};

    #[test]
    fn sgd_decays() {
        let cfg = OptimizerConfig {
            kind: OptimizerKind::Sgd,
            lr: 1.0,
            decay: 1.0,
            ..OptimizerConfig::default()
        };
        let mut opt = Sgd::from_config(&cfg, 0, 1);
        let mut w = vec![0.0f32];
        apply(&mut opt, 0, &[0], &[1.0], &mut w);
        apply(&mut opt, 1, &[0], &[1.0], &mut w);
        assert_eq!(w[0], -1.5);
    }
}
