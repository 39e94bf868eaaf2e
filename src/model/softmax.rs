//! Multiclass softmax (multinomial logistic) regression: `K` classes over sparse features, one
//! weight per feature and class (key `f·K + c`), the cross-entropy of the softmax of the row's
//! `K` margins against its class:
//!
//! `loss = log Σ_c exp(m_c) - m_y`,  `∂loss/∂m_c = p_c - [c = y]`,  `p_c = exp(m_c) / Σ exp(m_c')`.
//!
//! The gradient of a row touches `K` keys per feature it holds, so a codec sees `K` times the
//! keys of a binary model over the same rows, laid out feature by feature.

use super::{ModelLoss, Task};
use crate::data::{is_class, not_a_class};

/// Softmax regression over `classes` classes; labels are the classes `0..classes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Softmax {
    classes: u32,
}

impl Softmax {
    /// The loss for `classes` classes (at least 2).
    pub fn new(classes: u32) -> Softmax {
        assert!(
            classes >= 2,
            "softmax needs at least 2 classes, not {classes}"
        );
        Softmax { classes }
    }

    /// The number of classes.
    pub fn classes(&self) -> u32 {
        self.classes
    }

    /// The class a label names, if it is one (an integer in `0..classes`).
    fn class(&self, label: f32) -> Option<usize> {
        is_class(label, self.classes).then_some(label as usize)
    }
}

impl ModelLoss for Softmax {
    fn name(&self) -> &str {
        "softmax"
    }

    fn outputs(&self) -> u32 {
        self.classes
    }

    fn task(&self) -> Task {
        Task::Multiclass
    }

    fn target(&self, label: f32) -> f32 {
        label
    }

    fn row(&self, margins: &[f32], label: f32, derivatives: &mut [f32]) -> f64 {
        // log Σ exp(m_c), shifted by the largest margin so that no exp overflows.
        let top = margins.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0f32;
        for (d, &m) in derivatives.iter_mut().zip(margins) {
            *d = (m - top).exp();
            sum += *d;
        }
        let inv = 1.0 / sum;
        for d in derivatives.iter_mut() {
            *d *= inv;
        }
        let log_sum = top as f64 + (sum as f64).ln();
        match self.class(label) {
            Some(y) => {
                derivatives[y] -= 1.0;
                log_sum - margins[y] as f64
            }
            None => f64::NAN,
        }
    }

    fn predict(&self, margins: &[f32]) -> f32 {
        argmax(margins) as f32
    }

    fn check_label(&self, label: f32) -> Result<(), String> {
        match self.class(label) {
            Some(_) => Ok(()),
            None => Err(not_a_class(&label.to_string(), self.classes)),
        }
    }
}

/// The index of the largest value (the first of equal ones).
pub fn argmax(values: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derivatives_match_finite_differences_and_sum_to_zero() {
        let loss = Softmax::new(4);
        let margins = [0.3f32, -1.2, 2.0, 0.1];
        for y in 0..4 {
            let mut d = [0.0f32; 4];
            let value = loss.row(&margins, y as f32, &mut d);
            assert!(value > 0.0);
            // p - e_y sums to 0; a missing "- 1" at the true class or an unnormalised p
            // would not.
            assert!(d.iter().sum::<f32>().abs() < 1e-6, "{d:?}");
            for c in 0..4 {
                let h = 1e-3f32;
                let (mut up, mut down) = (margins, margins);
                up[c] += h;
                down[c] -= h;
                let mut scratch = [0.0f32; 4];
                let numeric = (loss.row(&up, y as f32, &mut scratch)
                    - loss.row(&down, y as f32, &mut scratch))
                    / (2.0 * h as f64);
                assert!(
                    (numeric - d[c] as f64).abs() < 2e-3,
                    "class {y}, margin {c}: {numeric} vs {}",
                    d[c]
                );
            }
        }
    }

    #[test]
    fn large_margins_do_not_overflow_and_bad_labels_do_not_panic() {
        let loss = Softmax::new(3);
        let mut d = [0.0f32; 3];
        let v = loss.row(&[1000.0, 0.0, -1000.0], 0.0, &mut d);
        assert!(v.is_finite() && v < 1e-6, "{v}");
        let v = loss.row(&[1000.0, 0.0, -1000.0], 1.0, &mut d);
        assert!((v - 1000.0).abs() < 1e-3, "{v}");
        for bad in [3.0f32, -1.0, 0.5, f32::NAN] {
            assert!(loss.row(&[0.0; 3], bad, &mut d).is_nan());
            assert!(loss.check_label(bad).is_err(), "{bad}");
        }
        assert!(loss.check_label(2.0).is_ok());
        assert_eq!(loss.predict(&[0.1, 0.7, 0.7]), 1.0);
    }
}
