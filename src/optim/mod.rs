//! Optimizers: update rules, one file each ([`sgd`], [`momentum`], [`adam`], [`adagrad`],
//! [`ftrl`]), found by their `optimizer.kind` name in one registry ([`registry`]). Each holds
//! state for one contiguous key range (the whole model; under `sharded` an owner only ever
//! touches the keys it owns) and updates only the keys present in the aggregated gradient, as
//! the papers' systems do. A step yields *changes* of the weights, which is what the `sharded`
//! downlink transmits.

pub mod adagrad;
pub mod adam;
pub mod delay;
pub mod ftrl;
pub mod momentum;
pub mod registry;
pub mod sgd;

pub use registry::{build_optimizer, register, OptimizerKind, OPTIMIZERS, OPTIMIZER_NAMES};

use crate::snapshot::NonZero;
use serde::{Deserialize, Serialize};

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
    /// Adam's and AdaGrad's ε (added to the root of the second moment).
    pub eps: f32,
    /// FTRL-Proximal's β: the per-key rate is `lr / (β + √n)`. 0 by default (TensorFlow's):
    /// McMahan et al.'s β = 1 suits one row's gradient, and gradflow's is a mini-batch's mean.
    pub beta: f32,
    /// FTRL-Proximal's L1 strength λ1: a weight whose |z| is at most λ1 is exactly 0.
    pub l1: f32,
    /// FTRL-Proximal's L2 strength λ2.
    pub l2: f32,
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
            beta: 0.0,
            l1: 0.0,
            l2: 0.0,
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
        )?;
        check(
            self.beta.is_finite() && self.beta >= 0.0,
            "beta",
            "must be >= 0",
        )?;
        let ftrl = self.kind == OptimizerKind::Ftrl;
        for (field, value) in [("l1", self.l1), ("l2", self.l2)] {
            check(value.is_finite() && value >= 0.0, field, "must be >= 0")?;
            check(
                ftrl || value == 0.0,
                field,
                "is FTRL-Proximal's (kind = \"ftrl\"); other update rules take the model's \
                 `lambda`",
            )?;
        }
        Ok(())
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

/// [`UpdateRule::step`] applied to `weights` (indexed by key), as a replica applies the
/// changes (`w += c`).
pub fn apply(
    rule: &mut dyn UpdateRule,
    step: u64,
    keys: &[u32],
    grads: &[f32],
    weights: &mut [f32],
) {
    let mut changes = Vec::with_capacity(keys.len());
    rule.step(step, keys, grads, &mut changes);
    for (&k, &c) in keys.iter().zip(&changes) {
        weights[k as usize] += c;
    }
}

/// Per-key state arrays as a checkpoint keeps them (the entries whose bits are not zero), in
/// the order given.
pub fn save_arrays(arrays: &[&[f32]]) -> Vec<u8> {
    let parts: Vec<NonZero> = arrays.iter().map(|a| NonZero::of(a)).collect();
    crate::snapshot::encode(&parts)
}

/// Restores what [`save_arrays`] saved into `arrays` (of the same lengths); `what` names the
/// state in errors.
pub fn restore_arrays(saved: &[u8], arrays: &mut [&mut [f32]], what: &str) -> Result<(), String> {
    let parts: Vec<NonZero> = crate::snapshot::decode(saved, what)?;
    if parts.len() != arrays.len() {
        return Err(format!(
            "{what}: {} arrays saved, {} expected (another update rule's state)",
            parts.len(),
            arrays.len()
        ));
    }
    for (part, array) in parts.iter().zip(arrays.iter_mut()) {
        part.restore(array, what)?;
    }
    Ok(())
}
