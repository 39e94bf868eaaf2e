//! Where worker 0's finished metrics rows go: the metrics CSV, written while the run trains,
//! and (when asked) a copy in memory for [`crate::runtime::RunOutcome::rows`].
//!
//! A round's row is final once its wire bytes are counted ([`WireCounters::take_round`]),
//! which happens a few tens of rounds after the row itself is complete (timely hands its
//! communication log over in batches of about a hundred messages). Rows wait in a short queue
//! until then, but no longer than [`MAX_WAIT`]: a row that has waited that long is written
//! with the bytes counted so far, and the rest of its round's bytes count for a later round
//! (the rounds still add up to the process's total). The CSV holds every column the first
//! time it is written and nothing is rewritten at the end: memory stays flat however long the
//! run, unless the rows are also kept. The file is flushed at every epoch row and at least
//! every second; when the run fails, the rows still waiting are written with the bytes counted
//! so far.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{MetricsRow, WireBytes, WireCounters};

/// The longest a row waits for its round's wire bytes.
pub const MAX_WAIT: Duration = Duration::from_secs(2);

/// The metrics rows of a run on their way out (see the module docs).
pub struct RowOutput {
    csv: Option<Csv>,
    kept: Option<Vec<MetricsRow>>,
    wire: Option<WireCounters>,
    /// Rows waiting for their wire bytes, in order, with when they came.
    pending: VecDeque<(Instant, MetricsRow)>,
    /// Wire bytes of the epoch's round rows so far.
    epoch_wire: WireBytes,
    flushed: Instant,
}

impl Default for RowOutput {
    /// An output that drops every row.
    fn default() -> Self {
        RowOutput::new(None, false, None)
    }
}

impl RowOutput {
    /// Rows written to the CSV at `csv` (created, with its directory, at the first row) and
    /// kept in memory when `keep`; wire columns from `wire` (zero without).
    pub fn new(csv: Option<&Path>, keep: bool, wire: Option<WireCounters>) -> Self {
        RowOutput {
            csv: csv.map(Csv::new),
            kept: keep.then(Vec::new),
            wire,
            pending: VecDeque::new(),
            epoch_wire: WireBytes::default(),
            flushed: Instant::now(),
        }
    }

    /// A finished row: written once its wire bytes are counted. An error names the file.
    pub fn push(&mut self, row: MetricsRow) -> Result<(), String> {
        self.pending.push_back((Instant::now(), row));
        self.release(false)
    }

    /// A row of the run before a resume, written as it is (the wire bytes of those rounds
    /// were counted by processes that are gone).
    pub fn push_restored(&mut self, row: MetricsRow) -> Result<(), String> {
        self.release(true)?;
        self.write(row)
    }

    /// Rows still waiting for their wire bytes.
    pub fn waiting(&self) -> usize {
        self.pending.len()
    }

    /// Writes every row that is waiting, with the wire bytes counted (call it once the
    /// communication threads have ended), and flushes; returns the rows kept in memory.
    pub fn finish(&mut self) -> Result<Vec<MetricsRow>, String> {
        if let Some(w) = &self.wire {
            w.settle();
        }
        self.release(true)?;
        if let Some(csv) = &mut self.csv {
            csv.flush()?;
        }
        Ok(self.kept.take().unwrap_or_default())
    }

    /// Writes the rows at the front whose wire bytes are counted or that have waited
    /// [`MAX_WAIT`] (all of them when `all`).
    fn release(&mut self, all: bool) -> Result<(), String> {
        while let Some((came, row)) = self.pending.front_mut() {
            let now = all || came.elapsed() >= MAX_WAIT;
            match row.kind {
                "round" => {
                    let bytes = match &self.wire {
                        Some(w) => match w.take_round(row.round, now) {
                            Some(b) => b,
                            None => break,
                        },
                        None => WireBytes::default(),
                    };
                    row.wire_data_bytes = bytes.data;
                    row.wire_progress_bytes = bytes.progress;
                    self.epoch_wire.data += bytes.data;
                    self.epoch_wire.progress += bytes.progress;
                }
                "epoch" => {
                    let epoch = std::mem::take(&mut self.epoch_wire);
                    row.wire_data_bytes = epoch.data;
                    row.wire_progress_bytes = epoch.progress;
                }
                _ => {}
            }
            let (_, row) = self.pending.pop_front().expect("the front row");
            self.write(row)?;
        }
        if self.flushed.elapsed() >= Duration::from_secs(1) {
            self.flushed = Instant::now();
            if let Some(csv) = &mut self.csv {
                csv.flush()?;
            }
        }
        Ok(())
    }

    fn write(&mut self, row: MetricsRow) -> Result<(), String> {
        if let Some(csv) = &mut self.csv {
            csv.write(&row)?;
            if row.kind == "epoch" {
                csv.flush()?;
            }
        }
        if let Some(kept) = &mut self.kept {
            kept.push(row);
        }
        Ok(())
    }
}

impl Drop for RowOutput {
    /// A run that failed: the rows so far stay in the file.
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The metrics CSV, opened at its first row. Rows are formatted in memory and reach the file
/// only as whole records (one `write` of whole lines), so a process killed at any moment
/// leaves a file of whole rows.
struct Csv {
    path: PathBuf,
    file: Option<std::fs::File>,
    /// Whole records not yet written.
    pending: Vec<u8>,
    /// Bytes of whole records in the file.
    whole: u64,
}

/// Records are written once this many bytes are pending (and at every flush).
const PENDING_BYTES: usize = 1 << 16;

impl Csv {
    fn new(path: &Path) -> Self {
        Csv {
            path: path.to_path_buf(),
            file: None,
            pending: Vec::new(),
            whole: 0,
        }
    }

    fn err(&self, e: impl std::fmt::Display) -> String {
        format!("output.metrics: {}: {e}", self.path.display())
    }

    fn write(&mut self, row: &MetricsRow) -> Result<(), String> {
        let first = self.file.is_none();
        if first {
            crate::atomic::create_parent(&self.path).map_err(|e| self.err(e))?;
            crate::atomic::target(&self.path).map_err(|e| self.err(e))?;
            self.file = Some(std::fs::File::create(&self.path).map_err(|e| self.err(e))?);
        }
        // The header goes with the first record.
        let mut record = csv::WriterBuilder::new()
            .has_headers(first)
            .buffer_capacity(1024)
            .from_writer(std::mem::take(&mut self.pending));
        record
            .serialize(row)
            .map_err(|e| format!("output.metrics: {e}"))?;
        self.pending = record.into_inner().map_err(|e| self.err(e.error()))?;
        if self.pending.len() >= PENDING_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), String> {
        use std::io::Write;
        let Some(file) = &mut self.file else {
            return Ok(());
        };
        use std::io::{Seek, SeekFrom};
        let written = file.write_all(&self.pending);
        let len = self.pending.len() as u64;
        self.pending.clear();
        match written {
            Ok(()) => {
                self.whole += len;
                Ok(())
            }
            // (A full disk took part of the records: cut the file back to its whole rows.)
            Err(e) => {
                let whole = self.whole;
                let _ = file
                    .set_len(whole)
                    .and_then(|()| file.seek(SeekFrom::Start(whole)));
                Err(self.err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &'static str, round: u64) -> MetricsRow {
        MetricsRow {
            kind,
            round,
            ..Default::default()
        }
    }

    #[test]
    fn rows_wait_for_their_wire_bytes_and_keep_their_order() {
        let wire = WireCounters::new();
        let mut out = RowOutput::new(None, true, Some(wire.clone()));
        wire.mark_round(0);
        out.push(row("round", 0)).unwrap();
        // Round 1 has not started: round 0's bytes may still grow.
        assert_eq!(out.waiting(), 1);
        wire.mark_round(1);
        out.push(row("round", 1)).unwrap();
        out.push(row("epoch", 1)).unwrap();
        // No send thread (one process): round 0 is counted once round 1 has started.
        assert_eq!(out.waiting(), 2, "round 0 goes, round 1 and the epoch wait");
        assert_eq!(wire.held_rounds(), 1, "round 0 is forgotten once taken");
        let rows = out.finish().unwrap();
        let kinds: Vec<_> = rows.iter().map(|r| (r.kind, r.round)).collect();
        assert_eq!(kinds, [("round", 0), ("round", 1), ("epoch", 1)]);
        assert_eq!(wire.held_rounds(), 0);
    }

    /// A process killed at any moment leaves whole rows: the file never ends inside one (the
    /// csv writer's own buffer used to spill every 8 KiB, mid-record).
    #[test]
    fn the_file_holds_only_whole_rows_at_every_moment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.csv");
        let mut out = RowOutput::new(Some(&path), false, None);
        let mut sizes = std::collections::BTreeSet::new();
        for r in 0..2000 {
            out.push(row("round", r)).unwrap();
            let text = std::fs::read(&path).unwrap_or_default();
            assert!(text.is_empty() || text.ends_with(b"\n"), "after row {r}");
            sizes.insert(text.len());
        }
        assert!(sizes.len() > 2, "rows reach the file while the run goes on");
        drop(out);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2001, "the header and every row");
    }

    #[test]
    fn a_restored_row_is_written_before_new_ones_and_rows_are_not_kept_unless_asked() {
        let mut out = RowOutput::new(None, false, None);
        out.push_restored(row("round", 0)).unwrap();
        out.push(row("round", 1)).unwrap();
        assert_eq!(out.waiting(), 0, "without wire counters nothing waits");
        assert!(out.finish().unwrap().is_empty());
    }
}
