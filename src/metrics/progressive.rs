//! An online run's progressive validation: every row is scored by the model before it is
//! trained on, so the mean of those losses estimates the loss on unseen rows without a
//! held-out set (Blum, Kalai and Langford, "Beating the hold-out", COLT'99; Vowpal Wabbit's
//! "average loss").

use super::MetricsRow;

/// The progressive loss so far, from the round rows of an online run, reported as Vowpal
/// Wabbit reports its average loss: at 1, 2, 4, … times the first round's rows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Progressive {
    /// Rows scored and trained on.
    pub rows: u64,
    /// Rounds.
    pub rounds: u64,
    /// The sum of their losses.
    pub loss_sum: f64,
    /// Seconds since training started, at the last round.
    pub seconds: f64,
    /// The AUC of the last complete window of progressive scores (`train.auc_window`).
    pub window_auc: Option<f64>,
    /// The rows and loss sum at the last report.
    since: (u64, f64),
    /// The row count of the next report.
    next: u64,
}

impl Progressive {
    /// Adds a round row; returns the report line when one is due.
    pub fn add(&mut self, row: &MetricsRow) -> Option<String> {
        if row.kind != "round" || row.rows == 0 {
            return None;
        }
        self.rows += row.rows;
        self.rounds += 1;
        self.loss_sum += row.train_loss * row.rows as f64;
        self.seconds = row.seconds;
        if row.progressive_auc.is_some() {
            self.window_auc = row.progressive_auc;
        }
        if self.next == 0 {
            self.next = row.rows;
        }
        if self.rows < self.next {
            return None;
        }
        while self.next <= self.rows {
            self.next = self.next.saturating_mul(2);
        }
        Some(self.line())
    }

    /// The mean loss of every row so far (NaN before the first).
    pub fn loss(&self) -> f64 {
        self.loss_sum / self.rows as f64
    }

    /// The report: rows, the progressive loss, that of the rows since the last report, the
    /// rate, and the last window's AUC once there is one.
    pub fn line(&mut self) -> String {
        let (rows, sum) = std::mem::replace(&mut self.since, (self.rows, self.loss_sum));
        let last = (self.loss_sum - sum) / (self.rows - rows).max(1) as f64;
        let auc = self
            .window_auc
            .map_or(String::new(), |a| format!("  window_auc {a:.4}"));
        format!(
            "rows {:>10}  progressive_loss {:.4}  since_last {:.4}  {:>9.0} rows/s{auc}",
            self.rows,
            self.loss(),
            last,
            self.rows as f64 / self.seconds.max(1e-9)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(rows: u64, loss: f64) -> MetricsRow {
        MetricsRow {
            kind: "round",
            rows,
            train_loss: loss,
            seconds: 1.0,
            ..Default::default()
        }
    }

    /// The mean weighs rounds by their rows; reports come at 1, 2, 4, … times the first
    /// round's rows, with the loss of the rows since the previous report.
    #[test]
    fn the_progressive_loss_weighs_rounds_by_rows_and_reports_at_doublings() {
        let mut p = Progressive::default();
        let first = p.add(&round(100, 1.0)).expect("the first round reports");
        assert!(
            first.contains("rows        100  progressive_loss 1.0000"),
            "{first}"
        );
        assert!(
            p.add(&round(50, 0.4)).is_none(),
            "150 rows: the next report is at 200"
        );
        let second = p.add(&round(50, 0.4)).expect("200 rows");
        assert!(
            second.contains("progressive_loss 0.7000  since_last 0.4000"),
            "{second}"
        );
        assert!(
            p.add(&round(0, f64::NAN)).is_none(),
            "an empty round counts nothing"
        );
        let mut windowed = round(200, 0.1);
        windowed.progressive_auc = Some(0.75);
        let third = p.add(&windowed).expect("400 rows");
        assert!(third.ends_with("window_auc 0.7500"), "{third}");
        assert_eq!((p.rows, p.rounds), (400, 4));
        assert!((p.loss() - 0.4).abs() < 1e-12);
    }
}
