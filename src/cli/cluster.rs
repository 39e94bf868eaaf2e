//! `gradflow cluster`: N local processes on loopback, output prefixed by process id; when one
//! fails the others are stopped and the command fails.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Picks `n` free loopback ports (bound, then released for the children to take).
pub fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

/// How to start a cluster's processes.
pub struct Launch<'a> {
    /// The job file.
    pub job: &'a Path,
    /// Processes.
    pub processes: usize,
    /// Worker threads per process.
    pub workers: usize,
    /// Seconds each process waits for the others to connect.
    pub startup_timeout: u64,
    /// `--set` arguments and the like, passed to every process.
    pub overrides: &'a [String],
    /// `host:port` of every process (default: free loopback ports).
    pub hosts: Option<Vec<String>>,
    /// Words run before the executable for process `i`, e.g. `ip netns exec gf0` (default:
    /// none).
    pub wrap: Option<&'a dyn Fn(usize) -> Vec<String>>,
    /// Append the processes' output, prefixed `[pI]`, to this file instead of printing it.
    pub log: Option<&'a Path>,
}

impl<'a> Launch<'a> {
    /// A loopback cluster printing its output.
    pub fn local(job: &'a Path, processes: usize, workers: usize, overrides: &'a [String]) -> Self {
        Launch {
            job,
            processes,
            workers,
            startup_timeout: 60,
            overrides,
            hosts: None,
            wrap: None,
            log: None,
        }
    }
}

/// Runs the job as `processes` local processes of `workers` threads each.
pub fn run(
    job: &Path,
    processes: usize,
    workers: usize,
    startup_timeout: u64,
    overrides: &[String],
) -> Result<(), String> {
    launch(&Launch {
        startup_timeout,
        ..Launch::local(job, processes, workers, overrides)
    })
}

/// Starts the processes of `l`, waits for all of them, and stops the others when one fails.
pub fn launch(l: &Launch) -> Result<(), String> {
    let (job, processes, workers, startup_timeout, overrides) = (
        l.job,
        l.processes,
        l.workers,
        l.startup_timeout,
        l.overrides,
    );
    if processes == 0 || workers == 0 {
        return Err("--processes and --workers must be at least 1".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
    let hostfile = std::env::temp_dir().join(format!("gradflow-hosts-{}", std::process::id()));
    let hosts: String = match &l.hosts {
        Some(h) => h.iter().map(|h| format!("{h}\n")).collect(),
        None => free_ports(processes)
            .map_err(|e| format!("cannot pick ports: {e}"))?
            .iter()
            .map(|p| format!("127.0.0.1:{p}\n"))
            .collect(),
    };
    std::fs::write(&hostfile, hosts).map_err(|e| format!("{}: {e}", hostfile.display()))?;
    let log = match l.log {
        Some(path) => Some(std::sync::Arc::new(std::sync::Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("{}: {e}", path.display()))?,
        ))),
        None => None,
    };

    let mut children: Vec<Child> = Vec::new();
    for i in 0..processes {
        let wrap = l.wrap.map(|w| w(i)).unwrap_or_default();
        let mut cmd = match wrap.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        cmd.arg("train")
            .arg(job)
            .args([
                "--processes",
                &processes.to_string(),
                "--process",
                &i.to_string(),
            ])
            .args([
                "--workers",
                &workers.to_string(),
                "--startup-timeout",
                &startup_timeout.to_string(),
            ])
            .arg("--hostfile")
            .arg(&hostfile)
            .args(overrides)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start process {i}: {e}"))?;
        for (stream, is_err) in [
            (
                child
                    .stdout
                    .take()
                    .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
                false,
            ),
            (
                child
                    .stderr
                    .take()
                    .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
                true,
            ),
        ] {
            if let Some(s) = stream {
                let log = log.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(s).lines().map_while(Result::ok) {
                        if let Some(f) = &log {
                            let _ = writeln!(f.lock().unwrap(), "[p{i}] {line}");
                        } else if is_err {
                            let _ = writeln!(std::io::stderr(), "[p{i}] {line}");
                        } else {
                            let _ = writeln!(std::io::stdout(), "[p{i}] {line}");
                        }
                    }
                });
            }
        }
        children.push(child);
    }
    // Poll the children; the first failure stops the rest.
    let mut done = vec![false; processes];
    let mut failure: Option<String> = None;
    while done.iter().any(|d| !d) {
        for (i, child) in children.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            if let Ok(Some(status)) = child.try_wait() {
                done[i] = true;
                if !status.success() && failure.is_none() {
                    failure = Some(format!("process {i} failed ({status})"));
                }
            }
        }
        if failure.is_some() {
            for (i, child) in children.iter_mut().enumerate() {
                if !done[i] {
                    let _ = child.kill();
                    let _ = child.wait();
                    done[i] = true;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(100)); // let the output threads drain
    let _ = std::fs::remove_file(&hostfile);
    match failure {
        Some(f) => Err(f),
        None => Ok(()),
    }
}
