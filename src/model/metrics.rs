//! Test metrics: loss, accuracy and AUC for two classes, log loss and accuracy for several,
//! RMSE for regression. Each worker evaluates its share of the test rows into an [`EvalPart`];
//! parts merge into an [`EvalSummary`].

use serde::{Deserialize, Serialize};

use super::softmax::argmax;
use super::{margins, ModelLoss, Task};
use crate::data::Dataset;

/// One worker's share of a test evaluation. Scores are kept (one pair per row) so that the AUC
/// of the merged parts is exact.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EvalPart {
    /// Sum of the data loss.
    pub loss_sum: f64,
    /// Rows evaluated.
    pub count: u64,
    /// Correctly classified rows (classification).
    pub correct: u64,
    /// Sum of squared errors (regression).
    pub sq_err: f64,
    /// (margin, target) per row, for the AUC (two classes only).
    pub scores: Vec<(f32, f32)>,
}

impl EvalPart {
    /// Evaluates `weights` on every row of `data`.
    pub fn evaluate(data: &Dataset, weights: &[f32], loss: &dyn ModelLoss) -> Self {
        let mut part = EvalPart::default();
        let outputs = loss.outputs() as usize;
        let (mut m, mut scratch) = (vec![0.0f32; outputs], vec![0.0f32; outputs]);
        for i in 0..data.rows() {
            let (k, v) = data.row(i);
            margins(weights, k, v, &mut m);
            let label = data.labels[i];
            part.loss_sum += loss.row(&m, label, &mut scratch);
            part.count += 1;
            let y = loss.target(label);
            match loss.task() {
                Task::Binary => {
                    part.correct += ((m[0] >= 0.0) == (y > 0.0)) as u64;
                    part.scores.push((m[0], y));
                }
                Task::Multiclass => part.correct += (argmax(&m) as f32 == y) as u64,
                Task::Regression => part.sq_err += ((m[0] - y) as f64).powi(2),
            }
        }
        part
    }

    /// Adds another part into this one.
    pub fn merge(&mut self, other: &EvalPart) {
        self.loss_sum += other.loss_sum;
        self.count += other.count;
        self.correct += other.correct;
        self.sq_err += other.sq_err;
        self.scores.extend_from_slice(&other.scores);
    }

    /// The metrics of the merged parts.
    /// With no rows evaluated every metric is absent.
    pub fn summary(&self, loss: &dyn ModelLoss) -> EvalSummary {
        if self.count == 0 {
            return EvalSummary::default();
        }
        let n = self.count as f64;
        let task = loss.task();
        EvalSummary {
            loss: Some(self.loss_sum / n),
            accuracy: (task != Task::Regression).then(|| self.correct as f64 / n),
            auc: (task == Task::Binary).then(|| auc(&self.scores)),
            rmse: (task == Task::Regression).then(|| (self.sq_err / n).sqrt()),
        }
    }
}

/// Test metrics of one evaluation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EvalSummary {
    /// Mean data loss (absent when there were no test rows).
    pub loss: Option<f64>,
    /// Fraction classified correctly (classification).
    pub accuracy: Option<f64>,
    /// Area under the ROC curve (classification).
    pub auc: Option<f64>,
    /// Root mean squared error (regression).
    pub rmse: Option<f64>,
}

/// Exact ROC AUC of `(score, target)` pairs (target > 0 is positive), ties counted half
/// (Mann-Whitney rank statistic). Returns 0.5 when one class is absent.
pub fn auc(scores: &[(f32, f32)]) -> f64 {
    let mut s: Vec<(f32, bool)> = scores.iter().map(|&(m, y)| (m, y > 0.0)).collect();
    s.sort_by(|a, b| a.0.total_cmp(&b.0));
    let pos = s.iter().filter(|x| x.1).count() as f64;
    let neg = s.len() as f64 - pos;
    if pos == 0.0 || neg == 0.0 {
        return 0.5;
    }
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < s.len() {
        let mut j = i;
        while j < s.len() && s[j].0 == s[i].0 {
            j += 1;
        }
        let avg_rank = (i + j + 1) as f64 / 2.0; // 1-based ranks i+1..=j
        rank_sum += avg_rank * s[i..j].iter().filter(|x| x.1).count() as f64;
        i = j;
    }
    (rank_sum - pos * (pos + 1.0) / 2.0) / (pos * neg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Loss;

    #[test]
    fn auc_of_known_orderings() {
        assert_eq!(
            auc(&[(0.1, -1.0), (0.2, -1.0), (0.3, 1.0), (0.4, 1.0)]),
            1.0
        );
        assert_eq!(auc(&[(0.4, -1.0), (0.3, 1.0)]), 0.0);
        assert_eq!(auc(&[(0.5, -1.0), (0.5, 1.0)]), 0.5);
        // one inversion out of 2x2 pairs
        assert_eq!(
            auc(&[(0.1, -1.0), (0.3, -1.0), (0.2, 1.0), (0.4, 1.0)]),
            0.75
        );
    }

    #[test]
    fn parts_merge_to_the_whole() {
        let mut d = Dataset::new(3);
        d.push_row(&[0], &[1.0], 1.0);
        d.push_row(&[1], &[1.0], -1.0);
        d.push_row(&[2], &[1.0], 1.0);
        let w = [0.5, 0.2, -0.1];
        let whole = EvalPart::evaluate(&d, &w, &Loss::Logistic);
        assert_eq!(whole.count, 3);
        assert_eq!(whole.correct, 1); // row 0 right; row 1 (m=0.2 ≥ 0) wrong; row 2 (m<0) wrong
        let s = whole.summary(&Loss::Logistic);
        assert!((s.accuracy.unwrap() - 1.0 / 3.0).abs() < 1e-12);
    }
}
