//! Checkpoints and resume, end to end: real `gradflow` processes killed with SIGKILL while
//! they train, resumed with `--resume`, and compared bit for bit with uninterrupted runs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{file_names, free_ports};

const BIN: &str = env!("CARGO_BIN_EXE_gradflow");

/// 8,000 rounds of a job whose every kind of state matters: Adam moments, a biased codec with
/// its residual memory, and (sharded, 2 workers) owners with a lossy downlink and its residual.
/// Long enough (~5 s) that a cluster's metrics rows, which wait up to 2 s for their rounds'
/// wire bytes ([`gradflow::metrics::output::MAX_WAIT`]), are written well before it ends: with
/// 3,000 rounds (~2 s since the exchange got faster) the run often ended before the test saw
/// three epochs in the file.
const JOB: &str = r#"
[data.synth]
rows = 10000
dim = 20000
nnz = 20
[model]
loss = "logistic"
lambda = 0.001
[optimizer]
kind = "adam"
lr = 0.02
[train]
epochs = 800
seed = 11
compressor = { name = "topk", ratio = 0.2 }
memory = "residual"
downlink = { name = "topk", ratio = 0.5 }
checkpoint = { every_rounds = 40, dir = "ckpt" }
[output]
model = "model.txt"
metrics = "metrics.csv"
"#;

/// `job` (the text of [`JOB`]) cut to 100 rounds with a checkpoint every 20: complete
/// checkpoints at rounds 20, 40, 60 and 80, of which the last two are kept.
fn short(job: &str) -> String {
    job.replace("epochs = 800", "epochs = 10")
        .replace("every_rounds = 40", "every_rounds = 20")
}

/// A directory with the job, its outputs and its checkpoints.
fn setup(job: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.toml");
    std::fs::write(&path, job).unwrap();
    (dir, path)
}

/// Starts the job as `processes` processes (2 worker threads when alone, 1 each otherwise).
fn start(dir: &Path, processes: usize, extra: &[&str]) -> Vec<Child> {
    let ports = free_ports(processes);
    let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let workers = if processes == 1 { "2" } else { "1" };
    (0..processes)
        .map(|p| {
            Command::new(BIN)
                .current_dir(dir)
                .args(["train", "job.toml", "-q", "-w", workers])
                .args(["-n", &processes.to_string(), "-p", &p.to_string()])
                .args(["--hosts", &hosts.join(",")])
                .args(extra)
                .env("GRADFLOW_CLUSTER_SECRET", "test")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect()
}

/// Waits for every process; returns process 0's stderr, asserting success.
fn finish(children: Vec<Child>) -> String {
    let mut first = String::new();
    for (i, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "process {i}: {err}");
        if i == 0 {
            first = err;
        }
    }
    first
}

/// Complete checkpoint rounds of every process in `ckpt`.
fn complete(ckpt: &Path, processes: usize) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(ckpt) else {
        return Vec::new();
    };
    let mut rounds: Vec<u64> = entries
        .flatten()
        .filter(|e| (0..processes).all(|p| e.path().join(format!("complete-process-{p}")).exists()))
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("round-")?.parse().ok())
        .collect();
    rounds.sort_unstable();
    rounds
}

/// Runs `job` as `processes` processes to its end, then again resumed from its last
/// checkpoint (round 40): the resumed run must write the same model file.
fn assert_resumes_bit_for_bit(job: &str, processes: usize) {
    let (dir, _) = setup(job);
    finish(start(dir.path(), processes, &[]));
    let full = std::fs::read(dir.path().join("model.txt")).unwrap();
    std::fs::remove_file(dir.path().join("model.txt")).unwrap();
    let err = finish(start(dir.path(), processes, &["--resume", "ckpt"]));
    assert!(err.contains("resuming from round 40"), "{err}");
    let resumed = std::fs::read(dir.path().join("model.txt")).unwrap();
    assert!(resumed == full, "{processes} process(es): {job}");
}

fn killed_and_resumed_equals_uninterrupted(processes: usize, kill_all: bool) {
    // The uninterrupted run.
    let (full, _) = setup(JOB);
    finish(start(full.path(), processes, &[]));
    let expected = std::fs::read(full.path().join("model.txt")).unwrap();
    let rows = std::fs::read_to_string(full.path().join("metrics.csv")).unwrap();

    // The same job, every process killed with SIGKILL once a checkpoint is complete and the
    // metrics file has three epochs.
    let (run, _) = setup(JOB);
    let mut children = start(run.path(), processes, &[]);
    let ckpt = run.path().join("ckpt");
    let started = Instant::now();
    let epochs_written = || {
        let csv = std::fs::read_to_string(run.path().join("metrics.csv")).unwrap_or_default();
        csv.lines().filter(|l| l.starts_with("epoch,")).count()
    };
    while complete(&ckpt, processes).is_empty() || epochs_written() < 3 {
        assert!(started.elapsed() < Duration::from_secs(60), "no checkpoint");
        std::thread::sleep(Duration::from_millis(5));
    }
    for c in children.iter_mut() {
        if let Some(status) = c.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(c.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("the run ended before the kill ({status}): {err}");
        }
    }
    // The last process is killed with SIGKILL; the others too, or they stop by themselves (a
    // lost peer), saying how to resume.
    let mut last = children.pop().unwrap();
    last.kill().unwrap();
    last.wait().unwrap();
    if kill_all {
        for c in children.iter_mut() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        children.clear();
    }
    for c in children {
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains("the last complete checkpoint is round") && err.contains("--resume ckpt"),
            "{err}"
        );
    }
    assert!(!run.path().join("model.txt").exists());
    // The metrics so far survive.
    let so_far = std::fs::read_to_string(run.path().join("metrics.csv")).unwrap();
    let epochs = so_far.lines().filter(|l| l.starts_with("epoch,")).count();
    assert!(epochs >= 3, "{so_far}");
    assert!(so_far.starts_with("kind,process,epoch,round,"));

    // Resumed: the same model, bit for bit, and the same metrics but for the timings.
    let err = finish(start(run.path(), processes, &["--resume", "ckpt"]));
    let resumed_at: u64 = err
        .split("resuming from round ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no resume note: {err}"));
    assert!(resumed_at > 0 && resumed_at.is_multiple_of(40), "{err}");
    let got = std::fs::read(run.path().join("model.txt")).unwrap();
    assert!(
        got == expected,
        "{processes} process(es): the resumed model differs"
    );
    let resumed_rows = std::fs::read_to_string(run.path().join("metrics.csv")).unwrap();
    let losses = |csv: &str| -> Vec<String> {
        csv.lines()
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                [f[0], f[2], f[3], f[5], f[6], f[8], f[9], f[10]].join(",")
            })
            .collect()
    };
    assert_eq!(losses(&resumed_rows), losses(&rows));
}

#[test]
fn one_process_killed_and_resumed_ends_with_the_uninterrupted_model() {
    killed_and_resumed_equals_uninterrupted(1, true);
}

#[test]
fn two_processes_killed_and_resumed_end_with_the_uninterrupted_model() {
    killed_and_resumed_equals_uninterrupted(2, true);
}

#[test]
fn a_process_that_loses_its_peer_says_how_to_resume_and_the_resumed_model_is_the_same() {
    killed_and_resumed_equals_uninterrupted(2, false);
}

#[test]
fn a_bad_resume_is_an_error_naming_the_cause() {
    let short = short(JOB);
    let (dir, _) = setup(&short);
    finish(start(dir.path(), 1, &[]));
    // Checkpoints at rounds 20, 40, 60 and 80 of 100: the last two are kept, the others gone.
    let ckpt = dir.path().join("ckpt");
    assert_eq!(complete(&ckpt, 1), vec![60, 80]);
    let names = file_names(&ckpt);
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(
        names[0].starts_with("metrics-rows-"),
        "the rows log: {names:?}"
    );
    let rows_log = ckpt.join(&names[0]);
    // `train job.toml -q` with `job` and `args`: whether it succeeded, and its stderr.
    let train = |job: &str, args: &[&str]| {
        std::fs::write(dir.path().join("job.toml"), job).unwrap();
        let out = Command::new(BIN)
            .current_dir(dir.path())
            .args(["train", "job.toml", "-q"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), err)
    };
    let resume = |job: &str, d: &str| {
        let (ok, err) = train(job, &["-w", "2", "--resume", d]);
        assert!(!ok, "{err}");
        err
    };
    // Another job (another learning rate).
    let e = resume(&short.replace("lr = 0.02", "lr = 0.03"), "ckpt");
    assert!(e.contains("a checkpoint of another job"), "{e}");
    // Another number of workers.
    let (ok, e) = train(&short, &["-w", "1", "--resume", "ckpt"]);
    assert!(!ok && e.contains("run of 2 workers"), "{e}");
    // A directory without checkpoints, and one that does not exist.
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    let e = resume(&short, "empty");
    assert!(e.contains("no complete checkpoint of this job"), "{e}");
    let e = resume(&short, "missing");
    assert!(e.contains("missing"), "{e}");
    // A rows log cut short or damaged: the error names it, and leaves it as it was.
    let saved = std::fs::read(&rows_log).unwrap();
    std::fs::write(&rows_log, &saved[..saved.len() / 2]).unwrap();
    let e = resume(&short, "ckpt");
    assert!(e.contains(&names[0]) && e.contains("ends before"), "{e}");
    let mut flipped = saved.clone();
    flipped[saved.len() / 3] ^= 0x40;
    std::fs::write(&rows_log, &flipped).unwrap();
    let e = resume(&short, "ckpt");
    assert!(e.contains(&names[0]), "{e}");
    assert_eq!(std::fs::read(&rows_log).unwrap(), flipped);
    std::fs::write(&rows_log, &saved).unwrap();
    // A damaged worker file of the latest checkpoint: named in a note, and the run resumes
    // from the one before (which is why two are kept), ending with the same model.
    let model = std::fs::read(dir.path().join("model.txt")).unwrap();
    let file = dir.path().join("ckpt/round-000000000080/worker-0001.bin");
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(&file, bytes).unwrap();
    let (ok, e) = train(&short, &["-w", "2", "--resume", "ckpt"]);
    assert!(ok, "{e}");
    assert!(
        e.contains("worker-0001.bin") && e.contains("checksum mismatch"),
        "{e}"
    );
    assert!(
        e.contains("round 80 is passed over") && e.contains("resuming from round 60"),
        "{e}"
    );
    assert_eq!(std::fs::read(dir.path().join("model.txt")).unwrap(), model);
    // A fresh run over them says so and replaces them, and they resume.
    let (ok, e) = train(&short, &["-w", "2"]);
    assert!(
        ok && e.contains("held checkpoints of an earlier run"),
        "{e}"
    );
    assert_eq!(complete(&ckpt, 1), vec![60, 80]);
    let (ok, e) = train(&short, &["-w", "2", "--resume", "ckpt"]);
    assert!(ok && e.contains("resuming from round 80"), "{e}");
}

/// Files of the latest checkpoint swapped with the round before's, taken from another run, or
/// replaced by a FIFO: each is named in a note and the run resumes from the round before, with
/// the uninterrupted run's model and every metrics row (a swapped `metrics.bin` once passed its
/// checksum and lost 52 rows; a FIFO once hung the resume).
#[test]
fn swapped_foreign_or_fifo_checkpoint_files_fall_back_to_the_round_before() {
    let short = short(JOB);
    let (dir, _) = setup(&short);
    finish(start(dir.path(), 1, &[]));
    let model = std::fs::read(dir.path().join("model.txt")).unwrap();
    let metrics = std::fs::read_to_string(dir.path().join("metrics.csv")).unwrap();
    // Another run's checkpoint (another seed) to take files from.
    let (other, _) = setup(&short.replace("seed = 11", "seed = 12"));
    finish(start(other.path(), 1, &[]));
    let ckpt = dir.path().join("ckpt");
    let round = |r: u64, f: &str| ckpt.join(format!("round-{r:012}/{f}"));
    let foreign = |f: &str| other.path().join(format!("ckpt/round-000000000080/{f}"));
    let cases = [
        ("worker-0001.bin", "holds round 60 of worker 1"),
        ("metrics.bin", "holds the metrics of round 60"),
        ("worker-0000.bin", "a checkpoint of another job"),
        ("metrics.bin", "the metrics of another job"),
        ("worker-0001.bin", "a pipe or FIFO"),
    ];
    for (i, (file, why)) in cases.iter().enumerate() {
        let target = round(80, file);
        std::fs::remove_file(&target).unwrap();
        match i {
            0 | 1 => std::fs::copy(round(60, file), &target).map(|_| ()).unwrap(),
            2 | 3 => std::fs::copy(foreign(file), &target).map(|_| ()).unwrap(),
            _ => assert!(Command::new("mkfifo")
                .arg(&target)
                .status()
                .unwrap()
                .success()),
        }
        let out = Command::new(BIN)
            .current_dir(dir.path())
            .args(["train", "job.toml", "-q", "-w", "2", "--resume", "ckpt"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{file}: {e}");
        assert!(e.contains(file) && e.contains(why), "{file}: {e}");
        assert!(
            e.contains("round 80 is passed over") && e.contains("resuming from round 60"),
            "{e}"
        );
        assert_eq!(
            std::fs::read(dir.path().join("model.txt")).unwrap(),
            model,
            "{file}"
        );
        let now = std::fs::read_to_string(dir.path().join("metrics.csv")).unwrap();
        assert_eq!(
            now.lines().count(),
            metrics.lines().count(),
            "{file}: metrics rows"
        );
    }
}

/// A kill between the two processes' markers leaves the latest checkpoint complete on one
/// process only: they agree on the one before, and the resumed run must not try to mark a
/// round it did not write (it once failed there on every retry, the older round pruned).
#[test]
fn a_checkpoint_one_process_did_not_complete_resumes_from_the_one_before() {
    let short = short(JOB);
    let (dir, _) = setup(&short);
    finish(start(dir.path(), 2, &[]));
    let model = std::fs::read(dir.path().join("model.txt")).unwrap();
    let ckpt = dir.path().join("ckpt");
    assert_eq!(complete(&ckpt, 2), vec![60, 80]);
    std::fs::remove_file(ckpt.join("round-000000000080/complete-process-1")).unwrap();
    std::fs::remove_file(dir.path().join("model.txt")).unwrap();
    let err = finish(start(dir.path(), 2, &["--resume", "ckpt"]));
    assert!(err.contains("resuming from round 60"), "{err}");
    assert_eq!(std::fs::read(dir.path().join("model.txt")).unwrap(), model);
    // And it resumes again from what that run left.
    assert_eq!(complete(&ckpt, 2), vec![60, 80]);
    finish(start(dir.path(), 2, &["--resume", "ckpt"]));
}

/// A checkpoint records the data it was trained on: flipping labels (same size) or cutting
/// the file between the kill and `--resume` is an error naming the file, not a silent run.
#[test]
fn resuming_on_changed_data_is_an_error_naming_the_file() {
    let rows: String = (0..400)
        .map(|i| {
            format!(
                "{} {}:1 {}:0.5\n",
                if i % 3 == 0 { "+1" } else { "-1" },
                i % 37 + 1,
                i % 11 + 40
            )
        })
        .collect();
    let job = JOB.replace(
        "[data.synth]\nrows = 10000\ndim = 20000\nnnz = 20\n",
        "[data]\ntrain = \"rows.svm\"\n",
    );
    let job = short(&job);
    let (dir, _) = setup(&job);
    std::fs::write(dir.path().join("rows.svm"), &rows).unwrap();
    finish(start(dir.path(), 1, &[]));
    let resume = || {
        let out = Command::new(BIN)
            .current_dir(dir.path())
            .args(["train", "job.toml", "-q", "-w", "2", "--resume", "ckpt"])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, e) = resume();
    assert!(ok, "the same data resumes: {e}");
    let flipped = rows.replacen("+1", "-1", 60);
    assert_eq!(flipped.len(), rows.len());
    for (changed, why) in [
        (&flipped[..], "its content changed"),
        (&rows[..rows.len() / 2], "bytes then"),
    ] {
        std::fs::write(dir.path().join("rows.svm"), changed).unwrap();
        let (ok, e) = resume();
        assert!(!ok, "{e}");
        assert!(
            e.contains("rows.svm: the input changed") && e.contains(why),
            "{e}"
        );
        // The failed resume does not tell the user to run itself again.
        assert!(!e.contains("continue with"), "{e}");
        assert!(e.contains("wrote no newer checkpoint"), "{e}");
    }
}

#[test]
fn the_other_exchanges_and_memories_resume_bit_for_bit() {
    // Resuming a finished run from its last checkpoint repeats its last rounds exactly:
    // `sketch` (DGC memory, the update in ApplyTopK) with plain SGD, and `allgather` with a
    // randomised codec and the lazy residual.
    let base = JOB
        .replace("epochs = 800", "epochs = 6")
        .replace("downlink = { name = \"topk\", ratio = 0.5 }\n", "");
    let sketch = base.replace(
        "compressor = { name = \"topk\", ratio = 0.2 }\nmemory = \"residual\"",
        "exchange = \"sketch\"",
    );
    let sketch = sketch.replace("kind = \"adam\"\nlr = 0.02", "kind = \"sgd\"\nlr = 0.5");
    let allgather = base.replace(
        "compressor = { name = \"topk\", ratio = 0.2 }\nmemory = \"residual\"",
        "exchange = \"allgather\"\ncompressor = { name = \"qsgd\" }\nmemory = \"lazy_residual\"",
    );
    // And `sharded` with one replica for the process's two workers (the first restores it),
    // with Adam and top-k with its residual memory.
    let shared = base.replace("seed = 11\n", "seed = 11\nreplica = \"process\"\n");
    assert!(shared.contains("replica"));
    for job in [sketch, allgather, shared] {
        assert_resumes_bit_for_bit(&job, 1);
    }
}

#[test]
fn adagrad_and_ftrl_state_resumes_bit_for_bit() {
    // AdaGrad's sums of squares (replicated, one process) and FTRL's z, n and weights, with
    // L1's exact zeros, in each owner's shard (sharded state, two processes).
    let base = JOB
        .replace("epochs = 800", "epochs = 6")
        .replace("downlink = { name = \"topk\", ratio = 0.5 }\n", "");
    let adagrad = base.replace("kind = \"adam\"\nlr = 0.02", "kind = \"adagrad\"\nlr = 0.1");
    let ftrl = base
        .replace(
            "kind = \"adam\"\nlr = 0.02",
            "kind = \"ftrl\"\nlr = 0.1\nl1 = 0.003\nl2 = 0.01",
        )
        .replace("seed = 11\n", "seed = 11\nstate = \"sharded\"\n");
    assert!(adagrad.contains("adagrad") && ftrl.contains("l1 = 0.003"));
    assert_resumes_bit_for_bit(&adagrad, 1);
    assert_resumes_bit_for_bit(&ftrl, 2);
}

#[test]
fn pipelined_rounds_resume_bit_for_bit() {
    // With rounds in flight (`train.staleness`), a checkpoint round starts from the whole
    // model, so a run resumed there repeats the uninterrupted one: `sharded` with its lossy
    // downlink and delay compensation (whose changes in flight the checkpoint round forgets),
    // `allgather` and `sketch` (without memory), on two threads and as two processes.
    let pipelined = JOB
        .replace("epochs = 800", "epochs = 6")
        .replace("seed = 11\n", "seed = 11\nstaleness = 2\n")
        .replace(
            "memory = \"residual\"\n",
            "memory = \"residual\"\ndelay_compensation = 0.5\n",
        );
    let allgather = pipelined
        .replace("downlink = { name = \"topk\", ratio = 0.5 }\n", "")
        .replace(
            "staleness = 2\n",
            "staleness = 2\nexchange = \"allgather\"\n",
        );
    let sketch = allgather
        .replace("exchange = \"allgather\"", "exchange = \"sketch\"")
        .replace("compressor = { name = \"topk\", ratio = 0.2 }\n", "")
        .replace("memory = \"residual\"", "memory = \"none\"");
    let cases = [
        (&pipelined, 1),
        (&allgather, 1),
        (&sketch, 1),
        (&pipelined, 2),
    ];
    for (job, processes) in cases {
        assert_resumes_bit_for_bit(job, processes);
    }
}

#[test]
fn sharded_state_resumes_bit_for_bit() {
    // Each worker's file holds its shard, its shard's optimizer state and the weights it
    // pulled for the checkpoint's round: resumed there, the run repeats the uninterrupted
    // one, on two threads and as two processes, with top-k and its residual memory, and
    // with compressed pull replies.
    let sharded = JOB
        .replace("epochs = 800", "epochs = 6")
        .replace("downlink = { name = \"topk\", ratio = 0.5 }\n", "")
        .replace("seed = 11\n", "seed = 11\nstate = \"sharded\"\n");
    assert!(sharded.contains("state = \"sharded\"") && !sharded.contains("downlink"));
    for processes in [1, 2] {
        assert_resumes_bit_for_bit(&sharded, processes);
    }
    // With compressed replies between the processes, whose decoded weights the files keep.
    let reply = sharded.replace(
        "seed = 11\n",
        "seed = 11\ndownlink = { name = \"logquant\" }\n",
    );
    assert_resumes_bit_for_bit(&reply, 2);
}

/// The processes `pid` started (from /proc: each process's parent).
fn children_of(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // `pid (comm) state ppid ...`: the fields after the command's closing parenthesis.
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        if after.split_whitespace().nth(1) == Some(&pid.to_string()) {
            found.push(child);
        }
    }
    found
}

/// `gradflow cluster --restarts 3`: one process is killed (SIGKILL) three times during the
/// run, each time once a later checkpoint is complete; every time the launcher stops the
/// others and starts every process again from the last checkpoint all of them completed,
/// and the run ends with the uninterrupted run's model, bit for bit.
#[test]
fn a_cluster_restarts_from_its_checkpoints_and_trains_the_uninterrupted_model() {
    let job = JOB
        .replace("epochs = 800", "epochs = 30")
        .replace("every_rounds = 40", "every_rounds = 20");
    let (full, _) = setup(&job);
    let ok = Command::new(BIN)
        .current_dir(full.path())
        .args(["cluster", "job.toml", "-n", "2", "-q"])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let expected = std::fs::read(full.path().join("model.txt")).unwrap();

    let (run, _) = setup(&job);
    let launcher = Command::new(BIN)
        .current_dir(run.path())
        .args(["cluster", "job.toml", "-n", "2", "-q", "--restarts", "3"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ckpt = run.path().join("ckpt");
    let started = Instant::now();
    // Kill process 1, then 0, then 1, once checkpoints 40, 100 and 160 are complete.
    for (kill, after_round) in [(1usize, 40u64), (0, 100), (1, 160)] {
        while complete(&ckpt, 2).last().is_none_or(|&r| r < after_round) {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "no checkpoint {after_round}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        // The processes of this attempt, in the order they were started (their pids rise).
        let mut pids = children_of(launcher.id());
        pids.sort_unstable();
        assert_eq!(pids.len(), 2, "{pids:?}");
        let killed = Command::new("kill")
            .args(["-9", &pids[kill].to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        // The next attempt starts afresh: wait until its processes are not the killed ones.
        while children_of(launcher.id()).contains(&pids[1 - kill]) {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "not restarted"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let out = launcher.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for n in 1..=3 {
        assert!(
            err.contains(&format!(
                "restart {n} of 3: every process again, from round"
            )),
            "{err}"
        );
    }
    // Every restart resumed (a run started over would end with the same model too).
    let resumed = err
        .matches("[p0] note: process 0: resuming from round")
        .count();
    assert_eq!(resumed, 3, "{err}");
    let got = std::fs::read(run.path().join("model.txt")).unwrap();
    assert!(got == expected, "the restarted run's model differs");
}

/// Restarts resume from checkpoints: a job that writes none is refused before any process
/// starts.
#[test]
fn restarts_without_checkpoints_are_refused() {
    let (dir, _) = setup(&JOB.replace("checkpoint = { every_rounds = 40, dir = \"ckpt\" }\n", ""));
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .args(["cluster", "job.toml", "-n", "2", "--restarts", "2"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--restarts: the job writes no checkpoints (train.checkpoint)"),
        "{err}"
    );
    assert!(
        !dir.path().join("metrics.csv").exists(),
        "a process started"
    );
}
