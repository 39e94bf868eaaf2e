//! End-to-end training: in-process timely workers, real multi-process clusters over loopback
//! TCP (spawned `gradflow` processes), bytes on the wire, and failures.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{
    epoch_losses, file_names, free_ports, gradflow, gradflow_ok, job_from, run_local, run_processes,
};
use gradflow::dataflow::Supervisor;
use gradflow::exchange::ExchangeKind;
use gradflow::job::Job;
use gradflow::model::file::ModelFile;
use gradflow::runtime::{quiet, run_job, ClusterSpec, RunOutcome};

const BIN: &str = env!("CARGO_BIN_EXE_gradflow");

/// A small CTR-like job: 20,000 rows, 20,000 features.
const SMALL_JOB: &str = r#"
[data.synth]
rows = 20000
dim = 20000
nnz = 20
[model]
loss = "logistic"
lambda = 0.01
[optimizer]
kind = "adam"
lr = 0.05
[train]
epochs = 4
seed = 7
"#;

fn job(overrides: &[&str]) -> Job {
    job_from(SMALL_JOB, "small.toml", overrides)
}

fn write_job(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn logistic_regression_learns_the_generated_data() {
    let out = run_local(&job(&[]), 1);
    let epochs: Vec<_> = out.rows.iter().filter(|r| r.kind == "epoch").collect();
    assert_eq!(epochs.len(), 4);
    let auc = epochs.last().unwrap().test_auc.unwrap();
    assert!(auc >= 0.72, "test AUC {auc} should reach 0.72");
    let first = out.rows.iter().find(|r| r.kind == "round").unwrap();
    assert!(
        (first.train_loss - std::f64::consts::LN_2).abs() < 1e-6,
        "round 0 starts from w = 0"
    );
    assert!(epochs.last().unwrap().train_loss < 0.62);
    assert_eq!(out.rows.iter().filter(|r| r.kind == "round").count(), 40);
    assert!(
        out.wire.data == 0 && out.wire.progress == 0,
        "one process sends nothing on the wire"
    );
}

#[test]
fn eval_every_adds_test_metrics_between_epochs_without_changing_training() {
    // 10 rounds per epoch, 4 epochs; evaluating every 4 rounds adds rows after rounds 4, 8, 12,
    // 16, 24, 28, 32 and 36 (20 and 40 are epoch ends). The pull exchange must fetch the test
    // rows' weights before each of them: it gives the broadcast model bit for bit, so its
    // evaluations must equal the broadcast run's.
    let kind = |out: &gradflow::runtime::RunOutcome, k: &str| -> Vec<(u64, f64)> {
        out.rows
            .iter()
            .filter(|r| r.kind == k)
            .map(|r| (r.round, r.test_loss.unwrap()))
            .collect()
    };
    let plain = run_local(&job(&["train.exchange=\"sharded\""]), 2);
    let every = run_local(
        &job(&["train.exchange=\"sharded\"", "train.eval_every=4"]),
        2,
    );
    let pulled = run_local(
        &job(&[
            "train.exchange=\"sharded\"",
            "train.eval_every=4",
            "train.pull=true",
        ]),
        2,
    );
    assert_eq!(
        kind(&every, "epoch"),
        kind(&plain, "epoch"),
        "training changed"
    );
    let evals = kind(&every, "eval");
    let rounds: Vec<u64> = evals.iter().map(|e| e.0).collect();
    assert_eq!(rounds, [3, 7, 11, 15, 23, 27, 31, 35]);
    assert!(kind(&plain, "eval").is_empty());
    assert!(evals.iter().all(|e| e.1.is_finite() && e.1 > 0.0));
    assert!(evals[0].1 > evals[7].1, "the test loss falls: {evals:?}");
    assert_eq!(kind(&pulled, "eval"), evals, "pull evaluated other weights");
    // Evaluation time is its own stage, on the round each evaluation follows and no other.
    for r in every.rows.iter().filter(|r| r.kind == "round") {
        let evaluated = (r.round + 1) % 4 == 0 || (r.round + 1) % 10 == 0;
        assert_eq!(
            r.eval_ms > 0.0,
            evaluated,
            "round {}: eval_ms {}",
            r.round,
            r.eval_ms
        );
    }
}

#[test]
fn every_loss_trains_and_reports_its_metrics() {
    let svm = run_local(&job(&["model.loss=\"hinge\""]), 1);
    let last = svm.rows.iter().rfind(|r| r.kind == "epoch").unwrap();
    assert!(last.test_auc.unwrap() > 0.7, "svm auc {:?}", last.test_auc);
    let lin = run_local(&job(&["model.loss=\"squared\"", "optimizer.lr=0.01"]), 1);
    let first = lin.rows.iter().find(|r| r.kind == "epoch").unwrap();
    let last = lin.rows.iter().rfind(|r| r.kind == "epoch").unwrap();
    assert!(
        last.test_rmse.unwrap() < first.test_rmse.unwrap(),
        "rmse should fall"
    );
    assert!(last.test_auc.is_none() && last.test_rmse.is_some());
}

#[test]
fn same_seed_same_model_and_exchanges_agree() {
    let a = run_local(&job(&[]), 2).weights.unwrap();
    let b = run_local(&job(&[]), 2).weights.unwrap();
    assert_eq!(a, b, "same job, same result");
    let g = run_local(&job(&["train.exchange=\"allgather\""]), 2)
        .weights
        .unwrap();
    let max_diff = a
        .iter()
        .zip(&g)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(
        max_diff <= 1e-6,
        "sharded and allgather differ by {max_diff}"
    );
    let other_seed = run_local(&job(&["train.seed=8"]), 2).weights.unwrap();
    assert_ne!(a, other_seed);
}

/// How far above the uncompressed test loss each codec may end any epoch of the job below, as
/// a fraction, under (Adam, plain SGD): at least 1.2x the worst excess over eight training
/// seeds (`bash bench/tolerances.sh`, seeds 42 and 1-7; the range is in the comment, in %,
/// Adam then SGD), so that a broken codec fails and another trajectory does not. The test runs
/// seed 42, which was the best of the eight for sketchml under Adam: its tolerance was once
/// twice seed 42's excess, 1.5%, and seeds 1 and 3 exceed that. The papers' FastSGD is held to
/// 0.5%. Where the excess is large it is the codec's design meeting this set (1% batches of
/// sparse one-hot rows, λ = 1e-6), not noise: unbiased sparsifiers and quantisers (randomk,
/// gspar, qsgd, terngrad) rescale rare coordinates by 1/p, which Adam's per-key normalisation
/// turns into full-size noisy steps; signSGD under Adam runs without memory (see `docs/codecs.md`);
/// SketchML's excess under Adam is largest at epoch 1 and shrinks each epoch (at epoch 3:
/// +0.28% to +0.70% at seeds 42, 1 and 3).
const TOLERANCES: &[(&str, f64, f64)] = &[
    ("none", 0.0, 0.0),
    ("none64", 0.0, 0.0),
    ("zipml", 0.001, 0.001),      // -0.002..+0.032 / -0.002..+0.006
    ("fastsgd", 0.005, 0.005),    // -0.001..+0.011 / +0.157..+0.204
    ("sketchml", 0.020, 0.005),   // +0.943..+1.624 / -0.130..+0.227 (lazy residual under SGD)
    ("skcompress", 0.020, 0.005), // the same numbers: the same values, coded smaller
    ("gspar", 0.15, 0.02),        // +6.54..+7.21 / +0.51..+1.10
    ("topk", 0.012, 0.001),       // +0.539..+0.673 / +0.001, with its residual
    ("randomk", 0.40, 0.10),      // +19.3..+22.5 / +3.66..+8.17
    ("threshold", 0.007, 0.001),  // +0.305..+0.386 / +0.001..+0.008, with its residual
    ("qsgd", 0.05, 0.003),        // +2.03..+2.42 / +0.034..+0.253
    ("terngrad", 0.08, 0.018),    // +4.36..+5.37 / +0.90..+1.47
    ("signsgd", 0.60, 0.13),      // +23.8..+27.1 / +5.69..+6.50 (residual under SGD only)
    ("signsgd-vote", 0.60, 0.13), // +23.6..+26.8 / +5.68..+6.49
    ("logquant", 0.0035, 0.001),  // +0.099..+0.254 / -0.110..-0.003
];

/// Every codec, with its paper's memory, against the uncompressed run at the same epoch, under
/// Adam and under plain SGD (where a scale error shows: Adam normalises it away), on the
/// field-structured CTR set with weak regularisation.
#[test]
fn every_codec_stays_within_its_tolerance_of_uncompressed_training_at_every_epoch() {
    const JOB: &str = include_str!("../bench/tolerances.toml");
    let losses = |table: &str, optimizer: &[&str]| {
        let mut overrides = vec![format!("train.compressor={table}")];
        overrides.extend(optimizer.iter().map(|o| o.to_string()));
        let overrides: Vec<&str> = overrides.iter().map(String::as_str).collect();
        epoch_losses(&run_local(&job_from(JOB, "codecs.toml", &overrides), 2).rows)
    };
    let optimizers: [&[&str]; 2] = [
        &["optimizer.kind=\"adam\"", "optimizer.lr=0.01"],
        &["optimizer.kind=\"sgd\"", "optimizer.lr=2.0"],
    ];
    let references: Vec<Vec<f64>> = optimizers
        .iter()
        .map(|o| losses("{name=\"none\"}", o))
        .collect();
    let (mut report, mut failed) = (String::new(), false);
    let codecs = gradflow::codec::CODEC_NAMES
        .iter()
        .map(|c| (c.to_string(), format!("{{name=\"{c}\"}}")))
        .chain([(
            "signsgd-vote".to_string(),
            "{name=\"signsgd\",vote=true}".to_string(),
        )]);
    for (name, table) in codecs {
        for (optimizer, reference) in optimizers.iter().zip(&references) {
            let excess = losses(&table, optimizer)
                .iter()
                .zip(reference)
                .map(|(l, r)| l / r - 1.0)
                .fold(f64::MIN, f64::max);
            let &(_, adam, sgd) = TOLERANCES.iter().find(|t| t.0 == name).unwrap();
            let allowed = if optimizer[0].contains("adam") {
                adam
            } else {
                sgd
            };
            failed |= excess > allowed;
            report += &format!(
                "{name:>12} {:<22} worst epoch {:+.3}% (allowed {:.2}%)\n",
                optimizer[0],
                100.0 * excess,
                100.0 * allowed
            );
        }
    }
    println!("{report}");
    assert!(!failed, "{report}");
}

#[test]
fn non_finite_gradients_stop_the_run_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let data = write_job(
        dir.path(),
        "huge.svm",
        "1 1:1e30 2:1\n-1 2:1\n1 1:1e30\n-1 2:2\n",
    );
    let text = format!(
        "[data]\ntrain = {:?}\ntest_fraction = 0.0\n[model]\nloss = \"squared\"\n[optimizer]\nkind = \"sgd\"\n[train]\nepochs = 5\nbatch_fraction = 0.5\n",
        data.display().to_string()
    );
    let j = Job::parse(&text, Path::new("nan.toml"), &[]).unwrap();
    let e = run_job(
        &j,
        &ClusterSpec {
            workers: 2,
            ..Default::default()
        },
        &Supervisor::new(),
        quiet(),
    )
    .unwrap_err();
    assert!(e.contains("not finite") && e.contains("key 0"), "{e}");
}

/// Runs `gradflow train` on `job_path` with `args`; returns the model file written.
fn train_cli(job_path: &Path, out: &Path, args: &[&str]) -> ModelFile {
    let status = Command::new(BIN)
        .arg("train")
        .arg(job_path)
        .args(args)
        .args(["--quiet", "--set"])
        .arg(format!("output.model={:?}", out.display().to_string()))
        .status()
        .unwrap();
    assert!(status.success());
    ModelFile::load(out).unwrap()
}

#[test]
fn two_processes_give_the_model_of_one_process_with_two_workers() {
    let dir = tempfile::tempdir().unwrap();
    let job_path = write_job(dir.path(), "small.toml", SMALL_JOB);
    for (exchange, codec) in [
        ("sharded", "none"),
        ("allgather", "none"),
        ("sharded", "gspar"),
        ("sharded", "sketchml"),
        ("sharded", "topk"), // with its residual memory
        ("sketch", "none"),
    ] {
        let codec_set = format!("train.compressor={{name=\"{codec}\"}}");
        let threads = train_cli(
            &job_path,
            &dir.path().join("t.txt"),
            &["-w", "2", "--exchange", exchange, "--set", &codec_set],
        );
        let cluster_model = dir.path().join("c.txt");
        let output = Command::new(BIN)
            .args(["cluster"])
            .arg(&job_path)
            .args([
                "-n",
                "2",
                "-w",
                "1",
                "--exchange",
                exchange,
                "--set",
                &codec_set,
                "--set",
            ])
            .arg(format!(
                "output.model={:?}",
                cluster_model.display().to_string()
            ))
            .env_remove(gradflow::runtime::SECRET_VARIABLE)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stdout}\n{stderr}");
        // The launcher generated a cluster secret and gave it to its processes.
        assert!(
            !stdout.contains("no cluster secret") && !stderr.contains("no cluster secret"),
            "{stderr}"
        );
        assert!(
            stdout.contains("[p0] epoch   4") && stdout.contains("[p1] process 1 sent"),
            "{stdout}"
        );
        // The run says how its gradients move, with the memory it resolved.
        let said = format!("[p0] exchange: {exchange}");
        assert!(stdout.contains(&said), "{said} in {stdout}");
        if codec == "topk" {
            assert!(stdout.contains("memory residual"), "{stdout}");
        }
        let processes = ModelFile::load(&cluster_model).unwrap();
        assert_eq!(
            threads, processes,
            "{exchange}, {codec}: 2 processes x 1 worker must equal 1 process x 2 workers"
        );
    }
}

#[test]
fn bytes_on_the_wire_are_the_payloads_plus_framing() {
    // Two timely processes connected over loopback TCP, run from two threads of this test.
    let ports = free_ports(2);
    let dir = tempfile::tempdir().unwrap();
    let hosts = write_job(
        dir.path(),
        "hosts",
        &format!("127.0.0.1:{}\n127.0.0.1:{}\n", ports[0], ports[1]),
    );
    for exchange in [ExchangeKind::Sharded, ExchangeKind::Allgather] {
        let ports = free_ports(2);
        std::fs::write(
            &hosts,
            format!("127.0.0.1:{}\n127.0.0.1:{}\n", ports[0], ports[1]),
        )
        .unwrap();
        let mut j = job(&[]);
        j.train.exchange = exchange;
        let handles: Vec<_> = (0..2)
            .map(|p| {
                let (j, hosts) = (j.clone(), hosts.clone());
                std::thread::spawn(move || {
                    let spec = ClusterSpec {
                        workers: 1,
                        processes: 2,
                        process: p,
                        hostfile: Some(hosts),
                        ..Default::default()
                    };
                    run_job(&j, &spec, &Supervisor::new(), quiet()).unwrap()
                })
            })
            .collect();
        let outs: Vec<RunOutcome> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let rows = &outs[0].rows;
        let payload: u64 = rows
            .iter()
            .filter(|r| r.kind == "round")
            .map(|r| r.uplink_bytes + r.downlink_bytes)
            .sum();
        let wire: u64 = outs.iter().map(|o| o.wire.data).sum();
        let messages: u64 = outs.iter().map(|o| o.wire.data_messages).sum();
        let progress: u64 = outs.iter().map(|o| o.wire.progress).sum();
        assert!(
            payload > 0 && progress > 0,
            "{exchange:?}: payload {payload}, progress {progress}"
        );
        // Framing per timely message: 48-byte header, 16 (source, sequence) + 16 (stamp) + 8
        // (vector length) + padding, and 20 per envelope; plus worker 1's statistics for
        // worker 0 (about 120 bytes a round and 8 bytes per test row per epoch).
        let test_rows = 20000 / 4;
        let slack = 100 * messages + 20 * 4 * 40 + 150 * 40 + 8 * test_rows * 4;
        assert!(
            wire > payload && wire <= payload + slack,
            "{exchange:?}: wire {wire}, payload {payload}, slack {slack}"
        );
        // Per-round wire columns of process 0 add up to its total.
        let per_round: u64 = rows
            .iter()
            .filter(|r| r.kind == "round")
            .map(|r| r.wire_data_bytes)
            .sum();
        assert_eq!(per_round, outs[0].wire.data);
        // Sharded sends each key once to its owner and back; allgather sends whole gradients.
        eprintln!("{exchange:?}: payload {payload} B, wire data {wire} B in {messages} messages, progress {progress} B");
    }
}

#[test]
fn killing_a_process_stops_the_other_within_ten_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let long = SMALL_JOB.replace("epochs = 4", "epochs = 100000");
    let job_path = write_job(dir.path(), "long.toml", &long);
    let ports = free_ports(2);
    let hosts = write_job(
        dir.path(),
        "hosts",
        &format!("127.0.0.1:{}\n127.0.0.1:{}\n", ports[0], ports[1]),
    );
    let spawn = |p: usize| {
        Command::new(BIN)
            .arg("train")
            .arg(&job_path)
            .args([
                "--processes",
                "2",
                "--process",
                &p.to_string(),
                "--hostfile",
            ])
            .arg(&hosts)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut p0 = spawn(0);
    let mut p1 = spawn(1);
    // Wait until training is under way: process 0 prints its first epoch line.
    let mut lines = BufReader::new(p0.stdout.take().unwrap()).lines();
    let first = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.starts_with("epoch"));
    assert!(first.is_some(), "process 0 never reported an epoch");
    std::thread::spawn(move || for _ in lines.by_ref() {});
    p1.kill().unwrap();
    p1.wait().unwrap();
    let killed = Instant::now();
    let status = loop {
        if let Some(s) = p0.try_wait().unwrap() {
            break s;
        }
        if killed.elapsed() > Duration::from_secs(10) {
            let _ = p0.kill();
            panic!("process 0 still running 10 s after its peer died");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The status says the failure was the peer's (the cluster launcher blames the peer).
    assert_eq!(
        status.code(),
        Some(gradflow::cli::EXIT_LOST_PEER),
        "{status}"
    );
    let mut err = String::new();
    std::io::Read::read_to_string(&mut p0.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        err.contains("error: process 0: lost the connection to process 1"),
        "{err}"
    );
}

/// The `gradflow cluster` processes of launcher `pid` that have started, by process index
/// (from their command lines), read from /proc.
#[cfg(target_os = "linux")]
fn cluster_children(pid: u32) -> Vec<(usize, u32)> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    let mut found: Vec<(usize, u32)> = children
        .split_whitespace()
        .filter_map(|c| {
            let child: u32 = c.parse().unwrap();
            // (a child between fork and exec still has the launcher's command line)
            let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).ok()?;
            let args: Vec<String> = cmdline
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let at = args.iter().position(|a| a == "--process")?;
            Some((args[at + 1].parse().unwrap(), child))
        })
        .collect();
    found.sort();
    found
}

/// Whether `pid` is gone (or a zombie nobody has reaped yet: it runs no more).
#[cfg(target_os = "linux")]
fn is_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .unwrap()
            .trim_start()
            .starts_with('Z'),
    }
}

/// Starts `gradflow cluster` with 3 processes on a long job and returns it once process 0
/// trains, with its child processes by index.
#[cfg(target_os = "linux")]
fn start_long_cluster(job_path: &Path, args: &[&str]) -> (std::process::Child, Vec<(usize, u32)>) {
    let mut launcher = Command::new(BIN)
        .arg("cluster")
        .arg(job_path)
        .args(["-n", "3"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(launcher.stdout.take().unwrap()).lines();
    let first = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.starts_with("[p0] epoch"));
    assert!(first.is_some(), "process 0 never reported an epoch");
    std::thread::spawn(move || for _ in lines.by_ref() {});
    let children = cluster_children(launcher.id());
    let indices: Vec<usize> = children.iter().map(|c| c.0).collect();
    assert_eq!(indices, [0, 1, 2]);
    (launcher, children)
}

/// The output of `launcher`, which must end within `limit`.
#[cfg(target_os = "linux")]
fn wait_for_launcher(mut launcher: std::process::Child, limit: Duration) -> std::process::Output {
    let started = Instant::now();
    while launcher.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            let _ = launcher.kill();
            panic!("the launcher still runs after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    launcher.wait_with_output().unwrap()
}

#[test]
#[cfg(target_os = "linux")]
fn a_stopped_process_stops_the_cluster_with_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let long = SMALL_JOB
        .replace("epochs = 4", "epochs = 100000")
        .replace("rows = 20000", "rows = 3000");
    let job_path = write_job(dir.path(), "long.toml", &long);
    // SIGSTOP: the process keeps its connections open and sends nothing, as a frozen machine.
    let (launcher, children) = start_long_cluster(&job_path, &["--peer-timeout", "2"]);
    let stopped = Instant::now();
    unsafe { libc::kill(children[1].1 as libc::pid_t, libc::SIGSTOP) };
    // 2 s of silence, up to 3 s for a process to leave its stuck threads, 2 s of grace.
    let out = wait_for_launcher(launcher, Duration::from_secs(20));
    let took = stopped.elapsed();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for survivor in [0, 2] {
        let says =
            format!("[p{survivor}] error: process {survivor}: process 1 made no progress for 2 s");
        assert!(err.contains(&says), "{err}");
    }
    assert!(err.contains("error: process 1 failed first"), "{err}");
    assert!(
        took >= Duration::from_secs(2),
        "{took:?}: stopped before the timeout"
    );
    assert!(children.iter().all(|c| is_gone(c.1)));
}

#[test]
#[cfg(target_os = "linux")]
fn the_cluster_launcher_names_the_first_failure_and_its_processes_die_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let long = SMALL_JOB
        .replace("epochs = 4", "epochs = 100000")
        .replace("rows = 20000", "rows = 3000");
    let job_path = write_job(dir.path(), "long.toml", &long);

    // Process 2 (the last index, so a poll in index order would name a survivor) is killed:
    // the others stop because of it, and the launcher blames process 2.
    let (launcher, children) = start_long_cluster(&job_path, &[]);
    unsafe { libc::kill(children[2].1 as libc::pid_t, libc::SIGKILL) };
    let out = wait_for_launcher(launcher, Duration::from_secs(10));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("process 2 failed first"), "{err}");
    assert!(children.iter().all(|c| is_gone(c.1)));

    // The launcher itself is killed (SIGKILL: no destructor, no signal handler runs) while
    // its processes are quiet (no output whose broken pipe would stop them): they die with it
    // instead of training on as orphans.
    let mut launcher = Command::new(BIN)
        .arg("cluster")
        .arg(&job_path)
        .args(["-n", "3", "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let children = loop {
        let children = cluster_children(launcher.id());
        if children.len() == 3 {
            break children;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{children:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(500));
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    let killed = Instant::now();
    while !children.iter().all(|c| is_gone(c.1)) {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "orphans: {children:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The addresses went on the command line: no temporary hostfile is left behind.
    let leftover = std::env::temp_dir().join(format!("gradflow-hosts-{}", launcher.id()));
    assert!(!leftover.exists());
}

#[test]
fn a_peer_that_never_starts_is_a_timeout_error() {
    let dir = tempfile::tempdir().unwrap();
    let job_path = write_job(dir.path(), "small.toml", SMALL_JOB);
    let ports = free_ports(2);
    let hosts = write_job(
        dir.path(),
        "hosts",
        &format!("127.0.0.1:{}\n127.0.0.1:{}\n", ports[0], ports[1]),
    );
    let started = Instant::now();
    let out = Command::new(BIN)
        .arg("train")
        .arg(&job_path)
        .args([
            "--processes",
            "2",
            "--process",
            "1",
            "--startup-timeout",
            "6",
            "--hostfile",
        ])
        .arg(&hosts)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(started.elapsed() < Duration::from_secs(12));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("timed out after 6 s"), "{err}");
    // While it waits, it says for whom, where, and how long of how long.
    let waiting = format!(
        "process 1: waiting for process 0 at 127.0.0.1:{} (",
        ports[0]
    );
    assert!(
        err.contains(&waiting) && err.contains(", 5 s of 6"),
        "{err}"
    );
}

#[test]
fn bad_job_files_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write_job(
        dir.path(),
        "bad.toml",
        "[train]\nepochs = 2\nexchnage = \"sharded\"\n",
    );
    let out = Command::new(BIN).arg("train").arg(&bad).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("exchnage") && err.contains("bad.toml"),
        "{err}"
    );
    let out = Command::new(BIN)
        .arg("train")
        .arg(dir.path().join("missing.toml"))
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn predict_reads_the_saved_model() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d.svm");
    let st = Command::new(BIN)
        .args([
            "data", "synth", "--rows", "3000", "--dim", "2000", "--nnz", "10", "--out",
        ])
        .arg(&data)
        .status()
        .unwrap();
    assert!(st.success());
    let job_text = format!(
        "[data]\ntrain = {:?}\n[train]\nepochs = 3\n",
        data.display().to_string()
    );
    let job_path = write_job(dir.path(), "j.toml", &job_text);
    let model = dir.path().join("m.txt");
    train_cli(&job_path, &model, &[]);
    let preds = dir.path().join("p.txt");
    let out = Command::new(BIN)
        .arg("predict")
        .arg(&model)
        .arg(&data)
        .arg("--out")
        .arg(&preds)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("rows 3000") && said.contains("auc"), "{said}");
    assert!(out.stdout.is_empty(), "the predictions went to --out");
    // A line per row: the class, then the probability of class 1; the class is 1 exactly
    // when that probability is above one half.
    let p: Vec<(f32, f32)> = std::fs::read_to_string(&preds)
        .unwrap()
        .lines()
        .map(|l| {
            let (c, p) = l.split_once(' ').unwrap();
            (c.parse().unwrap(), p.parse().unwrap())
        })
        .collect();
    assert_eq!(p.len(), 3000);
    assert!(p.iter().all(|(_, x)| (0.0..=1.0).contains(x)));
    let agree = |&(c, x): &(f32, f32)| x == 0.5 || c == (x > 0.5) as u8 as f32;
    assert!(p.iter().all(agree), "{p:?}");
    assert!(p.iter().any(|l| l.0 == 1.0) && p.iter().any(|l| l.0 == 0.0));

    // Features the model never saw (beyond its dimension) are ignored and counted, in
    // `predict` and in a training job's separate test file; a row keeps its other features.
    let unseen = dir.path().join("unseen.svm");
    std::fs::write(&unseen, "1 3:1 5000:1 9999:2\n0 7:1\n").unwrap();
    let out = Command::new(BIN)
        .arg("predict")
        .arg(&model)
        .arg(&unseen)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("rows 2")
            && said.contains("2 features beyond the model's dimension 2000 ignored"),
        "{said}"
    );
    // Without --out, the predictions are on standard output.
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
    let with_test = write_job(
        dir.path(),
        "t.toml",
        &format!(
            "[data]\ntrain = {:?}\ntest = {:?}\n[train]\nepochs = 1\n",
            data.display().to_string(),
            unseen.display().to_string()
        ),
    );
    let out = Command::new(BIN)
        .arg("train")
        .arg(&with_test)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the test file has 2 features beyond the training data's dimension 2000"),
        "{stderr}"
    );
}

#[test]
fn codec_commands_print_the_documented_columns_and_reject_bad_input() {
    let text = gradflow_ok([
        "codec",
        "compare",
        "--synth",
        "100000,2000,3",
        "--repeats",
        "1",
        "--csv",
    ]);
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "codec,bytes,bytes_per_pair,key_bits_per_key,value_bits_per_value,encode_ms,decode_ms,median_rel_err,mean_rel_err,max_abs_err,rel_l2_err,sign_flips,underestimated,kept"
    );
    assert_eq!(
        lines.count(),
        gradflow::codec::CODEC_NAMES.len(),
        "one row per codec"
    );

    // A gradient file round trip through --input.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.bin");
    gradflow::codec::measure::write_gradient(
        &file,
        &gradflow::codec::measure::synth_gradient(50_000, 1000, 0.01, 1),
    )
    .unwrap();
    let args = ["codec", "keys", "--csv", "--dim", "50000", "--input"];
    let text = gradflow_ok(
        args.iter()
            .map(std::ffi::OsStr::new)
            .chain([file.as_os_str()]),
    );
    assert!(
        text.starts_with(
            "coder,bits_per_key,entropy_bits_per_key,encode_mkeys_per_s,decode_mkeys_per_s"
        ),
        "{text}"
    );
    assert_eq!(text.lines().count(), 5, "raw, delta_binary, adaptive, rice");

    // For people: an aligned table; codec parameters in --codecs label their rows.
    let text = gradflow_ok([
        "codec",
        "compare",
        "--synth",
        "100000,2000,3",
        "--repeats",
        "1",
        "--codecs",
        "topk:ratio=0.01,keys=raw,fastsgd",
    ]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines
            .iter()
            .all(|l| !l.contains(',') || l.starts_with("topk:")),
        "{text}"
    );
    assert!(
        lines[0].starts_with("codec ") && lines[0].contains("  median_rel_err"),
        "{text}"
    );
    assert!(lines[1].starts_with("topk:ratio=0.01,keys=raw "), "{text}");
    assert!(
        lines[1].trim_end().ends_with("0.01000"),
        "kept 1%: {}",
        lines[1]
    );
    assert!(lines[2].starts_with("fastsgd "), "{text}");
    let widths: Vec<usize> = lines.iter().map(|l| l.len()).collect();
    assert!(
        widths.iter().all(|&w| w == widths[0]),
        "aligned: {widths:?}"
    );

    for (args, needle) in [
        (vec!["codec", "compare", "--synth", "10,20"], "0 < d <= D"),
        (vec!["codec", "compare", "--synth", "100,x"], "bad d"),
        (
            vec!["codec", "compare", "--synth", "1000,10", "--codecs", "zstd"],
            "unknown codec 'zstd'",
        ),
        (
            vec![
                "codec",
                "compare",
                "--synth",
                "1000,10",
                "--codecs",
                "topk:ratoi=0.1",
            ],
            "ratoi",
        ),
        (
            vec![
                "codec",
                "compare",
                "--synth",
                "1000,10",
                "--codecs",
                "topk:ratio=7",
            ],
            "ratio",
        ),
        (
            vec![
                "codec", "compare", "--synth", "1000,10", "--codecs", "keys=raw",
            ],
            "before any codec name",
        ),
        (
            vec![
                "codec",
                "keys",
                "--dim",
                "10",
                "--input",
                "/nonexistent/g.bin",
            ],
            "/nonexistent/g.bin",
        ),
        (vec!["codec", "keys", "--dim", "100"], "--input"),
    ] {
        let out = Command::new(BIN).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(needle),
            "{args:?}: {err}"
        );
    }
}

/// A codec whose filter keeps nothing (FastSGD with a threshold of half the L1 norm) is visible:
/// the metrics show a kept fraction of 0 and training warns after three silent rounds.
#[test]
fn a_codec_that_sends_nothing_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let job_path = write_job(dir.path(), "small.toml", SMALL_JOB);
    let metrics = dir.path().join("m.csv");
    let train = |codec: &str| {
        gradflow([
            "train".to_string(),
            job_path.display().to_string(),
            "--epochs=1".into(),
            "--quiet".into(),
            format!("--set=train.compressor={codec}"),
            format!("--set=output.metrics={:?}", metrics.display().to_string()),
        ])
    };
    let out = train("{name=\"fastsgd\",b=2.0,tau=1}");
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("sent no key for 3 rounds").count(),
        1,
        "{stderr}"
    );
    let mut reader = csv::Reader::from_path(&metrics).unwrap();
    let column = reader
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "kept_fraction")
        .unwrap();
    let kept: Vec<String> = reader
        .records()
        .map(|r| r.unwrap())
        .filter(|r| &r[0] == "round")
        .map(|r| r[column].to_string())
        .collect();
    assert!(
        !kept.is_empty() && kept.iter().all(|k| k == "0.0"),
        "{kept:?}"
    );
    // The default FastSGD keeps most of this small gradient, and says nothing.
    let out = train("{name=\"fastsgd\"}");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `train --dump-gradients DIR` writes each worker's real gradient of each round in the format
/// `codec compare --input` reads; an unwritable directory is an error naming it.
#[test]
fn training_gradients_can_be_dumped_and_compared() {
    let dir = tempfile::tempdir().unwrap();
    let job_path = write_job(dir.path(), "small.toml", SMALL_JOB);
    let dump = dir.path().join("grads");
    let train = |to: &Path| {
        let mut args: Vec<std::ffi::OsString> = vec!["train".into(), job_path.clone().into()];
        args.extend(["-w", "2", "--epochs", "1", "--quiet", "--dump-gradients"].map(Into::into));
        args.push(to.into());
        gradflow(args)
    };
    assert!(train(&dump).status.success());
    let files = file_names(&dump);
    assert_eq!(files.len(), 20, "10 rounds x 2 workers: {files:?}");
    assert_eq!(files[0], "round00000-worker0.bin");
    let file = dump.join("round00003-worker1.bin");
    let g = gradflow::codec::measure::read_gradient(&file, 20_001).unwrap(); // 20,000 features and the intercept
    assert!(
        g.len() > 1000,
        "a real mini-batch gradient: {} keys",
        g.len()
    );
    let text = gradflow_ok(
        [
            "codec",
            "compare",
            "--csv",
            "--dim",
            "20001",
            "--codecs",
            "none,topk",
            "--input",
        ]
        .iter()
        .map(std::ffi::OsStr::new)
        .chain([file.as_os_str()]),
    );
    let none = text.lines().nth(1).unwrap();
    assert!(
        none.starts_with(&format!("none,{},8.", 10 + 8 * g.len())),
        "{text}"
    );
    // A directory under a file cannot be created.
    let out = train(&dir.path().join("small.toml").join("sub"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("output.gradients"),
        "{err}"
    );
}

/// SketchML on the embedded flights table with the time split (`test_split = "tail"`: the
/// test rows are the last 20% of the year, whose dates and date crosses training never saw).
/// The MinMaxSketch shrinks the largest magnitudes of each group most, and by different
/// factors for the two signs (`docs/codecs.md`, SketchML notes), which moves the optimum; on this split
/// the date features cannot absorb the shift and the test loss drifts away from uncompressed
/// training epoch after epoch. A lazy residual returns what was shrunk. 2 workers, allgather,
/// 1% batches, λ = 1e-6: the setting of the drift's report.
#[test]
fn sketchml_with_a_lazy_residual_does_not_drift_on_the_flights_time_split() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string("jobs/quickstart.toml").unwrap();
    let losses = |overrides: &[&str]| {
        let out = |f: &str| format!("{:?}", dir.path().join(f).display().to_string());
        let mut o = vec![
            "data.test_split=\"tail\"".to_string(),
            "model.lambda=1e-6".to_string(),
            "train.epochs=6".to_string(),
            "train.exchange=\"allgather\"".to_string(),
            format!("output.metrics={}", out("m.csv")),
            format!("output.model={}", out("model.txt")),
        ];
        o.extend(overrides.iter().map(|s| s.to_string()));
        let o: Vec<&str> = o.iter().map(String::as_str).collect();
        epoch_losses(&run_local(&job_from(&text, "quickstart.toml", &o), 2).rows)
    };
    let excess = |a: &[f64], reference: &[f64], from: usize| {
        a.iter()
            .zip(reference)
            .skip(from)
            .map(|(l, r)| l / r - 1.0)
            .fold(f64::MIN, f64::max)
    };
    let adam = ["optimizer.kind=\"adam\"", "optimizer.lr=0.01"];
    let sketchml = "train.compressor={name=\"sketchml\",decode=\"edge\"}";
    let reference = losses(&[&adam[..], &["train.compressor={name=\"none\"}"]].concat());
    // The set catches the drift: without memory, sketchml ends epochs 4-6 above uncompressed
    // by more than 2% (measured: +3.5%, +7.6%, +6.7%; `decode = "mean"`: +5.7%, +10.7%, +11%;
    // at training seeds 1-7 the worst of epochs 4-6 was +2.9% to +9.7%).
    let drifting = losses(&[&adam[..], &[sketchml, "train.memory=\"none\""]].concat());
    assert!(
        excess(&drifting, &reference, 3) > 0.02,
        "no drift to catch: {drifting:?} against {reference:?}"
    );
    // With a lazy residual and the default `mean` table it stays within 1% from epoch 3 on
    // (the first two epochs are above while the residuals build up; measured: -0.28%). Over
    // twenty hash seeds of the sketch (a throwaway build that read its multipliers from the
    // environment; `docs/codecs.md`, SketchML notes) it stayed within 1% for 17, at most +3.5%; with
    // `decode = "edge"` for 8 of 20, up to +24%, and the shipped seed was one of those 8 by
    // chance: that is why this checks `mean`, not `edge` as it once did. At training seeds
    // 1-7 (the shipped hash) `mean` stayed within -1.5% to +0.5%.
    let default_table = "train.compressor={name=\"sketchml\"}";
    let fixed = losses(
        &[
            &adam[..],
            &[default_table, "train.memory=\"lazy_residual\""],
        ]
        .concat(),
    );
    assert!(
        excess(&fixed, &reference, 2) < 0.01,
        "lazy residual: {fixed:?} against {reference:?}"
    );
    // Plain SGD gets the lazy residual by default, and tracks uncompressed SGD from the first
    // epoch (measured: at most +0.05%, at seeds 1-7 +0.04% to +0.11%; without memory it lags
    // by 0.8%).
    let sgd = ["optimizer.kind=\"sgd\"", "optimizer.lr=0.1"];
    let reference = losses(&[&sgd[..], &["train.compressor={name=\"none\"}"]].concat());
    let default = losses(&[&sgd[..], &[default_table]].concat());
    assert!(
        excess(&default, &reference, 0) < 0.005,
        "sgd: {default:?} against {reference:?}"
    );
}

#[test]
fn a_warm_start_continues_from_the_model_and_refuses_one_that_does_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("two-epochs.txt");
    // Plain SGD at a constant rate: no optimizer state to lose, so two more epochs from the
    // saved model must go on from where it ended, not from zero.
    let sgd = [
        "data.synth.kind=\"fields\"",
        "model.lambda=1e-6",
        "train.batch_fraction=0.01",
        "optimizer.kind=\"sgd\"",
        "optimizer.lr=5.0",
        "train.epochs=2",
    ];
    let first = run_local(&job(&sgd), 2);
    let first_losses = epoch_losses(&first.rows);
    ModelFile {
        loss: "logistic".into(),
        weights: first.weights.clone().unwrap(),
        intercept: first.plan.as_ref().unwrap().intercept,
        classes: None,
        model: None,
        features: None,
    }
    .save(&saved)
    .unwrap();
    let init = format!("train.init_model={:?}", saved.display().to_string());
    let warm = run_local(&job(&[&sgd[..], &[init.as_str()]].concat()), 2);
    let warm_losses = epoch_losses(&warm.rows);
    // The fresh run's first epoch is far above its second. The warm run's first epoch starts
    // from the saved model: near its loss (within 0.01; a constant rate of 5 makes SGD's loss
    // wander by a few thousandths), far below a start from zero.
    assert!(first_losses[0] > first_losses[1] + 0.01, "{first_losses:?}");
    assert!(
        warm_losses[0] < first_losses[0] - 0.01 && (warm_losses[0] - first_losses[1]).abs() < 0.01,
        "warm {warm_losses:?}, first {first_losses:?}"
    );
    assert!(warm_losses[1] < first_losses[0] - 0.01);

    // A model that does not fit is an error naming the file and what differs.
    let run = |overrides: &[&str]| {
        let job = job(&[&sgd[..], overrides, &[init.as_str()]].concat());
        let spec = ClusterSpec {
            workers: 2,
            ..Default::default()
        };
        run_job(&job, &spec, &Supervisor::new(), quiet()).unwrap_err()
    };
    let file = saved.display().to_string();
    for (overrides, says) in [
        (&["data.synth.kind=\"ctr\""][..], "weights"),
        (&["model.intercept=false"][..], "intercept"),
        (&["model.loss=\"hinge\""][..], "'hinge'"),
    ] {
        let e = run(overrides);
        assert!(
            e.contains(&file) && e.contains("does not fit") && e.contains(says),
            "{e}"
        );
    }
}

/// `train` says which replica `auto` chose for two workers of a small model and why: their
/// cores' measured round trip, shared below `cores::NEAR_NS`; nothing when the job fixed it.
#[test]
fn train_prints_the_replica_the_cores_distance_chose() {
    let dir = tempfile::tempdir().unwrap();
    let job_path = write_job(dir.path(), "small.toml", SMALL_JOB);
    let job = job_path.to_str().unwrap();
    let out = gradflow_ok(["train", job, "-w", "2", "--epochs", "1"]);
    let line = out
        .lines()
        .find(|l| l.starts_with("replica: "))
        .unwrap_or_else(|| panic!("no replica line:\n{out}"));
    let shared = line.starts_with("replica: one model for the 2 workers");
    assert!(
        shared || line.starts_with("replica: one model per worker"),
        "{line}"
    );
    let measured = line
        .split("measured ")
        .nth(1)
        .and_then(|rest| rest.split(" ns").next())
        .map(|ns| ns.parse::<f64>().expect("a number of ns"));
    match measured {
        Some(ns) => assert_eq!(shared, ns < gradflow::cores::NEAR_NS, "{line}"),
        None => assert!(!shared && line.contains("could not be measured"), "{line}"),
    }
    for fixed in ["train.replica=\"worker\"", "train.replica=\"process\""] {
        let out = gradflow_ok(["train", job, "-w", "2", "--epochs", "1", "--set", fixed]);
        assert!(!out.contains("auto:"), "{fixed}: {out}");
    }
    let one = gradflow_ok(["train", job, "-w", "1", "--epochs", "1"]);
    assert!(!one.contains("replica:"), "{one}");
}

/// The test AUC from score bins is within 1e-3 of the exact one at the default 65,536 bins,
/// and 2 bins (a score's sign only) are not: the bins are what decides it. The other metrics
/// and training do not depend on the bins.
#[test]
fn binned_auc_is_close_to_the_exact_auc_and_changes_nothing_else() {
    let run = |bins: &str| run_local(&job(&[&format!("train.auc_bins={bins}")]), 2);
    let (exact, binned, coarse) = (run("\"exact\""), run("65536"), run("2"));
    let evals = |out: &RunOutcome| -> Vec<(f64, f64, f64)> {
        out.rows
            .iter()
            .filter(|r| r.kind == "epoch")
            .map(|r| {
                (
                    r.test_loss.unwrap(),
                    r.test_accuracy.unwrap(),
                    r.test_auc.unwrap(),
                )
            })
            .collect()
    };
    let (e, b, c) = (evals(&exact), evals(&binned), evals(&coarse));
    assert_eq!(e.len(), 4);
    for ((e, b), c) in e.iter().zip(&b).zip(&c) {
        assert_eq!(
            (e.0, e.1),
            (b.0, b.1),
            "loss and accuracy do not depend on the bins"
        );
        assert!(
            (e.2 - b.2).abs() < 1e-3,
            "65,536 bins: {} against exact {}",
            b.2,
            e.2
        );
        assert!(
            (e.2 - c.2).abs() > 0.02,
            "2 bins: {} against exact {}",
            c.2,
            e.2
        );
    }
    assert_eq!(
        epoch_losses(&exact.rows),
        epoch_losses(&binned.rows),
        "training changed"
    );
}

/// Round statistics and evaluations sent to process 0 are counted, in their own column and
/// not as gradient traffic; binned, an evaluation's bytes do not grow with the test set, while
/// exact ones (a bin per distinct score) do. Evaluations run on a copy of the model while later
/// rounds go on (12,000 test rows a process take three steps): every evaluation is of the
/// model after its own round, the same with exact or binned scores.
#[test]
fn evaluation_bytes_are_counted_and_binned_ones_do_not_grow_with_the_test_set() {
    type Evals = Vec<(u64, f64)>;
    let run = |overrides: &[&str]| -> (u64, u64, Evals) {
        let mut all = vec!["data.synth.rows=60000", "train.eval_every=3"];
        all.extend_from_slice(overrides);
        let outs = run_processes(&job(&all), 2);
        let rows = &outs[0].rows;
        let round_bytes: u64 = rows
            .iter()
            .filter(|r| r.kind == "round")
            .map(|r| r.eval_bytes)
            .sum();
        let process: Vec<u64> = rows
            .iter()
            .filter(|r| r.kind == "process")
            .map(|r| r.eval_bytes)
            .collect();
        assert_eq!(process.len(), 2);
        assert_eq!(process[0], 0, "process 0 sends its statistics to itself");
        assert!(process[1] > 0);
        let evals = rows
            .iter()
            .filter(|r| r.kind == "eval" || r.kind == "epoch")
            .map(|r| (r.round, r.test_loss.unwrap()))
            .collect();
        (round_bytes, process[1], evals)
    };
    let (small, large) = ("data.test_fraction=0.1", "data.test_fraction=0.4");
    let exact = "train.auc_bins=\"exact\"";
    let (rounds, binned_small, _) = run(&[small]);
    assert_eq!(
        rounds, binned_small,
        "the round rows add up to the process row"
    );
    let (_, binned_large, binned_evals) = run(&[large]);
    let (_, exact_small, _) = run(&[small, exact]);
    let (_, exact_large, exact_evals) = run(&[large, exact]);
    // 10 rounds an epoch, 4 epochs: after every third round and at epoch ends.
    let expected: Vec<u64> = (0..40)
        .filter(|q| (q + 1) % 3 == 0 || (q + 1) % 10 == 0)
        .collect();
    let rounds_of = |e: &Evals| e.iter().map(|x| x.0).collect::<Vec<u64>>();
    assert_eq!(rounds_of(&binned_evals), expected);
    assert_eq!(
        binned_evals, exact_evals,
        "the evaluations do not depend on the bins"
    );
    // Process 1 holds half the test rows: 3,000 at 0.1, 12,000 at 0.4, nearly all scores
    // distinct, each an exact bin of at least 3 bytes.
    assert!(
        exact_large > exact_small + expected.len() as u64 * 9000 * 3,
        "exact: {exact_small} -> {exact_large}"
    );
    assert!(
        binned_large < binned_small + (exact_large - exact_small) / 4,
        "binned: {binned_small} -> {binned_large}, exact: {exact_small} -> {exact_large}"
    );
}

/// `gradflow train ... | tee log` from a terminal: standard error is the terminal (with the
/// progress bar), standard output a pipe. The pipe gets the data line, then every evaluation
/// and epoch line in order, each epoch once (an evaluation is not an extra epoch line).
#[test]
fn epoch_lines_reach_a_piped_stdout_while_stderr_is_a_terminal() {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    let (mut terminal, mut side) = (0, 0);
    let (name, settings, size) = (std::ptr::null_mut(), std::ptr::null(), std::ptr::null());
    // SAFETY: openpty writes two new descriptors, owned from here on.
    let opened = unsafe { libc::openpty(&mut terminal, &mut side, name, settings, size) };
    assert_eq!(opened, 0, "openpty");
    let (terminal, side) = unsafe { (OwnedFd::from_raw_fd(terminal), OwnedFd::from_raw_fd(side)) };
    let dir = tempfile::tempdir().unwrap();
    let job = write_job(dir.path(), "j.toml", "[train]\nepochs = 3\n");
    let mut child = Command::new(BIN)
        .arg("train")
        .arg(&job)
        .args(["-w", "1"])
        .args([
            "--set",
            "train.eval_every=4",
            "--set",
            "data.synth.rows=4000",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(side)
        .spawn()
        .unwrap();
    // Drain the terminal so that the bar never blocks; it ends (EIO) when the child exits.
    let drain = std::thread::spawn(move || {
        let mut shown = Vec::new();
        let _ = std::fs::File::from(terminal).read_to_end(&mut shown);
        String::from_utf8_lossy(&shown).into_owned()
    });
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let status = child.wait().unwrap();
    let shown = drain.join().unwrap();
    assert!(status.success(), "{stdout}{shown}");
    assert!(shown.contains("rounds"), "the bar was drawn: {shown:?}");
    let lines: Vec<&str> = stdout.lines().collect();
    let at = |prefix: &str| lines.iter().position(|l| l.starts_with(prefix));
    let epochs: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("epoch "))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(epochs, ["1", "2", "3"], "{stdout}");
    // Ten rounds an epoch, an evaluation every four: rounds 3, 7, 11, 15, 23, 27 (19 and 29
    // end epochs).
    let evals = lines.iter().filter(|l| l.starts_with("eval ")).count();
    assert_eq!(evals, 6, "{stdout}");
    assert!(at("data:").unwrap() < at("eval ").unwrap(), "{stdout}");
    assert!(at("eval ").unwrap() < at("epoch ").unwrap(), "{stdout}");
    assert!(
        !shown.contains("epoch   1 "),
        "epoch lines go to stdout only"
    );
}
