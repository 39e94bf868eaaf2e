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

use serde::{Deserialize, Serialize};

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
    /// Whether labels are classes (mapped to ±1: positive labels are +1, the rest -1).
    pub fn is_classification(self) -> bool {
        !matches!(self, Loss::Squared)
    }

    /// The target the loss sees for a stored label.
    #[inline]
    pub fn target(self, label: f32) -> f32 {
        if self.is_classification() {
            if label > 0.0 {
                1.0
            } else {
                -1.0
            }
        } else {
            label
        }
    }

    /// Loss value at margin `m` for target `y`.
    #[inline]
    pub fn value(self, m: f32, y: f32) -> f64 {
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

    /// Derivative of the loss with respect to the margin.
    #[inline]
    pub fn derivative(self, m: f32, y: f32) -> f32 {
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
