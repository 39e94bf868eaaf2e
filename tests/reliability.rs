//! Hostile numbers and files through the command line: non-finite scores and weights, a
//! model file cut short, outputs that cannot be written. Each case once hung, passed silently
//! or failed only after training.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;

use common::within;

const BIN: &str = env!("CARGO_BIN_EXE_gradflow");

/// Runs `gradflow args` in `dir`, failing the test if it takes more than 60 s (a hang).
fn run(dir: &Path, args: &[&str]) -> Output {
    let child = Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    within(child, Duration::from_secs(60))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const MODEL_V2: &str = "# gradflow model v2\nloss logistic\ndim 3\nintercept none\nweights\n";

#[test]
fn predict_with_infinite_margins_ends_and_ranks_them() {
    let dir = tempfile::tempdir().unwrap();
    // Two finite values of 3e38 on weights of opposite sign: the margin is inf - inf = NaN.
    std::fs::write(dir.path().join("m.txt"), format!("{MODEL_V2}0 10\n1 -10\n")).unwrap();
    std::fs::write(
        dir.path().join("rows.svm"),
        "1 1:3e38 2:3e38\n-1 1:1\n1 1:2\n1 2:1\n",
    )
    .unwrap();
    let out = run(dir.path(), &["predict", "m.txt", "rows.svm"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // A v2 file loads, with a note that its cut could not be detected.
    let note = "m.txt: a model file of an older format, without a checksum: a file cut short at \
                a line's end cannot be told from a whole one";
    assert!(stderr(&out).contains(note), "{}", stderr(&out));
    let line = stderr(&out);
    // Scores: NaN (positive, ranked last), 10 (negative), 20 and -10 (positive): of the three
    // positives only 20 is above the negative.
    assert!(line.contains("auc 0.3333"), "{line}");
    // Every row is predicted, the NaN margin's too (class 0, probability NaN).
    let predictions = String::from_utf8_lossy(&out.stdout);
    assert_eq!(predictions.lines().count(), 4, "{predictions}");
}

#[test]
fn non_finite_or_repeated_weights_and_cut_models_are_refused_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rows.svm"), "1 1:1\n-1 2:1\n").unwrap();
    for (body, line, why) in [
        ("0 nan\n", 6, "not a finite f32"),
        ("0 1e39\n", 6, "not a finite f32"),
        ("0 1\n0 2\n", 7, "repeated"),
    ] {
        std::fs::write(dir.path().join("m.txt"), format!("{MODEL_V2}{body}")).unwrap();
        let out = run(dir.path(), &["predict", "m.txt", "rows.svm"]);
        let e = stderr(&out);
        assert!(!out.status.success(), "{body:?}");
        assert!(
            e.contains(&format!("m.txt:{line}: ")) && e.contains(why),
            "{e}"
        );
    }
    // A model written by train, cut inside a weight (`-0.` of `-0.25`): refused, where the
    // older format loaded it as another model.
    let job = "[data]\ntrain = \"rows.svm\"\ntest_fraction = 0.0\n[train]\nepochs = 1\nbatch_fraction = 0.5\n[output]\nmodel = \"trained.txt\"\n";
    std::fs::write(dir.path().join("job.toml"), job).unwrap();
    let out = run(dir.path(), &["train", "job.toml", "-q"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(dir.path().join("trained.txt")).unwrap();
    let cut = text.find("\n0 ").unwrap() + 5;
    std::fs::write(dir.path().join("cut.txt"), &text[..cut]).unwrap();
    for args in [
        &["predict", "cut.txt", "rows.svm"][..],
        &["train", "job.toml", "-q", "--init-model", "cut.txt"][..],
    ] {
        let out = run(dir.path(), args);
        let e = stderr(&out);
        assert!(
            !out.status.success() && e.contains("cut.txt") && e.contains("cut short"),
            "{e}"
        );
    }
}

#[test]
fn an_output_that_cannot_be_written_is_an_error_before_training() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a-file"), "").unwrap();
    let job = "[data.synth]\nrows = 200000\ndim = 1000\nnnz = 10\n[train]\nepochs = 50\n[output]\nmodel = \"a-file/model.txt\"\n";
    std::fs::write(dir.path().join("job.toml"), job).unwrap();
    let started = Instant::now();
    let out = run(dir.path(), &["train", "job.toml", "-q"]);
    let e = stderr(&out);
    assert!(!out.status.success(), "{e}");
    assert!(
        e.contains("output.model: a-file/model.txt: cannot be written"),
        "{e}"
    );
    // 50 epochs of 200,000 rows take far longer than finding the path.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// A process stopped (SIGSTOP) until its peer gives up, then continued, names itself: it used
/// to blame its healthy peer, which it could not hear while it was stopped.
#[test]
fn a_process_continued_after_a_stop_names_itself_not_its_peer() {
    let dir = tempfile::tempdir().unwrap();
    let job = "[data.synth]\nrows = 3000\ndim = 2000\nnnz = 10\n[train]\nepochs = 100000\n";
    std::fs::write(dir.path().join("job.toml"), job).unwrap();
    let hosts: Vec<String> = common::free_ports(2)
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let mut children: Vec<std::process::Child> = (0..2)
        .map(|p| {
            Command::new(BIN)
                .current_dir(dir.path())
                .args(["train", "job.toml", "-q", "-n", "2", "-p", &p.to_string()])
                .args(["--hosts", &hosts.join(","), "--peer-timeout", "2"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2)); // connected and training
    let stopped = children[1].id() as libc::pid_t;
    unsafe { libc::kill(stopped, libc::SIGSTOP) };
    let started = Instant::now();
    while children[0].try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "process 0 waits for ever"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    unsafe { libc::kill(stopped, libc::SIGCONT) };
    let outputs: Vec<Output> = children
        .into_iter()
        .map(|c| within(c, Duration::from_secs(30)))
        .collect();
    let (e0, e1) = (stderr(&outputs[0]), stderr(&outputs[1]));
    assert!(e0.contains("process 1 made no progress"), "{e0}");
    assert!(!outputs[1].status.success());
    assert!(
        e1.contains("this process (process 1) made no progress"),
        "{e1}"
    );
    assert!(!e1.contains("process 0 made no progress"), "{e1}");
}
