//! Helpers the integration tests share: jobs from text, runs in one process, and clusters of
//! processes connected over loopback TCP, run from threads of the test.
#![allow(dead_code)] // each test crate uses its own subset

pub mod models;

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};

use gradflow::dataflow::Supervisor;
use gradflow::job::Job;
use gradflow::metrics::MetricsRow;
use gradflow::runtime::{quiet, run_job, ClusterSpec, RunOutcome};

/// The field-structured CTR generator (one value per field, popular values at low indices,
/// crosses; 105,060 features, 16 per row) with 2% batches.
pub const FIELDS_JOB: &str = r#"
[data]
test_fraction = 0.2
[data.synth]
kind = "fields"
rows = 20000
[model]
loss = "logistic"
lambda = 0.0001
[optimizer]
kind = "sgd"
lr = 2.0
[train]
epochs = 3
batch_fraction = 0.02
seed = 7
"#;

/// The job in `text` (named `name` in errors) with `overrides` (`section.field=value`).
pub fn job_from(text: &str, name: &str, overrides: &[&str]) -> Job {
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    Job::parse(text, Path::new(name), &o).unwrap()
}

/// Test loss at the end of every epoch.
pub fn epoch_losses(rows: &[MetricsRow]) -> Vec<f64> {
    rows.iter()
        .filter(|r| r.kind == "epoch")
        .map(|r| r.test_loss.unwrap())
        .collect()
}

/// Runs `job` in this process with `workers` threads.
pub fn run_local(job: &Job, workers: usize) -> RunOutcome {
    let spec = ClusterSpec {
        workers,
        ..ClusterSpec::default()
    };
    run_job(job, &spec, &Supervisor::new(), quiet()).unwrap()
}

/// The names of the entries of `dir`, sorted.
pub fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `n` free loopback ports.
pub fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// Writes a hostfile of `n` fresh loopback addresses into `dir`.
pub fn hostfile(dir: &Path, n: usize) -> std::path::PathBuf {
    let path = dir.join("hosts");
    let lines: String = free_ports(n)
        .iter()
        .map(|p| format!("127.0.0.1:{p}\n"))
        .collect();
    std::fs::write(&path, lines).unwrap();
    path
}

/// Runs `job` as `n` timely processes of one worker each, connected over loopback TCP, from
/// threads of this test.
pub fn run_processes(job: &Job, n: usize) -> Vec<RunOutcome> {
    let dir = tempfile::tempdir().unwrap();
    let hosts = hostfile(dir.path(), n);
    let handles: Vec<_> = (0..n)
        .map(|p| {
            let (job, hosts) = (job.clone(), hosts.clone());
            std::thread::spawn(move || {
                let spec = ClusterSpec {
                    workers: 1,
                    processes: n,
                    process: p,
                    hostfile: Some(hosts),
                    ..Default::default()
                };
                run_job(&job, &spec, &Supervisor::new(), quiet()).unwrap()
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// The output of `child`, which must end within `limit`: else it is killed and the test fails
/// (a hang).
pub fn within(mut child: std::process::Child, limit: std::time::Duration) -> Output {
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            child.kill().unwrap();
            panic!("a process still runs after {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Runs the `gradflow` binary with `args`.
pub fn gradflow<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_gradflow"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs the `gradflow` binary with `args`, asserts that it succeeded and returns its stdout.
pub fn gradflow_ok<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let out = gradflow(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs the `gradflow` binary with `args`, asserts that it succeeded and returns its stdout and
/// its stderr.
pub fn gradflow_outputs<I, S>(args: I) -> (String, String)
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let out = gradflow(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// The rows of `data` as sorted `(label, features)` lists.
pub fn row_list(data: &gradflow::data::Dataset) -> Vec<(u32, Vec<(u32, u32)>)> {
    let mut rows: Vec<_> = (0..data.rows())
        .map(|i| {
            let (k, v) = data.row(i);
            let f = k.iter().zip(v).map(|(k, v)| (*k, v.to_bits())).collect();
            (data.labels[i].to_bits(), f)
        })
        .collect();
    rows.sort();
    rows
}

/// The epoch lines of a `train` or `cluster` output (process 0's), each from the train loss to
/// before the traffic: what two runs of one model must print alike, whatever their timing.
pub fn epoch_fields(out: &str) -> Vec<String> {
    let lines = out.lines().map(|l| l.trim_start_matches("[p0] "));
    lines
        .filter(|l| l.starts_with("epoch"))
        .map(|l| {
            let fields = l.split("sent").next().unwrap();
            fields.split_once("s  ").unwrap().1.to_string()
        })
        .collect()
}
