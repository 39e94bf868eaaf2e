//! A table read as a stream ([`crate::data::stream`]), one CSV line at a time: each line is a
//! record of its file's header's columns, labelled by `[data.label]` and turned into features
//! by a feature map that needs no statistics of the rows ([`stream_map`]: hashed discrete slots,
//! raw or `log1p` numbers, text), joined with the dimension tables, which are read once when the
//! stream opens.

use csv_core::{ReadRecordResult, Reader, ReaderBuilder, Terminator};

use super::features::{label_value, BadValue, Encoder, FeatureMap, NumericStats, RowValues};
use super::pipeline::{dimension_tables, DimRows};
use super::read::Cells;
use super::read::{header_names, named_once};
use super::spec::{TableSpec, Transform};
use crate::data::libsvm::LineError;
use crate::data::LineRows;

/// The feature map of a table read as a stream: its layout is known before the first row
/// arrives. A spec that needs statistics of the training rows (a vocabulary, standardizing,
/// quantile buckets) is an error naming the field.
pub fn stream_map(spec: &TableSpec) -> Result<FeatureMap, String> {
    let f = &spec.features;
    let counted = |t| matches!(t, Transform::Standardize | Transform::Bucket);
    if let Some(n) = f.numeric.iter().find(|n| counted(n.transform)) {
        return Err(format!(
            "data.features.numeric: column '{}' is {}, which needs statistics of every training \
             row, and a stream's rows arrive one by one (use transform = \"raw\" or \"log1p\")",
            n.column,
            if n.transform == Transform::Bucket {
                "bucketed"
            } else {
                "standardized"
            }
        ));
    }
    let slots = spec.slots()?;
    if !slots.is_empty() && f.hash_bits.is_none() {
        return Err(format!(
            "data.features.hash_bits: a stream's discrete features ({}) must be hashed: their \
             vocabulary is unknown before the rows arrive",
            slots
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let numeric = vec![NumericStats::default(); f.numeric.len()];
    Ok(FeatureMap::new(
        spec.clone(),
        numeric,
        vec![Vec::new(); slots.len()],
    ))
}

/// The rows of CSV lines, by a [`stream_map`]'s feature map.
pub struct CsvLines<'m> {
    spec: &'m TableSpec,
    encoder: Encoder<'m>,
    classification: bool,
    fields: Fields,
    /// The number of fields of the current file's header; `None` before a header.
    width: Option<usize>,
    /// Per column of the row's own ([`TableSpec::row_columns`]), its field in the header.
    field_of: Vec<usize>,
    /// The current row's values.
    record: Record<'m>,
    /// The label's column among the encoder's columns.
    label: usize,
    /// Per join, its key columns among the row's own.
    join_keys: Vec<Vec<usize>>,
    key: String,
    out: Vec<(u32, f32)>,
    keys: Vec<u32>,
    values: Vec<f32>,
    /// Rows without a label, passed over.
    unlabelled: u64,
}

/// One row's values: the row's own columns (copied out of the line, trimmed), then the joined
/// ones (from the matched dimension rows).
struct Record<'m> {
    spec: &'m TableSpec,
    own: usize,
    text: String,
    spans: Vec<Option<(u32, u32)>>,
    /// Per joined column: its join and its place among the join's columns.
    brought: Vec<(usize, usize)>,
    tables: Vec<DimRows>,
    /// Per join, the row's matched dimension row.
    matched: Vec<Option<u32>>,
}

impl RowValues for Record<'_> {
    fn value(&self, i: usize) -> Option<&str> {
        if i < self.own {
            let (a, b) = self.spans[i]?;
            return Some(&self.text[a as usize..b as usize]);
        }
        let (j, c) = self.brought[i - self.own];
        let v = self.tables[j][self.matched[j]? as usize].1[c].as_str();
        (!self.spec.missing.iter().any(|m| m == v)).then_some(v)
    }
}

/// A line's fields, split by a CSV parser that allocates only to grow its buffers.
struct Fields {
    parser: Reader,
    bytes: Vec<u8>,
    ends: Vec<usize>,
    count: usize,
}

impl Fields {
    fn new(delimiter: u8) -> Fields {
        Fields {
            parser: ReaderBuilder::new()
                .delimiter(delimiter)
                .terminator(Terminator::Any(b'\n'))
                .build(),
            bytes: vec![0; 1024],
            ends: vec![0; 64],
            count: 0,
        }
    }

    /// Splits `line` (one record, ending at its line feed).
    fn split(&mut self, line: &[u8]) -> Result<(), LineError> {
        self.parser.reset();
        let (mut input, mut out) = (line, 0);
        self.count = 0;
        loop {
            let (res, nin, nout, nend) = self.parser.read_record(
                input,
                &mut self.bytes[out..],
                &mut self.ends[self.count..],
            );
            input = &input[nin..];
            out += nout;
            self.count += nend;
            match res {
                ReadRecordResult::Record | ReadRecordResult::End => return Ok(()),
                ReadRecordResult::OutputFull => self.bytes.resize(2 * self.bytes.len(), 0),
                ReadRecordResult::OutputEndsFull => self.ends.resize(2 * self.ends.len(), 0),
                ReadRecordResult::InputEmpty if input.is_empty() && !line.ends_with(b"\n") => {
                    input = b"" // the end of a header read without its line feed
                }
                ReadRecordResult::InputEmpty => {
                    return Err((
                        0,
                        "a quoted field runs on past the end of its line: a stream is read a \
                         line at a time, so a field cannot hold a line break"
                            .into(),
                    ))
                }
            }
        }
    }

    /// Field `i` (untrimmed).
    fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }
}

impl<'m> CsvLines<'m> {
    /// Rows by `map` (from [`stream_map`]); `classification`: a label that is not a class is an
    /// error. Reads the join's dimension tables.
    pub fn new(map: &'m FeatureMap, classification: bool) -> Result<CsvLines<'m>, String> {
        let spec = &map.spec;
        let own = spec.row_columns();
        let mut columns = own.clone();
        columns.extend(spec.joined_columns());
        let label = (columns.iter())
            .position(|c| c == &spec.label.column)
            .expect("the label is a row's column");
        let join_keys = (spec.join.iter())
            .map(|j| {
                (j.on.keys())
                    .map(|k| own.iter().position(|c| c == k).expect("a key is own"))
                    .collect()
            })
            .collect();
        let brought = (spec.join.iter().enumerate())
            .flat_map(|(j, js)| (0..js.columns.len()).map(move |c| (j, c)))
            .collect();
        Ok(CsvLines {
            spec,
            encoder: map.encoder(&columns)?,
            classification,
            fields: Fields::new(spec.delimiter as u8),
            width: None,
            field_of: vec![0; own.len()],
            record: Record {
                spec,
                own: own.len(),
                text: String::new(),
                spans: vec![None; own.len()],
                brought,
                tables: dimension_tables(spec)?,
                matched: vec![None; spec.join.len()],
            },
            label,
            join_keys,
            key: String::new(),
            out: Vec::new(),
            keys: Vec::new(),
            values: Vec::new(),
            unlabelled: 0,
        })
    }

    /// Copies the row's own values out of its fields: trimmed, `None` where missing.
    fn take_values(&mut self) -> Result<(), LineError> {
        let r = &mut self.record;
        r.text.clear();
        for (i, &at) in self.field_of.iter().enumerate() {
            let v = std::str::from_utf8(self.fields.get(at)).map_err(|_| {
                let name = &self.encoder.columns()[i];
                (at + 1, format!("column '{name}': not UTF-8"))
            })?;
            let v = v.trim();
            r.spans[i] = if self.spec.missing.iter().any(|m| m == v) {
                None
            } else {
                let from = r.text.len() as u32;
                r.text.push_str(v);
                Some((from, r.text.len() as u32))
            };
        }
        Ok(())
    }

    /// Matches the row with each join's dimension row by its key columns.
    fn join(&mut self) {
        let r = &mut self.record;
        for (j, keys) in self.join_keys.iter().enumerate() {
            self.key.clear();
            let mut whole = true;
            for (k, &c) in keys.iter().enumerate() {
                if k > 0 {
                    self.key.push('\u{1f}');
                }
                match r.spans[c] {
                    Some((a, b)) => self.key.push_str(&r.text[a as usize..b as usize]),
                    None => whole = false,
                }
            }
            r.matched[j] = whole
                .then(|| {
                    let rows = &r.tables[j];
                    rows.binary_search_by(|(k, _)| k.as_str().cmp(&self.key))
                })
                .and_then(Result::ok)
                .map(|m| m as u32);
        }
    }

    /// The row whose own values are in the record: joined, labelled and encoded; `None` when
    /// it has no label (counted).
    fn finish(&mut self) -> Result<Option<f32>, BadValue> {
        self.join();
        let Some(v) = self.record.value(self.label) else {
            self.unlabelled += 1;
            return Ok(None);
        };
        let l = &self.spec.label;
        let label = label_value(l, v, self.classification).map_err(|message| BadValue {
            column: l.column.clone(),
            message,
        })?;
        self.encoder.encode(&self.record, &mut self.out)?;
        self.keys.clear();
        self.values.clear();
        for &(k, v) in &self.out {
            self.keys.push(k);
            self.values.push(v);
        }
        Ok(Some(label))
    }

    /// The table spec.
    pub fn spec(&self) -> &TableSpec {
        self.spec
    }

    /// The columns a table's rows give ([`Self::row_of_cells`] reads cells of these, in this
    /// order).
    pub fn columns(&self) -> &[String] {
        &self.encoder.columns()[..self.record.own]
    }

    /// Row `row` of `cells` (read with [`Self::columns`]: a Parquet part's), as
    /// [`LineRows::parse`] reads a line: its label (`None` without one, counted), its features
    /// in [`LineRows::features`]; an error names the column and what is wrong.
    pub fn row_of_cells(&mut self, cells: &Cells, row: usize) -> Result<Option<f32>, BadValue> {
        let r = &mut self.record;
        r.text.clear();
        for i in 0..r.own {
            r.spans[i] = cells.value(row, i).map(|v| {
                let from = r.text.len() as u32;
                r.text.push_str(v);
                (from, r.text.len() as u32)
            });
        }
        self.finish()
    }

    /// The 1-based field of a column of the row's own (0 for a joined column).
    fn field_number(&self, column: &str) -> usize {
        let own = &self.encoder.columns()[..self.record.own];
        own.iter()
            .position(|c| c == column)
            .map_or(0, |i| self.field_of[i] + 1)
    }
}

impl LineRows for CsvLines<'_> {
    fn parse(&mut self, line: &[u8]) -> Result<Option<f32>, LineError> {
        if line.trim_ascii().is_empty() {
            return Ok(None);
        }
        let width = self.width.expect("a header comes first");
        self.fields.split(line)?;
        if self.fields.count != width {
            let n = self.fields.count;
            return Err((0, format!("{n} fields, but the header has {width}")));
        }
        self.take_values()?;
        self.finish().map_err(|b| {
            let at = self.field_number(&b.column);
            (at, format!("column '{}': {}", b.column, b.message))
        })
    }

    fn features(&self) -> (&[u32], &[f32]) {
        (&self.keys, &self.values)
    }

    fn has_header(&self) -> bool {
        true
    }

    fn header(&mut self, line: &[u8]) -> Result<(), LineError> {
        self.fields.split(line)?;
        let mut names = Vec::with_capacity(self.fields.count);
        for i in 0..self.fields.count {
            let name = std::str::from_utf8(self.fields.get(i))
                .map_err(|_| (i + 1, "the header is not UTF-8".to_string()))?;
            names.push(name.trim().to_string());
        }
        named_once(&names)?;
        let own = &self.encoder.columns()[..self.record.own];
        for (i, c) in own.iter().enumerate() {
            self.field_of[i] = names.iter().position(|n| n == c).ok_or_else(|| {
                let m = format!(
                    "no column '{}' ({})",
                    crate::data::clip(c),
                    header_names(&names)
                );
                (0, m)
            })?;
        }
        self.width = Some(names.len());
        Ok(())
    }

    fn note(&self) -> Option<String> {
        (self.unlabelled > 0).then(|| {
            format!(
                "{} rows without a label (column '{}') were passed over",
                self.unlabelled, self.spec.label.column
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::table::spec::{FeatureSpec, LabelSpec, NumericSpec};

    fn spec() -> TableSpec {
        TableSpec {
            label: LabelSpec {
                column: "clicked".into(),
                equals: Some("yes".into()),
                ..LabelSpec::default()
            },
            features: FeatureSpec {
                categorical: vec!["site".into(), "device".into()],
                numeric: vec![NumericSpec {
                    column: "price".into(),
                    transform: Transform::Log1p,
                    buckets: 10,
                }],
                crosses: vec![vec!["site".into(), "device".into()]],
                hash_bits: Some(10),
                ..FeatureSpec::default()
            },
            ..TableSpec::default()
        }
    }

    type Row = Option<(f32, Vec<(u32, f32)>)>;

    fn row(lines: &mut CsvLines, line: &str) -> Result<Row, LineError> {
        Ok(lines.parse(line.as_bytes())?.map(|y| {
            let (k, v) = lines.features();
            (y, k.iter().copied().zip(v.iter().copied()).collect())
        }))
    }

    #[test]
    fn a_line_encodes_as_the_file_pipeline_encodes_its_row() {
        let s = spec();
        let map = stream_map(&s).unwrap();
        assert_eq!(map.dim, 1 << 10);
        let mut lines = CsvLines::new(&map, true).unwrap();
        lines
            .header(b"device, clicked ,price,site,unused\n")
            .unwrap();
        let (y, features) = row(&mut lines, "phone,yes,2.5,\"a,b\",x\n")
            .unwrap()
            .unwrap();
        assert_eq!(y, 1.0);
        // The same row through the encoder the file pipeline uses, by the same map.
        struct Values(Vec<Option<&'static str>>);
        impl RowValues for Values {
            fn value(&self, i: usize) -> Option<&str> {
                self.0[i]
            }
        }
        let mut encoder = map.encoder(&s.row_columns()).unwrap();
        // Columns: clicked, site, device, price.
        let values = Values(vec![Some("yes"), Some("a,b"), Some("phone"), Some("2.5")]);
        let mut expected = Vec::new();
        encoder.encode(&values, &mut expected).unwrap();
        assert_eq!(features, expected);
        assert!(features
            .iter()
            .any(|&(_, v)| (v - 3.5f32.ln()).abs() < 1e-6));
        assert_eq!(features.len(), 4, "site, device, their cross, log1p(price)");
        // A CRLF line, a missing value (no feature), and a negative label.
        let (y, f) = row(&mut lines, "NA,no,0,a,x\r\n").unwrap().unwrap();
        assert_eq!(
            (y, f.len()),
            (-1.0, 2),
            "site and log1p(0); no device, no cross"
        );
    }

    #[test]
    fn bad_lines_name_their_column() {
        let map = stream_map(&spec()).unwrap();
        let mut lines = CsvLines::new(&map, true).unwrap();
        let err = lines.header(b"clicked,price\n").unwrap_err();
        assert!(err.1.contains("no column 'site'"), "{err:?}");
        lines.header(b"clicked,price,site,device\n").unwrap();
        let err = row(&mut lines, "yes,abc,s,d\n").unwrap_err();
        assert_eq!(err.0, 2, "{err:?}");
        assert!(err.1.contains("column 'price'"), "{err:?}");
        let err = row(&mut lines, "yes,1,s\n").unwrap_err();
        assert!(err.1.contains("3 fields, but the header has 4"), "{err:?}");
        let err = row(&mut lines, "yes,1,\"s\n").unwrap_err();
        assert!(err.1.contains("cannot hold a line break"), "{err:?}");
        let err = row(&mut lines, "yes,-2,s,d\n").unwrap_err();
        assert!(err.1.contains("price"), "log1p of -2: {err:?}");
        // A missing label passes the row over, and is counted.
        assert_eq!(row(&mut lines, ",1,s,d\n").unwrap(), None);
        assert_eq!(row(&mut lines, "   \n").unwrap(), None);
        assert!(lines.note().unwrap().starts_with("1 rows without a label"));
        let err = lines
            .header(b"clicked,site,site,price,device\n")
            .unwrap_err();
        assert!(err.1.contains("both named 'site'"), "{err:?}");
    }

    #[test]
    fn a_spec_that_needs_the_rows_statistics_is_refused() {
        let mut s = spec();
        s.features.hash_bits = None;
        let err = stream_map(&s).unwrap_err();
        assert!(
            err.contains("hash_bits") && err.contains("site*device"),
            "{err}"
        );
        let mut s = spec();
        s.features.numeric[0].transform = Transform::Standardize;
        assert!(stream_map(&s).unwrap_err().contains("standardized"));
        // Numbers and text alone need no hashing: their keys are known.
        let mut s = spec();
        (
            s.features.hash_bits,
            s.features.categorical,
            s.features.crosses,
        ) = (None, vec![], vec![]);
        assert_eq!(stream_map(&s).unwrap().dim, 1);
    }
}
