//! Optimizers. Each holds state for one contiguous key range (the whole model; under `sharded`
//! an owner only ever touches the keys it owns) and updates only the keys present in the
//! aggregated gradient, as the papers' systems do. A step yields *changes* of the weights, which
//! is what the `sharded` downlink transmits. Adam bias correction uses the global step (the round number + 1).

pub mod delay;

use crate::snapshot::NonZero;
use serde::{Deserialize, Serialize};

/// Which update rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptimizerKind {
    /// Plain SGD with rate `lr / (1 + decay * t)`.
    Sgd,
    /// Heavy-ball momentum: `u ← μ u + g; w ← w - lr u`.
    Momentum,
    /// Adam (Kingma & Ba): the papers' default, β1 0.9, β2 0.999, ε 1e-8.
    Adam,
}

/// Optimizer hyper-parameters (job file table `[optimizer]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimizerConfig {
    /// The update rule.
    pub kind: OptimizerKind,
    /// Learning rate.
    pub lr: f32,
    /// SGD rate decay per round (0 = constant rate).
    pub decay: f32,
    /// Momentum factor μ.
    pub momentum: f32,
    /// Adam β1.
    pub beta1: f32,
    /// Adam β2.
    pub beta2: f32,
    /// Adam ε.
    pub eps: f32,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig {
            kind: OptimizerKind::Adam,
            lr: 0.01,
            decay: 0.0,
            momentum: 0.9,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        }
    }
}

impl OptimizerConfig {
    /// Checks the ranges of the hyper-parameters; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        let check = |ok: bool, field: &str, why: &str| {
            if ok {
                Ok(())
            } else {
                Err(format!("optimizer.{field}: {why}"))
            }
        };
        check(
            self.lr.is_finite() && self.lr > 0.0,
            "lr",
            "must be a positive number",
        )?;
        check(
            self.decay.is_finite() && self.decay >= 0.0,
            "decay",
            "must be >= 0",
        )?;
        check(
            (0.0..1.0).contains(&self.momentum),
            "momentum",
            "must be in [0, 1)",
        )?;
        check(
            (0.0..1.0).contains(&self.beta1),
            "beta1",
            "must be in [0, 1)",
        )?;
        check(
            (0.0..1.0).contains(&self.beta2),
            "beta2",
            "must be in [0, 1)",
        )?;
        check(
            self.eps.is_finite() && self.eps > 0.0,
            "eps",
            "must be positive",
        )
    }
}

/// An update rule: from an aggregated gradient to the changes of its keys' weights. The
/// built-in [`Optimizer`] implements it; a program hands its own to a plan
/// ([`crate::dataflow::Training::set_optimizer`], `jobs/own_parts.rs`).
pub trait UpdateRule: Send {
    /// One step (`step` counts rounds from 0) of the gradient `(keys, grads)`, keys increasing:
    /// `changes[i]` (cleared first) is what weight `keys[i]` must add. Every key lies in the
    /// range the rule was built for; no weight is read.
    fn step(&mut self, step: u64, keys: &[u32], grads: &[f32], changes: &mut Vec<f32>);
    /// The rule's state for a checkpoint ([`crate::snapshot`]), `None` when it cannot be saved
    /// (the default: a checkpoint of a run that uses it is an error saying so). A rule
    /// without state returns `Some(Vec::new())`.
    fn save(&self) -> Option<Vec<u8>> {
        None
    }
    /// Restores what [`UpdateRule::save`] returned into this fresh rule for the same keys, so
    /// that the run continues bit for bit.
    fn restore(&mut self, _saved: &[u8]) -> Result<(), String> {
        Err("this update rule cannot restore a checkpoint".into())
    }
}

/// A program's own update rule, as a plan holds it: a name and a factory that builds the rule
/// for the key range `lo..hi`, once per owner.
pub type CustomOptimizer =
    crate::named::Named<dyn Fn(u32, u32) -> Box<dyn UpdateRule> + Send + Sync>;

/// Optimizer state for the key range `[lo, lo + len)`.
pub struct Optimizer {
    cfg: OptimizerConfig,
    lo: u32,
    first: crate::mem::ZeroedArray<f32>,
    second: crate::mem::ZeroedArray<f32>,
}

impl Optimizer {
    /// State for keys `lo..hi`.
    pub fn new(cfg: OptimizerConfig, lo: u32, hi: u32) -> Self {
        let len = (hi - lo) as usize;
        let first = if cfg.kind == OptimizerKind::Sgd {
            Default::default()
        } else {
            crate::mem::ZeroedArray::new(len)
        };
        let second = if cfg.kind == OptimizerKind::Adam {
            crate::mem::ZeroedArray::new(len)
        } else {
            Default::default()
        };
        Optimizer {
            cfg,
            lo,
            first,
            second,
        }
    }

    /// Computes one step (`step` counts from 0) of the gradient `(keys, grads)`: `changes[i]`
    /// is what weight `keys[i]` must add (`-lr·g` for SGD). Every key must lie in this
    /// optimizer's range. Optimizer state advances; no weight is read.
    pub fn step(&mut self, step: u64, keys: &[u32], grads: &[f32], changes: &mut Vec<f32>) {
        let c = &self.cfg;
        changes.clear();
        changes.reserve(keys.len());
        match c.kind {
            OptimizerKind::Sgd => {
                let lr = c.lr / (1.0 + c.decay * step as f32);
                changes.extend(grads.iter().map(|&g| -(lr * g)));
            }
            OptimizerKind::Momentum => {
                for (&k, &g) in keys.iter().zip(grads) {
                    let u = &mut self.first[(k - self.lo) as usize];
                    *u = c.momentum * *u + g;
                    changes.push(-(c.lr * *u));
                }
            }
            OptimizerKind::Adam => {
                let t = (step + 1) as i32;
                let bc1 = 1.0 - (c.beta1 as f64).powi(t);
                let bc2 = 1.0 - (c.beta2 as f64).powi(t);
                // lr_t = lr * sqrt(1 - β2^t) / (1 - β1^t), ε scaled alike (Kingma & Ba, §2 end).
                let lr_t = (c.lr as f64 * bc2.sqrt() / bc1) as f32;
                let eps_t = (c.eps as f64 * bc2.sqrt()) as f32;
                for (&k, &g) in keys.iter().zip(grads) {
                    let i = (k - self.lo) as usize;
                    let m = &mut self.first[i];
                    *m = c.beta1 * *m + (1.0 - c.beta1) * g;
                    let v = &mut self.second[i];
                    *v = c.beta2 * *v + (1.0 - c.beta2) * g * g;
                    changes.push(-(lr_t * self.first[i] / (self.second[i].sqrt() + eps_t)));
                }
            }
        }
    }

    /// [`UpdateRule::step`] applied to `weights` (indexed by global key).
    pub fn apply(&mut self, step: u64, keys: &[u32], grads: &[f32], weights: &mut [f32]) {
        let mut changes = Vec::with_capacity(keys.len());
        self.step(step, keys, grads, &mut changes);
        for (&k, &c) in keys.iter().zip(&changes) {
            weights[k as usize] += c;
        }
    }
}

impl UpdateRule for Optimizer {
    fn step(&mut self, step: u64, keys: &[u32], grads: &[f32], changes: &mut Vec<f32>) {
        Optimizer::step(self, step, keys, grads, changes);
    }

    /// The first and second moments (empty for what the kind does not keep).
    fn save(&self) -> Option<Vec<u8>> {
        let moments = (NonZero::of(&self.first), NonZero::of(&self.second));
        Some(crate::snapshot::encode(&moments))
    }

    fn restore(&mut self, saved: &[u8]) -> Result<(), String> {
        let what = "optimizer state";
        let (first, second): (NonZero, NonZero) = crate::snapshot::decode(saved, what)?;
        first.restore(&mut self.first, what)?;
        second.restore(&mut self.second, what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adam_matches_hand_computation() {
        let cfg = OptimizerConfig {
            kind: OptimizerKind::Adam,
            lr: 0.1,
            ..OptimizerConfig::default()
        };
        let mut opt = Optimizer::new(cfg, 10, 20);
        let mut w = vec![0.0f32; 20];
        w[12] = 1.0;
        // Step 1, g = 0.5: m = 0.05, v = 0.00025, m̂ = 0.5, v̂ = 0.25, w -= 0.1 * 0.5 / (0.5 + 1e-8).
        opt.apply(0, &[12], &[0.5], &mut w);
        assert!((w[12] - 0.9).abs() < 1e-6, "{}", w[12]);
        // Step 2, g = -1: m = 0.045 - 0.1 = -0.055, v = 0.00024975 + 0.001 = 0.00124975,
        // m̂ = -0.055 / 0.19 = -0.289474, v̂ = 0.00124975 / 0.001999 = 0.625188, step = 0.1 * m̂ / sqrt(v̂)
        opt.apply(1, &[12], &[-1.0], &mut w);
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

    #[test]
    fn momentum_matches_hand_computation() {
        let cfg = OptimizerConfig {
            kind: OptimizerKind::Momentum,
            lr: 0.5,
            momentum: 0.9,
            ..OptimizerConfig::default()
        };
        let mut opt = Optimizer::new(cfg, 0, 4);
        let mut w = vec![1.0f32; 4];
        opt.apply(0, &[1, 3], &[1.0, -2.0], &mut w); // u = (1, -2)
        assert_eq!(w, vec![1.0, 0.5, 1.0, 2.0]);
        opt.apply(1, &[1], &[1.0], &mut w); // u1 = 0.9 + 1 = 1.9; key 3 untouched keeps u = -2
        assert!((w[1] - (0.5 - 0.95)).abs() < 1e-6);
        assert_eq!(w[3], 2.0);
        opt.apply(2, &[3], &[0.0], &mut w); // u3 = -1.8
        assert!((w[3] - 2.9).abs() < 1e-6);
    }

    #[test]
    fn sgd_decays() {
        let cfg = OptimizerConfig {
            kind: OptimizerKind::Sgd,
            lr: 1.0,
            decay: 1.0,
            ..OptimizerConfig::default()
        };
        let mut opt = Optimizer::new(cfg, 0, 1);
        let mut w = vec![0.0f32];
        opt.apply(0, &[0], &[1.0], &mut w);
        opt.apply(1, &[0], &[1.0], &mut w);
        assert_eq!(w[0], -1.5);
    }
}
