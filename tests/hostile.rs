//! Hostile inputs and outputs through the command line, each a case that once replaced what it
//! should not have, trained on wrong input without a word, panicked or hung. Every process is
//! bounded in time (a hang fails the test).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_gradflow");

/// Runs `gradflow args` in `dir`; the test fails if it runs longer than 60 s.
fn run(dir: &Path, args: &[&str]) -> Output {
    let child = Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::within(child, Duration::from_secs(60))
}

/// Standard error of a run that must fail (not crash: exit code 1, or 2 for a command line
/// refused by its parser; no panic).
fn failure(dir: &Path, args: &[&str]) -> String {
    let out = run(dir, args);
    let e = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "gradflow {args:?}: {e}"
    );
    assert!(!e.contains("panicked"), "gradflow {args:?}: {e}");
    e
}

fn success(dir: &Path, args: &[&str]) -> String {
    let out = run(dir, args);
    let e = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "gradflow {args:?}: {e}");
    e + &String::from_utf8_lossy(&out.stdout)
}

/// A small LibSVM file `d.svm` in `dir`.
fn data(dir: &Path) {
    success(
        dir,
        &[
            "data", "synth", "--rows", "200", "--dim", "50", "--nnz", "5", "--out", "d.svm",
        ],
    );
}

fn kind(path: &Path) -> std::fs::FileType {
    std::fs::symlink_metadata(path).unwrap().file_type()
}

/// Outputs never replace a device node, a FIFO or an input; a symlink's target is replaced
/// and the link kept. The node here is our own (`mknod` in a temporary directory, the null
/// device's numbers), so even a failing test writes nowhere else.
#[test]
fn outputs_replace_only_regular_files_and_never_an_input() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    data(d);
    assert!(Command::new("mkfifo")
        .arg(d.join("fifo"))
        .status()
        .unwrap()
        .success());
    let node = Command::new("mknod")
        .arg(d.join("node"))
        .args(["c", "1", "3"])
        .status();
    let node = node.map(|s| s.success()).unwrap_or(false);
    let mut specials = vec![("fifo", "is a pipe or FIFO")];
    if node {
        specials.push(("node", "is a device"));
    }
    let train = ["train", "--data", "d.svm", "--epochs", "1"];
    for (name, why) in &specials {
        for flag in ["--model-out", "--metrics"] {
            let e = failure(d, &[&train[..], &[flag, name]].concat());
            assert!(e.contains(why), "{flag} {name}: {e}");
        }
        let e = failure(
            d,
            &[
                "data", "synth", "--rows", "5", "--dim", "5", "--nnz", "2", "--out", name,
            ],
        );
        assert!(e.contains(why), "{e}");
    }
    assert!(kind(&d.join("fifo")).is_fifo());
    if node {
        assert!(kind(&d.join("node")).is_char_device());
    }
    // The training data named as the model: refused, the data untouched.
    let before = std::fs::read(d.join("d.svm")).unwrap();
    let e = failure(d, &[&train[..], &["--model-out", "d.svm"]].concat());
    assert!(
        e.contains("output.model: d.svm is an input of this run"),
        "{e}"
    );
    assert_eq!(std::fs::read(d.join("d.svm")).unwrap(), before);
    // A link to a regular file: the file gets the model, the link stays a link.
    std::fs::write(d.join("real.txt"), "old").unwrap();
    std::os::unix::fs::symlink("real.txt", d.join("link")).unwrap();
    success(d, &[&train[..], &["--model-out", "link"]].concat());
    assert!(kind(&d.join("link")).is_symlink());
    assert!(std::fs::read_to_string(d.join("real.txt"))
        .unwrap()
        .starts_with("# gradflow model"));
    // predict: a FIFO, the model or the data as -o are refused before any row is scored; a
    // missing directory is made.
    for (out, why) in [
        ("fifo", "is a pipe or FIFO"),
        ("real.txt", "is an input"),
        ("d.svm", "is an input"),
    ] {
        let e = failure(d, &["predict", "real.txt", "d.svm", "-o", out]);
        assert!(e.contains(why), "-o {out}: {e}");
    }
    success(d, &["predict", "real.txt", "d.svm", "-o", "new/dir/p.txt"]);
    assert_eq!(
        std::fs::read_to_string(d.join("new/dir/p.txt"))
            .unwrap()
            .lines()
            .count(),
        200
    );
    // Nothing is left behind by any refusal.
    let mut names: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    names.sort();
    assert!(names.is_empty(), "temporary files left: {names:?}");
}

/// Numbers from flags and job fields are range-checked where they are parsed: each once
/// overflowed, asked for gigabytes or ran unbounded. Each case must fail at once, naming the
/// flag or field, without a panic.
#[test]
fn numbers_out_of_range_are_refused_where_they_are_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    data(d);
    let train = ["train", "--data", "d.svm", "--epochs", "1"];
    let cases: &[(&[&str], &str)] = &[
        (
            &["--startup-timeout", "18446744073709551615"],
            "--startup-timeout",
        ),
        (&["--peer-timeout", "0"], "out of range: 1 to 604800"),
        (&["-n", "4294967296"], "out of range: 1 to 4096"),
        (&["-n", "70000"], "out of range: 1 to 4096"),
        (&["-w", "1000"], "out of range: 1 to 256"),
        (
            &["--set", "train.epochs=9223372036854775808"],
            "u64 value was too large",
        ),
        (
            &["--set", "data.label.above=1e400"],
            "floating-point number overflowed",
        ),
    ];
    for (extra, why) in cases {
        let e = failure(d, &[&train[..], extra].concat());
        assert!(e.contains(why), "{extra:?}: {e}");
    }
    let synth = ["data", "synth", "--dim", "5", "--out", "s.svm"];
    let e = failure(d, &[&synth[..], &["--rows", "10", "--nnz", "9"]].concat());
    assert!(e.contains("--nnz = 9 is more than --dim = 5"), "{e}");
    let e = failure(
        d,
        &[
            "data",
            "synth",
            "--rows",
            "10000000000000",
            "--out",
            "s.svm",
        ],
    );
    assert!(e.contains("is over 2147483648 nonzeros"), "{e}");
    let e = failure(d, &["codec", "compare", "--synth", "4294967295,4294967295"]);
    assert!(e.contains("D = 4294967295 is over"), "{e}");
    // A file that is not a gradient dump: its size, not a count of 3.6e18.
    let e = failure(d, &["codec", "compare", "--input", "d.svm", "--dim", "50"]);
    assert!(
        e.contains("not a gradient file") && !e.contains("e18"),
        "{e}"
    );
    assert!(!d.join("s.svm").exists());
}

/// A model file's header may ask for more weights than the process can hold (`--max-dim`
/// raised to 2^32 - 1): an error, not an abort. Run under a 4 GB address-space cap.
#[test]
fn a_model_larger_than_memory_is_an_error_not_an_abort() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    data(d);
    let model = "# gradflow model v2\nloss logistic\ndim 4294967295\nintercept none\nweights\n";
    std::fs::write(d.join("huge.txt"), model).unwrap();
    let out = Command::new("sh")
        .current_dir(d)
        .arg("-c")
        .arg(format!(
            "ulimit -v 4000000; exec {BIN} predict huge.txt d.svm --max-dim 4294967295"
        ))
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(e.contains("more than this process can allocate"), "{e}");
}

/// Wording: each of these once answered with serde's words (`internally tagged enum
/// CodecSpec`, `invalid type: string`) or a list without the valid choice.
#[test]
fn auto_where_it_is_no_choice_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    data(d);
    let train = ["train", "--data", "d.svm", "--epochs", "1"];
    let cases: &[(&[&str], &str)] = &[
        (
            &["--compressor", "auto:ratio=0.1"],
            "auto takes no parameters",
        ),
        (
            &["--downlink", "auto"],
            "--downlink: auto is not a choice here",
        ),
        (
            &["--set", "train.downlink=\"auto\""],
            "train.downlink: \"auto\" is not a choice",
        ),
        (
            &["--set", "train.exchange=\"AUTO\""],
            "names are lower case",
        ),
        (
            &["--set", "train.exchange=\"allgatherr\""],
            "unknown exchange 'allgatherr' (expected sharded, allgather, sketch, auto)",
        ),
        (
            &["--set", "train.compressor={ name = \"auto\", ratio = 0.1 }"],
            "\"auto\" takes no parameters",
        ),
    ];
    for (extra, why) in cases {
        let e = failure(d, &[&train[..], extra].concat());
        assert!(e.contains(why), "{extra:?}: {e}");
    }
}

/// Input that once gave a silent wrong result now gives an error naming the place.
#[test]
fn malformed_tables_are_errors_not_silent_results() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut rows = vec!["a,b,y".to_string()];
    rows.extend((0..400).map(|i| format!("{i},x{},{}", i % 7, i % 2)));
    let table = |name: &str, rows: &[String], end: &str| {
        std::fs::write(d.join(name), rows.join(end) + end).unwrap();
    };
    // A quote opened in the last column and never closed: the other 199 rows were one label.
    let mut open = rows.clone();
    open[201] = "200,x4,\"1".into();
    table("open.csv", &open, "\n");
    let gz = Command::new("gzip")
        .args(["-k", "open.csv"])
        .current_dir(d)
        .status();
    assert!(gz.unwrap().success());
    let label = [
        "--label",
        "y=1",
        "--numeric",
        "a",
        "--categorical",
        "b",
        "--epochs",
        "1",
    ];
    for file in ["open.csv", "open.csv.gz"] {
        let e = failure(d, &[&["train", "--data", file][..], &label].concat());
        assert!(
            e.contains(&format!("{file}:202:")) && e.contains("never closed"),
            "{e}"
        );
    }
    // CR-only line endings: 400 rows with one worker, an error with two; now refused alike.
    table("cr.csv", &rows, "\r");
    for w in ["1", "2"] {
        let e = failure(
            d,
            &[&["train", "--data", "cr.csv", "-w", w][..], &label].concat(),
        );
        assert!(e.contains("cr.csv:1:") && e.contains("CR alone"), "{e}");
    }
    // A label threshold that is not a number puts every row on one side.
    table("t.csv", &rows, "\n");
    let above = ["train", "--data", "t.csv", "--label", "y", "--numeric", "a"];
    let e = failure(
        d,
        &[&above[..], &["--set", "data.label.above=nan"]].concat(),
    );
    assert!(
        e.contains("data.label.above: must be a finite number"),
        "{e}"
    );
    // Control characters in a value reach the terminal escaped.
    std::fs::write(d.join("esc.csv"), "a,y\n1,\u{1b}]0;title\u{7}\u{1b}[2J\n").unwrap();
    let e = failure(
        d,
        &[
            "train",
            "--data",
            "esc.csv",
            "--label",
            "y",
            "--numeric",
            "a",
        ],
    );
    assert!(
        e.contains("\\u{1b}]0;title") && !e.contains('\u{1b}'),
        "{e}"
    );
}

/// A 100 KB gzip holding a 100 MB cell: an error once the record passes 64 MiB, with memory
/// bounded by that, not by what the stream decompresses to.
#[test]
fn a_compressed_record_is_bounded() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = std::fs::File::create(d.join("bomb.csv.gz")).unwrap();
    let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    gz.write_all(b"a,b,y\n1,x,1\n2,").unwrap();
    let chunk = vec![b'A'; 1 << 20];
    for _ in 0..100 {
        gz.write_all(&chunk).unwrap();
    }
    gz.write_all(b",0\n").unwrap();
    gz.finish().unwrap();
    let args = [
        "train",
        "--data",
        "bomb.csv.gz",
        "--label",
        "y",
        "--numeric",
        "a",
    ];
    let e = failure(d, &[&args[..], &["--categorical", "b"]].concat());
    assert!(e.contains("a record longer than 64 MiB"), "{e}");
    // The same for a LibSVM line.
    let file = std::fs::File::create(d.join("bomb.svm.gz")).unwrap();
    let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    gz.write_all(b"1 1:1\n1 ").unwrap();
    for _ in 0..100 {
        gz.write_all(&chunk).unwrap();
    }
    gz.finish().unwrap();
    let e = failure(d, &["train", "--data", "bomb.svm.gz"]);
    assert!(e.contains("a line longer than 64 MiB"), "{e}");
}

/// `.svm.gz` (listed in the docs) is decompressed: with one worker it trains the very model
/// of the plain file; with two, a model of the same quality.
#[test]
fn compressed_libsvm_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    data(d);
    let gz = Command::new("gzip")
        .args(["-k", "d.svm"])
        .current_dir(d)
        .status();
    assert!(gz.unwrap().success());
    let train = |file: &str, w: &str, out: &str| {
        success(
            d,
            &[
                "train",
                "--data",
                file,
                "--epochs",
                "3",
                "-w",
                w,
                "--model-out",
                out,
            ],
        )
    };
    train("d.svm", "1", "plain.txt");
    train("d.svm.gz", "1", "gz.txt");
    let read = |f: &str| std::fs::read(d.join(f)).unwrap();
    assert_eq!(read("plain.txt"), read("gz.txt"));
    let out = train("d.svm.gz", "2", "gz2.txt");
    assert!(out.contains("trained 3 epochs"), "{out}");
}

/// A model file is input: its feature map's statistics, vocabularies and dimension are
/// checked (they once gave inf/NaN predictions, silently unknown values, or a panic), and a
/// join table it names is read but its first line never shown in an error.
#[test]
fn a_model_s_feature_map_is_checked() {
    use gradflow::model::file::ModelFile;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut rows = vec!["k,a,b,y".to_string()];
    rows.extend((0..200).map(|i| format!("{},{i},x{},{}", i % 3, i % 5, i % 2)));
    std::fs::write(d.join("t.csv"), rows.join("\n") + "\n").unwrap();
    std::fs::write(d.join("j.csv"), "k,c\n0,p\n1,q\n2,r\n").unwrap();
    std::fs::write(d.join("secret.txt"), "the-first-line-of-a-private-file\n").unwrap();
    let job = r#"
[data]
train = "t.csv"
[data.label]
column = "y"
[data.features]
categorical = ["b", "c"]
numeric = [
  { column = "a", transform = "standardize" },
  { column = "k", transform = "log1p" },
]
[[data.join]]
file = "j.csv"
on = { k = "k" }
columns = ["c"]
[train]
epochs = 1
batch_fraction = 0.5
[output]
model = "m.txt"
"#;
    std::fs::write(d.join("job.toml"), job).unwrap();
    success(d, &["train", "job.toml"]);
    // The model as written scores: a log1p column keeps no statistics (its std is 0, which
    // only a standardized column may not have).
    success(d, &["predict", "m.txt", "t.csv", "-o", "p.csv"]);
    let good = ModelFile::load(&d.join("m.txt")).unwrap();
    let features = good.features.clone().unwrap();
    let edited = |from: &str, to: &str| {
        assert!(features.contains(from), "{from} in {features}");
        let mut m = good.clone();
        m.features = Some(features.replacen(from, to, 1));
        std::fs::write(d.join("bad.txt"), m.to_text()).unwrap();
        failure(d, &["predict", "bad.txt", "t.csv"])
    };
    let std_line = features
        .lines()
        .find(|l| l.starts_with("std = "))
        .unwrap()
        .to_string();
    for (to, why) in [
        ("std = 0.0", "std positive for a standardized column"),
        ("std = nan", "finite, and std positive"),
    ] {
        let e = edited(&std_line, to);
        assert!(e.contains(why), "{to}: {e}");
    }
    let e = edited("\"x1\", \"x2\"", "\"x1\", \"x1\"");
    assert!(e.contains("entries must be sorted and each once"), "{e}");
    let dim = features
        .lines()
        .find(|l| l.starts_with("dim = "))
        .unwrap()
        .to_string();
    let e = edited(&dim, "dim = 3");
    assert!(e.contains("but its columns make"), "{e}");
    let e = edited("file = \"", "file = \"secret.txt\" #");
    assert!(!e.contains("the-first-line"), "{e}");
    assert!(e.contains("one column of 32 bytes"), "{e}");
}

/// A job file's error quotes at most 400 characters a line: a 10 MB value in a misspelt field
/// once gave 30 MB of standard error.
#[test]
fn a_huge_value_in_a_job_error_is_not_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let big = "x".repeat(10 << 20);
    std::fs::write(d.join("job.toml"), format!("[train]\nepochs = \"{big}\"\n")).unwrap();
    let e = failure(d, &["train", "job.toml"]);
    assert!(e.len() < 4000, "{} bytes of error", e.len());
    assert!(e.contains("train.epochs") || e.contains("epochs"), "{e}");
    // (A command line holds at most 128 KiB an argument.)
    let set = format!("train.epochs={}", &big[..100_000]);
    let e = failure(d, &["train", "--set", &set]);
    assert!(e.len() < 4000, "{} bytes of error", e.len());
}

/// A full disk under the metrics CSV (an 8 KiB tmpfs in a mount namespace of its own, so
/// nothing outside the test sees it; needs root, as CI has): the run fails naming the file,
/// and the file holds whole rows only (a write that failed partway once left a torn row).
#[test]
fn a_full_disk_leaves_whole_metrics_rows() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    data(d);
    let script = format!(
        "mkdir -p small && mount -t tmpfs -o size=8k tmpfs small && \
         {BIN} train --data d.svm --epochs 400 --metrics small/m.csv -q; \
         code=$?; cp small/m.csv kept.csv; exit $code"
    );
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .current_dir(d)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(e.contains("small/m.csv: No space left on device"), "{e}");
    let csv = std::fs::read_to_string(d.join("kept.csv")).unwrap();
    assert!(
        csv.len() > 1000 && csv.ends_with('\n'),
        "{} bytes",
        csv.len()
    );
    let fields = |l: &str| l.split(',').count();
    let header = fields(csv.lines().next().unwrap());
    assert!(csv.lines().all(|l| fields(l) == header), "a torn row");
}
