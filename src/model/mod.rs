//! Model layer: linear models over sparse rows, their losses, the mini-batch sparse gradient and
//! the test metrics. Knows the data layer only.
//!
//! Losses follow the papers (`shared/papers/NOTES.md`): logistic regression, SVM (hinge) and linear
//! regression (squared), each with L2 regularisation `λ/2 ‖w‖²` (λ = 0.01 in the papers).

pub mod file;
pub mod gradient;
pub mod metrics;

pub use gradient::{GradientWorkspace, SparseGrad};
pub use metrics::{auc, EvalPart, EvalSummary};

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A loss of a linear model's margin `m = w·x` against a target `y`: everything the mini-batch
/// gradient, the test metrics and predictions need. The built-in [`Loss`] implements it; a
/// program plugs in its own through [`crate::dataflow::Training::set_loss`] (`jobs/huber.rs`),
/// without copying an operator.
pub trait MarginLoss: Send + Sync + std::fmt::Debug {
    /// The name the model file records.
    fn name(&self) -> &str;
    /// Whether labels are classes (mapped to ±1: positive labels are +1, the rest -1); the
    /// metrics are then accuracy and AUC, otherwise RMSE.
    fn is_classification(&self) -> bool;
    /// Loss value at margin `m` for target `y`.
    fn value(&self, m: f32, y: f32) -> f64;
    /// Derivative of the loss with respect to the margin.
    fn derivative(&self, m: f32, y: f32) -> f32;
    /// The target the loss sees for a stored label.
    #[inline]
    fn target(&self, label: f32) -> f32 {
        match (self.is_classification(), label > 0.0) {
            (true, true) => 1.0,
            (true, false) => -1.0,
            (false, _) => label,
        }
    }
    /// What a prediction reports for margin `m` (the margin itself unless overridden).
    fn prediction(&self, m: f32) -> f32 {
        m
    }
}

/// A loss as a plan holds it: shared by every worker's operators, compared by name.
#[derive(Clone, Debug)]
pub struct LossFn(pub Arc<dyn MarginLoss>);

impl LossFn {
    /// Wraps a loss.
    pub fn new(loss: impl MarginLoss + 'static) -> LossFn {
        LossFn(Arc::new(loss))
    }
}

impl std::ops::Deref for LossFn {
    type Target = dyn MarginLoss;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl PartialEq for LossFn {
    fn eq(&self, other: &LossFn) -> bool {
        self.name() == other.name()
    }
}

impl From<Loss> for LossFn {
    fn from(loss: Loss) -> LossFn {
        LossFn::new(loss)
    }
}

/// The loss of a linear model `m = w·x` against a label `y`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Loss {
    /// Logistic regression: `log(1 + exp(-y m))`, `y ∈ {-1, +1}`.
    Logistic,
    /// Linear SVM: `max(0, 1 - y m)`, `y ∈ {-1, +1}`.
    Hinge,
    /// Linear regression: `(m - y)² / 2`, real `y`.
    Squared,
}

impl Loss {
    /// The built-in loss named `name` (as job and model files write it).
    pub fn from_name(name: &str) -> Option<Loss> {
        [Loss::Logistic, Loss::Hinge, Loss::Squared]
            .into_iter()
            .find(|l| l.name() == name)
    }
}

impl MarginLoss for Loss {
    fn name(&self) -> &str {
        match self {
            Loss::Logistic => "logistic",
            Loss::Hinge => "hinge",
            Loss::Squared => "squared",
        }
    }

    fn is_classification(&self) -> bool {
        !matches!(self, Loss::Squared)
    }

    #[inline]
    fn value(&self, m: f32, y: f32) -> f64 {
        let (m, y) = (m as f64, y as f64);
        match self {
            Loss::Logistic => {
                let z = -y * m;
                // log(1 + e^z) computed stably.
                if z > 0.0 {
                    z + (-z).exp().ln_1p()
                } else {
                    z.exp().ln_1p()
                }
            }
            Loss::Hinge => (1.0 - y * m).max(0.0),
            Loss::Squared => 0.5 * (m - y) * (m - y),
        }
    }

    #[inline]
    fn derivative(&self, m: f32, y: f32) -> f32 {
        match self {
            Loss::Logistic => -y / (1.0 + (y * m).exp()),
            Loss::Hinge => {
                if y * m < 1.0 {
                    -y
                } else {
                    0.0
                }
            }
            Loss::Squared => m - y,
        }
    }

    /// The probability of the positive class for logistic regression, the margin otherwise.
    fn prediction(&self, m: f32) -> f32 {
        match self {
            Loss::Logistic => 1.0 / (1.0 + (-m).exp()),
            _ => m,
        }
    }
}

/// `w · x` for a sparse row.
#[inline]
pub fn margin(weights: &[f32], keys: &[u32], vals: &[f32]) -> f32 {
    keys.iter()
        .zip(vals)
        .map(|(&k, &v)| weights[k as usize] * v)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derivatives_match_finite_differences() {
        for loss in [Loss::Logistic, Loss::Hinge, Loss::Squared] {
            for &y in &[1.0f32, -1.0, 0.7] {
                let y = if loss.is_classification() {
                    loss.target(y)
                } else {
                    y
                };
                for &m in &[-3.0f32, -0.4, 0.3, 2.5] {
                    if loss == Loss::Hinge && (y * m - 1.0).abs() < 1e-3 {
                        continue; // the kink
                    }
                    let h = 1e-3f64;
                    let numeric = (loss.value((m as f64 + h) as f32, y)
                        - loss.value((m as f64 - h) as f32, y))
                        / (2.0 * h);
                    let analytic = loss.derivative(m, y) as f64;
                    assert!(
                        (numeric - analytic).abs() < 2e-3,
                        "{loss:?} y={y} m={m}: {numeric} vs {analytic}"
                    );
                }
            }
        }
    }
}
