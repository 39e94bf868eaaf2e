//! Metrics: bytes on the wire as timely's communication layer reports them, per-round and
//! per-epoch rows, and the metrics CSV. Observes the other layers; none of them depends on it
//! except through plain numbers.

pub mod output;
pub mod progressive;
pub mod wire;

pub use output::RowOutput;
pub use progressive::Progressive;
pub use wire::{WireBytes, WireCounters};

use serde::Serialize;
use std::io::Write;

/// Time spent per stage of a round, in milliseconds (mean over workers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct StageTimes {
    /// Mini-batch gradient.
    pub gradient_ms: f64,
    /// Encoding the outgoing messages.
    pub encode_ms: f64,
    /// Waiting for the other workers and the network.
    pub wait_ms: f64,
    /// Decoding and summing the received gradients.
    pub aggregate_ms: f64,
    /// Optimizer update and applying received model updates.
    pub update_ms: f64,
    /// Test evaluation (epoch ends and `train.eval_every`), in no other stage.
    pub eval_ms: f64,
}

impl StageTimes {
    /// The stages' names, in the order of [`StageTimes::values`].
    pub const NAMES: [&'static str; 6] =
        ["gradient", "encode", "wait", "aggregate", "update", "eval"];

    /// The stages' times, in the order of [`StageTimes::NAMES`].
    pub fn values(&self) -> [f64; 6] {
        [
            self.gradient_ms,
            self.encode_ms,
            self.wait_ms,
            self.aggregate_ms,
            self.update_ms,
            self.eval_ms,
        ]
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &StageTimes) {
        self.gradient_ms += other.gradient_ms;
        self.encode_ms += other.encode_ms;
        self.wait_ms += other.wait_ms;
        self.aggregate_ms += other.aggregate_ms;
        self.update_ms += other.update_ms;
        self.eval_ms += other.eval_ms;
    }
    /// Multiplies every stage by `s`.
    pub fn scale(&mut self, s: f64) {
        self.gradient_ms *= s;
        self.encode_ms *= s;
        self.wait_ms *= s;
        self.aggregate_ms *= s;
        self.update_ms *= s;
        self.eval_ms *= s;
    }
}

/// Payload bytes (codec messages, sketches, values) moved by one worker or process, by
/// direction. Uplink: gradients, sketches and exact values on their way to an owner or
/// aggregator; downlink: model changes, summed sketches and sums on their way back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Traffic {
    /// Uplink bytes sent to workers of other processes.
    pub up_sent: u64,
    /// Downlink bytes sent to workers of other processes.
    pub down_sent: u64,
    /// Uplink bytes received from workers of other processes.
    pub up_received: u64,
    /// Downlink bytes received from workers of other processes.
    pub down_received: u64,
    /// Uplink bytes addressed to any worker, this process's own included: the protocol's cost
    /// as if every worker were a machine of its own (what the papers count).
    pub logical_up: u64,
    /// Downlink bytes addressed to any worker, this process's own included.
    pub logical_down: u64,
    /// Bytes of round statistics and test evaluation parts sent to process 0 (which writes
    /// the metrics) from another process: the cost of watching the run, not of training.
    pub eval_sent: u64,
}

impl Traffic {
    /// Records a message of `bytes` sent (`remote`: to another process).
    pub fn sent(&mut self, uplink: bool, bytes: usize, remote: bool) {
        let b = bytes as u64;
        match (uplink, remote) {
            (true, true) => self.up_sent += b,
            (false, true) => self.down_sent += b,
            _ => {}
        }
        if uplink {
            self.logical_up += b;
        } else {
            self.logical_down += b;
        }
    }

    /// Records a message of `bytes` received (`remote`: from another process).
    pub fn received(&mut self, uplink: bool, bytes: usize, remote: bool) {
        if remote {
            if uplink {
                self.up_received += bytes as u64;
            } else {
                self.down_received += bytes as u64;
            }
        }
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, o: &Traffic) {
        self.up_sent += o.up_sent;
        self.down_sent += o.down_sent;
        self.up_received += o.up_received;
        self.down_received += o.down_received;
        self.logical_up += o.logical_up;
        self.logical_down += o.logical_down;
        self.eval_sent += o.eval_sent;
    }

    /// Bytes sent to other processes, both directions.
    pub fn total_sent(&self) -> u64 {
        self.up_sent + self.down_sent
    }

    /// Bytes received from other processes, both directions.
    pub fn total_received(&self) -> u64 {
        self.up_received + self.down_received
    }
}

/// One row of the metrics CSV: a round, an epoch, or (at the end) a process's totals.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct MetricsRow {
    /// `choice` (the first row of a job with `"auto"`: the seconds choosing took before
    /// training, and in `uplink_bytes` the payload its probes and trials sent, all processes),
    /// `round`, `epoch`, `eval` (test metrics after a round between epoch ends, with
    /// `train.eval_every`; its traffic and time fields are zero, the round's row has them) or
    /// `process`.
    #[serde(deserialize_with = "row_kind")]
    pub kind: RowKind,
    /// The process a `process` row describes.
    pub process: Option<u32>,
    /// Epoch (1-based).
    pub epoch: u64,
    /// Round (0-based, global); for an epoch row, its last round.
    pub round: u64,
    /// Wall-clock seconds since training started.
    pub seconds: f64,
    /// Mean training loss of the round's (or epoch's) mini-batches, before the update. An
    /// online run's is its progressive loss: each row scored before it is trained on.
    pub train_loss: f64,
    /// Test loss (epoch rows).
    pub test_loss: Option<f64>,
    /// Test accuracy (classification, epoch rows).
    pub test_accuracy: Option<f64>,
    /// Test AUC (classification, epoch rows).
    pub test_auc: Option<f64>,
    /// Test RMSE (regression, epoch rows).
    pub test_rmse: Option<f64>,
    /// Keys in the workers' gradients (sum over workers).
    pub gradient_keys: u64,
    /// Keys the workers' gradient messages carry (sum over workers; 0 for `sketch`).
    pub sent_keys: u64,
    /// `sent_keys` over the keys offered to the codec (after error feedback); absent when no
    /// codec message was sent (`sketch`). A filtering codec that keeps nothing shows 0 here.
    pub kept_fraction: Option<f64>,
    /// Uplink payload bytes sent to other processes (all processes; a `process` row: its own).
    pub uplink_bytes: u64,
    /// Downlink payload bytes sent to other processes.
    pub downlink_bytes: u64,
    /// Uplink payload bytes received from other processes.
    pub uplink_received_bytes: u64,
    /// Downlink payload bytes received from other processes.
    pub downlink_received_bytes: u64,
    /// Uplink payload bytes addressed to any worker, own process included (see [`Traffic`]).
    pub logical_uplink_bytes: u64,
    /// Downlink payload bytes addressed to any worker, own process included.
    pub logical_downlink_bytes: u64,
    /// The most payload bytes one process sent to the others (both directions): the busiest
    /// link. A `process` row: that process's own.
    pub max_process_sent_bytes: u64,
    /// Bytes of round statistics and test evaluation parts sent to process 0 by the other
    /// processes (serialized as they cross), at this round: gradient traffic's neighbour on
    /// process 0's inbound link. A `process` row: that process's own.
    #[serde(default)]
    pub eval_bytes: u64,
    /// Bytes timely sent on data channels to other processes, by process 0 (the process that
    /// writes the rows; the per-process totals are printed at the end of each process).
    pub wire_data_bytes: u64,
    /// Bytes timely sent on progress channels to other processes, by process 0.
    pub wire_progress_bytes: u64,
    /// Gradient time, ms (mean over workers).
    pub gradient_ms: f64,
    /// Encode time, ms (mean over workers).
    pub encode_ms: f64,
    /// Waiting time, ms (mean over workers).
    pub wait_ms: f64,
    /// Decode and sum time, ms (mean over workers).
    pub aggregate_ms: f64,
    /// Optimizer update time, ms (mean over workers).
    pub update_ms: f64,
    /// Test evaluation time, ms (mean over workers): the evaluation after this round.
    pub eval_ms: f64,
    /// Training rows of the round (or epoch), all workers (the last column, so that readers
    /// of the columns before it by position are unchanged).
    #[serde(default)]
    pub rows: u64,
    /// An online run: the AUC of the progressive scores (each row scored before it was
    /// trained on) of the window of `train.auc_window` rows this round closes; empty on other
    /// rows.
    #[serde(default)]
    pub progressive_auc: Option<f64>,
}

/// A [`MetricsRow`]'s kind, one of [`ROW_KINDS`] (an alias, so that serde does not borrow it
/// from its input).
pub type RowKind = &'static str;

/// The kinds of [`MetricsRow`].
pub const ROW_KINDS: [&str; 5] = ["choice", "round", "epoch", "eval", "process"];

fn row_kind<'de, D: serde::Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    let s = <String as serde::Deserialize>::deserialize(d)?;
    ROW_KINDS
        .into_iter()
        .find(|k| *k == s)
        .ok_or_else(|| serde::de::Error::custom(format!("unknown metrics row kind '{s}'")))
}

impl MetricsRow {
    /// Sets `sent_keys` and `kept_fraction` from the keys offered to the codec and sent.
    pub fn set_kept(&mut self, offered: u64, sent: u64) {
        self.sent_keys = sent;
        self.kept_fraction = (offered > 0).then(|| sent as f64 / offered as f64);
    }

    /// Sets the traffic columns (`busiest`: the most one process sent).
    pub fn set_traffic(&mut self, t: &Traffic, busiest: u64) {
        self.uplink_bytes = t.up_sent;
        self.downlink_bytes = t.down_sent;
        self.uplink_received_bytes = t.up_received;
        self.downlink_received_bytes = t.down_received;
        self.logical_uplink_bytes = t.logical_up;
        self.logical_downlink_bytes = t.logical_down;
        self.max_process_sent_bytes = busiest;
        self.eval_bytes = t.eval_sent;
    }

    /// The per-stage times of this row.
    pub fn times(&self) -> StageTimes {
        StageTimes {
            gradient_ms: self.gradient_ms,
            encode_ms: self.encode_ms,
            wait_ms: self.wait_ms,
            aggregate_ms: self.aggregate_ms,
            update_ms: self.update_ms,
            eval_ms: self.eval_ms,
        }
    }

    /// Sets the per-stage times.
    pub fn set_times(&mut self, t: &StageTimes) {
        self.gradient_ms = t.gradient_ms;
        self.encode_ms = t.encode_ms;
        self.wait_ms = t.wait_ms;
        self.aggregate_ms = t.aggregate_ms;
        self.update_ms = t.update_ms;
        self.eval_ms = t.eval_ms;
    }
}

/// Watches round rows for a codec that sends nothing: after [`SilentCodec::ROUNDS`] rounds in a
/// row whose gradients offered keys but whose messages carried none, it returns a warning
/// (once per such streak). FastSGD's threshold `sum / b^τ` grows with the number of keys, so on
/// large gradients it can drop everything; training then goes on with no update at all.
#[derive(Debug, Default)]
pub struct SilentCodec {
    streak: u64,
}

impl SilentCodec {
    /// Rounds of silence before the warning.
    pub const ROUNDS: u64 = 3;

    /// Looks at one row; returns the warning when this row completes a silent streak.
    pub fn observe(&mut self, row: &MetricsRow) -> Option<String> {
        if row.kind != "round" {
            return None;
        }
        if row.kept_fraction == Some(0.0) {
            self.streak += 1;
        } else {
            self.streak = 0;
        }
        (self.streak == Self::ROUNDS).then(|| {
            format!(
                "warning: round {}: the compressor has sent no key for {} rounds in a row, so the \
                 model does not change (a filtering codec drops every value; for fastsgd the \
                 threshold sum/b^tau grows with the number of keys: raise tau or b)",
                row.round,
                Self::ROUNDS
            )
        })
    }
}

/// Milliseconds since `since`.
pub fn ms(since: std::time::Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// Formats a byte count for people (B, kB, MB, GB; powers of 1000).
pub fn human_bytes(b: u64) -> String {
    let b = b as f64;
    if b < 1e3 {
        format!("{b:.0} B")
    } else if b < 1e6 {
        format!("{:.1} kB", b / 1e3)
    } else if b < 1e9 {
        format!("{:.2} MB", b / 1e6)
    } else {
        format!("{:.2} GB", b / 1e9)
    }
}

/// The one-line summary of an epoch. `sent` counts the payload bytes all processes addressed to
/// other processes in the epoch, split into uplink and downlink; the wire totals, framing and
/// progress traffic included, are known when the run ends.
pub fn epoch_line(row: &MetricsRow) -> String {
    let mut s = format!(
        "epoch {:>3}  {:>7.2}s  train_loss {:.4}",
        row.epoch, row.seconds, row.train_loss
    );
    s += &test_columns(row);
    s += &format!(
        "  sent {} (all processes: up {}, down {})",
        human_bytes(row.uplink_bytes + row.downlink_bytes),
        human_bytes(row.uplink_bytes),
        human_bytes(row.downlink_bytes)
    );
    s
}

/// One line for people on an evaluation between epoch ends (`train.eval_every`): the round
/// (as in the metrics CSV), the time and the test metrics.
pub fn eval_line(row: &MetricsRow) -> String {
    let head = format!("eval  round {:>6}  {:>7.2}s", row.round, row.seconds);
    head + &test_columns(row)
}

/// A row's test metrics, each with its name.
fn test_columns(row: &MetricsRow) -> String {
    let mut s = String::new();
    if let Some(l) = row.test_loss {
        s += &format!("  test_loss {l:.4}");
    }
    if let Some(a) = row.test_accuracy {
        s += &format!("  acc {a:.4}");
    }
    if let Some(a) = row.test_auc {
        s += &format!("  auc {a:.4}");
    }
    if let Some(r) = row.test_rmse {
        s += &format!("  rmse {r:.4}");
    }
    s
}

/// Flushes stdout, ignoring errors (used after progress output).
pub fn flush_stdout() {
    let _ = std::io::stdout().flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_codec_is_reported_once_per_streak() {
        let row = |round, kept: Option<f64>| MetricsRow {
            kind: "round",
            round,
            kept_fraction: kept,
            ..Default::default()
        };
        let mut watch = SilentCodec::default();
        let kept = [
            Some(0.0),
            Some(0.0),
            Some(0.5),
            Some(0.0),
            Some(0.0),
            Some(0.0),
            Some(0.0),
        ];
        let warned: Vec<u64> = kept
            .iter()
            .enumerate()
            .filter_map(|(r, &k)| watch.observe(&row(r as u64, k)).map(|_| r as u64))
            .collect();
        assert_eq!(warned, vec![5], "the third silent round in a row, once");
        let mut sketch = SilentCodec::default();
        assert!(
            (0..5).all(|r| sketch.observe(&row(r, None)).is_none()),
            "no codec, no warning"
        );
    }
}
