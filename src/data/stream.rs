//! Rows that arrive while training runs: standard input, or a file followed as it grows.
//!
//! A reader thread reads blocks of up to [`BLOCK_BYTES`], parses their whole lines (LibSVM,
//! with the file reader's checks, [`LineParser`]; or CSV with a header per file, by a feature
//! map known up front, [`CsvLines`]) and hands the rows on through a channel of
//! [`QUEUE_BLOCKS`] blocks. Parsing there overlaps it with training. When training falls
//! behind, the channel fills, the thread blocks, and so does the writer of the pipe
//! (back-pressure: memory stays bounded by the channel and the longest line, whatever the
//! input's rate). A line longer than [`MAX_LINE_BYTES`] is an error naming its byte offset;
//! the bytes after the last newline when the stream ends (a line cut by the writer's end) are
//! never parsed, and the end says so. A malformed row stops the stream with its place (line,
//! column) or, with [`OnBadRow::Skip`], is counted and the first few quoted.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::libsvm::{LibsvmOptions, LineParser};
use super::table::{CsvLines, FeatureMap};
use super::LineRows;

/// Bytes read at a time.
pub const BLOCK_BYTES: usize = 1 << 20;
/// Blocks the channel holds before the reader waits.
pub const QUEUE_BLOCKS: usize = 8;
/// The longest line (as for files: a record's bound).
pub const MAX_LINE_BYTES: usize = crate::data::table::read::MAX_RECORD_BYTES as usize;
/// How often a followed file is looked at again once its end is reached.
const FOLLOW_POLL: Duration = Duration::from_millis(20);

/// Where a stream's bytes come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Origin {
    /// Standard input (`data.train = "-"`); cannot be resumed.
    Stdin,
    /// A file read from byte `from` and followed as it grows, or a directory whose part files
    /// are read in name order as they appear (`from` counts the bytes of the parts before),
    /// until [`Records::stop`].
    Follow {
        /// The file or directory.
        path: PathBuf,
        /// The byte to start at (a resumed run's checkpointed offset).
        from: u64,
    },
}

impl Origin {
    /// Reads from `offset` on (a resumed run's). Standard input cannot be resumed: what was
    /// read of it is gone.
    pub fn resume_at(&mut self, offset: u64) -> Result<(), String> {
        match self {
            Origin::Stdin => Err("--resume: standard input cannot be resumed (the rows read \
                                  before the checkpoint are gone); follow a file to resume a \
                                  stream (data.follow)"
                .into()),
            Origin::Follow { from, .. } => {
                *from = offset;
                Ok(())
            }
        }
    }

    /// The name errors give.
    pub fn name(&self) -> String {
        match self {
            Origin::Stdin => "standard input".into(),
            Origin::Follow { path, .. } => path.display().to_string(),
        }
    }
}

/// What to do with a malformed row of a stream (`data.on_bad_row`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnBadRow {
    /// Stop the run with the row's place and what is wrong (as for a file).
    #[default]
    Stop,
    /// Skip it: the first few are quoted on standard error, all are counted.
    Skip,
}

/// Malformed rows quoted on standard error before the rest are only counted.
const QUOTED_BAD_ROWS: u64 = 5;

/// How a stream's lines become rows.
#[derive(Clone, Debug, PartialEq)]
pub struct RowFormat {
    /// The lines' format.
    pub lines: LineFormat,
    /// What a malformed row does.
    pub on_bad_row: OnBadRow,
}

/// The format of a stream's lines.
#[derive(Clone, Debug, PartialEq)]
pub enum LineFormat {
    /// LibSVM, with these checks (a declared dimension, labels the loss reads).
    Libsvm(LibsvmOptions),
    /// CSV, each file's first line its header, by a feature map that needs no statistics of
    /// the rows ([`crate::data::table::stream_map`]).
    Csv {
        /// The feature map (its spec holds the label rule, features and joins).
        map: Box<FeatureMap>,
        /// A label that is not a class is an error.
        classification: bool,
    },
    /// A directory's Parquet part files, each read whole, by a feature map as for CSV; a
    /// part's positions are its rows.
    Parquet {
        /// The feature map.
        map: Box<FeatureMap>,
        /// A label that is not a class is an error.
        classification: bool,
    },
}

impl LineFormat {
    /// The format's name, for the user.
    pub fn name(&self) -> &'static str {
        match self {
            LineFormat::Libsvm(_) => "LibSVM",
            LineFormat::Csv { .. } => "CSV",
            LineFormat::Parquet { .. } => "Parquet",
        }
    }
}

/// Rows parsed from a block of whole lines, in stream order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rows {
    /// Each row's label.
    pub labels: Vec<f32>,
    /// Each row's number of features.
    pub lens: Vec<u32>,
    /// The rows' keys, row after row (ascending within a row).
    pub keys: Vec<u32>,
    /// Their values.
    pub values: Vec<f32>,
    /// The stream's byte offset after each row's line.
    pub ends: Vec<u64>,
}

impl Rows {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

/// What the reader hands on.
#[derive(Debug, PartialEq)]
pub enum Event {
    /// The rows of some whole lines.
    Rows(Rows),
    /// The stream ended at offset `end` (its last whole line's end); `cut` bytes after it
    /// belonged to a line without its newline, which was not parsed; `skipped` malformed rows
    /// were skipped.
    End {
        /// The offset after the last whole line.
        end: u64,
        /// Bytes of a cut last line, dropped.
        cut: u64,
        /// Malformed rows skipped ([`OnBadRow::Skip`]).
        skipped: u64,
    },
    /// Reading failed (an I/O error, a line too long, a followed file that shrank).
    Failed(String),
}

/// Starts the reader thread of `origin`.
fn spawn_reader(origin: &Origin, read: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::Builder::new()
        .name("gradflow-stream".into())
        .spawn(read)
        .map(|_| ())
        .map_err(|e| format!("{}: cannot start its reader: {e}", origin.name()))
}

/// What the reader thread does with its parser and its channel: read the origin.
type ReadWith = dyn FnOnce(&mut RowReader, &SyncSender<Event>) + Send;

/// A stream of lines read by a thread of its own.
pub struct Records {
    events: Receiver<Event>,
    stop: Arc<AtomicBool>,
}

impl Records {
    /// Starts reading `origin`, its lines parsed as `format` says. Fails if a followed file
    /// cannot be opened or sought.
    pub fn open(origin: Origin, format: RowFormat) -> Result<Records, String> {
        if let LineFormat::Parquet { .. } = format.lines {
            return Self::open_parquet(origin, format);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, events) = sync_channel(QUEUE_BLOCKS);
        let name = origin.name();
        let read: Box<ReadWith> = match &origin {
            Origin::Follow { path, from } if path.is_dir() => {
                let (dir, from, stop) = (path.clone(), *from, stop.clone());
                Box::new(move |rows, tx| {
                    read_parts(&dir, from, &stop, rows, |e| tx.send(e).is_ok())
                })
            }
            Origin::Follow { path, from } => {
                let (file, from, stop) = (open_at(path, *from)?, *from, stop.clone());
                let path = path.clone();
                Box::new(move |rows, tx| {
                    let send = |e| tx.send(e).is_ok();
                    match rows.begin(&path, from) {
                        Ok(()) => read_lines(Box::new(file), from, Some(stop), rows, send),
                        Err(e) => {
                            send(Event::Failed(e));
                        }
                    }
                })
            }
            Origin::Stdin => Box::new(move |rows, tx| {
                rows.header_next = rows.lines.has_header();
                let stdin = Box::new(std::io::stdin());
                read_lines(stdin, 0, None, rows, |e| tx.send(e).is_ok())
            }),
        };
        let on_bad_row = format.on_bad_row;
        let with_lines = move || {
            let mut libsvm;
            let mut csv;
            let lines: &mut dyn LineRows = match &format.lines {
                LineFormat::Libsvm(o) => {
                    libsvm = LineParser::new(o);
                    &mut libsvm
                }
                LineFormat::Csv {
                    map,
                    classification,
                } => match CsvLines::new(map, *classification) {
                    Ok(lines) => {
                        csv = lines;
                        &mut csv
                    }
                    Err(e) => {
                        let _ = tx.send(Event::Failed(e));
                        return;
                    }
                },
                LineFormat::Parquet { .. } => unreachable!("opened by open_parquet"),
            };
            let mut rows = RowReader::new(lines, on_bad_row, name.clone());
            read(&mut rows, &tx);
            if let Some(note) = rows.lines.note() {
                eprintln!("note: {name}: {note}");
            }
        };
        spawn_reader(&origin, with_lines)?;
        Ok(Records { events, stop })
    }

    /// [`Self::open`] of a directory of Parquet part files.
    fn open_parquet(origin: Origin, format: RowFormat) -> Result<Records, String> {
        let Origin::Follow { path: dir, from } = origin.clone() else {
            return Err(
                "standard input: a Parquet stream is a directory of part files, \
                        followed (data.follow)"
                    .into(),
            );
        };
        if !dir.is_dir() {
            return Err(format!(
                "{}: a Parquet stream is a directory its part files appear in (a Parquet \
                 file's rows are found through its footer, written last: a growing file \
                 cannot be followed)",
                dir.display()
            ));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, events) = sync_channel(QUEUE_BLOCKS);
        let stopped = stop.clone();
        let read = move || {
            let LineFormat::Parquet {
                map,
                classification,
            } = &format.lines
            else {
                unreachable!("a Parquet format")
            };
            #[cfg(feature = "parquet")]
            match CsvLines::new(map, *classification) {
                Ok(lines) => {
                    let on_bad_row = format.on_bad_row;
                    let mut parts = ParquetParts {
                        lines,
                        on_bad_row,
                        skipped: 0,
                    };
                    read_parts(&dir, from, &stopped, &mut parts, |e| tx.send(e).is_ok());
                    if let Some(note) = parts.lines.note() {
                        eprintln!("note: {}: {note}", dir.display());
                    }
                }
                Err(e) => {
                    let _ = tx.send(Event::Failed(e));
                }
            }
            #[cfg(not(feature = "parquet"))]
            {
                let _ = (map, classification, from, &stopped);
                let m = "this gradflow was built without Parquet (the `parquet` feature)";
                let _ = tx.send(Event::Failed(format!("{}: {m}", dir.display())));
            }
        };
        spawn_reader(&origin, read)?;
        Ok(Records { events, stop })
    }

    /// The next event, waiting at most `wait`; `None` if none came (or the reader is gone
    /// after its last event).
    pub fn next_timeout(&self, wait: Duration) -> Option<Event> {
        self.events.recv_timeout(wait).ok()
    }

    /// The next event if one is ready.
    pub fn try_next(&self) -> Option<Event> {
        self.events.try_recv().ok()
    }

    /// Ends a followed file: the reader hands on what it has read and then [`Event::End`].
    /// (Standard input ends with its writer.)
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn open_at(path: &Path, from: u64) -> Result<File, String> {
    let mut file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if from > len {
        return Err(format!(
            "{}: the run stopped at byte {from}, but the file now has {len} bytes (it was \
             replaced or cut: a followed file may only grow)",
            path.display()
        ));
    }
    file.seek(SeekFrom::Start(from))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(file)
}

/// A directory's part files after `after` (all without), in name order, with their sizes:
/// regular files whose names start with neither `.` nor `_` (Spark's `_SUCCESS`, temporary
/// files being written).
fn parts_after(
    dir: &Path,
    after: Option<&std::ffi::OsString>,
) -> Result<Vec<(std::ffi::OsString, PathBuf, u64)>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut parts = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = entry.file_name();
        let hidden = name
            .as_encoded_bytes()
            .first()
            .is_some_and(|b| *b == b'.' || *b == b'_');
        let meta = entry
            .metadata()
            .map_err(|e| format!("{}: {e}", entry.path().display()))?;
        if hidden || !meta.is_file() || after.is_some_and(|a| name <= *a) {
            continue;
        }
        parts.push((name, entry.path(), meta.len()));
    }
    parts.sort();
    Ok(parts)
}

/// How a directory's part files are read ([`read_parts`]): as lines ([`RowReader`]) or as
/// Parquet files ([`ParquetParts`]).
trait PartReader {
    /// Reads part `path` (of `bytes` bytes) from its position `skip` on, its positions
    /// following `offset` (the positions of the parts before); returns the position after it,
    /// or `None` when reading failed (said through `send`) or nobody listens.
    fn read_part(
        &mut self,
        path: &Path,
        bytes: u64,
        skip: u64,
        offset: u64,
        send: &mut dyn FnMut(Event) -> bool,
    ) -> Option<u64>;

    /// Malformed rows skipped so far.
    fn skipped(&self) -> u64;
}

impl PartReader for RowReader<'_> {
    /// A part's positions are its bytes: whole lines, the last ending with a newline.
    fn read_part(
        &mut self,
        path: &Path,
        bytes: u64,
        skip: u64,
        offset: u64,
        send: &mut dyn FnMut(Event) -> bool,
    ) -> Option<u64> {
        if skip >= bytes {
            return Some(offset + bytes);
        }
        let file = open_at(path, skip).and_then(|f| self.begin(path, skip).map(|_| f));
        let file = match file {
            Ok(file) => file,
            Err(e) => {
                send(Event::Failed(e));
                return None;
            }
        };
        let mut ended = None;
        read_lines(Box::new(file), offset + skip, None, self, |e| match e {
            Event::End { end, cut, .. } => {
                ended = Some((end, cut));
                true
            }
            e => send(e),
        });
        // Without an end, reading failed (said) or nobody listens.
        let (end, cut) = ended?;
        if cut > 0 {
            send(Event::Failed(format!(
                "{}: ends inside a line ({cut} bytes without a newline): a part file must end \
                 with one",
                path.display()
            )));
            return None;
        }
        Some(end)
    }

    fn skipped(&self) -> u64 {
        self.skipped
    }
}

/// The reader thread of a directory: each part file read whole, in name order, as it appears
/// (a part must appear complete, as a writer's rename makes it); the stream's positions count
/// those of the parts before. `from` positions are skipped (a resumed run's). Ends once `stop`
/// is set and no new part is there.
fn read_parts(
    dir: &Path,
    from: u64,
    stop: &AtomicBool,
    reader: &mut dyn PartReader,
    mut send: impl FnMut(Event) -> bool,
) {
    let (mut offset, mut skip) = (0u64, from);
    let mut last: Option<std::ffi::OsString> = None;
    loop {
        let parts = match parts_after(dir, last.as_ref()) {
            Ok(parts) => parts,
            Err(e) => {
                send(Event::Failed(e));
                return;
            }
        };
        if parts.is_empty() {
            if skip > 0 {
                send(Event::Failed(format!(
                    "{}: the run had read {from} of its parts' positions (bytes, or a Parquet \
                     part's rows), and they now hold {offset} (a part was removed or cut)",
                    dir.display()
                )));
                return;
            }
            if stop.load(Ordering::Relaxed) {
                let skipped = reader.skipped();
                send(Event::End {
                    end: offset,
                    cut: 0,
                    skipped,
                });
                return;
            }
            std::thread::sleep(FOLLOW_POLL);
            continue;
        }
        for (name, path, bytes) in parts {
            last = Some(name);
            let Some(end) = reader.read_part(&path, bytes, skip, offset, &mut send) else {
                return;
            };
            (skip, offset) = (skip.saturating_sub(end - offset), end);
        }
    }
}

/// A directory's Parquet part files, each read whole (through the table reader, with its
/// checks) and encoded row by row by a stream's feature map; a part's positions are its rows.
#[cfg(feature = "parquet")]
struct ParquetParts<'m> {
    lines: CsvLines<'m>,
    on_bad_row: OnBadRow,
    skipped: u64,
}

#[cfg(feature = "parquet")]
impl PartReader for ParquetParts<'_> {
    fn read_part(
        &mut self,
        path: &Path,
        _bytes: u64,
        skip: u64,
        offset: u64,
        send: &mut dyn FnMut(Event) -> bool,
    ) -> Option<u64> {
        let missing = &self.lines.spec().missing;
        let read = crate::data::table::parquet::read_cells(
            path,
            self.lines.columns(),
            super::Part::WHOLE,
            missing,
        );
        let cells = match read {
            Ok(cells) => cells,
            Err(e) => {
                send(Event::Failed(e.to_string()));
                return None;
            }
        };
        let (n, mut rows) = (cells.len() as u64, Rows::default());
        for r in skip.min(n)..n {
            match self.lines.row_of_cells(&cells, r as usize) {
                Ok(Some(label)) => {
                    let (keys, values) = self.lines.features();
                    rows.keys.extend_from_slice(keys);
                    rows.values.extend_from_slice(values);
                    rows.lens.push(keys.len() as u32);
                    rows.labels.push(label);
                    rows.ends.push(offset + r + 1);
                }
                Ok(None) => {}
                Err(b) => {
                    let column = self.lines.columns().iter().position(|c| *c == b.column);
                    let place = cells.error(r as usize, column.unwrap_or(0), b.message);
                    let place = match column {
                        Some(_) => place.to_string(),
                        None => format!("{place} (joined column '{}')", b.column),
                    };
                    if self.on_bad_row == OnBadRow::Stop {
                        send(Event::Failed(format!(
                            "{place} (data.on_bad_row = \"skip\" skips such rows)"
                        )));
                        return None;
                    }
                    self.skipped += 1;
                    if self.skipped <= QUOTED_BAD_ROWS {
                        eprintln!("warning: skipped a malformed row: {place}");
                    }
                }
            }
            if rows.len() == crate::data::table::parquet::BATCH_ROWS
                && !send(Event::Rows(std::mem::take(&mut rows)))
            {
                return None;
            }
        }
        if !rows.is_empty() && !send(Event::Rows(rows)) {
            return None;
        }
        Some(offset + n)
    }

    fn skipped(&self) -> u64 {
        self.skipped
    }
}

/// The reader thread's parser: whole lines to rows, counting lines for errors' places.
struct RowReader<'l> {
    lines: &'l mut dyn LineRows,
    on_bad_row: OnBadRow,
    name: String,
    /// The 1-based number of the next line.
    line: u64,
    /// The next line is a file's header.
    header_next: bool,
    skipped: u64,
}

impl<'l> RowReader<'l> {
    fn new(lines: &'l mut dyn LineRows, on_bad_row: OnBadRow, name: String) -> Self {
        RowReader {
            lines,
            on_bad_row,
            name,
            line: 1,
            header_next: false,
            skipped: 0,
        }
    }

    /// File `path` is read from its byte `from` on: errors name it and count its lines from
    /// there; its header is its first line, read apart when `from` is past it.
    fn begin(&mut self, path: &Path, from: u64) -> Result<(), String> {
        self.name = path.display().to_string();
        self.line = match from {
            0 => 1,
            _ => crate::data::source::line_of(path, from).map_err(|e| e.to_string())? as u64,
        };
        self.header_next = self.lines.has_header() && from == 0;
        if self.lines.has_header() && from > 0 {
            let mut first = Vec::new();
            let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            std::io::BufRead::read_until(
                &mut std::io::BufReader::new(file.take(MAX_LINE_BYTES as u64)),
                b'\n',
                &mut first,
            )
            .map_err(|e| format!("{}: {e}", path.display()))?;
            (self.lines.header(&first)).map_err(|e| self.place(1, e))?;
        }
        Ok(())
    }

    /// An error's place and message: `name:line:column: message` (no column when 0).
    fn place(&self, line: u64, (column, message): super::libsvm::LineError) -> String {
        match column {
            0 => format!("{}:{line}: {message}", self.name),
            _ => format!("{}:{line}:{column}: {message}", self.name),
        }
    }

    /// The rows of `bytes`, whole lines that end at stream offset `end`.
    fn parse(&mut self, bytes: &[u8], end: u64) -> Result<Rows, String> {
        let mut rows = Rows::default();
        let mut offset = end - bytes.len() as u64;
        for text in bytes.split_inclusive(|&b| b == b'\n') {
            let line = self.line;
            self.line += 1;
            offset += text.len() as u64;
            if std::mem::take(&mut self.header_next) {
                self.lines.header(text).map_err(|e| self.place(line, e))?;
                continue;
            }
            let label = match self.lines.parse(text) {
                Ok(Some(label)) => label,
                Ok(None) => continue,
                Err(e) => {
                    let place = self.place(line, e);
                    if self.on_bad_row == OnBadRow::Stop {
                        return Err(format!(
                            "{place} (data.on_bad_row = \"skip\" skips such rows)"
                        ));
                    }
                    self.skipped += 1;
                    if self.skipped <= QUOTED_BAD_ROWS {
                        eprintln!("warning: skipped a malformed row: {place}");
                    }
                    continue;
                }
            };
            let (keys, values) = self.lines.features();
            rows.keys.extend_from_slice(keys);
            rows.values.extend_from_slice(values);
            rows.lens.push(keys.len() as u32);
            rows.labels.push(label);
            rows.ends.push(offset);
        }
        Ok(rows)
    }
}

/// The reader thread: reads `source` (at stream offset `start`), parses its whole lines with
/// `rows` and hands them to `send` (false: nobody listens any more, stop). With `follow`, the
/// end of the file is waited at until the flag is set.
fn read_lines(
    mut source: Box<dyn Read + Send>,
    start: u64,
    follow: Option<Arc<AtomicBool>>,
    rows: &mut RowReader,
    mut send: impl FnMut(Event) -> bool,
) {
    let name = rows.name.clone();
    let mut block = vec![0u8; BLOCK_BYTES];
    // Bytes of an unfinished line, carried into the next block.
    let mut tail: Vec<u8> = Vec::new();
    let mut offset = start; // the offset after the last whole line handed on
    loop {
        let n = match source.read(&mut block) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                send(Event::Failed(format!(
                    "{name}: read error at byte {offset}: {e}"
                )));
                return;
            }
        };
        if n == 0 {
            match &follow {
                Some(stop) if !stop.load(Ordering::Relaxed) => {
                    std::thread::sleep(FOLLOW_POLL);
                    continue;
                }
                _ => {
                    let (cut, skipped) = (tail.len() as u64, rows.skipped);
                    send(Event::End {
                        end: offset,
                        cut,
                        skipped,
                    });
                    return;
                }
            }
        }
        let fresh = &block[..n];
        let Some(last) = memchr::memrchr(b'\n', fresh) else {
            tail.extend_from_slice(fresh);
            if tail.len() > MAX_LINE_BYTES {
                let m = format!(
                    "{name}: the line at byte {offset} is longer than {} MiB",
                    MAX_LINE_BYTES >> 20
                );
                send(Event::Failed(m));
                return;
            }
            continue;
        };
        let parsed = if tail.is_empty() {
            offset += last as u64 + 1;
            rows.parse(&fresh[..=last], offset)
        } else {
            tail.extend_from_slice(&fresh[..=last]);
            offset += tail.len() as u64;
            let parsed = rows.parse(&tail, offset);
            tail.clear();
            parsed
        };
        tail.extend_from_slice(&fresh[last + 1..]);
        let event = parsed.map_or_else(Event::Failed, Event::Rows);
        let failed = matches!(event, Event::Failed(_));
        if !send(event) || failed {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> LibsvmOptions {
        LibsvmOptions {
            dim: Some(100),
            ..LibsvmOptions::default()
        }
    }

    fn format(on_bad_row: OnBadRow) -> RowFormat {
        RowFormat {
            lines: LineFormat::Libsvm(options()),
            on_bad_row,
        }
    }

    fn events_with(input: &[u8], on_bad_row: OnBadRow) -> Vec<Event> {
        let mut out = Vec::new();
        let source: Box<dyn Read + Send> = Box::new(std::io::Cursor::new(input.to_vec()));
        let mut parser = LineParser::new(&options());
        let mut rows = RowReader::new(&mut parser, on_bad_row, "test".into());
        read_lines(source, 0, None, &mut rows, |e| {
            out.push(e);
            true
        });
        out
    }

    fn events(input: &[u8]) -> Vec<Event> {
        events_with(input, OnBadRow::Stop)
    }

    /// Every row of `events`, as (label, keys, end offset).
    fn rows_of(events: &[Event]) -> Vec<(f32, Vec<u32>, u64)> {
        let mut out = Vec::new();
        for e in events {
            if let Event::Rows(r) = e {
                let mut at = 0;
                for i in 0..r.len() {
                    let len = r.lens[i] as usize;
                    out.push((r.labels[i], r.keys[at..at + len].to_vec(), r.ends[i]));
                    at += len;
                }
            }
        }
        out
    }

    /// Whole lines become rows with their end offsets (comments and blank lines none); a last
    /// line without its newline is cut and counted, never parsed.
    #[test]
    fn whole_lines_become_rows_and_a_cut_last_line_is_counted() {
        let got = events(b"1 1:1 3:2\n# note\n-1 2:1\n+1 3:");
        let want = vec![(1.0, vec![0, 2], 10), (-1.0, vec![1], 24)];
        assert_eq!(rows_of(&got), want);
        assert_eq!(
            got.last(),
            Some(&Event::End {
                end: 24,
                cut: 5,
                skipped: 0
            })
        );
        let none = Event::End {
            end: 0,
            cut: 0,
            skipped: 0,
        };
        assert_eq!(events(b""), vec![none]);
    }

    /// A malformed row stops the stream with its line and column, or is skipped and counted.
    #[test]
    fn a_malformed_row_stops_with_its_place_or_is_skipped() {
        let input = b"1 1:1\n1 5:1 4:1\n-1 200:1\n-1 2:1\n";
        match events(input).last() {
            Some(Event::Failed(m)) => {
                assert!(
                    m.starts_with("test:2:7: feature index 4 is not increasing"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
        let got = events_with(input, OnBadRow::Skip);
        let keys: Vec<Vec<u32>> = rows_of(&got).into_iter().map(|r| r.1).collect();
        assert_eq!(keys, vec![vec![0], vec![1]]);
        assert!(matches!(got.last(), Some(Event::End { skipped: 2, .. })));
    }

    /// A line spanning blocks arrives whole; an endless one is an error naming its offset.
    #[test]
    fn lines_across_blocks_arrive_whole_and_an_endless_line_fails() {
        let mut long = b"1".to_vec();
        while long.len() < BLOCK_BYTES + 10 {
            long.extend_from_slice(b" #");
        }
        long.extend_from_slice(b"\n-1 7:1\n");
        let got = rows_of(&events(&long));
        assert_eq!(got.len(), 2);
        assert_eq!(got[1], (-1.0, vec![6], long.len() as u64));
        let endless = vec![b'z'; MAX_LINE_BYTES + 2 * BLOCK_BYTES];
        match events(&endless).last() {
            Some(Event::Failed(m)) => assert!(m.contains("at byte 0 is longer than"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    /// A directory: its parts in name order (hidden and `_` names skipped), a new part once it
    /// appears, offsets counting the parts before; a resumed run skips whole parts and starts
    /// inside one; a bad row is named by its part and line; a part cut inside a line fails.
    #[test]
    fn a_directorys_parts_are_read_in_name_order_as_they_appear() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &[u8]| std::fs::write(dir.path().join(name), text).unwrap();
        write("part-00001.svm", b"-1 2:1\n");
        write("part-00000.svm", b"1 1:1\n");
        write("_SUCCESS", b"");
        write(".part-00002.svm.tmp", b"1 9:x\n");
        let open = |from: u64| {
            let origin = Origin::Follow {
                path: dir.path().to_path_buf(),
                from,
            };
            Records::open(origin, format(OnBadRow::Stop)).unwrap()
        };
        let wait = Duration::from_secs(5);
        let records = open(0);
        let mut got = Vec::new();
        while got.len() < 2 {
            got.extend(rows_of(&[records.next_timeout(wait).unwrap()]));
        }
        assert_eq!(got, vec![(1.0, vec![0], 6), (-1.0, vec![1], 13)]);
        write("part-00002.svm", b"1 3:1\n1 4:1\n");
        let third = rows_of(&[records.next_timeout(wait).unwrap()]);
        assert_eq!(third, vec![(1.0, vec![2], 19), (1.0, vec![3], 25)]);
        records.stop();
        let end = Event::End {
            end: 25,
            cut: 0,
            skipped: 0,
        };
        assert_eq!(records.next_timeout(wait), Some(end));

        // Resumed at byte 19: the first two parts skipped, the third read from its second row.
        let resumed = open(19);
        assert_eq!(
            rows_of(&[resumed.next_timeout(wait).unwrap()]),
            vec![(1.0, vec![3], 25)]
        );
        resumed.stop();

        write("part-00003.svm", b"1 5:1\n-1 7:1 6:1\n");
        write("part-00004.svm", b"1 5:1");
        let records = open(25);
        let mut failed = None;
        while failed.is_none() {
            if let Some(Event::Failed(m)) = records.next_timeout(wait) {
                failed = Some(m);
            }
        }
        let m = failed.unwrap();
        assert!(
            m.contains("part-00003.svm:2:8: feature index 6 is not increasing"),
            "{m}"
        );
    }

    /// A followed file: what is appended after the reader reached the end arrives, a line cut
    /// by an append once its end is appended, and the stop ends the stream at the last whole
    /// line.
    #[test]
    fn a_followed_file_yields_what_is_appended_until_stopped() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grow.svm");
        std::fs::write(&path, b"1 1:1\n-1 2").unwrap();
        let origin = Origin::Follow {
            path: path.clone(),
            from: 0,
        };
        let records = Records::open(origin, format(OnBadRow::Stop)).unwrap();
        let wait = Duration::from_secs(5);
        let first = records.next_timeout(wait).unwrap();
        assert_eq!(rows_of(&[first]), vec![(1.0, vec![0], 6)]);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b":1\n1 3").unwrap();
        let second = records.next_timeout(wait).unwrap();
        assert_eq!(rows_of(&[second]), vec![(-1.0, vec![1], 13)]);
        records.stop();
        let end = Event::End {
            end: 13,
            cut: 3,
            skipped: 0,
        };
        assert_eq!(records.next_timeout(wait), Some(end));
        // Resuming past the end of a file that shrank is an error, not a silent restart.
        let origin = Origin::Follow { path, from: 1000 };
        let e = Records::open(origin, format(OnBadRow::Stop)).err().unwrap();
        assert!(e.contains("may only grow"), "{e}");
    }

    /// Every event of `origin` until its end (the reader told to stop at once).
    fn all_events(origin: Origin, format: RowFormat) -> Vec<Event> {
        let records = Records::open(origin, format).unwrap();
        records.stop();
        let mut out = Vec::new();
        while let Some(e) = records.next_timeout(Duration::from_secs(5)) {
            let last = !matches!(e, Event::Rows(_));
            out.push(e);
            if last {
                break;
            }
        }
        out
    }

    /// The feature map of a table stream: label `y`, categorical `c` hashed into 16 features.
    fn label_and_one_hashed_column() -> FeatureMap {
        use crate::data::table::{stream_map, FeatureSpec, LabelSpec, TableSpec};
        let spec = TableSpec {
            label: LabelSpec {
                column: "y".into(),
                ..LabelSpec::default()
            },
            features: FeatureSpec {
                categorical: vec!["c".into()],
                hash_bits: Some(4),
                ..FeatureSpec::default()
            },
            ..TableSpec::default()
        };
        stream_map(&spec).unwrap()
    }

    #[test]
    fn a_csv_stream_resumed_past_its_header_reads_it_apart_and_counts_lines_from_the_start() {
        let csv = RowFormat {
            lines: LineFormat::Csv {
                map: Box::new(label_and_one_hashed_column()),
                classification: true,
            },
            on_bad_row: OnBadRow::Stop,
        };
        let follow = |path: &Path, from: u64| {
            let path = path.to_path_buf();
            all_events(Origin::Follow { path, from }, csv.clone())
        };
        let dir = tempfile::tempdir().unwrap();
        let (file, bad) = (dir.path().join("t.csv"), dir.path().join("bad.csv"));
        let text = "c,y\na,1\nb,0\nc,1\n";
        std::fs::write(&file, text).unwrap();
        std::fs::write(&bad, format!("{text}d,x\n")).unwrap();
        let rows = rows_of(&follow(&file, 0));
        assert_eq!(rows.iter().map(|r| r.2).collect::<Vec<_>>(), [8, 12, 16]);
        assert_eq!((rows[0].0, rows[1].0), (1.0, 0.0));
        // From after row b (byte 12): the header is read apart, and row c is the same row.
        assert_eq!(rows_of(&follow(&file, 12)), rows[2..].to_vec());
        // A bad label's place is its line in the file, from the start or resumed.
        for from in [0, 16] {
            let events = follow(&bad, from);
            assert!(
                matches!(events.last(), Some(Event::Failed(e))
                    if e.contains("bad.csv:5:2: column 'y': 'x' is not a finite number")),
                "{events:?}"
            );
        }
        // A directory: each part has its own header (p0's columns in another order); resumed
        // inside p1, past its header.
        let parts = dir.path().join("parts");
        std::fs::create_dir(&parts).unwrap();
        std::fs::write(parts.join("p0"), "y,c\n1,a\n").unwrap();
        std::fs::write(parts.join("p1"), text).unwrap();
        let whole = rows_of(&follow(&parts, 0));
        assert_eq!(whole.len(), 4, "{whole:?}");
        assert_eq!(whole[0].1, rows[0].1, "column c by name, wherever it is");
        assert_eq!(rows_of(&follow(&parts, 8 + 12)), whole[3..].to_vec());
    }

    #[cfg(feature = "parquet")]
    #[test]
    fn a_directorys_parquet_parts_are_rows_whose_positions_are_row_numbers() {
        use arrow_array::{ArrayRef, RecordBatch, StringArray};
        let format = RowFormat {
            lines: LineFormat::Parquet {
                map: Box::new(label_and_one_hashed_column()),
                classification: true,
            },
            on_bad_row: OnBadRow::Stop,
        };
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, y: &[&str], c: &[&str]| {
            let column =
                |v: &[&str]| -> ArrayRef { std::sync::Arc::new(StringArray::from(v.to_vec())) };
            let batch = RecordBatch::try_from_iter([("c", column(c)), ("y", column(y))]).unwrap();
            let file = File::create(dir.path().join(name)).unwrap();
            let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
            w.write(&batch).unwrap();
            w.close().unwrap();
        };
        write("p0.parquet", &["1", "0", "1"], &["a", "b", "c"]);
        write("p1.parquet", &["0", "1"], &["d", "e"]);
        let follow = |from: u64| {
            let path = dir.path().to_path_buf();
            all_events(Origin::Follow { path, from }, format.clone())
        };
        let rows = rows_of(&follow(0));
        assert_eq!(
            rows.iter().map(|r| r.2).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5]
        );
        assert_eq!(
            rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            [1.0, 0.0, 1.0, 0.0, 1.0]
        );
        // Resumed after row 4: inside the second part.
        assert_eq!(rows_of(&follow(4)), rows[4..].to_vec());
        // A bad label names its file, row group and row.
        write("p2.parquet", &["1", "x"], &["f", "g"]);
        let events = follow(5);
        assert!(
            matches!(events.last(), Some(Event::Failed(e))
                if e.contains("p2.parquet: row group 0, row 2 of the table: column 'y'")),
            "{events:?}"
        );
    }
}
