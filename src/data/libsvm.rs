//! LibSVM / SVMlight reader and writer.
//!
//! Format: one row per line, `label [qid:N] index:value index:value ... [# comment]`. Indices are
//! 1-based unless [`LibsvmOptions::zero_based`] is set, and must be strictly increasing within a
//! row. Every malformed input is an error naming the file, the 1-based line and the 1-based
//! column of the offending token; the reader never panics on input.

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::partition::{RowFilter, Side};
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
#[derive(Clone, Debug, Default)]
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
    let file = File::open(path).map_err(|e| DataError {
        file: path.to_path_buf(),
        line: 0,
        column: 0,
        message: format!("cannot open: {e}"),
    })?;
    parse_libsvm(BufReader::new(file), path, opts, filter)
}

/// The number of data rows of `path` (lines with anything before a `#`), as [`read_libsvm`]
/// numbers them: what an ordered split needs before reading.
pub fn count_rows(path: &Path) -> Result<usize, DataError> {
    let err = |line: usize, message: String| DataError {
        file: path.to_path_buf(),
        line,
        column: 0,
        message,
    };
    let file = File::open(path).map_err(|e| err(0, format!("cannot open: {e}")))?;
    let mut reader = BufReader::new(file);
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
    let declared = opts.dim.unwrap_or(u32::MAX);
    let mut split = Split {
        train: Dataset::new(declared),
        test: Dataset::new(declared),
        total_rows: 0,
        ignored_features: 0,
    };
    let mut max_index: Option<u32> = None;
    let mut line = String::new();
    let mut line_no = 0usize;
    let mut keys: Vec<u32> = Vec::new();
    let mut vals: Vec<f32> = Vec::new();
    let err = |line: usize, column: usize, message: String| DataError {
        file: name.to_path_buf(),
        line,
        column,
        message,
    };
    loop {
        line.clear();
        let n = reader
            .read_line(&mut line)
            .map_err(|e| err(line_no + 1, 0, format!("read error: {e}")))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let content = match line.find('#') {
            Some(p) => &line[..p],
            None => &line[..],
        };
        let mut tokens = Tokens {
            text: content,
            pos: 0,
        };
        let Some((col, label_tok)) = tokens.next() else {
            continue;
        };
        let label: f32 = label_tok
            .parse()
            .map_err(|_| err(line_no, col, format!("bad label '{label_tok}'")))?;
        if !label.is_finite() {
            return Err(err(
                line_no,
                col,
                format!("label '{label_tok}' is not finite"),
            ));
        }
        keys.clear();
        vals.clear();
        let mut prev: Option<u64> = None; // the previous index, kept or ignored
        for (col, tok) in tokens {
            let Some(colon) = tok.find(':') else {
                return Err(err(
                    line_no,
                    col,
                    format!("expected index:value, found '{tok}'"),
                ));
            };
            let (idx_s, val_s) = (&tok[..colon], &tok[colon + 1..]);
            if idx_s == "qid" {
                continue;
            }
            let raw: u64 = idx_s
                .parse()
                .map_err(|_| err(line_no, col, format!("bad feature index '{idx_s}'")))?;
            let index = if opts.zero_based {
                raw
            } else if raw == 0 {
                return Err(err(
                    line_no,
                    col,
                    "feature index 0 in a 1-based file (set zero_based = true)".into(),
                ));
            } else {
                raw - 1
            };
            if let Some(prev) = prev {
                if index == prev {
                    return Err(err(line_no, col, format!("repeated feature index {raw}")));
                }
                if index < prev {
                    return Err(err(
                        line_no,
                        col,
                        format!("feature index {raw} is not increasing"),
                    ));
                }
            }
            prev = Some(index);
            let beyond = index >= declared as u64;
            if beyond && !opts.ignore_beyond_dim {
                return Err(err(
                    line_no,
                    col,
                    format!("feature index {raw} is beyond the declared dimension {declared}"),
                ));
            }
            let value: f32 = val_s.parse().map_err(|_| {
                err(
                    line_no,
                    col + colon + 1,
                    format!("bad feature value '{val_s}'"),
                )
            })?;
            if !value.is_finite() {
                return Err(err(
                    line_no,
                    col + colon + 1,
                    format!("feature value '{val_s}' is not finite"),
                ));
            }
            if beyond {
                split.ignored_features += 1;
            } else {
                keys.push(index as u32);
                vals.push(value);
            }
        }
        if let Some(&last) = keys.last() {
            max_index = Some(max_index.map_or(last, |m| m.max(last)));
        }
        let row = split.total_rows;
        split.total_rows += 1;
        match filter.side(row) {
            Some(Side::Train) => split.train.push_row_unchecked(&keys, &vals, label),
            Some(Side::Test) => split.test.push_row_unchecked(&keys, &vals, label),
            None => {}
        }
    }
    let dim = opts.dim.unwrap_or_else(|| max_index.map_or(0, |m| m + 1));
    split.train.dim = dim;
    split.test.dim = dim;
    Ok(split)
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

/// Whitespace tokens of a line with their 1-based byte columns.
struct Tokens<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Iterator for Tokens<'a> {
    type Item = (usize, &'a str);
    fn next(&mut self) -> Option<Self::Item> {
        let bytes = self.text.as_bytes();
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
    let mut out = BufWriter::new(File::create(path)?);
    write_libsvm_to(&mut out, data)?;
    out.flush()
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
