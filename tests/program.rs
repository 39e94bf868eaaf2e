//! Job programs (`jobs/custom_dataflow.rs`) on the full runtime: run as real 2-process clusters
//! through their own command line, they train the model the standard loop trains, write the
//! same outputs, and stop every process when one of their operators fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gradflow::model::file::ModelFile;

/// The example program's executable, which `cargo test` builds beside the test binaries.
fn program() -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let exe = deps
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples")
        .join("custom_dataflow");
    assert!(exe.exists(), "{} not built", exe.display());
    exe
}

/// Runs `exe` with `args` and `env`, failing the test if it takes longer than `limit` (a hang).
fn run(exe: &Path, args: &[String], env: &[(&str, &str)], limit: Duration) -> Output {
    let mut child = Command::new(exe)
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            child.kill().unwrap();
            panic!("{} {args:?} still running after {limit:?}", exe.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// `cluster jobs/quickstart.toml -n 2 --epochs 1` with outputs in `dir` under `name`.
fn cluster_args(dir: &Path, name: &str) -> Vec<String> {
    let out = |f: &str| {
        format!(
            "{:?}",
            dir.join(format!("{name}-{f}")).display().to_string()
        )
    };
    [
        "cluster",
        "jobs/quickstart.toml",
        "-n",
        "2",
        "--epochs",
        "1",
        "--startup-timeout",
        "30",
        "--set",
        &format!("output.metrics={}", out("metrics.csv")),
        "--set",
        &format!("output.model={}", out("model.txt")),
    ]
    .map(String::from)
    .to_vec()
}

#[test]
fn a_program_runs_as_a_cluster_and_trains_the_standard_loops_model() {
    let dir = tempfile::tempdir().unwrap();
    let limit = Duration::from_secs(120);
    let custom = run(&program(), &cluster_args(dir.path(), "custom"), &[], limit);
    let stdout = String::from_utf8_lossy(&custom.stdout);
    assert!(
        custom.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&custom.stderr)
    );
    // Its own operator ran on the feedback edge, and the runtime counted bytes on the wire.
    assert!(stdout.contains("custom: worker 0, round 49:"), "{stdout}");
    assert!(stdout.contains("[p0] process 0 sent"), "{stdout}");
    assert!(stdout.contains("[p1] process 1 sent"), "{stdout}");
    let metrics = std::fs::read_to_string(dir.path().join("custom-metrics.csv")).unwrap();
    assert!(
        metrics.lines().any(|l| l.starts_with("epoch,")),
        "{metrics}"
    );

    // The same steps as the standard loop, plus an inspection: the same model, bit for bit.
    let standard = run(
        Path::new(env!("CARGO_BIN_EXE_gradflow")),
        &cluster_args(dir.path(), "standard"),
        &[],
        limit,
    );
    assert!(standard.status.success());
    let load = |name: &str| ModelFile::load(&dir.path().join(format!("{name}-model.txt"))).unwrap();
    let (a, b) = (load("custom"), load("standard"));
    assert!(!a.weights.is_empty() && a.weights.iter().any(|&w| w != 0.0));
    assert_eq!(a.weights, b.weights, "program and standard loop differ");
    assert_eq!(a.features, b.features, "the feature map is written too");
}

#[test]
fn a_failing_operator_of_a_program_stops_every_process_with_its_message() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        &program(),
        &cluster_args(dir.path(), "failing"),
        &[("CUSTOM_FAIL_AT", "30")],
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    for p in ["[p0] error: process 0", "[p1] error: process 1"] {
        let line = stderr.lines().find(|l| l.starts_with(p));
        assert!(
            line.is_some_and(|l| l.contains("asked to fail at round 30")),
            "{p}: {stderr}"
        );
    }
}
