//! Hostile inputs and outputs through the command line, each a case that once replaced what it
//! should not have, trained on wrong input without a word, panicked or hung. Every process is
//! bounded in time (a hang fails the test).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_gradflow");

/// Runs `gradflow args` in `dir`; the test fails if it runs longer than 60 s.
fn run(dir: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("gradflow {args:?} still runs after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Standard error of a run that must fail (not crash: exit code 1, no panic).
fn failure(dir: &Path, args: &[&str]) -> String {
    let out = run(dir, args);
    let e = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "gradflow {args:?}: {e}");
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
    let mut specials = vec![("fifo", "is a FIFO")];
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
            &["data", "synth", "--rows", "5", "--dim", "5", "--out", name],
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
        ("fifo", "is a FIFO"),
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
