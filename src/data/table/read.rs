//! Reading a worker's part of a CSV file.
//!
//! A plain file is cut into byte ranges ([`crate::data::source`]): a worker reads the records
//! that start in its range, and no worker parses the whole file. A gzip or zstd file cannot be
//! cut: every worker decompresses it and parses every `W`-th record. Either way,
//! a record's id is its byte offset in the (decompressed) file: unique, in file order, and the
//! same for any number of workers.
//!
//! A cut can fall inside a quoted field that holds a line break. The workers first count the
//! quotes in their ranges ([`count_quotes`]) and share the counts: the parity of the quotes
//! before a range tells whether it starts inside a quoted field, and the worker then starts at
//! the first line break outside quotes ([`Cut::Quotes`]), as speculative parallel CSV parsers
//! do. The parity can be wrong where a quote stands inside an unquoted field (`12" pipe`,
//! which CSV reads as a literal quote), so it is checked: every part reports where its first
//! record starts and where the record after its last one starts ([`Cells::first`],
//! [`Cells::next`]), and the parts must chain. When they do not, the workers read again cutting
//! at line breaks ([`Cut::Lines`]), where a quoted line break is an error naming its line,
//! raised by the worker whose range holds the record's start, never a misread record.
//!
//! Cells are kept in one text arena per part: no allocation per cell.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

pub use crate::data::source::Part;
use crate::data::source::{
    compression, count_byte, line_of, open_at_line, open_error, open_stream,
};
use crate::data::DataError;

/// The selected columns of a worker's records, in one text arena.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cells {
    /// The file.
    pub file: PathBuf,
    /// The selected columns' names.
    pub names: Vec<String>,
    /// Each selected column's 1-based position in the file (for error messages).
    pub positions: Vec<usize>,
    /// Each record's id: the byte offset of its start in the (decompressed) file.
    pub ids: Vec<u64>,
    /// Each record's number among the file's records (blank lines are none), 0-based, when
    /// `numbered`; empty otherwise, where record `r` is the part's `r`-th ([`Cells::number`]).
    numbers: Vec<u64>,
    /// Whether records are numbered from the file's first: a part read from the whole stream
    /// (a compressed file, or one part); otherwise the parts before hold the others.
    pub numbered: bool,
    /// Where this part's first record starts (0 for the first part).
    pub first: u64,
    /// Where the record after this part's last one starts (the file's size at its end): the
    /// next part's `first` when the cut is right.
    pub next: u64,
    text: String,
    /// End of each cell in `text`, record by record (`names.len()` per record).
    ends: Vec<u32>,
    /// Bit `i` is set when cell `i` (in `ends` order) is a missing-value marker.
    missing: Vec<u64>,
    /// A Parquet table's row groups, each with its file and the number of its first row
    /// among the table's: a record's id is its row number there, and an error names the file,
    /// the row group and the row, as a CSV error names the line. Empty for CSV.
    pub(super) groups: Vec<(PathBuf, usize, u64)>,
}

/// Whether `path` is a Parquet table ([`super::parquet`]): a directory (of part files), a
/// `.parquet`/`.parq` name, or a file that starts with Parquet's magic `PAR1`.
pub fn is_parquet(path: &Path) -> bool {
    if path.is_dir() {
        return true;
    }
    let ext = path.extension().and_then(|e| e.to_str());
    if ext.is_some_and(|e| e.eq_ignore_ascii_case("parquet") || e.eq_ignore_ascii_case("parq")) {
        return true;
    }
    let mut magic = [0u8; 4];
    let read = crate::data::source::open_input(path).and_then(|mut f| f.read_exact(&mut magic));
    read.is_ok() && &magic == b"PAR1"
}

/// A Parquet table where gradflow was built without the `parquet` feature.
#[cfg(not(feature = "parquet"))]
fn no_parquet(path: &Path) -> DataError {
    DataError {
        file: path.to_path_buf(),
        line: 0,
        column: 0,
        message: "a Parquet table, and this gradflow was built without Parquet (the `parquet` \
                  feature, on by default)"
            .into(),
    }
}

/// The error of a part whose cells pass 4 GiB (their ends are `u32`).
const TOO_MANY_CELLS: &str = "a worker's part holds over 4 GiB of cells; use more workers";

impl Cells {
    /// Record `r`'s number: in the file when [`Cells::numbered`], else in this part.
    pub fn number(&self, r: usize) -> u64 {
        match self.numbered {
            true => self.numbers[r],
            false => r as u64,
        }
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Cell `col` (index into `names`) of record `row`.
    #[inline]
    pub fn get(&self, row: usize, col: usize) -> &str {
        let i = row * self.names.len() + col;
        let lo = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.text[lo..self.ends[i] as usize]
    }

    /// Cell `col` of record `row`, or `None` when it is a missing-value marker.
    #[inline]
    pub fn value(&self, row: usize, col: usize) -> Option<&str> {
        let i = row * self.names.len() + col;
        if self.missing[i / 64] >> (i % 64) & 1 == 1 {
            return None;
        }
        Some(self.get(row, col))
    }

    /// No records yet of the columns `names` of `file`, numbered from the file's first.
    #[cfg(feature = "parquet")]
    pub(super) fn numbered(file: &Path, names: &[String]) -> Cells {
        Cells {
            file: file.to_path_buf(),
            names: names.to_vec(),
            numbered: true,
            ..Cells::default()
        }
    }

    /// Appends a cell (already trimmed) to the record being read, marked missing or not.
    pub(super) fn push_cell(&mut self, s: &str, missing: bool) -> Result<(), &'static str> {
        let i = self.ends.len();
        if i.is_multiple_of(64) {
            self.missing.push(0);
        }
        if missing {
            self.missing[i / 64] |= 1 << (i % 64);
        }
        self.text.push_str(s);
        let end = u32::try_from(self.text.len()).map_err(|_| TOO_MANY_CELLS)?;
        self.ends.push(end);
        Ok(())
    }

    /// Ends the record being read: its id and, where records are numbered, its number.
    #[cfg(feature = "parquet")]
    pub(super) fn end_record(&mut self, id: u64) {
        self.ids.push(id);
        if self.numbered {
            self.numbers.push(id);
        }
    }

    /// An error at cell `col` of record `row`, with the file's line number (found by counting
    /// line breaks up to the record: only errors pay for it); in a Parquet table, its file,
    /// row group and row.
    pub fn error(&self, row: usize, col: usize, message: String) -> DataError {
        let name = crate::data::clip(&self.names[col]);
        let id = self.ids[row];
        if let Some(at) = self.groups.iter().rposition(|g| g.2 <= id) {
            let (file, group, _) = &self.groups[at];
            return DataError {
                file: file.clone(),
                line: 0,
                column: 0,
                message: format!(
                    "row group {group}, row {} of the table: column '{name}': {message}",
                    id + 1,
                ),
            };
        }
        let line = line_of(&self.file, id).unwrap_or(0);
        DataError {
            file: self.file.clone(),
            line,
            column: self.positions[col],
            message: format!("column '{name}': {message}"),
        }
    }
}

/// The longest record read from a compressed stream: there, memory would follow the
/// decompressed bytes (a 2 MB gzip can hold a 2 GiB cell), not the bytes received.
pub const MAX_RECORD_BYTES: u64 = 64 << 20;

/// A reader that fails once more than [`MAX_RECORD_BYTES`] (plus the CSV reader's buffer)
/// were pulled past `mark`, the start of the record being read.
struct Bounded<R> {
    inner: R,
    pulled: u64,
    mark: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pulled > self.mark.get() + MAX_RECORD_BYTES + (1 << 20) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "a record longer than {} MiB (from byte {} of the decompressed stream): a \
                     quote opened and never closed, or not a CSV table",
                    MAX_RECORD_BYTES >> 20,
                    self.mark.get()
                ),
            ));
        }
        let n = self.inner.read(buf)?;
        self.pulled += n as u64;
        Ok(n)
    }
}

/// Refuses a file whose lines end in CR alone (classic Mac): one reader would take the CR as
/// a line break and workers cutting the file at line feeds would not, so its rows would depend
/// on the number of workers.
fn refuse_cr_only(path: &Path) -> Result<(), DataError> {
    let mut head = Vec::new();
    open_stream(path)?
        .take(1 << 16)
        .read_to_end(&mut head)
        .map_err(|e| open_error(path, e))?;
    if head.contains(&b'\r') && !head.contains(&b'\n') {
        return Err(DataError {
            file: path.to_path_buf(),
            line: 1,
            column: 0,
            message: "its lines end in CR alone (classic Mac line endings), which gradflow does \
                      not read: convert them with `tr '\\r' '\\n'`"
                .into(),
        });
    }
    Ok(())
}

/// Whether the record at bytes `start..end` of `path`'s (decompressed) stream holds an odd
/// number of quotes: a quote opened and never closed, which makes the rest of the file one
/// field. Asked only of a file's last record when one of its fields holds a line break.
fn unclosed_quote(path: &Path, start: u64, end: u64) -> Result<bool, DataError> {
    let mut stream = open_stream(path)?;
    std::io::copy(&mut (&mut stream).take(start), &mut std::io::sink())
        .map_err(|e| open_error(path, e))?;
    let quotes = crate::data::source::count_byte(stream.take(end - start), b'"', path)?;
    Ok(quotes % 2 == 1)
}

/// The error for a quote opened on the record at byte `id` and never closed.
fn unclosed_quote_error(path: &Path, id: u64) -> DataError {
    DataError {
        file: path.to_path_buf(),
        line: line_of(path, id).unwrap_or(0),
        column: 0,
        message: "a quote opened in this record is never closed, so every line after it would \
                  be one field: close the quote (a literal quote inside a quoted field is \
                  written twice, \"\")"
            .into(),
    }
}

/// Whether any field of `rec` holds a line break.
fn holds_line_break(rec: &csv::ByteRecord) -> bool {
    rec.iter()
        .any(|f| f.iter().any(|&b| b == b'\n' || b == b'\r'))
}

/// A reader of records that end at a line feed. (With the csv crate's default, which ends a
/// record at CR, LF or CRLF, the record after a CRLF is placed at its LF, one byte before it
/// starts, on the line before: parts cut at line starts did not chain and errors named the
/// line above.) A CRLF's CR stays at the end of the last field, which [`next_record`] removes.
fn csv_reader<R: Read>(r: R, delimiter: u8) -> csv::Reader<R> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .delimiter(delimiter)
        .flexible(true)
        .terminator(csv::Terminator::Any(b'\n'))
        .from_reader(r)
}

/// Reads the next record of `r` into `rec` (false at the end), without the CR of a CRLF line
/// ending; `scratch` is reused from record to record.
fn next_record<R: Read>(
    r: &mut csv::Reader<R>,
    rec: &mut csv::ByteRecord,
    scratch: &mut Vec<u8>,
    path: &Path,
) -> Result<bool, DataError> {
    if !r.read_byte_record(rec).map_err(|e| csv_error(path, e))? {
        return Ok(false);
    }
    let last = rec.len() - 1;
    if let Some(field) = rec.get(last).and_then(|f| f.strip_suffix(b"\r")) {
        scratch.clear();
        scratch.extend_from_slice(field);
        rec.truncate(last);
        rec.push_field(scratch);
    }
    Ok(true)
}

fn csv_error(path: &Path, e: csv::Error) -> DataError {
    let (line, message) = match e.kind() {
        csv::ErrorKind::Utf8 { pos, err } => (
            pos.as_ref().map(|p| p.line() as usize).unwrap_or(0),
            format!("field {} is not UTF-8", err.field() + 1),
        ),
        _ => (
            e.position().map(|p| p.line() as usize).unwrap_or(0),
            e.to_string(),
        ),
    };
    DataError {
        file: path.to_path_buf(),
        line,
        column: 0,
        message,
    }
}

/// The header of `path` (its first record).
pub fn header(path: &Path, delimiter: u8) -> Result<Vec<String>, DataError> {
    if is_parquet(path) {
        #[cfg(feature = "parquet")]
        return super::parquet::header(path);
        #[cfg(not(feature = "parquet"))]
        return Err(no_parquet(path));
    }
    refuse_cr_only(path)?;
    let bounded = Bounded {
        inner: open_stream(path)?,
        pulled: 0,
        mark: Default::default(),
    };
    let mut r = csv_reader(bounded, delimiter);
    let mut rec = csv::StringRecord::new();
    if !r.read_record(&mut rec).map_err(|e| csv_error(path, e))? {
        return Err(DataError {
            file: path.to_path_buf(),
            line: 0,
            column: 0,
            message: "empty file: expected a header line".into(),
        });
    }
    let names: Vec<String> = rec.iter().map(|s| s.trim().to_string()).collect();
    if let Err((column, message)) = named_once(&names) {
        return Err(DataError {
            file: path.to_path_buf(),
            line: 1,
            column,
            message,
        });
    }
    Ok(names)
}

/// A header whose columns are each named once; else the second one's 1-based position and the
/// error. (Unnamed columns, an index column or a trailing delimiter, cannot be selected: no
/// clash.)
pub(super) fn named_once(names: &[String]) -> Result<(), (usize, String)> {
    let named = names
        .iter()
        .map(String::as_str)
        .zip(1..)
        .filter(|n| !n.0.is_empty());
    let mut sorted: Vec<(&str, usize)> = named.collect();
    sorted.sort_unstable();
    match sorted.windows(2).find(|w| w[0].0 == w[1].0) {
        Some(w) => Err((
            w[1].1,
            format!(
                "columns {} and {} are both named '{}': a column must be named once",
                w[0].1,
                w[1].1,
                crate::data::clip(w[0].0)
            ),
        )),
        None => Ok(()),
    }
}

/// What an error says of a header without the column it needs: its names when it has several,
/// but not a one-column "header", which may be any file's first line (a model file's join
/// path can name any file, and its first line is not for an error message to show).
pub(super) fn header_names(head: &[String]) -> String {
    match head.len() {
        0 | 1 => format!(
            "the first line is one column of {} bytes: not a table with this delimiter",
            head.first().map_or(0, |h| h.len())
        ),
        _ => format!("the header has: {}", crate::data::clip(&head.join(", "))),
    }
}

/// How a plain file read by several workers is cut into their parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// At line breaks: a quoted field may not hold one.
    Lines,
    /// At line breaks outside quoted fields; `inside`: this part's range starts inside one
    /// (an odd number of quotes before it).
    Quotes {
        /// The range starts inside a quoted field.
        inside: bool,
    },
}

/// The quote characters (`"`) in `part`'s byte range of the plain file `path`.
pub fn count_quotes(path: &Path, part: Part) -> Result<u64, DataError> {
    let size = std::fs::metadata(path)
        .map_err(|e| open_error(path, e))?
        .len();
    let (start, end) = part.range(size);
    let mut file = crate::data::source::open_input(path).map_err(|e| open_error(path, e))?;
    file.seek(SeekFrom::Start(start))
        .map_err(|e| open_error(path, e))?;
    count_byte(file.take(end - start), b'"', path)
}

/// The plain file `path` opened at the first record that starts at or after `start`, cut as
/// `cut` says, and that record's offset (the file's size when none does).
fn open_at_record(path: &Path, start: u64, cut: Cut) -> Result<(BufReader<File>, u64), DataError> {
    let inside = match cut {
        Cut::Lines => return open_at_line(path, start),
        Cut::Quotes { inside } => inside,
    };
    // A record starts right after a line break outside quotes. The byte before `start` is
    // outside a quote exactly when `start` is (a line break is not a quote).
    let (mut file, line) = open_at_line(path, start)?;
    if line == start && !inside {
        return Ok((file, start));
    }
    file.seek(SeekFrom::Start(start))
        .map_err(|e| open_error(path, e))?;
    let (mut at, mut inside) = (start, inside);
    loop {
        let buf = file.fill_buf().map_err(|e| open_error(path, e))?;
        if buf.is_empty() {
            return Ok((file, at));
        }
        let found = buf.iter().position(|&b| {
            inside ^= b == b'"';
            b == b'\n' && !inside
        });
        let used = found.map_or(buf.len(), |i| i + 1);
        file.consume(used);
        at += used as u64;
        if found.is_some() {
            return Ok((file, at));
        }
    }
}

/// Reads `part` of `path`, keeping the columns `names`; a missing column is an error naming the
/// header. A cell (trimmed) equal to one of `missing` is a missing value. A plain file read by
/// several workers is cut as `cut` says.
pub fn read_cells(
    path: &Path,
    names: &[String],
    part: Part,
    delimiter: u8,
    missing: &[String],
    cut: Cut,
) -> Result<Cells, DataError> {
    if is_parquet(path) {
        #[cfg(feature = "parquet")]
        return super::parquet::read_cells(path, names, part, missing);
        #[cfg(not(feature = "parquet"))]
        return Err(no_parquet(path));
    }
    let head = header(path, delimiter)?;
    let mut select = Vec::with_capacity(names.len());
    for n in names {
        let at = head.iter().position(|h| h == n).ok_or_else(|| DataError {
            file: path.to_path_buf(),
            line: 1,
            column: 0,
            message: format!(
                "no column '{}' ({})",
                crate::data::clip(n),
                header_names(&head)
            ),
        })?;
        select.push(at);
    }
    let mut cells = Cells {
        file: path.to_path_buf(),
        names: names.to_vec(),
        positions: select.iter().map(|&i| i + 1).collect(),
        ..Cells::default()
    };
    let selection = Selection {
        path,
        head: &head,
        select: &select,
        names,
        missing,
    };
    let keep = |cells: &mut Cells, rec: &csv::ByteRecord, id: u64| selection.keep(cells, rec, id);
    let mut rec = csv::ByteRecord::new();
    if compression(path)?.is_some() || part.count == 1 {
        // The whole stream; every `count`-th record after the header.
        let mark = std::rc::Rc::new(std::cell::Cell::new(0u64));
        let bounded = Bounded {
            inner: open_stream(path)?,
            pulled: 0,
            mark: mark.clone(),
        };
        let mut r = csv_reader(bounded, delimiter);
        let mut k = 0u64;
        let mut scratch = Vec::new();
        next_record(&mut r, &mut rec, &mut scratch, path)?;
        cells.numbered = true;
        let mut last = (0u64, false);
        loop {
            mark.set(r.position().byte());
            if !next_record(&mut r, &mut rec, &mut scratch, path)? {
                break;
            }
            last = (
                rec.position().map_or(0, |p| p.byte()),
                holds_line_break(&rec),
            );
            if is_blank(&rec) {
                continue;
            }
            if k % part.count as u64 == part.index as u64 {
                let id = rec.position().map_or(0, |p| p.byte());
                keep(&mut cells, &rec, id)?;
                cells.numbers.push(k);
            }
            k += 1;
        }
        cells.next = r.position().byte();
        if last.1 && unclosed_quote(path, last.0, cells.next)? {
            return Err(unclosed_quote_error(path, last.0));
        }
        return Ok(cells);
    }
    // A plain file: the records that start in this worker's byte range.
    let size = std::fs::metadata(path)
        .map_err(|e| open_error(path, e))?
        .len();
    let (start, end) = part.range(size);
    // The selected cells take at most the range's bytes.
    cells.text.reserve((end - start) as usize);
    let (file, first) = open_at_record(path, start, cut)?;
    (cells.first, cells.next) = (first, size);
    let mut r = csv_reader(file, delimiter);
    let mut scratch = Vec::new();
    loop {
        if !next_record(&mut r, &mut rec, &mut scratch, path)? {
            break;
        }
        let id = first + rec.position().map_or(0, |p| p.byte());
        if id >= end {
            cells.next = id;
            break;
        }
        let line_break = |f: &[u8]| f.iter().any(|&b| b == b'\n' || b == b'\r');
        let held = (cut == Cut::Lines)
            .then(|| rec.iter().position(line_break))
            .flatten();
        if let Some(i) = held {
            return Err(held_line_break(path, &head, i, id, part.count));
        }
        if id > 0 && !is_blank(&rec) {
            keep(&mut cells, &rec, id)?;
        }
        // The file's last record: one whose field holds a line break may be a quote never
        // closed, which took the rest of the file.
        let next = first + r.position().byte();
        if next >= size && holds_line_break(&rec) && unclosed_quote(path, id, next)? {
            return Err(unclosed_quote_error(path, id));
        }
    }
    Ok(cells)
}

/// The columns a reader keeps of each record, and what counts as missing.
struct Selection<'a> {
    path: &'a Path,
    head: &'a [String],
    /// The position in the record of each kept column.
    select: &'a [usize],
    names: &'a [String],
    missing: &'a [String],
}

impl Selection<'_> {
    /// Adds record `rec` (at byte `id`) to `cells`: its kept columns, trimmed, with their
    /// missing values marked. A record of another width or a cell that is not UTF-8 is an
    /// error naming its line and column.
    fn keep(&self, cells: &mut Cells, rec: &csv::ByteRecord, id: u64) -> Result<(), DataError> {
        if rec.len() != self.head.len() {
            let line = line_of(self.path, id).unwrap_or(0);
            return Err(DataError {
                file: self.path.to_path_buf(),
                line,
                column: 0,
                message: format!(
                    "{} fields, but the header has {}",
                    rec.len(),
                    self.head.len()
                ),
            });
        }
        for (c, &i) in self.select.iter().enumerate() {
            let s = std::str::from_utf8(&rec[i]).map_err(|_| DataError {
                file: self.path.to_path_buf(),
                line: line_of(self.path, id).unwrap_or(0),
                column: i + 1,
                message: format!("column '{}': not UTF-8", self.names[c]),
            })?;
            let s = s.trim();
            let missing = self.missing.iter().any(|m| m == s);
            cells.push_cell(s, missing).map_err(|why| DataError {
                file: self.path.to_path_buf(),
                line: 0,
                column: 0,
                message: why.into(),
            })?;
        }
        cells.ids.push(id);
        Ok(())
    }
}

/// The error of a record at byte `id` whose field `i` holds a line break, where `workers`
/// workers cut the file at line breaks.
fn held_line_break(path: &Path, head: &[String], i: usize, id: u64, workers: usize) -> DataError {
    let name = head.get(i).map_or("?", String::as_str);
    DataError {
        file: path.to_path_buf(),
        line: line_of(path, id).unwrap_or(0),
        column: i + 1,
        message: format!(
            "column '{name}': a quoted field holds a line break, and a quote inside \
             an unquoted field keeps the {} workers from finding where their records \
             start (they count quotes), so the file is cut at line breaks; quote that \
             field, compress the file (gzip or zstd: every worker then reads the whole \
             stream) or read it with one worker",
            workers
        ),
    }
}

/// A record that is one empty field: a blank line.
fn is_blank(rec: &csv::ByteRecord) -> bool {
    rec.len() == 1 && rec[0].iter().all(|b| b.is_ascii_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 50 rows, a record whose quoted field holds a line break (and an escaped quote) across
    /// the file's middle, where the cut between 2 parts falls, 50 rows.
    fn split_field(dir: &Path) -> (PathBuf, u64) {
        let path = dir.join("t.csv");
        let mut text = String::from("a,b\n");
        text += &"1,x\n".repeat(50);
        text += &format!("2,\"{}\"\"\n{}\"\n", "p".repeat(100), "q".repeat(100));
        text += &"3,\"y\"\n".repeat(50);
        std::fs::write(&path, &text).unwrap();
        let (start, _) = Part { index: 1, count: 2 }.range(text.len() as u64);
        let field = text.find("pp").unwrap() as u64;
        assert!(
            field < start && start < field + 200,
            "the cut falls inside the field"
        );
        (path, text.len() as u64)
    }

    #[test]
    fn parts_cut_by_quote_parity_read_a_quoted_line_break_whole_and_chain() {
        let dir = tempfile::tempdir().unwrap();
        let (path, size) = split_field(dir.path());
        let names = ["a".to_string(), "b".to_string()];
        let whole = read_cells(&path, &names, Part::WHOLE, b',', &[], Cut::Lines).unwrap();
        assert_eq!(whole.len(), 101);
        let field = format!("{}\"\n{}", "p".repeat(100), "q".repeat(100));
        assert_eq!(whole.get(50, 1), field);
        // The quotes before part 1's range: odd (it starts inside the field).
        let halves = [0, 1].map(|index| Part { index, count: 2 });
        let quotes = count_quotes(&path, halves[0]).unwrap();
        assert_eq!(quotes, 3, "the field's opening quote and an escaped quote");
        let cuts = [
            Cut::Quotes { inside: false },
            Cut::Quotes {
                inside: quotes % 2 == 1,
            },
        ];
        let parts: Vec<Cells> = halves
            .iter()
            .zip(cuts)
            .map(|(&p, cut)| read_cells(&path, &names, p, b',', &[], cut).unwrap())
            .collect();
        assert_eq!((parts[0].first, parts[0].next), (0, parts[1].first));
        assert_eq!(parts[1].next, size);
        assert_eq!(parts[0].len() + parts[1].len(), 101);
        let ids: Vec<u64> = parts.iter().flat_map(|p| p.ids.clone()).collect();
        assert_eq!(ids, whole.ids);
        assert_eq!(
            parts[0].get(50, 1),
            field,
            "the part holding its start reads it whole"
        );
        // The wrong parity starts part 1 at a line break inside the field: the parts do not
        // chain, which the pipeline checks.
        let wrong = read_cells(
            &path,
            &names,
            halves[1],
            b',',
            &[],
            Cut::Quotes { inside: false },
        );
        assert!(wrong.map_or(true, |w| w.first != parts[0].next));
    }

    #[test]
    fn cut_at_lines_a_quoted_line_break_is_an_error_of_the_part_holding_its_record() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = split_field(dir.path());
        let names = ["a".to_string(), "b".to_string()];
        let read = |index| {
            read_cells(
                &path,
                &names,
                Part { index, count: 2 },
                b',',
                &[],
                Cut::Lines,
            )
        };
        let e = read(0).unwrap_err();
        assert_eq!((e.line, e.column), (52, 2), "{e}");
        assert!(e.message.starts_with("column 'b': "), "{e}");
        assert!(e.message.contains("holds a line break"), "{e}");
        // (part 1 starts after the field's line break, at a whole record here; the pipeline
        // reports the lowest part's error)
    }
}
