//! The authenticated cluster, end to end: real `gradflow` processes over loopback TCP, with
//! stray clients connecting to them during start-up, and processes that disagree on the secret
//! or the job.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::free_ports;
use gradflow::handshake::{Hello, HELLO_LEN, TAG_LEN};
use gradflow::runtime::SECRET_VARIABLE;

const BIN: &str = env!("CARGO_BIN_EXE_gradflow");

const JOB: &str = r#"
[data.synth]
rows = 4000
dim = 5000
nnz = 10
[model]
loss = "logistic"
[optimizer]
kind = "sgd"
lr = 0.5
[train]
epochs = 2
seed = 3
"#;

struct Cluster {
    _dir: tempfile::TempDir,
    job: PathBuf,
    hosts: PathBuf,
    port0: u16,
}

impl Cluster {
    fn new() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let job = dir.path().join("job.toml");
        std::fs::write(&job, JOB).unwrap();
        let ports = free_ports(2);
        let hosts = dir.path().join("hosts");
        let lines = format!("127.0.0.1:{}\n127.0.0.1:{}\n", ports[0], ports[1]);
        std::fs::write(&hosts, lines).unwrap();
        Cluster {
            _dir: dir,
            job,
            hosts,
            port0: ports[0],
        }
    }

    /// Starts process `p` with cluster secret `secret` (none if `None`), start-up timeout
    /// `timeout` seconds and job overrides `overrides`.
    fn spawn(&self, p: usize, secret: Option<&str>, timeout: u64, overrides: &[&str]) -> Child {
        let mut c = Command::new(BIN);
        c.arg("train").arg(&self.job).args([
            "--processes",
            "2",
            "--process",
            &p.to_string(),
            "--startup-timeout",
            &timeout.to_string(),
            "--hostfile",
        ]);
        c.arg(&self.hosts);
        for o in overrides {
            c.args(["--set", o]);
        }
        match secret {
            Some(s) => c.env(SECRET_VARIABLE, s),
            None => c.env_remove(SECRET_VARIABLE),
        };
        c.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// A connection to process 0, once it listens.
    fn dial(&self) -> TcpStream {
        let started = Instant::now();
        loop {
            match TcpStream::connect(("127.0.0.1", self.port0)) {
                Ok(s) => {
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    return s;
                }
                Err(e) if started.elapsed() > Duration::from_secs(20) => {
                    panic!("process 0 never listened: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A hello as process `from` would send it to process `to`.
fn hello(from: usize, to: usize) -> [u8; HELLO_LEN] {
    Hello::new(from, to).encode()
}

#[test]
fn stray_clients_are_refused_and_logged_and_the_job_goes_on() {
    let cluster = Cluster::new();
    let secret = Some("correct horse battery staple");
    let p0 = cluster.spawn(0, secret, 60, &[]);

    // 1. Connects and closes at once (this used to panic timely's start-up).
    drop(cluster.dial());
    // 2. Garbage.
    cluster.dial().write_all(&[0xAB; 100]).unwrap();
    // 3. What timely's own handshake sends: the process index as 8 bytes (this used to be
    //    accepted as process 1).
    let mut s = cluster.dial();
    s.write_all(&1u64.to_le_bytes()).unwrap();
    drop(s);
    // 4. A hello as process 1 would send it, then MACs made without the secret. Process 0
    //    answers with its hello (nothing of the job), then refuses ours with one byte.
    let mut s = cluster.dial();
    s.write_all(&hello(1, 0)).unwrap();
    let mut reply = [0u8; HELLO_LEN];
    s.read_exact(&mut reply).unwrap();
    let theirs = Hello::decode(&reply).unwrap();
    assert_eq!((theirs.from, theirs.to), (0, 1));
    s.write_all(&[0u8; 2 * TAG_LEN]).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert_eq!(
        rest,
        [2],
        "one byte, REFUSED: a client without the secret learns nothing"
    );
    // 5. A client that says nothing holds one handshake open, and does not block the peer.
    let silent = cluster.dial();

    // The real process 1 connects and the job runs to the end.
    let p1 = cluster.spawn(1, secret, 60, &[]);
    let out1 = p1.wait_with_output().unwrap();
    let out0 = p0.wait_with_output().unwrap();
    drop(silent);
    let ((stdout0, err0), (_, err1)) = (text(&out0), text(&out1));
    assert!(out0.status.success(), "process 0: {err0}");
    assert!(out1.status.success(), "process 1: {err1}");
    assert_eq!(
        stdout0.lines().filter(|l| l.starts_with("epoch")).count(),
        2,
        "{stdout0}"
    );
    // Every stray was refused with its reason in process 0's log.
    let refusals: Vec<&str> = err0
        .lines()
        .filter(|l| l.starts_with("process 0: refused a connection from 127.0.0.1:"))
        .collect();
    assert_eq!(refusals.len(), 4, "{err0}");
    for why in [
        "closed the connection before its hello",
        "not a gradflow process",
        "failed authentication",
    ] {
        assert!(refusals.iter().any(|l| l.contains(why)), "{why}: {err0}");
    }
    assert!(!err0.contains("panicked"), "{err0}");
}

#[test]
fn processes_that_disagree_on_the_secret_fail_with_a_clear_error() {
    for (case, secret1) in [
        ("another secret", Some("not the secret")),
        ("no secret", None),
    ] {
        let why = "failed authentication (a different cluster secret)";
        let cluster = Cluster::new();
        let started = Instant::now();
        let p0 = cluster.spawn(0, Some("the secret"), 3, &[]);
        let p1 = cluster.spawn(1, secret1, 3, &[]);
        let out1 = p1.wait_with_output().unwrap();
        let out0 = p0.wait_with_output().unwrap();
        let ((_, err0), (_, err1)) = (text(&out0), text(&out1));
        assert!(!out0.status.success() && !out1.status.success(), "{case}");
        assert!(started.elapsed() < Duration::from_secs(15), "{case}");
        // Process 1 (the connector) names process 0 and says what is wrong.
        assert!(
            err1.contains("process 0 at 127.0.0.1:") && err1.contains(why),
            "{case}: {err1}"
        );
        // Process 0 logs the refusal (a stranger could send the same) and then times out,
        // naming who is missing and why.
        assert!(
            err0.contains("process 0: refused a connection from"),
            "{case}: {err0}"
        );
        assert!(
            err0.contains("timed out after 3 s waiting for all 2 processes to connect")
                && err0.contains("never connected to this process at 127.0.0.1:")
                && err0.contains(": process 1 (127.0.0.1:")
                && err0.contains("1 connection(s) refused"),
            "{case}: {err0}"
        );
        assert!(!err0.contains("panicked") && !err1.contains("panicked"));
    }
}

/// Starts process `p` of `n` with `hosts` and `--startup-timeout timeout`, in `run` (the
/// job's directory in common), with a secret.
fn spawn_run(dir: &Path, p: usize, hosts: &str, timeout: u64, run: &str) -> Child {
    let n = hosts.split(',').count();
    Command::new(BIN)
        .current_dir(dir)
        .args(["train", "job.toml", "--run-id", run, "--hosts", hosts])
        .args(["-n", &n.to_string(), "-p", &p.to_string()])
        .args(["--startup-timeout", &timeout.to_string()])
        .env(SECRET_VARIABLE, "s")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A process left from an earlier attempt (same job, same secret, another run identity)
/// cannot join: process 0 turns it away, logging it, and the real process 1 joins; the
/// stale one gives up at its deadline, naming the run it met.
#[test]
fn a_process_of_another_run_cannot_join() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("job.toml"), JOB).unwrap();
    let hosts = free_ports(2)
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let p0 = spawn_run(dir.path(), 0, &hosts, 30, "job-9.r1");
    let stale = spawn_run(dir.path(), 1, &hosts, 3, "job-9.r0");
    let stale = stale.wait_with_output().unwrap();
    let p1 = spawn_run(dir.path(), 1, &hosts, 30, "job-9.r1");
    let (out0, out1) = (
        p0.wait_with_output().unwrap(),
        p1.wait_with_output().unwrap(),
    );
    let ((stdout0, err0), (_, err1), (_, stale_err)) = (text(&out0), text(&out1), text(&stale));
    assert!(
        out0.status.success() && out1.status.success(),
        "{err0}\n{err1}"
    );
    assert_eq!(
        stdout0.lines().filter(|l| l.starts_with("epoch")).count(),
        2
    );
    assert!(
        err0.contains("claims to be process 1 but belongs to another run")
            && err0.contains("this process's: `job-9.r1`"),
        "{err0}"
    );
    assert!(!stale.status.success());
    assert!(
        stale_err.contains("not reached: process 0 at 127.0.0.1:")
            && stale_err.contains("belongs to another run")
            && stale_err.contains("this process's: `job-9.r0`"),
        "{stale_err}"
    );
}

/// Two processes given one index: the second fails at once saying so, whether the index
/// listens (its port is in use) or not (the listener it dials has one already), and the
/// cluster of the first ones trains. A timeout names every process not reached, each with
/// its address and last attempt, and every process that never connected.
#[test]
fn two_processes_given_one_index_are_told_so_and_a_timeout_names_every_peer() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("job.toml"), JOB).unwrap();
    let ports = free_ports(4);
    let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let all = hosts.join(",");
    let run = "r";
    let (p0, p1, p3) = (
        spawn_run(dir.path(), 0, &all, 60, run),
        spawn_run(dir.path(), 1, &all, 60, run),
        spawn_run(dir.path(), 3, &all, 60, run),
    );
    // Process 1 listens, then (given a moment) has accepted process 3, as process 0 has.
    let seconds = Instant::now();
    while TcpStream::connect(hosts[1].as_str()).is_err() {
        assert!(
            seconds.elapsed() < Duration::from_secs(20),
            "process 1 never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    for (index, want) in [
        (
            1,
            format!("cannot listen on {}: the port is in use", hosts[1]),
        ),
        (3, "two processes were given index 3".to_string()),
    ] {
        let started = Instant::now();
        let twin = spawn_run(dir.path(), index, &all, 60, run)
            .wait_with_output()
            .unwrap();
        let (_, err) = text(&twin);
        assert!(
            !twin.status.success() && err.contains(&want),
            "{index}: {err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{index}: waited"
        );
    }
    let p2 = spawn_run(dir.path(), 2, &all, 60, run);
    for (i, p) in [p0, p1, p2, p3].into_iter().enumerate() {
        let out = p.wait_with_output().unwrap();
        assert!(out.status.success(), "process {i}: {}", text(&out).1);
    }

    // Process 1 of 3 alone: process 0 is not reached (nothing listens), process 2 never
    // connects.
    let out = spawn_run(dir.path(), 1, &hosts[..3].join(","), 2, run)
        .wait_with_output()
        .unwrap();
    let (_, err) = text(&out);
    assert!(!out.status.success());
    for want in [
        "timed out after 2 s waiting for all 3 processes to connect",
        &format!("not reached: process 0 at {} (dialled until the deadline; last attempt: cannot connect", hosts[0]),
        "nothing listens there",
        &format!("never connected to this process at {}: process 2 ({})", hosts[1], hosts[2]),
    ] {
        assert!(err.contains(want), "{want}: {err}");
    }
}

/// Starts process `p` of `n` in `dir` (its own job.toml and data) with `hosts`, the secret
/// `secret` and `-w workers`.
fn spawn_in(
    dir: &Path,
    p: usize,
    n: usize,
    hosts: &str,
    workers: &str,
    secret: Option<&str>,
) -> Child {
    let mut c = Command::new(BIN);
    c.current_dir(dir)
        .args([
            "train",
            "job.toml",
            "-w",
            workers,
            "--startup-timeout",
            "30",
        ])
        .args(["-n", &n.to_string(), "-p", &p.to_string(), "--hosts", hosts]);
    match secret {
        Some(s) => c.env(SECRET_VARIABLE, s),
        None => c.env_remove(SECRET_VARIABLE),
    };
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Processes that differ in `-w`, `-n`, a job field, the seed or the content of an input
/// (same name and size) are refused at start-up by both sides, at once (not after the
/// start-up timeout), each naming the field or file: with a secret both values, without one
/// the counts' both values and the others' own. (Different `-w` once failed with a relayed
/// panic, different `-n` 10 s later with an unrelated message, a different job as two ids.)
#[test]
fn processes_that_differ_name_what_differs_at_once() {
    let ports = free_ports(3);
    let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let two = hosts[..2].join(",");
    let three = hosts.join(",");
    let data_job = "[data]\ntrain = \"d.svm\"\n[train]\nepochs = 1\nseed = 3\n";
    let rows = "1 1:1\n-1 2:1\n1 3:1\n-1 4:1\n";
    let swapped = "-1 2:1\n1 1:1\n1 3:1\n-1 4:1\n";
    type Case<'a> = (
        &'a str,
        [&'a str; 2],
        [&'a str; 2],
        [&'a str; 2],
        Option<&'a str>,
        [&'a str; 2],
    );
    let cases: [Case; 5] = [
        (
            "-w",
            ["1", "2"],
            [JOB, JOB],
            [rows, rows],
            Some("s"),
            [
                "-w (threads per process): `1` here, `2` in process 1",
                "-w (threads per process): `2` here, `1` in process 0",
            ],
        ),
        (
            "-n",
            ["1", "1"],
            [JOB, JOB],
            [rows, rows],
            None,
            [
                "-n (processes): `2` here, `3` in process 1",
                "-n (processes): `3` here, `2` in process 0",
            ],
        ),
        (
            "epochs",
            ["1", "1"],
            [JOB, &JOB.replace("epochs = 2", "epochs = 3")],
            [rows, rows],
            Some("s"),
            [
                "train.epochs: `2` here, `3` in process 1",
                "train.epochs: `3` here, `2` in process 0",
            ],
        ),
        (
            "seed",
            ["1", "1"],
            [JOB, &JOB.replace("seed = 3", "seed = 4")],
            [rows, rows],
            None,
            [
                "train.seed: `3` here, another value in process 1",
                "train.seed: `4` here, another value in process 0",
            ],
        ),
        (
            "data",
            ["1", "1"],
            [data_job, data_job],
            [rows, swapped],
            Some("s"),
            ["input ", "input "],
        ),
    ];
    for (case, workers, jobs, data, secret, whys) in cases {
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        for (d, (job, rows)) in dirs.iter().zip(jobs.iter().zip(data)) {
            std::fs::write(d.path().join("job.toml"), job).unwrap();
            std::fs::write(d.path().join("d.svm"), rows).unwrap();
        }
        let n1 = if case == "-n" { 3 } else { 2 };
        let h1 = if case == "-n" { &three } else { &two };
        let started = Instant::now();
        let p0 = spawn_in(dirs[0].path(), 0, 2, &two, workers[0], secret);
        let p1 = spawn_in(dirs[1].path(), 1, n1, h1, workers[1], secret);
        let outs = [
            p0.wait_with_output().unwrap(),
            p1.wait_with_output().unwrap(),
        ];
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{case}: waited out a timeout"
        );
        for (i, out) in outs.iter().enumerate() {
            let (_, err) = text(out);
            assert!(!out.status.success(), "{case}: process {i}: {err}");
            assert!(
                err.contains("runs another job or cluster") && err.contains(whys[i]),
                "{case}: process {i}: {err}"
            );
            assert!(!err.contains("panicked"), "{case}: {err}");
            if case == "data" {
                assert!(err.contains("input d.svm: `26 bytes, xxh3 "), "{err}");
            }
        }
    }
}

/// Clients that connect and send a byte every second hold no handshake open for long: each
/// handshake has one deadline, and a new connection evicts the oldest unfinished one. Before,
/// 32 such clients held every slot (the limit was per read) and the real peer was refused
/// until the start-up timeout.
#[test]
fn slow_trickle_clients_do_not_crowd_out_the_real_peer() {
    use gradflow::handshake::{connect, Credentials, MAX_PENDING};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let ports = free_ports(2);
    let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let identity = gradflow::handshake::Identity::default().field("job", "job");
    let cred = Credentials::new(identity, Some("secret"));
    let timeout = Duration::from_secs(30);
    let (a, c) = (addresses.clone(), cred.clone());
    let p0 = std::thread::spawn(move || connect(&a, 0, &c, timeout).map(|_| ()));
    let stop = Arc::new(AtomicBool::new(false));
    let tricklers: Vec<_> = (0..MAX_PENDING + 8)
        .map(|_| {
            let (stop, port) = (stop.clone(), ports[0]);
            std::thread::spawn(move || {
                let started = Instant::now();
                let mut s = loop {
                    match TcpStream::connect(("127.0.0.1", port)) {
                        Ok(s) => break s,
                        Err(_) if started.elapsed() < Duration::from_secs(20) => {
                            std::thread::sleep(Duration::from_millis(20))
                        }
                        Err(e) => panic!("process 0 never listened: {e}"),
                    }
                };
                while !stop.load(Ordering::Relaxed) && s.write_all(b"G").is_ok() {
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500)); // every slot is taken by now
    let started = Instant::now();
    let p1 = connect(&addresses, 1, &cred, timeout);
    let waited = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    assert!(p1.is_ok(), "{:?}", p1.err());
    assert!(p0.join().unwrap().is_ok());
    assert!(
        waited < Duration::from_secs(10),
        "the real peer waited {waited:?}"
    );
    tricklers.into_iter().for_each(|t| t.join().unwrap());
}
