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
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        summary.contains("| 2 | job | sharded | none | 1 |") && summary.contains("1.00x"),
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
        for f in ["job.toml", "metrics.csv", "log.txt"] {
            assert!(out.join("cells").join(c).join(f).exists(), "{c}/{f}");
        }
    }
}

#[test]
fn a_shaped_link_runs_in_namespaces_at_its_rate_and_is_removed_afterwards() {
    let dir = tempfile::tempdir().unwrap();
    let suite = write_suite(dir.path(), r#"{ name = "20mbit", rate = "20mbit" }"#);
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
    assert!(
        !namespaces().contains("gfbench"),
        "namespaces left behind: {}",
        namespaces()
    );
}
