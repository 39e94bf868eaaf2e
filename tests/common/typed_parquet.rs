//! A typed Parquet copy of a CSV table, as a data tool would write it (for the Parquet tests
//! and the loading benchmark).

use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{Float64Builder, Int64Builder, StringDictionaryBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, RecordBatch};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

/// Writes `batch` to `path` in row groups of `group_rows` rows, Snappy-compressed.
pub fn write_parquet(path: &Path, batch: &RecordBatch, group_rows: usize) {
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(group_rows))
        .set_compression(Compression::SNAPPY)
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
}

/// A typed copy of a gzipped CSV table, as a data tool would write it: a column whose every
/// value is an integer becomes Int64, one of numbers (written as Rust writes them) Float64, one
/// of `YYYY-MM-DDTHH:MM` times a timestamp in seconds, any other a dictionary-encoded string;
/// an empty cell is a null.
pub fn typed_copy(csv: &Path) -> RecordBatch {
    let mut r = csv::Reader::from_reader(flate2::read::GzDecoder::new(
        std::fs::File::open(csv).unwrap(),
    ));
    let names: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    let mut columns: Vec<Vec<String>> = vec![Vec::new(); names.len()];
    for rec in r.records() {
        for (c, v) in rec.unwrap().iter().enumerate() {
            columns[c].push(v.to_string());
        }
    }
    let arrays: Vec<(String, ArrayRef)> = names
        .into_iter()
        .zip(columns)
        .map(|(name, values)| {
            let present = || values.iter().filter(|v| !v.is_empty());
            let array: ArrayRef = if present().all(|v| seconds(v).is_some()) {
                let mut b = arrow_array::builder::TimestampSecondBuilder::new();
                values.iter().for_each(|v| b.append_option(seconds(v)));
                Arc::new(b.finish())
            } else if present().all(|v| v.parse::<i64>().is_ok()) {
                let mut b = Int64Builder::new();
                values.iter().for_each(|v| b.append_option(v.parse().ok()));
                Arc::new(b.finish())
            } else if present().all(|v| v.parse::<f64>().is_ok_and(|x| x.to_string() == *v)) {
                let mut b = Float64Builder::new();
                values.iter().for_each(|v| b.append_option(v.parse().ok()));
                Arc::new(b.finish())
            } else {
                let mut b = StringDictionaryBuilder::<Int32Type>::new();
                for v in &values {
                    match v.is_empty() {
                        true => b.append_null(),
                        false => b.append_value(v),
                    }
                }
                Arc::new(b.finish())
            };
            (name, array)
        })
        .collect();
    RecordBatch::try_from_iter(arrays).unwrap()
}

/// Seconds since 1970 of a `YYYY-MM-DDTHH:MM` time (UTC).
fn seconds(v: &str) -> Option<i64> {
    let b = v.as_bytes();
    if b.len() != 16 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    let n = |r: std::ops::Range<usize>| v.get(r)?.parse::<i64>().ok();
    let (y, m, d, h, min) = (n(0..4)?, n(5..7)?, n(8..10)?, n(11..13)?, n(14..16)?);
    // Days from civil (H. Hinnant).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    Some(days * 86_400 + h * 3600 + min * 60)
}
