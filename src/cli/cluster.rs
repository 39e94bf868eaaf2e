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

/// Runs the job as `processes` local processes of `workers` threads each.
pub fn run(
    job: &Path,
    processes: usize,
    workers: usize,
    startup_timeout: u64,
    overrides: &[String],
) -> Result<(), String> {
    if processes == 0 || workers == 0 {
        return Err("--processes and --workers must be at least 1".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
    let hostfile = std::env::temp_dir().join(format!("gradflow-hosts-{}", std::process::id()));
    let ports = free_ports(processes).map_err(|e| format!("cannot pick ports: {e}"))?;
    let hosts: String = ports.iter().map(|p| format!("127.0.0.1:{p}\n")).collect();
    std::fs::write(&hostfile, hosts).map_err(|e| format!("{}: {e}", hostfile.display()))?;

    let mut children: Vec<Child> = Vec::new();
    for i in 0..processes {
        let mut cmd = Command::new(&exe);
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
                std::thread::spawn(move || {
                    for line in BufReader::new(s).lines().map_while(Result::ok) {
                        if is_err {
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
