//! Reading a worker's part of a CSV file.
//!
//! A plain file is cut into byte ranges ([`crate::data::source`]): a worker reads the records
//! that start in its range, and no worker parses the whole file. A gzip or zstd file cannot be
//! cut: every worker decompresses it and parses every `W`-th record. Either way,
//! a record's id is its byte offset in the (decompressed) file: unique, in file order, and the
//! same for any number of workers. Quoted fields may not contain line breaks in a plain file
//! read by several workers (a cut could fall inside one): such a field is an error naming its
//! line, raised by the worker whose range holds the record's start (the lowest part that sees
//! anything wrong, so its error is the one every worker reports), never a misread record.
//!
//! Cells are kept in one text arena per part: no allocation per cell.

use std::io::Read;
use std::path::{Path, PathBuf};

pub use crate::data::source::Part;
use crate::data::source::{compression, line_of, open_at_line, open_error, open_stream};
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
    text: String,
    /// End of each cell in `text`, record by record (`names.len()` per record).
    ends: Vec<u32>,
    /// Bit `i` is set when cell `i` (in `ends` order) is a missing-value marker.
    missing: Vec<u64>,
}

impl Cells {
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

    /// An error at cell `col` of record `row`, with the file's line number (found by counting
    /// line breaks up to the record: only errors pay for it).
    pub fn error(&self, row: usize, col: usize, message: String) -> DataError {
        let line = line_of(&self.file, self.ids[row]).unwrap_or(0);
        DataError {
            file: self.file.clone(),
            line,
            column: self.positions[col],
            message: format!("column '{}': {message}", self.names[col]),
        }
    }
}

fn csv_reader<R: Read>(r: R, delimiter: u8) -> csv::Reader<R> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .delimiter(delimiter)
        .flexible(true)
        .from_reader(r)
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
    let mut r = csv_reader(open_stream(path)?, delimiter);
    let mut rec = csv::StringRecord::new();
    if !r.read_record(&mut rec).map_err(|e| csv_error(path, e))? {
        return Err(DataError {
            file: path.to_path_buf(),
            line: 0,
            column: 0,
            message: "empty file: expected a header line".into(),
        });
    }
    Ok(rec.iter().map(|s| s.trim().to_string()).collect())
}

/// Reads `part` of `path`, keeping the columns `names`; a missing column is an error naming the
/// header. A cell (trimmed) equal to one of `missing` is a missing value.
pub fn read_cells(
    path: &Path,
    names: &[String],
    part: Part,
    delimiter: u8,
    missing: &[String],
) -> Result<Cells, DataError> {
    let head = header(path, delimiter)?;
    let mut select = Vec::with_capacity(names.len());
    for n in names {
        let at = head.iter().position(|h| h == n).ok_or_else(|| DataError {
            file: path.to_path_buf(),
            line: 1,
            column: 0,
            message: format!("no column '{n}' (the header has: {})", head.join(", ")),
        })?;
        select.push(at);
    }
    let mut cells = Cells {
        file: path.to_path_buf(),
        names: names.to_vec(),
        positions: select.iter().map(|&i| i + 1).collect(),
        ..Cells::default()
    };
    let keep = |cells: &mut Cells, rec: &csv::ByteRecord, id: u64| -> Result<(), DataError> {
        if rec.len() != head.len() {
            let line = line_of(path, id).unwrap_or(0);
            return Err(DataError {
                file: path.to_path_buf(),
                line,
                column: 0,
                message: format!("{} fields, but the header has {}", rec.len(), head.len()),
            });
        }
        for (c, &i) in select.iter().enumerate() {
            let s = std::str::from_utf8(&rec[i]).map_err(|_| DataError {
                file: path.to_path_buf(),
                line: line_of(path, id).unwrap_or(0),
                column: i + 1,
                message: format!("column '{}': not UTF-8", names[c]),
            })?;
            let s = s.trim();
            let i = cells.ends.len();
            if i % 64 == 0 {
                cells.missing.push(0);
            }
            if missing.iter().any(|m| m == s) {
                cells.missing[i / 64] |= 1 << (i % 64);
            }
            cells.text.push_str(s);
            let end = u32::try_from(cells.text.len()).map_err(|_| DataError {
                file: path.to_path_buf(),
                line: 0,
                column: 0,
                message: "a worker's part holds over 4 GiB of cells; use more workers".into(),
            })?;
            cells.ends.push(end);
        }
        cells.ids.push(id);
        Ok(())
    };
    let mut rec = csv::ByteRecord::new();
    if compression(path)?.is_some() || part.count == 1 {
        // The whole stream; every `count`-th record after the header.
        let mut r = csv_reader(open_stream(path)?, delimiter);
        let mut k = 0usize;
        r.read_byte_record(&mut rec)
            .map_err(|e| csv_error(path, e))?;
        while r
            .read_byte_record(&mut rec)
            .map_err(|e| csv_error(path, e))?
        {
            if k % part.count == part.index && !is_blank(&rec) {
                let id = rec.position().map_or(0, |p| p.byte());
                keep(&mut cells, &rec, id)?;
            }
            k += 1;
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
    let (file, first) = open_at_line(path, start)?;
    let mut r = csv_reader(file, delimiter);
    loop {
        if !r
            .read_byte_record(&mut rec)
            .map_err(|e| csv_error(path, e))?
        {
            break;
        }
        let id = first + rec.position().map_or(0, |p| p.byte());
        if id >= end {
            break;
        }
        let line_break = |f: &[u8]| f.iter().any(|&b| b == b'\n' || b == b'\r');
        if let Some(i) = rec.iter().position(line_break) {
            let name = head.get(i).map_or("?", String::as_str);
            return Err(DataError {
                file: path.to_path_buf(),
                line: line_of(path, id).unwrap_or(0),
                column: i + 1,
                message: format!(
                    "column '{name}': a quoted field holds a line break: a plain CSV file read \
                     by {} workers is cut at line breaks, so its fields cannot hold them; \
                     compress it (gzip or zstd: every worker then reads the whole stream) or \
                     read it with one worker",
                    part.count
                ),
            });
        }
        if id > 0 && !is_blank(&rec) {
            keep(&mut cells, &rec, id)?;
        }
    }
    Ok(cells)
}

/// A record that is one empty field: a blank line.
fn is_blank(rec: &csv::ByteRecord) -> bool {
    rec.len() == 1 && rec[0].iter().all(|b| b.is_ascii_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_line_break_is_an_error_of_the_part_holding_its_record_not_a_misread() {
        // 50 rows, a record whose quoted field holds a line break across the file's middle
        // (the cut between 2 parts falls inside it), 50 rows.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        let mut text = String::from("a,b\n");
        text += &"1,x\n".repeat(50);
        text += &format!("2,\"{}\n{}\"\n", "p".repeat(100), "q".repeat(100));
        text += &"3,y\n".repeat(50);
        std::fs::write(&path, &text).unwrap();
        let (start, _) = Part { index: 1, count: 2 }.range(text.len() as u64);
        let field = text.find('"').unwrap() as u64;
        assert!(
            field < start && start < field + 200,
            "the cut falls inside the field"
        );

        let names = ["a".to_string(), "b".to_string()];
        let read = |part| read_cells(&path, &names, part, b',', &[]);
        let e = read(Part { index: 0, count: 2 }).unwrap_err();
        assert_eq!((e.line, e.column), (52, 2), "{e}");
        assert!(e.message.starts_with("column 'b': "), "{e}");
        assert!(e.message.contains("holds a line break"), "{e}");
        // The part that starts inside the field fails too, rather than reading a shifted record;
        // the pipeline reports the lowest part's error.
        assert!(read(Part { index: 1, count: 2 }).is_err());
        // One reader (or a compressed file) reads the field whole.
        let whole = read(Part::WHOLE).unwrap();
        assert_eq!(whole.len(), 101);
        assert_eq!(
            whole.get(50, 1),
            format!("{}\n{}", "p".repeat(100), "q".repeat(100))
        );
    }
}
