//! LibSVM / SVMlight reader and writer.
//!
//! Format: one row per line, `label [qid:N] index:value index:value ... [# comment]`. Indices are
//! 1-based unless [`LibsvmOptions::zero_based`] is set, and must be strictly increasing within a
//! row. Every malformed input is an error naming the file, the 1-based line and the 1-based
//! column of the offending token; the reader never panics on input.

use std::fmt;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use super::partition::{RowFilter, Side};
use super::source::{line_of, open_at_line, open_error, Part};
use super::Dataset;

/// An error in a data file, with its location.
#[derive(Debug, Clone, PartialEq)]
pub struct DataError {
    /// The file being read.
    pub file: PathBuf,
    /// 1-based line number (0 when the error is not tied to a line, e.g. the file cannot be opened).
    pub line: usize,
    /// 1-based column of the offending token (0 when not tied to a token).
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file.display(),
                self.line,
                self.column,
                self.message
            )
        }
    }
}

impl std::error::Error for DataError {}

/// How to interpret a LibSVM file.
#[derive(Clone, Debug, PartialEq)]
pub struct LibsvmOptions {
    /// Indices start at 0 instead of 1.
    pub zero_based: bool,
    /// The declared number of features; an index at or beyond it is an error (or ignored, see
    /// `ignore_beyond_dim`). When `None`, the dimension is one past the largest index in the
    /// file.
    pub dim: Option<u32>,
    /// Ignore (and count in [`Split::ignored_features`]) a feature at or beyond `dim` instead
    /// of failing: data read against a model or a training set whose dimension is fixed, where
    /// a feature the model never saw carries no weight.
    pub ignore_beyond_dim: bool,
    /// Without a declared `dim`: the largest dimension the file may imply (an index at or
    /// beyond it is an error naming its place); the job's `data.max_dim`.
    pub max_dim: u32,
    /// Labels are classes `0..classes` (softmax): any other label is an error naming its place.
    pub classes: Option<u32>,
    /// Labels are two classes, +1/-1 or 1/0 (logistic, hinge): any other label is an error
    /// naming its place.
    pub binary: bool,
}

impl Default for LibsvmOptions {
    fn default() -> Self {
        LibsvmOptions {
            zero_based: false,
            dim: None,
            ignore_beyond_dim: false,
            max_dim: super::MAX_DIM,
            classes: None,
            binary: false,
        }
    }
}

/// The rows of one file that a worker keeps, split into training and test rows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Split {
    /// Rows assigned to training.
    pub train: Dataset,
    /// Rows assigned to testing.
    pub test: Dataset,
    /// Number of data rows in the whole file (all workers, both sides).
    pub total_rows: usize,
    /// Features at or beyond the declared dimension that were ignored, in the whole file (all
    /// workers, both sides), with `ignore_beyond_dim`.
    pub ignored_features: u64,
}

/// Reads `path`, keeping the rows that `filter` assigns to this worker.
///
/// Every line is parsed and validated (so every worker reports the same first error), but only
/// the kept rows are stored.
pub fn read_libsvm(
    path: &Path,
    opts: &LibsvmOptions,
    filter: &RowFilter,
) -> Result<Split, DataError> {
    parse_libsvm(super::source::open_stream(path)?, path, opts, filter)
}

/// The number of data rows of `path` (lines with anything before a `#`), as [`read_libsvm`]
/// numbers them.
pub fn count_rows(path: &Path) -> Result<usize, DataError> {
    let err = |line: usize, message: String| DataError {
        file: path.to_path_buf(),
        line,
        column: 0,
        message,
    };
    let mut reader = super::source::open_stream(path)?;
    let (mut line, mut line_no, mut rows) = (Vec::new(), 0usize, 0usize);
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| err(line_no + 1, format!("read error: {e}")))?;
        if n == 0 {
            return Ok(rows);
        }
        line_no += 1;
        let content = line.split(|&b| b == b'#').next().unwrap_or_default();
        rows += content.iter().any(|b| !b.is_ascii_whitespace()) as usize;
    }
}

/// Parses LibSVM text from any reader; `name` is used in error messages.
pub fn parse_libsvm<R: BufRead>(
    mut reader: R,
    name: &Path,
    opts: &LibsvmOptions,
    filter: &RowFilter,
) -> Result<Split, DataError> {
    let mut parser = LineParser::new(opts);
    let mut split = Split {
        train: Dataset::new(parser.declared),
        test: Dataset::new(parser.declared),
        total_rows: 0,
        ignored_features: 0,
    };
    let parsed = parser.lines(&mut reader, u64::MAX, true, |p, label| {
        let row = split.total_rows;
        split.total_rows += 1;
        match filter.side(row) {
            Some(Side::Train) => split.train.push_row_unchecked(&p.keys, &p.vals, label),
            Some(Side::Test) => split.test.push_row_unchecked(&p.keys, &p.vals, label),
            None => {}
        }
    });
    if let Err((line, column, message)) = parsed {
        return Err(DataError {
            file: name.to_path_buf(),
            line: line + 1,
            column,
            message,
        });
    }
    split.ignored_features = parser.ignored;
    split.train.dim = parser.dim();
    split.test.dim = parser.dim();
    Ok(split)
}

/// The rows of one worker's part of a LibSVM file, before the split.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PartRows {
    /// The rows that start in the part's byte range, in file order; `dim` is the declared
    /// dimension, or one past the part's largest index.
    pub data: Dataset,
    /// Features at or beyond the declared dimension that were ignored, with
    /// `ignore_beyond_dim`.
    pub ignored_features: u64,
}

/// Reads the rows of `path` that start in `part`'s byte range ([`super::source`]): each
/// worker parses only its share of the file. Row numbers, the split and the dimension need
/// every part's row count and largest index, which the caller combines.
pub fn read_libsvm_part(
    path: &Path,
    opts: &LibsvmOptions,
    part: Part,
) -> Result<PartRows, DataError> {
    if super::source::compression(path)?.is_some() {
        return read_compressed_part(path, opts, part);
    }
    let size = std::fs::metadata(path)
        .map_err(|e| open_error(path, e))?
        .len();
    let (start, end) = part.range(size);
    let (mut reader, first) = open_at_line(path, start)?;
    let mut parser = LineParser::new(opts);
    let mut data = Dataset::new(parser.declared);
    // A guess from the bytes, to grow the arrays rarely: ~8 bytes per feature.
    data.reserve(0, ((end - start) / 8) as usize);
    let parsed = parser.lines(
        &mut reader,
        end.saturating_sub(first),
        first == 0,
        |p, label| data.push_row_unchecked(&p.keys, &p.vals, label),
    );
    // Only an error pays for counting the lines before the part.
    let first_line = || line_of(path, first);
    part_rows(path, parsed, first_line, parser, data)
}

/// A part's rows once its lines are parsed (`parsed`), or the parser's error at its line
/// (counted from `first_line`, the part's first line).
fn part_rows(
    path: &Path,
    parsed: Result<(), (usize, usize, String)>,
    first_line: impl FnOnce() -> Result<usize, DataError>,
    parser: LineParser,
    mut data: Dataset,
) -> Result<PartRows, DataError> {
    if let Err((line, column, message)) = parsed {
        return Err(DataError {
            file: path.to_path_buf(),
            line: first_line()? + line,
            column,
            message,
        });
    }
    data.dim = parser.dim();
    Ok(PartRows {
        data,
        ignored_features: parser.ignored,
    })
}

/// A part of a gzip or zstd file: every worker reads the whole stream (a compressed stream
/// cannot be entered in the middle) and keeps every `part.count`-th row, as for CSV tables.
fn read_compressed_part(
    path: &Path,
    opts: &LibsvmOptions,
    part: Part,
) -> Result<PartRows, DataError> {
    let mut reader = super::source::open_stream(path)?;
    let mut parser = LineParser::new(opts);
    let mut data = Dataset::new(parser.declared);
    let mut k = 0usize;
    let parsed = parser.lines(&mut reader, u64::MAX, true, |p, label| {
        if k % part.count == part.index {
            data.push_row_unchecked(&p.keys, &p.vals, label);
        }
        k += 1;
    });
    part_rows(path, parsed, || Ok(1), parser, data)
}

impl Dataset {
    /// Like [`Dataset::push_row`] but without the debug checks on `dim` (used while the final
    /// dimension is still unknown; the reader validated ordering itself).
    fn push_row_unchecked(&mut self, indices: &[u32], values: &[f32], label: f32) {
        self.indices.extend_from_slice(indices);
        self.values.extend_from_slice(values);
        self.labels.push(label);
        self.row_ptr.push(self.indices.len());
    }
}

/// The longest line read (a compressed stream could otherwise grow one line without bound).
const MAX_LINE_BYTES: u64 = crate::data::table::read::MAX_RECORD_BYTES;

/// Parses lines into a label and the row's features (`keys`, `vals`), on bytes: no UTF-8
/// pass, no allocation per line. Files are read through it, and so are a stream's lines
/// ([`crate::data::stream`]).
pub struct LineParser {
    opts: LibsvmOptions,
    declared: u32,
    keys: Vec<u32>,
    vals: Vec<f32>,
    /// Features ignored so far (beyond the declared dimension).
    ignored: u64,
    /// The largest index kept so far.
    max_index: Option<u32>,
}

impl super::LineRows for LineParser {
    fn parse(&mut self, line: &[u8]) -> Result<Option<f32>, LineError> {
        LineParser::parse(self, line)
    }

    fn features(&self) -> (&[u32], &[f32]) {
        LineParser::features(self)
    }
}

/// An error in a line: its 1-based column and what is wrong.
pub type LineError = (usize, String);

impl LineParser {
    /// A parser with the checks of `opts`.
    pub fn new(opts: &LibsvmOptions) -> Self {
        LineParser {
            opts: opts.clone(),
            declared: opts.dim.unwrap_or(opts.max_dim),
            keys: Vec::new(),
            vals: Vec::new(),
            ignored: 0,
            max_index: None,
        }
    }

    /// The features of the row [`Self::parse`] read last: its keys and their values.
    pub fn features(&self) -> (&[u32], &[f32]) {
        (&self.keys, &self.vals)
    }

    /// The dimension: the declared one, or one past the largest index kept.
    fn dim(&self) -> u32 {
        self.opts
            .dim
            .unwrap_or_else(|| self.max_index.map_or(0, |m| m + 1))
    }

    /// Parses the lines of `reader` that start before its byte `limit`, handing each row's
    /// label to `row` (its features are in `keys`/`vals`); `at_start`: the reader is at the
    /// file's first byte, where a UTF-8 byte-order mark is skipped. An error carries the
    /// 0-based number of its line among those read, its column and its message.
    fn lines<R: BufRead>(
        &mut self,
        reader: &mut R,
        limit: u64,
        at_start: bool,
        mut row: impl FnMut(&Self, f32),
    ) -> Result<(), (usize, usize, String)> {
        let (mut line, mut offset, mut lines) = (Vec::new(), 0u64, 0usize);
        while offset < limit {
            line.clear();
            // (At most a record's bound: a compressed line grows memory by what it holds.)
            let n = std::io::Read::take(&mut *reader, MAX_LINE_BYTES + 1)
                .read_until(b'\n', &mut line)
                .map_err(|e| (lines, 0, format!("read error: {e}")))?;
            if n == 0 {
                break;
            }
            if n as u64 > MAX_LINE_BYTES {
                let m = format!("a line longer than {} MiB", MAX_LINE_BYTES >> 20);
                return Err((lines, 0, m));
            }
            let text = match line.strip_prefix(b"\xef\xbb\xbf") {
                Some(rest) if at_start && offset == 0 => rest,
                _ => &line[..],
            };
            match self.parse(text) {
                Ok(Some(label)) => {
                    if let Some(&last) = self.keys.last() {
                        self.max_index = Some(self.max_index.map_or(last, |m| m.max(last)));
                    }
                    row(self, label);
                }
                Ok(None) => {}
                Err((column, message)) => return Err((lines, column, message)),
            }
            offset += n as u64;
            lines += 1;
        }
        Ok(())
    }

    /// The label of `line` with its features in [`Self::features`]; `None` for a line with
    /// nothing before its `#`. An error gives the 1-based column and what is wrong.
    pub fn parse(&mut self, line: &[u8]) -> Result<Option<f32>, LineError> {
        let content = match memchr::memchr(b'#', line) {
            Some(p) => &line[..p],
            None => line,
        };
        let mut tokens = Tokens {
            text: content,
            pos: 0,
        };
        let Some((col, label_tok)) = tokens.next() else {
            return Ok(None);
        };
        let label = parse_f32(label_tok)
            .ok_or_else(|| (col, format!("bad label '{}'", show(label_tok))))?;
        if !label.is_finite() {
            return Err((col, format!("label '{}' is not finite", show(label_tok))));
        }
        if let Some(k) = self.opts.classes.filter(|&k| !super::is_class(label, k)) {
            let shown = format!("'{}'", show(label_tok));
            return Err((col, super::not_a_class(&shown, k)));
        }
        if self.opts.binary && !super::is_binary_label(label) {
            let m = format!(
                "label '{}' is not one of two classes: this loss reads +1 and -1, or 1 and 0",
                show(label_tok)
            );
            return Err((col, m));
        }
        self.keys.clear();
        self.vals.clear();
        let declared = self.declared as u64;
        let mut prev: Option<u64> = None; // the previous index, kept or ignored
        for (col, tok) in tokens {
            // The common token, up to 19 digits and a colon, in one pass; anything else
            // (qid, a sign, an overflow, an error) takes the general path.
            let (mut raw, mut colon) = (0u64, 0usize);
            while colon < tok.len().min(19) && tok[colon].is_ascii_digit() {
                raw = raw * 10 + (tok[colon] - b'0') as u64;
                colon += 1;
            }
            if colon == 0 || tok.get(colon) != Some(&b':') {
                colon = memchr::memchr(b':', tok)
                    .ok_or_else(|| (col, format!("expected index:value, found '{}'", show(tok))))?;
                let idx_s = &tok[..colon];
                if idx_s == b"qid" {
                    continue;
                }
                raw = parse_u64(idx_s)
                    .ok_or_else(|| (col, format!("bad feature index '{}'", show(idx_s))))?;
            }
            let val_s = &tok[colon + 1..];
            let index = if self.opts.zero_based {
                raw
            } else if raw == 0 {
                return Err((
                    col,
                    "feature index 0 in a 1-based file (set zero_based = true)".into(),
                ));
            } else {
                raw - 1
            };
            if let Some(prev) = prev {
                if index == prev {
                    return Err((col, format!("repeated feature index {raw}")));
                }
                if index < prev {
                    return Err((col, format!("feature index {raw} is not increasing")));
                }
            }
            prev = Some(index);
            let beyond = index >= declared;
            if beyond && !self.opts.ignore_beyond_dim {
                let message = match self.opts.dim {
                    Some(dim) => format!("feature index {raw} is beyond the declared dimension {dim}"),
                    None => format!(
                        "feature index {raw} makes a model of more than {} features (data.max_dim); \
                         raise data.max_dim if the workers have the memory for it (4-16 bytes per \
                         feature each)",
                        self.declared
                    ),
                };
                return Err((col, message));
            }
            let value = parse_f32(val_s).ok_or_else(|| {
                (
                    col + colon + 1,
                    format!("bad feature value '{}'", show(val_s)),
                )
            })?;
            if !value.is_finite() {
                return Err((
                    col + colon + 1,
                    format!("feature value '{}' is not finite", show(val_s)),
                ));
            }
            if beyond {
                self.ignored += 1;
            } else {
                self.keys.push(index as u32);
                self.vals.push(value);
            }
        }
        Ok(Some(label))
    }
}

/// A token for an error message (clipped: a 200 MB token is not echoed).
fn show(t: &[u8]) -> std::borrow::Cow<'_, str> {
    super::clip_bytes(t)
}

/// A decimal integer (an optional `+`, then digits), `None` on anything else or overflow.
#[inline]
fn parse_u64(t: &[u8]) -> Option<u64> {
    let digits = t.strip_prefix(b"+").unwrap_or(t);
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        if !d.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add((d - b'0') as u64)
    })
}

/// A number as Rust's `f32` parser reads it; a one-digit integer (the value of most binary
/// features) without it.
///
/// A number is ASCII, so a token that is not is no number, and one that is needs no UTF-8
/// validation: `str::from_utf8`, a call per value, was 9-16% of parsing real-valued rows.
#[inline]
fn parse_f32(t: &[u8]) -> Option<f32> {
    match t {
        [d] if d.is_ascii_digit() => Some((d - b'0') as f32),
        _ if t.is_ascii() => {
            // SAFETY: ASCII bytes are UTF-8.
            unsafe { std::str::from_utf8_unchecked(t) }.parse().ok()
        }
        _ => None,
    }
}

/// Whitespace tokens of a line with their 1-based byte columns.
struct Tokens<'a> {
    text: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Tokens<'a> {
    type Item = (usize, &'a [u8]);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let bytes = self.text;
        while self.pos < bytes.len() && bytes[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        if self.pos >= bytes.len() {
            return None;
        }
        let start = self.pos;
        while self.pos < bytes.len() && !bytes[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        Some((start + 1, &self.text[start..self.pos]))
    }
}

/// Writes `data` as 1-based LibSVM text (labels and values in shortest round-trip form).
pub fn write_libsvm(path: &Path, data: &Dataset) -> std::io::Result<()> {
    let mut out = crate::atomic::AtomicFile::create(path)?;
    write_libsvm_to(&mut out, data)?;
    out.commit()
}

/// Writes `data` as 1-based LibSVM text to any writer.
pub fn write_libsvm_to<W: Write>(out: &mut W, data: &Dataset) -> std::io::Result<()> {
    for i in 0..data.rows() {
        let (keys, vals) = data.row(i);
        write!(out, "{}", data.labels[i])?;
        for (k, v) in keys.iter().zip(vals) {
            write!(out, " {}:{}", k + 1, v)?;
        }
        writeln!(out)?;
    }
    Ok(())
}
