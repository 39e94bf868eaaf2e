//! `gradflow bench`: suites run as real clusters (spawned `gradflow` processes over TCP), over an
//! emulated link when the tests run as root.

mod common;

use std::path::Path;

use common::gradflow;

const BASE: &str = r#"
[data]
test_fraction = 0.2
[data.synth]
kind = "fields"
rows = 12000
seed = 1
[model]
loss = "logistic"
lambda = 1e-6
[optimizer]
kind = "adam"
lr = 0.01
[train]
epochs = 2
batch_fraction = 0.02
seed = 42
"#;

fn write_suite(dir: &Path, links: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("base.toml"), BASE).unwrap();
    let suite = format!(
        r#"
job = "base.toml"
processes = [2]
exchange = ["sharded", "allgather"]
links = [{links}]
[set]
"train.eval_every" = 10
[[compressor]]
name = "none"
[[compressor]]
name = "topk"
ratio = 0.02
"#
    );
    let p = dir.join("suite.toml");
    std::fs::write(&p, suite).unwrap();
    p
}

/// The tests that bring emulated links up run one at a time (a second bench is refused while
/// one holds the links).
static LINKS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root && std::process::Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn namespaces() -> String {
    std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// `gradflow bench SUITE --out OUT --only ONLY`, which must succeed; returns its stdout.
fn bench(suite: &Path, out: &Path, only: &str) -> String {
    let run = gradflow([
        "bench".as_ref(),
        suite.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--only".as_ref(),
        only.as_ref(),
    ]);
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    stdout
}

#[test]
fn a_suite_runs_every_cell_as_a_cluster_and_reports_bytes_losses_and_time_to_target() {
    let dir = tempfile::tempdir().unwrap();
    let suite = write_suite(dir.path(), r#""loopback""#);
    let out = dir.path().join("out");
    let dry = gradflow(["bench".as_ref(), suite.as_os_str(), "--dry-run".as_ref()]);
    let listed = String::from_utf8_lossy(&dry.stdout);
    assert!(dry.status.success(), "{listed}");
    assert!(
        listed.contains("4 cells")
            && listed.contains("loopback/W2/job/allgather/topk,ratio=0.02/r0")
    );
    assert!(!out.exists(), "a dry run writes nothing");

    bench(&suite, &out, "*sharded*");
    let rows: Vec<csv::StringRecord> = csv::Reader::from_path(out.join("results.csv"))
        .unwrap()
        .records()
        .map(Result::unwrap)
        .collect();
    // 2 cells (only sharded) x 2 epochs of 50 rounds, evaluated every 10 rounds: 10 rows each.
    assert_eq!(rows.len(), 20, "{rows:?}");
    let header = csv::Reader::from_path(out.join("results.csv"))
        .unwrap()
        .headers()
        .unwrap()
        .clone();
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let (cell, rounds, up) = (col("cell"), col("rounds"), col("up_bytes_per_process"));
    let none: Vec<&csv::StringRecord> = rows
        .iter()
        .filter(|r| r[cell].ends_with("/none/r0"))
        .collect();
    let topk: Vec<&csv::StringRecord> = rows.iter().filter(|r| r[cell].contains("topk")).collect();
    assert_eq!(
        none.iter()
            .map(|r| r[rounds].parse::<u64>().unwrap())
            .collect::<Vec<_>>(),
        [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    );
    let last_up = |rs: &[&csv::StringRecord]| rs.last().unwrap()[up].parse::<f64>().unwrap();
    assert!(
        last_up(&topk) < 0.5 * last_up(&none),
        "top-2% sends less than none: {} vs {}",
        last_up(&topk),
        last_up(&none)
    );
    // Every evaluation's test accuracy reaches the results (a logistic job: 0 to 1).
    let accuracy = col("test_accuracy");
    assert!(rows.iter().all(|r| r[accuracy]
        .parse::<f64>()
        .is_ok_and(|a| a > 0.0 && a <= 1.0)));
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        summary.contains("| 2 | job | sharded | none | 1 |")
            && summary.contains("1.00x")
            && summary.contains("| final loss | final acc | final AUC |"),
        "{summary}"
    );
    assert!(
        !summary.contains("allgather |"),
        "--only ran only the sharded cells: {summary}"
    );
    for c in [
        "loopback__W2__job__sharded__none__r0",
        "loopback__W2__job__sharded__topk,ratio=0.02__r0",
    ] {
        for f in ["job.toml", "metrics.csv", "log.txt", "model.txt"] {
            assert!(out.join("cells").join(c).join(f).exists(), "{c}/{f}");
        }
    }
    // Each cell its own model: the two codecs trained two different ones.
    let model = |c: &str| std::fs::read(out.join("cells").join(c).join("model.txt")).unwrap();
    assert_ne!(
        model("loopback__W2__job__sharded__none__r0"),
        model("loopback__W2__job__sharded__topk,ratio=0.02__r0")
    );
    // Plots, where a font is there to draw their text with (.ci/run installs one).
    if Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").exists() {
        for f in [
            "loss-vs-time-loopback.svg",
            "loss-vs-bytes-loopback.png",
            "stages-loopback.svg",
        ] {
            let len = std::fs::metadata(out.join(f)).map_or(0, |m| m.len());
            assert!(len > 1000, "{f}: {len} bytes");
        }
    }
    // --report-only writes the same report again from the cells, running nothing.
    std::fs::remove_file(out.join("summary.md")).unwrap();
    std::fs::remove_file(out.join("results.csv")).unwrap();
    let again = gradflow([
        "bench".as_ref(),
        suite.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--only".as_ref(),
        "*sharded*".as_ref(),
        "--report-only".as_ref(),
    ]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(out.join("summary.md")).unwrap(),
        summary
    );
    assert_eq!(
        csv::Reader::from_path(out.join("results.csv"))
            .unwrap()
            .records()
            .count(),
        20
    );
    // Without an earlier run there is nothing to report, and it says so.
    let empty = dir.path().join("empty");
    let none = gradflow([
        "bench".as_ref(),
        suite.as_os_str(),
        "--out".as_ref(),
        empty.as_os_str(),
        "--report-only".as_ref(),
    ]);
    let err = String::from_utf8_lossy(&none.stderr);
    assert!(
        !none.status.success() && err.contains("run the suite first"),
        "{err}"
    );
}

#[test]
fn a_shaped_link_runs_in_namespaces_at_its_rate_and_is_removed_afterwards() {
    let _links = LINKS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let suite = write_suite(
        dir.path(),
        r#"{ name = "20mbit", rate = "20mbit", delay = "1ms" }"#,
    );
    let out = dir.path().join("out");
    let stdout = bench(&suite, &out, "*/sharded/none/*");
    if !is_root() {
        assert!(
            stdout.contains("not root") || stdout.contains("no iproute2"),
            "{stdout}"
        );
        return;
    }
    // The probe's rate is within 80-105% of the setting (tbf here: 95-99%).
    let mbit: f64 = stdout
        .split("measured ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no measured rate in: {stdout}"));
    assert!(
        (16.0..=21.0).contains(&mbit),
        "20mbit link measured {mbit} Mbit/s"
    );
    // A delay needs netem; where the kernel lacks it, the report says so and the link runs.
    let netem = std::process::Command::new("modinfo")
        .arg("sch_netem")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        netem || stdout.contains("delay 1ms not emulated: no netem"),
        "{stdout}"
    );
    assert!(
        !namespaces().contains("gfbench"),
        "namespaces left behind: {}",
        namespaces()
    );
}

#[test]
fn an_interrupted_suite_removes_its_network_and_fails() {
    if !is_root() {
        return; // nothing to remove without namespaces
    }
    let _links = LINKS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let suite = write_suite(dir.path(), r#"{ name = "5mbit", rate = "5mbit" }"#);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_gradflow"))
        .arg("bench")
        .arg(&suite)
        .arg("--out")
        .arg(dir.path().join("out"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the namespaces, then interrupt as Ctrl-C would.
    let start = std::time::Instant::now();
    while !namespaces().contains("gfbench") {
        assert!(start.elapsed().as_secs() < 30, "no namespaces appeared");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // While it holds the links, a second bench with a shaped link is refused at once.
    let second = gradflow([
        "bench".as_ref(),
        suite.as_os_str(),
        "--out".as_ref(),
        dir.path().join("second").as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        !second.status.success() && err.contains("another gradflow bench"),
        "{err}"
    );
    assert!(
        namespaces().contains("gfbench"),
        "the refused bench removed nothing"
    );
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an interrupted suite fails");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(
        !namespaces().contains("gfbench"),
        "namespaces left behind: {}",
        namespaces()
    );
}
