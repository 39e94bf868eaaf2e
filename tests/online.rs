//! Online runs: rows from a pipe or a growing file, trained on as they arrive, by the real
//! `gradflow` binary (one and two workers, two processes over loopback TCP).

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{hostfile, within};

const DIM: &str = "2000";
const LIMIT: Duration = Duration::from_secs(120);

/// `rows` LibSVM rows of a planted logistic model over `DIM` features (gradflow's generator).
fn rows(dir: &Path, rows: usize) -> Vec<u8> {
    let path = dir.join("rows.svm");
    common::gradflow_ok([
        "data",
        "synth",
        "--rows",
        &rows.to_string(),
        "--dim",
        DIM,
        "--nnz",
        "20",
        "--out",
        path.to_str().unwrap(),
    ]);
    std::fs::read(path).unwrap()
}

/// Starts `gradflow train` on standard input with `args`.
fn start(args: &[&str], stdin: Stdio) -> Child {
    let base = [
        "train",
        "--data",
        "-",
        "--dim",
        DIM,
        "--optimizer",
        "sgd",
        "--lr",
        "0.5",
    ];
    Command::new(env!("CARGO_BIN_EXE_gradflow"))
        .args(base.iter().chain(args))
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Writes `bytes` into the child's standard input in small pieces, as a pipe from a producer
/// would (pieces that cut lines), then closes it. A child that stops reading early (a row
/// limit) ends the writing.
fn feed(child: &mut Child, bytes: Vec<u8>) -> std::thread::JoinHandle<()> {
    let mut stdin = child.stdin.take().unwrap();
    std::thread::spawn(move || {
        for piece in bytes.chunks(7919) {
            if stdin.write_all(piece).is_err() {
                return;
            }
        }
    })
}

/// Runs `gradflow train` on `bytes` through a pipe; its stdout and stderr, and whether it
/// succeeded.
fn train_on(bytes: Vec<u8>, args: &[&str]) -> (String, String, bool) {
    let mut child = start(args, Stdio::piped());
    let writer = feed(&mut child, bytes);
    let out = within(child, LIMIT);
    writer.join().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

/// The standard output of `child`, which must end well within [`LIMIT`].
fn succeeded(child: Child) -> String {
    let out = within(child, LIMIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The rows, rounds and progressive loss of the run's last line.
fn summary(out: &str) -> (u64, u64, f64) {
    let line = out
        .lines()
        .find(|l| l.starts_with("trained online on"))
        .unwrap_or_else(|| panic!("no summary in:\n{out}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let loss = words.last().unwrap().parse().unwrap();
    (words[3].parse().unwrap(), words[6].parse().unwrap(), loss)
}

/// The same stream through a pipe on two workers of one process and on two processes (whose
/// first reads it) trains the same model, byte for byte: row `n` goes to worker `n mod 2`
/// either way. One worker sums the same rows in another order: its progressive loss agrees to
/// rounding. Every row is trained on once (12 rounds of 500), and the model learns: the loss
/// of the last rows is below the first round's (the untrained model's 0.6931).
#[test]
fn a_piped_stream_trains_one_model_on_two_workers_in_one_or_two_processes() {
    let dir = tempfile::tempdir().unwrap();
    let data = rows(dir.path(), 6000);
    let model = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let (one, two, split) = (model("one.txt"), model("two.txt"), model("split.txt"));
    let batch = ["--batch-rows", "500"];
    let on_workers = |w: &str, model: &str| {
        let window = ["--set", "train.auc_window=2000"];
        let args = ["--batch-rows", "500", "-w", w, "--model-out", model];
        train_on(data.clone(), &[&args[..], &window].concat())
    };

    let (out, err, ok) = on_workers("2", &two);
    assert!(ok, "{err}");
    let (rows, rounds, loss) = summary(&out);
    assert_eq!((rows, rounds), (6000, 12), "{out}");
    assert!(
        out.contains("rows        500  progressive_loss 0.6931"),
        "{out}"
    );
    let last: f64 = out
        .lines()
        .rfind(|l| l.contains("since_last"))
        .and_then(|l| l.split_whitespace().nth(5)?.parse().ok())
        .unwrap();
    assert!(last < 0.66 && loss < 0.68, "no learning: {out}");
    // The AUC of the progressive scores over windows of 2,000 rows: the last one's.
    let auc: f64 = out
        .lines()
        .rfind(|l| l.contains("window_auc"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no window AUC: {out}"));
    assert!(auc > 0.6 && auc < 1.0, "{out}");

    let (out1, err, ok) = on_workers("1", &one);
    assert!(ok, "{err}");
    let (rows1, _, loss1) = summary(&out1);
    assert_eq!(rows1, 6000);
    assert!((loss1 - loss).abs() < 1e-4, "{loss1} vs {loss}");

    let hosts = hostfile(dir.path(), 2);
    let cluster = |p: &'static str, extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = batch.iter().map(|s| s.to_string()).collect();
        a.extend(["-n", "2", "-p", p, "--hostfile", hosts.to_str().unwrap()].map(String::from));
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let a0 = cluster("0", &["--model-out", &split]);
    let a1 = cluster("1", &[]);
    let mut second = start(
        &a1.iter().map(String::as_str).collect::<Vec<_>>(),
        Stdio::null(),
    );
    let (out0, err0, ok0) = train_on(data, &a0.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok0, "{err0}");
    second.wait().unwrap();
    assert_eq!(summary(&out0).0, 6000, "{out0}");
    let read = |p: &str| std::fs::read(p).unwrap();
    assert!(
        read(&two) == read(&split),
        "2 workers vs 2 processes: models differ"
    );
    assert!(read(&two) != read(&one), "one worker sums in another order");
}

/// A last line without its newline (the writer stopped mid-row) is not trained on, and the
/// run says so; `--max-rows` ends the stream at that many rows, the writer still writing.
#[test]
fn a_cut_last_line_is_not_trained_on_and_max_rows_ends_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let mut data = rows(dir.path(), 3000);
    data.extend_from_slice(b"1 3:1 7:");
    let (out, err, ok) = train_on(data.clone(), &["--batch-rows", "256"]);
    assert!(ok, "{err}");
    assert_eq!(summary(&out).0, 3000, "{out}");
    assert!(
        err.contains("ended inside a line (8 bytes without a newline)"),
        "{err}"
    );

    let (out, err, ok) = train_on(data, &["--batch-rows", "256", "--max-rows", "1000"]);
    assert!(ok, "{err}");
    let (rows, rounds, _) = summary(&out);
    assert_eq!((rows, rounds), (1000, 4), "256 + 256 + 256 + 232: {out}");
}

/// A malformed row stops the run with its place in the stream (line and column), or, with
/// `--on-bad-row skip`, is skipped: the first few quoted, all counted, the rest trained on.
#[test]
fn a_bad_row_stops_the_run_with_its_place_or_is_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut data = b"1 1:1 5:1\n-1 2:1\n".to_vec();
    data.extend_from_slice(b"1 4:1 3:1\n"); // line 3: keys must increase
    data.extend_from_slice(&rows(dir.path(), 1000));
    data.extend_from_slice(b"-1 2:x\n"); // line 1004: a bad value

    let (_, err, ok) = train_on(data.clone(), &[]);
    assert!(!ok);
    assert!(
        err.contains("standard input:3:7: feature index 3 is not increasing"),
        "{err}"
    );

    let (out, err, ok) = train_on(data, &["--on-bad-row", "skip"]);
    assert!(ok, "{err}");
    assert_eq!(summary(&out).0, 1002, "{out}");
    assert!(
        err.contains("skipped a malformed row: standard input:1004:6: bad feature value 'x'"),
        "{err}"
    );
    assert!(err.contains("skipped 2 malformed rows"), "{err}");
}

/// A followed file is trained on as it grows, lines cut across appends included, until
/// `--max-rows`; SIGTERM ends a run with no limit, which then writes its model. Meanwhile that
/// run rewrites the model file every 500 rows, and `predict` reads it while training goes on.
#[test]
fn a_followed_file_is_trained_on_as_it_grows_until_a_limit_or_a_signal() {
    let dir = tempfile::tempdir().unwrap();
    let data = rows(dir.path(), 3000);
    let path = dir.path().join("growing.svm");
    let model = dir.path().join("model.txt");
    let follow = |extra: &[&str]| -> Child {
        let mut a = vec![
            "train",
            "--data",
            path.to_str().unwrap(),
            "--follow",
            "--dim",
            DIM,
            "--batch-rows",
            "100",
            "--model-out",
            model.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_gradflow"))
            .args(a)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // The first third, then the rest in pieces that cut lines, while the run follows.
    let third = data.len() / 3;
    std::fs::write(&path, &data[..third]).unwrap();
    let child = follow(&["--max-rows", "2500"]);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    for piece in data[third..].chunks(10007) {
        std::thread::sleep(Duration::from_millis(20));
        file.write_all(piece).unwrap();
    }
    let stdout = succeeded(child);
    assert_eq!(summary(&stdout).0, 2500, "{stdout}");

    // No limit: the run follows until SIGTERM, then writes its model. Meanwhile it rewrites
    // the model file every 500 rows, which `predict` reads while training goes on.
    std::fs::remove_file(&model).unwrap();
    let child = follow(&["--snapshot-rows", "500"]);
    let started = std::time::Instant::now();
    while !model.exists() {
        assert!(started.elapsed() < LIMIT, "no live snapshot");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(child_runs(&child), "the snapshot came before the end");
    let scores = dir.path().join("scores.csv");
    let m = (model.to_str().unwrap(), scores.to_str().unwrap());
    common::gradflow_ok(["predict", m.0, path.to_str().unwrap(), "-o", m.1]);
    let lines = std::fs::read_to_string(&scores).unwrap().lines().count();
    assert!(lines >= 3000, "{lines} predictions");
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let stdout = succeeded(child);
    assert_eq!(summary(&stdout).0, 3000, "{stdout}");
    assert!(model.exists(), "{stdout}");
}

/// Whether `child` is still running.
fn child_runs(child: &Child) -> bool {
    // SAFETY: signal 0 only asks whether the process exists (our child, not yet waited for).
    unsafe { libc::kill(child.id() as i32, 0) == 0 }
}

/// What an online run needs, and what it cannot do, is said by field.
#[test]
fn an_online_run_names_what_it_needs_and_refuses() {
    let fail = |args: &[&str]| {
        let out = common::gradflow(args);
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = fail(&["train", "--data", "-"]);
    assert!(
        e.contains("data.dim: data.train = \"-\" (standard input) needs the number of features"),
        "{e}"
    );
    let e = fail(&["train", "--max-rows", "10"]);
    assert!(
        e.contains("train.max_rows: applies to an online run"),
        "{e}"
    );
    let e = fail(&[
        "train",
        "--data",
        "-",
        "--dim",
        "10",
        "--set",
        "train.pull=true",
    ]);
    assert!(e.contains("train.pull: an online run"), "{e}");
    let e = fail(&["train", "--data", "-", "--dim", "10", "--format", "idx"]);
    assert!(
        e.contains("data.format: data.train = \"-\" (standard input) reads LibSVM or CSV"),
        "{e}"
    );
    let e = fail(&["train", "--data", "-", "--format", "parquet"]);
    assert!(e.contains("a Parquet stream is a directory"), "{e}");
    // A single Parquet file cannot be followed (its footer is written last).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.parquet");
    std::fs::write(&file, b"PAR1").unwrap();
    let follow = [
        "--follow",
        "--format",
        "parquet",
        "--set",
        "data.label.column=\"y\"",
        "--set",
        "data.features.numeric=[{ column = \"x\" }]",
    ];
    let e = fail(&[&["train", "--data", file.to_str().unwrap()][..], &follow].concat());
    assert!(e.contains("a growing file cannot be followed"), "{e}");
    let e = fail(&["train", "--each-process-reads"]);
    assert!(
        e.contains("data.each_process_reads: applies to an online run"),
        "{e}"
    );
    let csv = ["train", "--data", "-", "--format", "csv", "--set"];
    let e = fail(&[&csv[..], &["data.label.column=\"y\""]].concat());
    assert!(e.contains("no column 'y'") || e.contains("features"), "{e}");
    let categorical = ["--set", "data.features.categorical=[\"c\"]"];
    let e = fail(&[&csv[..], &["data.label.column=\"y\""], &categorical].concat());
    assert!(
        e.contains("data.features.hash_bits: a stream's discrete features (c) must be hashed"),
        "{e}"
    );
    let numeric = "data.features.numeric=[{ column = \"x\", transform = \"standardize\" }]";
    let e = fail(&[&csv[..], &["data.label.column=\"y\"", "--set", numeric]].concat());
    assert!(e.contains("column 'x' is standardized"), "{e}");
    let stream = ["train", "--data", "-", "--dim", "10"];
    for (set, says) in [
        ("output.snapshot_rows=100", "rewrite the model file"),
        (
            "train.auc_window=0",
            "train.auc_window: must be at least 1 row",
        ),
        (
            "train.stall_seconds=0",
            "train.stall_seconds: must be above 0",
        ),
    ] {
        let e = fail(&[&stream[..], &["--set", set]].concat());
        assert!(e.contains(says), "{set}: {e}");
    }
}

/// A stream that pauses longer than `train.stall_seconds` is reported, once, and the run waits
/// for it: every row before and after the pause is trained on.
#[test]
fn a_stalled_stream_is_reported_and_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let data = rows(dir.path(), 2000);
    let half = data.len() / 2;
    let cut = half + data[half..].iter().position(|&b| b == b'\n').unwrap() + 1;
    let args = ["--batch-rows", "500", "--set", "train.stall_seconds=0.5"];
    let mut child = start(&args, Stdio::piped());
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&data[..cut]).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    stdin.write_all(&data[cut..]).unwrap();
    drop(stdin);
    let out = within(child, LIMIT);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert_eq!(summary(&stdout).0, 2000, "{stdout}");
    let reports = stderr.matches("(train.stall_seconds); waiting").count();
    assert_eq!(reports, 1, "{stderr}");
}

/// A followed file's run killed with SIGKILL resumes from its last checkpoint with `--resume`:
/// it reads the file on from where that checkpoint's rounds had read it, rows keep their
/// workers, `--max-rows` counts the rows of both runs, and the model equals that of a run
/// never stopped, byte for byte. Standard input cannot be resumed, and says so.
#[test]
fn a_followed_file_resumes_after_kill_9_from_its_checkpoints_offset() {
    let dir = tempfile::tempdir().unwrap();
    let data = rows(dir.path(), 3000);
    let (path, ckpt) = (dir.path().join("growing.svm"), dir.path().join("ckpt"));
    let (killed, whole) = (dir.path().join("resumed.txt"), dir.path().join("whole.txt"));
    let run = |model: &Path, checkpoint: bool, extra: &[&str]| -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gradflow"));
        c.args([
            "train",
            "--data",
            path.to_str().unwrap(),
            "--follow",
            "--dim",
            DIM,
        ])
        .args([
            "--batch-rows",
            "101",
            "--set",
            "train.batch_ms=600000",
            "-w",
            "2",
        ])
        .args([
            "--max-rows",
            "3000",
            "--optimizer",
            "adagrad",
            "--lr",
            "0.1",
        ])
        .args(["--model-out", model.to_str().unwrap()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        if checkpoint {
            let spec = format!("train.checkpoint={{ every_rounds = 7, dir = {:?} }}", ckpt);
            c.args(["--set", &spec]);
        }
        c
    };
    // Half the rows, then the run waits at round 14 for more: killed there, after the checkpoint
    // of round 7 (707 rows: an odd row goes first when resumed).
    let half = data.len() / 2;
    std::fs::write(&path, &data[..half]).unwrap();
    let mut first = run(&killed, true, &[]).spawn().unwrap();
    let done = ckpt.join("round-000000000007");
    let started = std::time::Instant::now();
    while !(done.exists() && std::fs::read_dir(&done).unwrap().count() >= 3) {
        assert!(started.elapsed() < LIMIT, "no checkpoint of round 7");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    first.kill().unwrap();
    first.wait().unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&data[half..])
        .unwrap();
    let mut resumed = run(&killed, true, &["--resume", ckpt.to_str().unwrap()]);
    let resumed = within(resumed.spawn().unwrap(), LIMIT);
    let (out, err) = (
        String::from_utf8_lossy(&resumed.stdout),
        String::from_utf8_lossy(&resumed.stderr),
    );
    assert!(resumed.status.success(), "{err}");
    assert!(err.contains("resuming from round 7 of"), "{err}");
    // The metrics of the rounds before the checkpoint are replayed from its log: the
    // progressive loss is the whole stream's.
    assert_eq!(summary(&out).0, 3000, "{out}");

    let never = within(run(&whole, false, &[]).spawn().unwrap(), LIMIT);
    assert!(
        never.status.success(),
        "{}",
        String::from_utf8_lossy(&never.stderr)
    );
    let read = |p: &Path| std::fs::read(p).unwrap();
    assert!(read(&killed) == read(&whole), "the resumed model differs");

    let spec = format!("train.checkpoint={{ every_rounds = 5, dir = {:?} }}", ckpt);
    let e = common::gradflow(["train", "--data", "-", "--dim", DIM, "--set", &spec]);
    let e = String::from_utf8_lossy(&e.stderr);
    assert!(e.contains("cannot be resumed from standard input"), "{e}");
}

/// A directory's part files are trained on in name order as they appear (written elsewhere,
/// then renamed in, as a stream writer does), `_SUCCESS` and hidden files skipped, until
/// `--max-rows`: the model equals that of the same rows through a pipe.
#[test]
fn a_directorys_parts_are_trained_on_as_they_appear() {
    let dir = tempfile::tempdir().unwrap();
    let data = rows(dir.path(), 3000);
    let parts = dir.path().join("parts");
    std::fs::create_dir(&parts).unwrap();
    let (from_parts, from_pipe) = (dir.path().join("parts.txt"), dir.path().join("pipe.txt"));
    let lines: Vec<&[u8]> = data.split_inclusive(|&b| b == b'\n').collect();
    std::fs::write(parts.join("_SUCCESS"), b"").unwrap();
    std::fs::write(parts.join(".part-00009.svm.tmp"), b"1 1:x\n").unwrap();
    std::fs::write(parts.join("part-00000.svm"), lines[..1000].concat()).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_gradflow"))
        .args([
            "train",
            "--data",
            parts.to_str().unwrap(),
            "--follow",
            "--dim",
            DIM,
        ])
        .args([
            "--batch-rows",
            "250",
            "--max-rows",
            "3000",
            "--optimizer",
            "sgd",
        ])
        .args(["--lr", "0.5", "--model-out", from_parts.to_str().unwrap()])
        .args(["--set", "train.batch_ms=600000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for (i, chunk) in lines[1000..].chunks(1000).enumerate() {
        std::thread::sleep(Duration::from_millis(100));
        let tmp = dir.path().join("writing");
        std::fs::write(&tmp, chunk.concat()).unwrap();
        std::fs::rename(&tmp, parts.join(format!("part-{:05}.svm", i + 1))).unwrap();
    }
    let stdout = succeeded(child);
    assert_eq!(summary(&stdout), (3000, 12, summary(&stdout).2), "{stdout}");

    let model = from_pipe.to_str().unwrap();
    let args = [
        "--batch-rows",
        "250",
        "--set",
        "train.batch_ms=600000",
        "--model-out",
        model,
    ];
    let (_, err, ok) = train_on(data, &args);
    assert!(ok, "{err}");
    let read = |p: &Path| std::fs::read(p).unwrap();
    assert!(
        read(&from_parts) == read(&from_pipe),
        "parts vs pipe: models differ"
    );
}

/// `rows` rows of a click table with a planted logistic model over its site, device and
/// price, and an unused column: as (clicked, site, device, price, note) values. Every 1000th
/// row has no label (`NA`).
fn click_table(rows: usize) -> Vec<[String; 5]> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..rows)
        .map(|i| {
            let site = (next() * 30.0) as usize;
            let device = ["phone", "tablet", "desktop"][(next() * 3.0) as usize];
            let price = -10.0 * next().ln();
            let z = ((site * 7919) % 13) as f64 / 3.0 - 2.0 + (device == "phone") as u8 as f64
                - 0.1 * price;
            let clicked = if i % 1000 == 999 {
                "NA"
            } else if next() < 1.0 / (1.0 + (-z).exp()) {
                "yes"
            } else {
                "no"
            };
            let note = match i % 3 {
                0 => "\"quoted, with a comma\"".to_string(),
                _ => format!("n{i}"),
            };
            [
                clicked.into(),
                format!("s{site}"),
                device.into(),
                format!("{price:.2}"),
                note,
            ]
        })
        .collect()
}

/// The table's lines with its columns in the order `order` (indices into the row's values).
fn table_lines(rows: &[[String; 5]], order: [usize; 5]) -> String {
    let names = ["clicked", "site", "device", "price", "note"];
    let mut text = order.map(|c| names[c]).join(",") + "\n";
    for row in rows {
        text += &(order.map(|c| row[c].as_str()).join(",") + "\n");
    }
    text
}

/// A CSV stream is read by its header's names and turned into features by a feature map known
/// before the first row (hashed slots, log1p of a number): the same rows through a pipe and as
/// a directory of parts whose headers order the columns differently train the same model, byte
/// for byte, and rows without a label are passed over and counted. `predict` on the table's
/// file (which encodes it through the model file's feature map, as the file pipeline does)
/// scores the model below the stream's progressive loss: the stream's rows and the file's are
/// the same features.
#[test]
fn a_csv_stream_is_read_by_its_header_and_encoded_as_predict_reads_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let table = click_table(4000);
    let file = dir.path().join("clicks.csv");
    std::fs::write(&file, table_lines(&table, [0, 1, 2, 3, 4])).unwrap();
    let job = dir.path().join("job.toml");
    std::fs::write(
        &job,
        "[data]\nformat = \"csv\"\ntrain = \"-\"\n\
         [data.label]\ncolumn = \"clicked\"\nequals = \"yes\"\n\
         [data.features]\ncategorical = [\"site\", \"device\"]\n\
         numeric = [{ column = \"price\", transform = \"log1p\" }]\n\
         crosses = [[\"site\", \"device\"]]\nhash_bits = 10\n\
         [model]\nloss = \"logistic\"\nlambda = 0.0\n\
         [optimizer]\nkind = \"adagrad\"\nlr = 0.2\n\
         [train]\nbatch_rows = 250\nbatch_ms = 600000\n",
    )
    .unwrap();
    let (from_pipe, from_parts) = (dir.path().join("pipe.txt"), dir.path().join("parts.txt"));
    let train = |data: &Path, model: &Path, extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gradflow"));
        c.args(["train", job.to_str().unwrap(), "-w", "2"])
            .args(["--data", data.to_str().unwrap()])
            .args(["--model-out", model.to_str().unwrap()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let mut child = train(Path::new("-"), &from_pipe, &[])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let writer = feed(&mut child, std::fs::read(&file).unwrap());
    let out = within(child, LIMIT);
    writer.join().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("as it arrives (CSV, 1024 features)"),
        "{stdout}"
    );
    assert!(
        stderr.contains("4 rows without a label (column 'clicked') were passed over"),
        "{stderr}"
    );
    let (rows, rounds, progressive) = summary(&stdout);
    assert_eq!((rows, rounds), (3996, 16), "{stdout}");

    // The same rows as parts, each with its header; the second part's columns in another order.
    // The last part comes once a live snapshot (with the feature map) has been scored.
    let parts = dir.path().join("parts");
    std::fs::create_dir(&parts).unwrap();
    let write_part = |i: usize, chunk: &[[String; 5]]| {
        let order = if i == 1 {
            [4, 3, 0, 2, 1]
        } else {
            [0, 1, 2, 3, 4]
        };
        let tmp = dir.path().join("writing");
        std::fs::write(&tmp, table_lines(chunk, order)).unwrap();
        std::fs::rename(&tmp, parts.join(format!("part-{i}.csv"))).unwrap();
    };
    let chunks: Vec<&[[String; 5]]> = table.chunks(1000).collect();
    (0..3).for_each(|i| write_part(i, chunks[i]));
    let args = ["--follow", "--max-rows", "3996", "--snapshot-rows", "1000"];
    let child = train(&parts, &from_parts, &args).spawn().unwrap();
    let started = std::time::Instant::now();
    let snapshot = loop {
        let scored = common::gradflow([
            "predict",
            from_parts.to_str().unwrap(),
            file.to_str().unwrap(),
        ]);
        if scored.status.success() {
            break String::from_utf8_lossy(&scored.stdout).into_owned();
        }
        assert!(started.elapsed() < LIMIT, "no live snapshot predict reads");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        snapshot.lines().count(),
        4000,
        "a prediction for every row of the table"
    );
    write_part(3, chunks[3]);
    let out = within(child, LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |p: &Path| std::fs::read(p).unwrap();
    assert!(
        read(&from_pipe) == read(&from_parts),
        "pipe vs parts: models differ"
    );

    // The same rows as Parquet parts (typed: the price a double), one part of 1,000 rows at a
    // time: the model of the CSV rows.
    #[cfg(feature = "parquet")]
    {
        let parquet = dir.path().join("parquet");
        std::fs::create_dir(&parquet).unwrap();
        let from_parquet = dir.path().join("parquet.txt");
        for (i, chunk) in table.chunks(1000).enumerate() {
            write_parquet_part(&parquet.join(format!("part-{i}.parquet")), chunk);
        }
        let args = ["--follow", "--max-rows", "3996", "--format", "parquet"];
        let out = within(
            train(&parquet, &from_parquet, &args).spawn().unwrap(),
            LIMIT,
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("as it arrives (Parquet, 1024 features)"),
            "{stdout}"
        );
        assert!(
            read(&from_pipe) == read(&from_parquet),
            "CSV vs Parquet: models differ"
        );
    }

    // The model scored through its file's feature map on the table as a file.
    let scored = common::gradflow_ok([
        "predict",
        from_pipe.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    let mut loss = (0.0, 0);
    for (line, row) in scored.lines().zip(&table) {
        let p: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        match row[0].as_str() {
            "yes" => loss.0 -= p.ln(),
            "no" => loss.0 -= (1.0 - p).ln(),
            _ => continue,
        }
        loss.1 += 1;
    }
    let loss = loss.0 / loss.1 as f64;
    assert!(loss.is_finite(), "{scored}");
    assert!(
        loss < progressive && progressive < 0.66,
        "predict's loss {loss:.4}, the stream's progressive loss {progressive:.4}"
    );
}

/// With `--each-process-reads`, every process reads its own standard input and trains its
/// rows on its own workers. Two processes of one worker each, fed the two halves of a stream,
/// train the model one process of two workers trains on the halves interleaved (row `n` of
/// the interleaving to worker `n mod 2`), byte for byte. Streams of unequal length: the run
/// ends when the longer one does, every row of both trained on.
#[test]
fn each_process_reads_its_own_stream() {
    let dir = tempfile::tempdir().unwrap();
    let data = rows(dir.path(), 3000);
    let lines: Vec<&[u8]> = data.split_inclusive(|&b| b == b'\n').collect();
    let (first, second) = lines.split_at(1500);
    let interleaved: Vec<u8> = first
        .iter()
        .zip(second)
        .flat_map(|(a, b)| [*a, *b])
        .collect::<Vec<_>>()
        .concat();
    let model = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let (together, apart) = (model("together.txt"), model("apart.txt"));
    let batch = ["--batch-rows", "200", "--set", "train.batch_ms=600000"];
    let (_, err, ok) = train_on(
        interleaved,
        &[&batch[..], &["-w", "2", "--model-out", &together]].concat(),
    );
    assert!(ok, "{err}");

    let hosts = hostfile(dir.path(), 2);
    let in_cluster = |p: &str, rows: Vec<u8>, extra: &[&str]| {
        let cluster = ["-n", "2", "-p", p, "--hostfile", hosts.to_str().unwrap()];
        let args = [&batch[..], &cluster, &["--each-process-reads"], extra].concat();
        let mut child = start(&args, Stdio::piped());
        let writer = feed(&mut child, rows);
        (child, writer)
    };
    let run = |a: Vec<u8>, b: Vec<u8>, extra: &[&str]| {
        let (one, w1) = in_cluster("1", b, &[]);
        let (zero, w0) = in_cluster("0", a, extra);
        let (out0, out1) = (within(zero, LIMIT), within(one, LIMIT));
        w0.join().unwrap();
        w1.join().unwrap();
        let stdout = String::from_utf8_lossy(&out0.stdout).into_owned();
        assert!(
            out0.status.success(),
            "{}",
            String::from_utf8_lossy(&out0.stderr)
        );
        assert!(
            out1.status.success(),
            "{}",
            String::from_utf8_lossy(&out1.stderr)
        );
        summary(&stdout)
    };
    let (rows, rounds, _) = run(first.concat(), second.concat(), &["--model-out", &apart]);
    assert_eq!((rows, rounds), (3000, 15));
    let read = |p: &str| std::fs::read(p).unwrap();
    assert!(
        read(&together) == read(&apart),
        "one reader vs a reader per process: models differ"
    );

    // The second process's stream ends after 500 rows: it sends empty rounds until the
    // first's ends (1,500 rows, 100 a round).
    for (a, b) in [(first, &second[..500]), (&second[..500], first)] {
        let (rows, rounds, loss) = run(a.concat(), b.concat(), &[]);
        assert_eq!((rows, rounds), (2000, 15), "{loss}");
    }
}

/// Writes `rows` of the click table as a Parquet file: strings, and the price a double.
#[cfg(feature = "parquet")]
fn write_parquet_part(path: &Path, rows: &[[String; 5]]) {
    use arrow_array::{ArrayRef, Float64Array, RecordBatch, StringArray};
    use std::sync::Arc;
    let text = |c: usize| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r[c].clone()),
        ))
    };
    let price = Float64Array::from_iter_values(rows.iter().map(|r| r[3].parse().unwrap()));
    let batch = RecordBatch::try_from_iter([
        ("clicked", text(0)),
        ("site", text(1)),
        ("device", text(2)),
        ("price", Arc::new(price) as ArrayRef),
        ("note", text(4)),
    ])
    .unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}
