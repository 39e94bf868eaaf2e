//! Reading a worker's part of a Parquet table (`data.format = "parquet"`): one file, or a
//! directory of part files as Spark, pandas or DuckDB write it (every `*.parquet` in it, in
//! name order; `_SUCCESS`, `.crc` and hidden files skipped), through the Apache Arrow Rust
//! crates (`parquet`'s Arrow reader).
//!
//! The table's rows are numbered across its files. Worker `i` of `W` reads rows
//! `[i·N/W, (i+1)·N/W)`, so the parts differ by one row at most whatever the row groups, and
//! opens only the row groups those rows are in (a group cut by a part's edge is read with a
//! row selection, which skips whole pages where the file has a page index). Only the named
//! columns are decoded, one batch of [`BATCH_ROWS`] rows at a time: memory follows the batch,
//! never a row count a footer claims.
//!
//! Typed values become the cells the CSV reader gives the feature pipeline: strings (plain or
//! dictionary-encoded) as they are, integers in decimal, floats in their shortest round-trip
//! form, booleans `true`/`false`, decimals with their scale, dates `YYYY-MM-DD` and timestamps
//! `YYYY-MM-DDTHH:MM:SS` in UTC (sub-second digits dropped), for the `hour`/`dow` parts. A
//! null is a missing value, as is a string in `data.missing`. A nested or binary column is an
//! error naming it and its type. Errors name the file, and where they concern a value, its row
//! group, row and column.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReaderBuilder, RowSelection};
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::ParquetMetaData;

use super::read::{is_parquet, Cells, Part};
use crate::data::DataError;

mod pages;
pub use pages::MAX_PAGE_BYTES;

/// Rows decoded at a time.
pub const BATCH_ROWS: usize = 8192;

fn error(file: &Path, message: impl Into<String>) -> DataError {
    DataError {
        file: file.to_path_buf(),
        line: 0,
        column: 0,
        message: message.into(),
    }
}

/// The table's files: `path` itself, or a directory's `*.parquet` part files in name order.
pub fn files(path: &Path) -> Result<Vec<PathBuf>, DataError> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path).map_err(|e| error(path, format!("cannot read: {e}")))?;
    let mut files = Vec::new();
    for entry in entries {
        let p = entry
            .map_err(|e| error(path, format!("cannot read: {e}")))?
            .path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let part = !name.starts_with(['.', '_']) && !name.ends_with(".crc");
        if part && p.is_file() && is_parquet(&p) {
            files.push(p);
        }
    }
    files.sort();
    match files.is_empty() {
        true => Err(error(
            path,
            "a directory with no Parquet part file (*.parquet) in it",
        )),
        false => Ok(files),
    }
}

/// A file's footer: its schema and row groups, each column chunk checked to lie within the
/// file (the crate asserts that offsets are not negative: a crafted footer made it panic).
fn open(file: &Path) -> Result<ParquetRecordBatchReaderBuilder<File>, DataError> {
    let f = File::open(file).map_err(|e| error(file, format!("cannot read: {e}")))?;
    let size = f
        .metadata()
        .map_err(|e| error(file, format!("cannot read: {e}")))?
        .len();
    let builder = ParquetRecordBatchReaderBuilder::try_new(f)
        .map_err(|e| error(file, format!("not a readable Parquet file: {e}")))?;
    for (g, group) in builder.metadata().row_groups().iter().enumerate() {
        if group.num_rows() < 0 {
            return Err(error(
                file,
                format!("row group {g}: {} rows", group.num_rows()),
            ));
        }
        for chunk in group.columns() {
            let start = chunk
                .dictionary_page_offset()
                .unwrap_or(chunk.data_page_offset());
            let (start, len) = (start.min(chunk.data_page_offset()), chunk.compressed_size());
            let inside =
                start >= 0 && len >= 0 && (start as u64).saturating_add(len as u64) <= size;
            if !inside {
                return Err(error(
                    file,
                    format!(
                        "row group {g}, column '{}': its bytes ({len} from offset {start}) are \
                         not within the file's {size} (a damaged footer)",
                        crate::data::clip(chunk.column_path().string().as_str())
                    ),
                ));
            }
        }
    }
    Ok(builder)
}

/// The table's column names (its first file's top-level fields), as a CSV header.
pub fn header(path: &Path) -> Result<Vec<String>, DataError> {
    contained(path, || header_of(path))
}

fn header_of(path: &Path) -> Result<Vec<String>, DataError> {
    let first = &files(path)?[0];
    let names = open(first)?
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    Ok(names)
}

/// Reads `part` of the table at `path`, keeping the columns `names` (each must be in every
/// file, of a type with a text form); a string equal to one of `missing`, or a null, is a
/// missing value.
pub fn read_cells(
    path: &Path,
    names: &[String],
    part: Part,
    missing: &[String],
) -> Result<Cells, DataError> {
    contained(path, || read_part(path, names, part, missing))
}

thread_local! {
    /// How many [`contained`] calls this thread is inside.
    static CONTAINED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether a panic on this thread now happens inside the Parquet reader, which turns it into
/// an error ([`contained`]): a panic hook should let it pass, neither printing it nor failing
/// the process.
pub fn panic_is_contained() -> bool {
    CONTAINED.with(|c| c.get() > 0)
}

/// Runs `f` (calls into the `parquet` crate), a panic becoming an error naming the file: the
/// crate asserts and `expect`s on some malformed input (a negative offset in a footer, a
/// dictionary-encoded page without its dictionary: both found by the `parquet_table` fuzz
/// target); what can be checked before is checked ([`open`], [`pages`]).
fn contained<T>(file: &Path, f: impl FnOnce() -> Result<T, DataError>) -> Result<T, DataError> {
    CONTAINED.with(|c| c.set(c.get() + 1));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    CONTAINED.with(|c| c.set(c.get() - 1));
    result.unwrap_or_else(|payload| {
        let what = (payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        Err(error(
            file,
            format!("the Parquet reader failed on it: {what} (a malformed file)"),
        ))
    })
}

fn read_part(
    path: &Path,
    names: &[String],
    part: Part,
    missing: &[String],
) -> Result<Cells, DataError> {
    let files = files(path)?;
    let mut footers = Vec::with_capacity(files.len());
    let mut total = 0u64;
    for f in &files {
        let builder = open(f)?;
        let rows = builder.metadata().file_metadata().num_rows();
        let rows = u64::try_from(rows).map_err(|_| error(f, format!("a row count of {rows}")))?;
        total = total
            .checked_add(rows)
            .ok_or_else(|| error(f, "more than 2^64 rows"))?;
        footers.push((builder, rows));
    }
    let (lo, hi) = (
        share(total, part, part.index),
        share(total, part, part.index + 1),
    );
    let mut cells = Cells::numbered(path, names);
    let mut first = 0u64;
    for (file, (builder, rows)) in files.iter().zip(footers) {
        let (from, to) = (lo.max(first), hi.min(first + rows));
        if from < to {
            read_file(
                file,
                builder,
                first,
                from - first,
                to - first,
                missing,
                &mut cells,
            )?;
        }
        first += rows;
    }
    if cells.positions.is_empty() {
        // A part with no rows still names its columns' positions.
        let head = header_of(path)?;
        cells.positions = names
            .iter()
            .map(|n| head.iter().position(|h| h == n).map_or(0, |i| i + 1))
            .collect();
    }
    Ok(cells)
}

/// The first row of part `index` of `total` rows cut into `part.count` parts.
fn share(total: u64, part: Part, index: usize) -> u64 {
    (total as u128 * index as u128 / part.count as u128) as u64
}

/// Reads rows `[from, to)` of `file` (whose first row is row `first` of the table) into
/// `cells`: only the row groups they are in, only the named columns.
fn read_file(
    file: &Path,
    builder: ParquetRecordBatchReaderBuilder<File>,
    first: u64,
    from: u64,
    to: u64,
    missing: &[String],
    cells: &mut Cells,
) -> Result<(), DataError> {
    let names = cells.names.clone();
    let schema = builder.schema().clone();
    let mut roots = Vec::with_capacity(names.len());
    for n in &names {
        let at = schema.index_of(n).map_err(|_| {
            let all: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            error(
                file,
                format!(
                    "no column '{}' (columns: {})",
                    crate::data::clip(n),
                    all.join(", ")
                ),
            )
        })?;
        check_type(file, n, schema.field(at).data_type())?;
        roots.push(at);
    }
    if cells.positions.is_empty() {
        cells.positions = roots.iter().map(|&i| i + 1).collect();
    }
    // The row groups that hold rows [from, to), and the selection of those rows in them.
    let meta: std::sync::Arc<ParquetMetaData> = builder.metadata().clone();
    // The groups, the rows kept within them, and those rows' numbers in the table.
    let (mut groups, mut ranges, mut kept) = (Vec::new(), Vec::new(), Vec::new());
    let (mut start, mut selected) = (0u64, 0u64);
    for (g, group) in meta.row_groups().iter().enumerate() {
        let rows = group.num_rows().max(0) as u64;
        let (a, b) = (from.max(start), to.min(start + rows));
        if a < b {
            cells.groups.push((file.to_path_buf(), g, first + start));
            groups.push(g);
            let at = (selected + a - start) as usize;
            ranges.push(at..at + (b - a) as usize);
            kept.push(first + a..first + b);
            selected += rows;
        }
        start += rows;
    }
    pages::check_chunks(file, &meta, &groups, &roots)?;
    let selection = RowSelection::from_consecutive_ranges(ranges.into_iter(), selected as usize);
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots.iter().copied());
    let reader = builder
        .with_row_groups(groups.clone())
        .with_row_selection(selection)
        .with_projection(mask)
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| error(file, format!("cannot read: {e}")))?;
    let mut numbers = kept.into_iter().flatten();
    let (mut text, mut read) = (String::new(), 0u64);
    for batch in reader {
        let batch = batch.map_err(|e| decode_error(file, &groups, &names, e))?;
        let columns = columns(&batch, &names);
        for r in 0..batch.num_rows() {
            for c in &columns {
                let (s, valid) = c.cell(r, &mut text);
                let is_missing = !valid || missing.iter().any(|m| m == s);
                cells
                    .push_cell(s, is_missing)
                    .map_err(|why| error(file, why))?;
            }
            let id = numbers
                .next()
                .ok_or_else(|| error(file, "more rows than its footer says"))?;
            cells.end_record(id);
            read += 1;
        }
    }
    match numbers.next() {
        // Fewer rows than the footer says: an error, not a smaller part in silence.
        Some(_) => Err(error(
            file,
            format!(
                "row groups {groups:?} hold {read} of the {} rows its footer says this part \
                 reads (a damaged footer)",
                to - from
            ),
        )),
        None => Ok(()),
    }
}

/// A column the reader can give a text form, or an error naming it and its type.
fn check_type(file: &Path, name: &str, t: &DataType) -> Result<(), DataError> {
    let ok = match t {
        DataType::Dictionary(_, values) => return check_type(file, name, values),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Boolean => true,
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _) => true,
        DataType::Decimal32(_, _) | DataType::Decimal64(_, _) => true,
        DataType::Decimal128(_, _) | DataType::Null => true,
        t => t.is_integer() || t.is_floating(),
    };
    match ok {
        true => Ok(()),
        false => Err(error(
            file,
            format!(
                "column '{}' is of type {t}, which has no value a feature can take (strings, \
                 numbers, booleans, dates and timestamps do)",
                crate::data::clip(name)
            ),
        )),
    }
}

/// A decoding error, with the row group and the column that fail: each is tried alone (only
/// on this path), so the error names them.
fn decode_error(
    file: &Path,
    groups: &[usize],
    names: &[String],
    e: impl std::fmt::Display,
) -> DataError {
    let fails = |g: usize, n: &str| {
        let Ok(builder) = open(file) else { return true };
        let Ok(at) = builder.schema().index_of(n) else {
            return true;
        };
        let mask = ProjectionMask::roots(builder.parquet_schema(), [at]);
        let reader = builder
            .with_row_groups(vec![g])
            .with_projection(mask)
            .build();
        reader.map_or(true, |mut r| r.any(|b| b.is_err()))
    };
    let found = groups
        .iter()
        .find_map(|&g| names.iter().find(|n| fails(g, n)).map(|n| (g, n)));
    let at = match found {
        Some((g, n)) => format!("row group {g}, column '{}'", crate::data::clip(n)),
        None => format!("row groups {groups:?}"),
    };
    error(file, format!("{at}: cannot decode: {e}"))
}

/// The batch's columns in `names` order, each resolved to its type once.
fn columns<'a>(batch: &'a RecordBatch, names: &[String]) -> Vec<Column<'a>> {
    names
        .iter()
        .map(|n| Column::of(batch.column_by_name(n).expect("projected")))
        .collect()
}

/// A batch's column, resolved to its type (per cell, no dispatch on the type and no `fmt`
/// machinery: formatting was most of the reader's time), with its nulls.
struct Column<'a> {
    nulls: Option<arrow_buffer::NullBuffer>,
    values: Values<'a>,
}

/// Writes a value (by row) as text.
type WriteValue<'a> = dyn Fn(usize, &mut String) + 'a;

/// How a column's values are read and written as text.
enum Values<'a> {
    Text(Box<dyn Fn(usize) -> &'a str + 'a>),
    Int(Box<dyn Fn(usize) -> i128 + 'a>),
    /// A float written by `fmt` (its shortest round-trip form).
    Float(Box<WriteValue<'a>>),
    Bool(&'a arrow_array::BooleanArray),
    Decimal(Box<dyn Fn(usize) -> i128 + 'a>, i8),
    /// Seconds since 1970, and whether the time of day is written.
    Seconds(Box<dyn Fn(usize) -> i64 + 'a>, bool),
    /// A dictionary's keys into its values.
    Dict(Vec<usize>, Box<Values<'a>>),
    /// A column of nulls only.
    None,
}

impl<'a> Column<'a> {
    fn of(array: &'a ArrayRef) -> Column<'a> {
        Column {
            nulls: array.logical_nulls(),
            values: Values::of(array.as_ref()),
        }
    }

    /// Row `r`'s text (in `buf` unless the array holds it) and whether it is not null.
    fn cell<'b>(&'b self, r: usize, buf: &'b mut String) -> (&'b str, bool) {
        if self.nulls.as_ref().is_some_and(|n| n.is_null(r)) {
            return ("", false);
        }
        (self.values.text(r, buf), true)
    }
}

impl<'a> Values<'a> {
    fn of(a: &'a dyn Array) -> Values<'a> {
        use arrow_array::types::*;
        macro_rules! int {
            ($t:ty) => {{
                let p = a.as_primitive::<$t>();
                Values::Int(Box::new(move |r| p.value(r) as i128))
            }};
        }
        if let Some(d) = a.as_any_dictionary_opt() {
            return Values::Dict(
                d.normalized_keys(),
                Box::new(Values::of(d.values().as_ref())),
            );
        }
        match a.data_type() {
            DataType::Utf8 => {
                let s = a.as_string::<i32>();
                Values::Text(Box::new(move |r| s.value(r)))
            }
            DataType::LargeUtf8 => {
                let s = a.as_string::<i64>();
                Values::Text(Box::new(move |r| s.value(r)))
            }
            DataType::Utf8View => {
                let s = a.as_string_view();
                Values::Text(Box::new(move |r| s.value(r)))
            }
            DataType::Boolean => Values::Bool(a.as_boolean()),
            DataType::Int8 => int!(Int8Type),
            DataType::Int16 => int!(Int16Type),
            DataType::Int32 => int!(Int32Type),
            DataType::Int64 => int!(Int64Type),
            DataType::UInt8 => int!(UInt8Type),
            DataType::UInt16 => int!(UInt16Type),
            DataType::UInt32 => int!(UInt32Type),
            DataType::UInt64 => int!(UInt64Type),
            DataType::Float16 => {
                let p = a.as_primitive::<Float16Type>();
                Values::Float(Box::new(move |r, out| push_fmt(out, p.value(r).to_f32())))
            }
            DataType::Float32 => {
                let p = a.as_primitive::<Float32Type>();
                Values::Float(Box::new(move |r, out| push_fmt(out, p.value(r))))
            }
            DataType::Float64 => {
                let p = a.as_primitive::<Float64Type>();
                Values::Float(Box::new(move |r, out| push_fmt(out, p.value(r))))
            }
            DataType::Decimal32(_, s) => {
                let p = a.as_primitive::<Decimal32Type>();
                Values::Decimal(Box::new(move |r| p.value(r) as i128), *s)
            }
            DataType::Decimal64(_, s) => {
                let p = a.as_primitive::<Decimal64Type>();
                Values::Decimal(Box::new(move |r| p.value(r) as i128), *s)
            }
            DataType::Decimal128(_, s) => {
                let p = a.as_primitive::<Decimal128Type>();
                Values::Decimal(Box::new(move |r| p.value(r)), *s)
            }
            DataType::Date32 => {
                let p = a.as_primitive::<Date32Type>();
                Values::Seconds(Box::new(move |r| p.value(r) as i64 * 86_400), false)
            }
            DataType::Date64 => {
                let p = a.as_primitive::<Date64Type>();
                Values::Seconds(Box::new(move |r| p.value(r).div_euclid(1000)), false)
            }
            DataType::Timestamp(unit, _) => {
                let (per_second, v): (i64, Box<dyn Fn(usize) -> i64 + 'a>) = match unit {
                    TimeUnit::Second => {
                        let p = a.as_primitive::<TimestampSecondType>();
                        (1, Box::new(move |r| p.value(r)))
                    }
                    TimeUnit::Millisecond => {
                        let p = a.as_primitive::<TimestampMillisecondType>();
                        (1000, Box::new(move |r| p.value(r)))
                    }
                    TimeUnit::Microsecond => {
                        let p = a.as_primitive::<TimestampMicrosecondType>();
                        (1_000_000, Box::new(move |r| p.value(r)))
                    }
                    TimeUnit::Nanosecond => {
                        let p = a.as_primitive::<TimestampNanosecondType>();
                        (1_000_000_000, Box::new(move |r| p.value(r)))
                    }
                };
                Values::Seconds(Box::new(move |r| v(r).div_euclid(per_second)), true)
            }
            // Checked before reading: only a column of nulls is left.
            _ => Values::None,
        }
    }

    /// Value `r`'s text: a string trimmed, as the CSV reader trims a cell; anything else
    /// written into `buf`.
    fn text<'b>(&'b self, r: usize, buf: &'b mut String) -> &'b str {
        buf.clear();
        match self {
            Values::Text(v) => return v(r).trim(),
            Values::Dict(keys, values) => return values.text(keys[r], buf),
            Values::Int(v) => push_int(buf, v(r)),
            Values::Float(v) => v(r, buf),
            Values::Bool(b) => buf.push_str(if b.value(r) { "true" } else { "false" }),
            Values::Decimal(v, scale) => push_decimal(buf, v(r), *scale),
            Values::Seconds(v, time) => push_time(buf, v(r), *time),
            Values::None => {}
        }
        buf.as_str()
    }
}

/// `x` in its `Display` form (a float's shortest round-trip digits).
fn push_fmt(out: &mut String, x: impl std::fmt::Display) {
    use std::fmt::Write;
    let _ = write!(out, "{x}");
}

/// `v` in decimal (64-bit arithmetic where it fits: a 128-bit division per digit was a sixth
/// of the reader's time).
fn push_int(out: &mut String, v: i128) {
    let mut digits = [0u8; 40];
    let mut at = digits.len();
    let mut step = |d: u8| {
        at -= 1;
        digits[at] = b'0' + d;
    };
    match u64::try_from(v.unsigned_abs()) {
        Ok(mut n) => loop {
            step((n % 10) as u8);
            n /= 10;
            if n == 0 {
                break;
            }
        },
        Err(_) => {
            let mut n = v.unsigned_abs();
            loop {
                step((n % 10) as u8);
                n /= 10;
                if n == 0 {
                    break;
                }
            }
        }
    }
    if v < 0 {
        out.push('-');
    }
    out.push_str(std::str::from_utf8(&digits[at..]).expect("ASCII digits"));
}

/// `v` scaled by 10^-`scale`, in decimal.
fn push_decimal(out: &mut String, v: i128, scale: i8) {
    if scale <= 0 {
        push_int(out, v);
        out.extend(std::iter::repeat_n('0', -(scale as i32) as usize));
        return;
    }
    let p = 10u128.pow(scale as u32);
    let (whole, frac) = (v.unsigned_abs() / p, v.unsigned_abs() % p);
    if v < 0 {
        out.push('-');
    }
    push_int(out, whole as i128);
    out.push('.');
    // The fraction's leading zeros, then its digits (no allocation per value).
    let mut lead = p / 10;
    while lead > 1 && frac < lead {
        out.push('0');
        lead /= 10;
    }
    push_int(out, frac as i128);
}

/// Seconds since 1970-01-01T00:00:00 UTC as `YYYY-MM-DD`, with `THH:MM:SS` when `time`.
fn push_time(out: &mut String, seconds: i64, time: bool) {
    let (days, secs) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (y, m, d) = super::features::civil_from_days(days);
    let two = |out: &mut String, n: u32| {
        out.push((b'0' + (n / 10) as u8) as char);
        out.push((b'0' + (n % 10) as u8) as char);
    };
    if (0..10_000).contains(&y) {
        two(out, (y / 100) as u32);
        two(out, (y % 100) as u32);
    } else {
        push_int(out, y as i128);
    }
    out.push('-');
    two(out, m);
    out.push('-');
    two(out, d);
    if time {
        let s = secs as u32;
        out.push('T');
        two(out, s / 3600);
        out.push(':');
        two(out, s / 60 % 60);
        out.push(':');
        two(out, s % 60);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic inside the reader is an error naming the file, and a panic hook is told it is
    /// contained only while it is inside (a nested call included).
    #[test]
    fn a_panic_in_the_reader_is_an_error_naming_the_file() {
        let file = Path::new("t.parquet");
        assert!(!panic_is_contained());
        let e = contained(file, || -> Result<(), DataError> {
            assert!(panic_is_contained());
            let inner = contained(file, || -> Result<(), DataError> { panic!("inner") });
            assert!(inner.unwrap_err().message.contains("inner"));
            assert!(panic_is_contained());
            panic!("assertion failed: offset >= 0")
        })
        .unwrap_err();
        assert!(!panic_is_contained());
        assert_eq!(
            e.to_string(),
            "t.parquet: the Parquet reader failed on it: assertion failed: offset >= 0 (a \
             malformed file)"
        );
    }

    /// Decimals keep their scale's digits, leading zeros of the fraction included.
    #[test]
    fn decimals_are_written_with_their_scale() {
        let text = |v: i128, scale: i8| {
            let mut s = String::new();
            push_decimal(&mut s, v, scale);
            s
        };
        assert_eq!(text(5, 3), "0.005");
        assert_eq!(text(-100, 2), "-1.00");
        assert_eq!(text(-1234, 2), "-12.34");
        assert_eq!(text(7, 1), "0.7");
        assert_eq!(text(12, -2), "1200");
        assert_eq!(text(0, 2), "0.00");
    }
}
