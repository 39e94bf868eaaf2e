//! Job programs (`jobs/custom_dataflow.rs`) on the full runtime: run as real 2-process clusters
//! through their own command line, they train the model the standard loop trains, write the
//! same outputs, and stop every process when one of their operators fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gradflow::model::file::ModelFile;

mod common;

use common::epoch_fields;

const QUICKSTART: &str = "jobs/quickstart.toml";

/// An example program's executable (`jobs/NAME.rs`), which `cargo test` builds beside the test
/// binaries.
fn program(name: &str) -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let exe = deps
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples")
        .join(name);
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

/// `cluster JOB -n 2 --epochs 1` with outputs in `dir` under `name`.
fn cluster_args(job: &str, dir: &Path, name: &str) -> Vec<String> {
    let out = |f: &str| {
        format!(
            "{:?}",
            dir.join(format!("{name}-{f}")).display().to_string()
        )
    };
    [
        "cluster",
        job,
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
    let custom = run(
        &program("custom_dataflow"),
        &cluster_args(QUICKSTART, dir.path(), "custom"),
        &[],
        limit,
    );
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
        &cluster_args(QUICKSTART, dir.path(), "standard"),
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
        &program("custom_dataflow"),
        &cluster_args(QUICKSTART, dir.path(), "failing"),
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

#[test]
fn a_programs_own_loss_trains_through_the_standard_loop_and_its_name_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let limit = Duration::from_secs(120);
    let huber = |name: &str, delta: &str| {
        let args = cluster_args("jobs/delays.toml", dir.path(), name);
        let out = run(&program("huber"), &args, &[("HUBER_DELTA", delta)], limit);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ModelFile::load(&dir.path().join(format!("{name}-model.txt"))).unwrap()
    };
    let squared = {
        let args = cluster_args("jobs/delays.toml", dir.path(), "squared");
        let out = run(Path::new(env!("CARGO_BIN_EXE_gradflow")), &args, &[], limit);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ModelFile::load(&dir.path().join("squared-model.txt")).unwrap()
    };
    // With δ beyond every residual, Huber's loss is the squared loss: the same model, bit for
    // bit, which only holds if the program's loss drives the gradient (and nothing else does).
    let wide = huber("wide", "1e30");
    assert_eq!(wide.weights, squared.weights);
    assert_eq!(
        (wide.loss.as_str(), squared.loss.as_str()),
        ("huber", "squared")
    );
    // At δ = 15 minutes the heavy tail pulls less: another model.
    let robust = huber("robust", "15");
    assert_ne!(robust.weights, squared.weights);
    let metrics = std::fs::read_to_string(dir.path().join("robust-metrics.csv")).unwrap();
    let head = metrics.lines().next().unwrap();
    let rmse = head.split(',').position(|c| c == "test_rmse").unwrap();
    let epoch = metrics.lines().find(|l| l.starts_with("epoch,")).unwrap();
    let value: f64 = epoch.split(',').nth(rmse).unwrap().parse().unwrap();
    assert!(value.is_finite() && value > 0.0, "{epoch}");
    // `gradflow predict` cannot compute a loss it does not know, and says so.
    let out = Command::new(env!("CARGO_BIN_EXE_gradflow"))
        .args(["predict"])
        .arg(dir.path().join("robust-model.txt"))
        .arg("datasets/nycflights13/flights.csv.gz")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("'huber'"),
        "{stderr}"
    );
}

/// A metrics CSV's column `name` over its rows of kind `kind`.
fn column(metrics: &Path, kind: &str, name: &str) -> Vec<f64> {
    let mut r = csv::Reader::from_path(metrics).unwrap();
    let at = r.headers().unwrap().iter().position(|h| h == name).unwrap();
    r.records()
        .map(|x| x.unwrap())
        .filter(|x| &x[0] == kind)
        .map(|x| x[at].parse().unwrap())
        .collect()
}

/// `jobs/own_parts.rs` registers `int8` (one line), which `--compressor` then names with its
/// typed parameters, and replaces the job's optimizer with AdaGrad through the program API.
#[test]
fn a_programs_own_codec_and_optimizer_replace_the_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let run_parts = |name: &str, more: &[&str], env: &[(&str, &str)]| {
        let mut args = cluster_args(QUICKSTART, dir.path(), name);
        args.extend(["--lr", "0.05"].iter().chain(more).map(|a| a.to_string()));
        let out = run(&program("own_parts"), &args, env, Duration::from_secs(120));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let metrics = dir.path().join(format!("{name}-metrics.csv"));
        let uplink: f64 = column(&metrics, "round", "uplink_bytes").iter().sum();
        let auc = *column(&metrics, "epoch", "test_auc").last().unwrap();
        let model = ModelFile::load(&dir.path().join(format!("{name}-model.txt"))).unwrap();
        (uplink, auc, model.weights)
    };
    let int8 = ["--compressor", "int8"];
    let (own_bytes, own_auc, own) = run_parts("own", &int8, &[]);
    let (job_codec_bytes, _, job_codec) = run_parts("job-codec", &[], &[]);
    let (_, job_opt_auc, job_opt) = run_parts("job-optimizer", &int8, &[("OWN_OPTIMIZER", "0")]);
    let (_, _, fewer) = run_parts("levels", &["--compressor", "int8:levels=3"], &[]);
    // int8 sends 5 bytes a pair where the job's `none` sends 8, and its bytes are the ones
    // counted.
    let ratio = own_bytes / job_codec_bytes;
    assert!((0.55..0.7).contains(&ratio), "uplink ratio {ratio}");
    // Each replacement changes the model, and so does the codec's parameter; both learn.
    assert_ne!(own, job_codec);
    assert_ne!(own, job_opt);
    assert_ne!(own, fewer);
    assert!(
        own_auc > 0.74 && job_opt_auc > 0.74,
        "{own_auc} {job_opt_auc}"
    );
    // An out-of-range parameter is refused before any process starts, naming it.
    let mut args = cluster_args(QUICKSTART, dir.path(), "bad");
    args.extend(["--compressor", "int8:levels=200"].map(String::from));
    let out = run(&program("own_parts"), &args, &[], Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("int8.levels = 200: 1 to 127"),
        "{stderr}"
    );
}

/// `jobs/own_parts.rs`'s `central` exchange (one parameter server, registered with one line)
/// on a 2-process cluster, named by a job file, with the job's lossless codec and optimizer: it
/// trains `allgather`'s model bit for bit, and its changes cross the network (downlink bytes)
/// where `allgather` sends none. The `gradflow` binary, which has no such strategy, names the
/// ones it has.
#[test]
fn a_registered_exchange_is_named_by_the_job_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = std::fs::canonicalize("datasets").unwrap();
    let job = |exchange: &str| {
        let text = std::fs::read_to_string(QUICKSTART)
            .unwrap()
            .replace("\"datasets/", &format!("\"{}/", data.display()))
            .replace(
                "[train]\n",
                &format!("[train]\nexchange = \"{exchange}\"\n"),
            );
        let path = dir.path().join(format!("{exchange}.toml"));
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let run_exchange = |name: &str| {
        let args = cluster_args(&job(name), dir.path(), name);
        let env = [("OWN_OPTIMIZER", "0")];
        let out = run(&program("own_parts"), &args, &env, Duration::from_secs(120));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let metrics = dir.path().join(format!("{name}-metrics.csv"));
        let down: f64 = column(&metrics, "round", "downlink_bytes").iter().sum();
        let model = ModelFile::load(&dir.path().join(format!("{name}-model.txt"))).unwrap();
        (down, model.weights)
    };
    let (central_down, central) = run_exchange("central");
    let (allgather_down, allgather) = run_exchange("allgather");
    assert_eq!(central, allgather);
    assert!(central.iter().any(|&w| w != 0.0));
    assert!(
        central_down > 0.0 && allgather_down == 0.0,
        "{central_down} {allgather_down}"
    );
    // `--help` lists the registered parts beside the built-in ones.
    let help = run(
        &program("own_parts"),
        &["train".into(), "--help".into()],
        &[],
        Duration::from_secs(30),
    );
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("sketch, central or auto") && help.contains("skcompress, int8"),
        "{help}"
    );
    let gradflow = Path::new(env!("CARGO_BIN_EXE_gradflow"));
    let out = run(
        gradflow,
        &cluster_args(&job("central"), dir.path(), "x"),
        &[],
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr
                .contains("unknown exchange 'central' (expected sharded, allgather, sketch, auto)"),
        "{stderr}"
    );
}

/// `auto` ranks a registered strategy that has a round model beside the built-in ones and
/// tries it; a benchmark suite names the registered codec and strategy, and its cells (processes
/// of the same program) train with them.
#[test]
fn auto_and_the_benchmark_harness_take_registered_parts() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = cluster_args(QUICKSTART, dir.path(), "auto");
    args.extend(["--exchange", "auto"].map(String::from));
    let env = [("OWN_OPTIMIZER", "0")];
    let out = run(&program("own_parts"), &args, &env, Duration::from_secs(300));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ranked: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("[p0] "))
        .skip_while(|l| !l.trim_start().starts_with("exchange   codec"))
        .skip(1)
        .take_while(|l| l.starts_with("  ") || l.starts_with("* "))
        .filter_map(|l| l.trim_start_matches([' ', '*']).split_whitespace().next())
        .collect();
    for name in ["sharded", "allgather", "central"] {
        assert!(ranked.contains(&name), "{name} not ranked: {stdout}");
    }

    let suite = dir.path().join("suite.toml");
    std::fs::write(
        &suite,
        format!(
            r#"
job = {:?}
processes = [2]
exchange = ["central", "allgather"]
baseline = {{ exchange = "allgather", compressor = "none" }}
[set]
"train.epochs" = 1
[[compressor]]
name = "none"
[[compressor]]
name = "int8"
levels = 100
"#,
            std::fs::canonicalize(QUICKSTART)
                .unwrap()
                .display()
                .to_string()
        ),
    )
    .unwrap();
    let out_dir = dir.path().join("bench");
    let args = [
        "bench".into(),
        suite.display().to_string(),
        "--out".into(),
        out_dir.display().to_string(),
    ];
    let out = run(&program("own_parts"), &args, &env, Duration::from_secs(300));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut cells = csv::Reader::from_path(out_dir.join("results.csv")).unwrap();
    let mut seen: Vec<(String, String, f64)> = cells
        .deserialize::<std::collections::HashMap<String, String>>()
        .map(|r| r.unwrap())
        .filter(|r| r["kind"] == "epoch")
        .map(|r| {
            (
                r["exchange"].clone(),
                r["compressor"].clone(),
                r["test_loss"].parse().unwrap(),
            )
        })
        .collect();
    seen.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let names: Vec<(&str, &str)> = seen.iter().map(|(e, c, _)| (&e[..], &c[..])).collect();
    assert_eq!(
        names,
        [
            ("allgather", "int8,levels=100"),
            ("allgather", "none"),
            ("central", "int8,levels=100"),
            ("central", "none")
        ]
    );
    // Lossless: central trains allgather's model; int8 is within 5% of it (one epoch).
    assert_eq!(seen[1].2, seen[3].2);
    assert!((seen[2].2 / seen[3].2 - 1.0).abs() < 0.05, "{seen:?}");
}

/// `jobs/early_stopping.rs` as a 2-process cluster: it stops both processes at the round its
/// patience rule names (the rule recomputed here from the metrics CSV's evaluations), writes
/// nothing after it, and, when the rule never fires, trains the standard loop's model bit for
/// bit (the stop input changes nothing but the end).
#[test]
fn early_stopping_ends_every_process_at_the_round_its_rule_names() {
    let dir = tempfile::tempdir().unwrap();
    let limit = Duration::from_secs(120);
    let args = |name: &str| {
        let mut a = cluster_args(QUICKSTART, dir.path(), name);
        let epochs = a.iter().position(|x| x == "--epochs").unwrap() + 1;
        a[epochs] = "20".into();
        a.extend(["--set", "train.eval_every=25"].map(String::from));
        a
    };
    let run_ok = |exe: &Path, name: &str, env: &[(&str, &str)]| {
        let out = run(exe, &args(name), env, limit);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        stdout
    };
    let stdout = run_ok(&program("early_stopping"), "stopped", &[]);
    let line = stdout
        .lines()
        .find(|l| l.contains("stopped early: trained "))
        .unwrap_or_else(|| panic!("no early stop: {stdout}"));
    let trained: u64 = line
        .split("stopped early: trained ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();

    // The evaluations in the CSV (`eval` and `epoch` rows), and where patience 2 fires.
    let metrics = std::fs::read_to_string(dir.path().join("stopped-metrics.csv")).unwrap();
    let mut evals: Vec<(u64, f64)> = Vec::new();
    let mut last_round = 0;
    for line in metrics.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f[0] == "process" {
            continue;
        }
        let round: u64 = f[3].parse().unwrap();
        last_round = last_round.max(round);
        if (f[0] == "eval" || f[0] == "epoch") && !f[6].is_empty() {
            evals.push((round, f[6].parse().unwrap()));
        }
    }
    let (mut best, mut without, mut fired) = (f64::INFINITY, 0, None);
    for &(round, loss) in &evals {
        if loss < best {
            (best, without) = (loss, 0);
        } else {
            without += 1;
            if without == 2 {
                fired = Some(round);
                break;
            }
        }
    }
    let fired = fired.unwrap_or_else(|| panic!("the rule never fires: {evals:?}"));
    // Decided from the evaluation after round q at round q + 1, in effect one round later.
    assert_eq!(trained, fired + 2, "{line}");
    assert!(trained < 2000, "{line}");
    // Nothing trained after the stop; the model of the last round is evaluated once more.
    assert_eq!(last_round, trained - 1, "{metrics}");
    assert_eq!(evals.last().unwrap().0, trained - 1, "{evals:?}");

    // A rule that never fires: the standard loop's model, bit for bit.
    let patient = [("EARLY_STOP_PATIENCE", "100000")];
    let stdout = run_ok(&program("early_stopping"), "patient", &patient);
    assert!(
        stdout.contains("trained 20 epochs (2000 rounds)"),
        "{stdout}"
    );
    run_ok(Path::new(env!("CARGO_BIN_EXE_gradflow")), "standard", &[]);
    let load = |name: &str| ModelFile::load(&dir.path().join(format!("{name}-model.txt"))).unwrap();
    assert_eq!(load("patient").weights, load("standard").weights);
    assert_ne!(load("stopped").weights, load("standard").weights);
}

/// A loop that can stop early cannot pull the weights (worker 0 asks for the whole model the
/// round before the last): an error naming the field, not a model missing its last weights.
#[test]
fn early_stopping_with_pull_is_an_error_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = cluster_args(QUICKSTART, dir.path(), "pull");
    args[0] = "train".into();
    let n = args.iter().position(|a| a == "-n").unwrap();
    args.splice(n..n + 2, ["-w".to_string(), "2".to_string()]);
    args.extend(["--set", "train.pull=true"].map(String::from));
    let out = run(
        &program("early_stopping"),
        &args,
        &[],
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("train.pull: a loop that can stop early"),
        "{stderr}"
    );
}

const PREPARE: &str = "jobs/prepare_and_train.toml";

/// `prepare_and_train`'s arguments: `command` (`cluster -n 2` or `train -w 2`) on `PREPARE` for
/// 3 epochs, outputs in `dir` under `name`, and `more`.
fn prepare_args(command: &[&str], dir: &Path, name: &str, more: &[&str]) -> Vec<String> {
    let out = |f: &str| dir.join(format!("{name}-{f}")).display().to_string();
    let mut args: Vec<String> = command.iter().map(|s| s.to_string()).collect();
    args.insert(1, PREPARE.into());
    for a in ["--epochs", "3", "--startup-timeout", "30", "--set"] {
        args.push(a.into());
    }
    args.push(format!("output.metrics={:?}", out("metrics.csv")));
    args.push("--set".into());
    args.push(format!("output.model={:?}", out("model.txt")));
    args.extend(more.iter().map(|s| s.to_string()));
    args
}

/// The flights' labelled rows as the program should prepare them, computed here without the
/// program's operators: (training rows, test rows, test rows that are late).
fn expected_rows(seed: u64, held_out: f64) -> (u64, u64, u64) {
    let file = std::fs::File::open("datasets/nycflights13/flights.csv.gz").unwrap();
    let mut r = csv::Reader::from_reader(flate2::read::GzDecoder::new(file));
    let at = r
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "arr_delay")
        .unwrap();
    let (mut train, mut test, mut late) = (0, 0, 0);
    let mut rec = csv::ByteRecord::new();
    while r.read_byte_record(&mut rec).unwrap() {
        let delay = std::str::from_utf8(&rec[at]).unwrap().trim();
        if delay.is_empty() || delay == "NA" {
            continue;
        }
        let id = rec.position().unwrap().byte();
        if gradflow::data::partition::unit_hash(seed, id) < held_out {
            test += 1;
            late += (delay.parse::<f64>().unwrap() > 15.0) as u64;
        } else {
            train += 1;
        }
    }
    (train, test, late)
}

/// The training and test rows the processes of a run say their program prepared.
fn prepared_rows(stdout: &str) -> (u64, u64) {
    let mut total = (0, 0);
    for line in stdout
        .lines()
        .filter(|l| l.contains("prepared by the program's dataflow"))
    {
        let n: Vec<u64> = line.split(' ').filter_map(|w| w.parse().ok()).collect();
        (total.0, total.1) = (total.0 + n[0], total.1 + n[1]);
    }
    total
}

#[test]
fn a_program_prepares_its_rows_in_the_training_dataflow_and_trains_on_them() {
    let dir = tempfile::tempdir().unwrap();
    let limit = Duration::from_secs(120);
    let exe = program("prepare_and_train");
    let cluster = run(
        &exe,
        &prepare_args(&["cluster", "-n", "2"], dir.path(), "cluster", &[]),
        &[],
        limit,
    );
    let stdout = String::from_utf8_lossy(&cluster.stdout);
    assert!(
        cluster.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&cluster.stderr)
    );

    // Every labelled flight became one row, on the side the seeded hash of its id puts it:
    // nothing lost or doubled by the join (a flight whose airport the table lacks is kept).
    let job = gradflow::job::Job::load(Path::new(PREPARE), &[]).unwrap();
    let (train, test, late) = expected_rows(job.train.seed, job.data.test_fraction);
    assert_eq!(prepared_rows(&stdout), (train, test), "{stdout}");
    assert!(train > 250_000 && test > 60_000);

    // It learns: after 3 epochs the test loss is 5% below the best constant's and AUC > 0.74.
    let metrics = dir.path().join("cluster-metrics.csv");
    let (loss, auc) = (
        column(&metrics, "epoch", "test_loss"),
        column(&metrics, "epoch", "test_auc"),
    );
    let p = late as f64 / test as f64;
    let constant = -(p * p.ln() + (1.0 - p) * (1.0 - p).ln());
    assert!(
        loss[2] < 0.95 * constant && loss[2] < loss[0],
        "{loss:?} vs {constant}"
    );
    assert!(auc[2] > 0.74, "{auc:?}");

    // The rows reach the gradient step in no fixed order; ordered by id, the model is the same
    // in one process with two threads, bit for bit.
    let threads = run(
        &exe,
        &prepare_args(&["train", "-w", "2"], dir.path(), "threads", &[]),
        &[],
        limit,
    );
    assert!(
        threads.status.success(),
        "{}",
        String::from_utf8_lossy(&threads.stderr)
    );
    assert_eq!(
        prepared_rows(&String::from_utf8_lossy(&threads.stdout)),
        (train, test)
    );
    let load = |name: &str| ModelFile::load(&dir.path().join(format!("{name}-model.txt"))).unwrap();
    assert_eq!(load("cluster").weights, load("threads").weights);
}

#[test]
fn a_programs_bad_data_stops_every_process_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let limit = Duration::from_secs(60);
    let exe = program("prepare_and_train");
    let fails = |name: &str, more: &[&str]| {
        let out = run(
            &exe,
            &prepare_args(&["cluster", "-n", "2"], dir.path(), name, more),
            &[],
            limit,
        );
        assert!(!out.status.success(), "{name}");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    // A file that is not there.
    let missing = dir.path().join("missing.csv");
    let set = format!("data.files.airports={:?}", missing.display().to_string());
    let e = fails("missing", &["--set", &set]);
    assert!(e.contains(&missing.display().to_string()), "{e}");
    // A record with a field too few, named by file and line.
    let bad = dir.path().join("flights.csv");
    std::fs::write(
        &bad,
        "sched_dep,carrier,tailnum,origin,dest,distance,arr_delay\n\
         2013-01-01T05:15,UA,N14228,EWR,IAH,1400,11\n\
         2013-01-01T05:29,UA,N24211,LGA,IAH,1416\n",
    )
    .unwrap();
    let set = format!("data.files.flights={:?}", bad.display().to_string());
    let e = fails("bad", &["--set", &set]);
    assert!(e.contains(&format!("{}:3", bad.display())), "{e}");
    // A file the job does not name.
    let e = fails("unnamed", &["--set", "data.files={}"]);
    assert!(e.contains("data.files.flights"), "{e}");
    // A program's own files on a job that reads its data another way (a CSV job).
    let out = run(
        &exe,
        &["train", "jobs/quickstart.toml", "-w", "1"].map(String::from),
        &[],
        limit,
    );
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("data.files.flights") && e.contains("\"program\""),
        "{e}"
    );
    // The standard loop has no rows for a program's job.
    let out = run(
        Path::new(env!("CARGO_BIN_EXE_gradflow")),
        &prepare_args(&["train", "-w", "1"], dir.path(), "standard", &[]),
        &[],
        limit,
    );
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("data.format = \"program\""),
        "{e}"
    );
}

#[test]
fn a_programs_rows_are_ordered_by_id_and_checked() {
    use gradflow::data::table::PreparedRow;
    let row = |id: u64, test: bool, keys: &[u32], label: f32| PreparedRow {
        id,
        test,
        label,
        keys: keys.to_vec(),
        values: vec![1.0; keys.len()],
    };
    let job = |text: &str| gradflow::job::Job::parse(text, Path::new("j.toml"), &[]).unwrap();
    let logistic = job("[data]\nformat = \"program\"\ndim = 10\n").plan(11, 1);
    let rows = vec![
        row(7, false, &[2, 9], 1.0),
        row(3, true, &[0], -1.0),
        row(5, false, &[1], 0.0),
    ];
    let data = gradflow::dataflow::worker_data(rows, &logistic).unwrap();
    // Ordered by id, the intercept (key 10) appended to every row.
    assert_eq!(data.train.labels, vec![0.0, 1.0]);
    assert_eq!(data.train.row(0).0, &[1, 10]);
    assert_eq!(data.train.row(1).0, &[2, 9, 10]);
    assert_eq!((data.test.rows(), data.test.row(0).0), (1, &[0u32, 10][..]));
    for (bad, says) in [
        (
            vec![row(1, false, &[1], 1.0), row(1, true, &[2], 1.0)],
            "row id 1: two rows",
        ),
        (
            vec![row(4, false, &[3, 2], 1.0)],
            "row id 4: keys 3 and 2 out of order",
        ),
        (
            vec![row(4, false, &[10], 1.0)],
            "row id 4: key 10 is beyond the model's 10 features",
        ),
        (
            vec![row(4, false, &[1], 7.0)],
            "row id 4: label 7 is not one the loss 'logistic' reads",
        ),
        (vec![row(4, false, &[1], f32::NAN)], "row id 4: label NaN"),
        (
            vec![PreparedRow {
                values: vec![],
                ..row(4, false, &[1], 1.0)
            }],
            "row id 4: 1 keys but 0 values",
        ),
    ] {
        let e = gradflow::dataflow::worker_data(bad, &logistic).unwrap_err();
        assert!(e.contains(says), "{e}");
    }
    let mut nan = row(4, false, &[1], 1.0);
    nan.values[0] = f32::INFINITY;
    let e = gradflow::dataflow::worker_data(vec![nan], &logistic).unwrap_err();
    assert!(e.contains("value inf is not finite"), "{e}");
    let softmax =
        job("[data]\nformat = \"program\"\ndim = 10\n[model]\nloss = \"softmax\"\nclasses = 3\n");
    let e = gradflow::dataflow::worker_data(vec![row(4, false, &[1], 3.0)], &softmax.plan(11, 1))
        .unwrap_err();
    assert!(e.contains("row id 4") && e.contains('3'), "{e}");
    assert!(
        gradflow::dataflow::worker_data(vec![row(4, false, &[1], 2.0)], &softmax.plan(11, 1))
            .is_ok()
    );
}

#[test]
fn a_programs_own_model_trains_through_the_standard_loop_and_its_name_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let limit = Duration::from_secs(120);
    let own = program("own_model");
    let ok = |exe: &Path, args: &[String]| {
        let out = run(exe, args, &[], limit);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
    };
    let gradflow = Path::new(env!("CARGO_BIN_EXE_gradflow"));
    let model = |name: &str| dir.path().join(format!("{name}-model.txt"));
    let unit_length = ["--model".to_string(), "unit-length".to_string()];
    // Two processes train the model one process of two workers trains, bit for bit.
    let mut clustered = cluster_args(QUICKSTART, dir.path(), "own");
    clustered.extend(unit_length.clone());
    let (clustered, _) = ok(&own, &clustered);
    let mut train = cluster_args(QUICKSTART, dir.path(), "own-threads");
    train[0] = "train".into();
    let at = train.iter().position(|a| a == "-n").unwrap();
    train[at] = "-w".into();
    let job_model = train.clone();
    train.extend(unit_length);
    let (threaded, _) = ok(&own, &train);
    assert_eq!(epoch_fields(&clustered), epoch_fields(&threaded));
    assert_eq!(epoch_fields(&clustered).len(), 1, "{clustered}");
    let auc: f64 = epoch_fields(&clustered)[0].split("auc ").nth(1).unwrap()[..6]
        .parse()
        .unwrap();
    // One epoch: well above chance (a gradient that does not reach the weights stays at 0.5).
    assert!(auc > 0.65, "{clustered}");
    let (own_file, threads_file) = (
        ModelFile::load(&model("own")).unwrap(),
        ModelFile::load(&model("own-threads")).unwrap(),
    );
    assert_eq!(own_file.weights, threads_file.weights);
    assert_eq!(own_file.model.as_deref(), Some("unit-length"));
    // The job's own linear model learns other weights from the same rows.
    ok(gradflow, &cluster_args(QUICKSTART, dir.path(), "linear"));
    let linear = ModelFile::load(&model("linear")).unwrap();
    assert_eq!(linear.model, None);
    assert_ne!(linear.weights, own_file.weights);
    // `gradflow predict` cannot compute a model it does not know, and says so; the program
    // that registered it scores it. A warm start checks the model: the program's own resumes,
    // the plain linear job refuses.
    let scored = dir.path().join("scored.csv");
    let (_, said) = ok(
        &own,
        &[
            "predict".into(),
            model("own").display().to_string(),
            "datasets/nycflights13/flights.csv.gz".into(),
            "-o".into(),
            scored.display().to_string(),
        ],
    );
    assert!(said.contains("auc 0.") && scored.exists(), "{said}");
    let out = run(
        gradflow,
        &[
            "predict".into(),
            model("own").display().to_string(),
            QUICKSTART.into(),
        ],
        &[],
        limit,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("'unit-length'"),
        "{stderr}"
    );
    let mut warm = train.clone();
    warm.extend(["--init-model".into(), model("own").display().to_string()]);
    ok(&own, &warm);
    let mut warm = job_model;
    warm.extend(["--init-model".into(), model("own").display().to_string()]);
    let out = run(gradflow, &warm, &[], limit);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("it is the model 'unit-length', the job trains 'linear'"),
        "{stderr}"
    );
}
