//! `gradflow cluster`: N local processes on loopback, output prefixed by process id; when one
//! fails the others are stopped and the command fails.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::runtime::SECRET_VARIABLE;

/// Set by SIGINT and SIGTERM once [`catch_interrupts`] is called: a launcher stops every
/// process and ends, with no restart.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// From now on SIGINT (Ctrl-C) and SIGTERM set [`interrupted`] instead of ending this
/// process, so that it can stop what it started.
pub fn catch_interrupts() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

/// Whether SIGINT or SIGTERM arrived since [`catch_interrupts`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

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
    /// The job file (none: the overrides set the job's fields on the defaults).
    pub job: Option<&'a Path>,
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
    /// Start each process on its host over ssh (`gradflow launch`) instead of locally.
    pub remote: Option<&'a Remote>,
}

/// Processes started over ssh: the ssh command's words, each process's host, and the
/// directory every host runs in (the same path on every host: a shared filesystem).
pub struct Remote {
    /// The ssh command, e.g. `ssh -o BatchMode=yes` (the host follows it).
    pub ssh: Vec<String>,
    /// The host of each process.
    pub hosts: Vec<String>,
    /// The working directory on every host.
    pub dir: std::path::PathBuf,
}

/// `word` quoted for a POSIX shell.
fn quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

impl Remote {
    /// The ssh command running `words` on `host`: the remote shell reads the cluster secret
    /// from the first line of standard input (never on a command line), runs the process
    /// in the shared directory, and kills it when standard input closes (the launcher or
    /// its ssh died), so a process never outlives its launcher; it exits with the process's
    /// status. (A background list reads /dev/null unless told otherwise: the watcher reads
    /// standard input through fd 3.)
    fn command(&self, host: &str, words: &[String]) -> Command {
        let run: Vec<String> = words.iter().map(|w| quoted(w)).collect();
        let script = format!(
            "cd {dir} && read -r {SECRET_VARIABLE} && export {SECRET_VARIABLE} && \
             exec 3<&0 && {{ {run} </dev/null & pid=$!; }} && \
             {{ (while read -r _; do :; done; kill $pid 2>/dev/null) <&3 & watch=$!; }} && \
             wait $pid; status=$?; kill $watch 2>/dev/null; exit $status",
            dir = quoted(&self.dir.display().to_string()),
            run = run.join(" ")
        );
        let mut cmd = self.ssh_to(host);
        cmd.arg(script);
        cmd
    }

    /// The ssh command to `host`, its remote command to follow.
    fn ssh_to(&self, host: &str) -> Command {
        let (ssh, options) = self.ssh.split_first().expect("an ssh command");
        let mut cmd = Command::new(ssh);
        cmd.args(options).arg(host);
        cmd
    }

    /// Checks, before anything starts, that every host reaches the binary, the job file
    /// and the directory by the same paths (a shared filesystem); an error names the host
    /// and what it lacks.
    pub fn check(&self, exe: &Path, job: Option<&Path>) -> Result<(), String> {
        let mut hosts = self.hosts.clone();
        hosts.sort();
        hosts.dedup();
        let mut paths = vec![("-x", exe.to_path_buf()), ("-d", self.dir.clone())];
        paths.extend(job.map(|j| ("-r", j.to_path_buf())));
        let test: Vec<String> = paths
            .iter()
            .map(|(flag, p)| {
                let p = quoted(&p.display().to_string());
                format!("{{ test {flag} {p} || echo {p}; }}")
            })
            .collect();
        for host in hosts {
            let out = (self
                .ssh_to(&host)
                .arg(test.join("; "))
                .stdin(Stdio::null())
                .output())
            .map_err(|e| format!("cannot run `{}`: {e}", self.ssh[0]))?;
            let missing = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if !out.status.success() {
                return Err(format!(
                    "{host}: ssh failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            if !missing.is_empty() {
                return Err(format!(
                    "{host}: does not have {} (gradflow launch runs the same binary, job file \
                     and directory paths on every host: put them on a filesystem every host \
                     shares)",
                    missing.lines().collect::<Vec<_>>().join(", ")
                ));
            }
        }
        Ok(())
    }
}

impl<'a> Launch<'a> {
    /// A loopback cluster printing its output.
    pub fn local(
        job: Option<&'a Path>,
        processes: usize,
        workers: usize,
        overrides: &'a [String],
    ) -> Self {
        Launch {
            job,
            processes,
            workers,
            startup_timeout: 60,
            overrides,
            hosts: None,
            wrap: None,
            log: None,
            remote: None,
        }
    }
}

/// Runs the job as `processes` local processes of `workers` threads each.
pub fn run(
    job: Option<&Path>,
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

/// Starts the processes of `l`, waits for all of them, and stops the others when one fails,
/// naming the process that failed first. The addresses travel on the command line (no
/// temporary file), and on Linux every process dies with the launcher, however it ends.
pub fn launch(l: &Launch) -> Result<(), String> {
    if l.processes == 0 || l.workers == 0 {
        return Err("--processes and --workers must be at least 1".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
    let hosts = match &l.hosts {
        Some(h) => h.join(","),
        None => free_ports(l.processes)
            .map_err(|e| format!("cannot pick ports: {e}"))?
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(","),
    };
    let log = match l.log {
        Some(path) => Some(Arc::new(Mutex::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("{}: {e}", path.display()))?,
        ))),
        None => None,
    };
    // The processes authenticate each other with a secret of this launch (or the user's).
    let secret = std::env::var(SECRET_VARIABLE)
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(new_secret);
    catch_interrupts();
    let mut cluster = Running::new(l.processes);
    // A remote process reads the secret from its standard input, which stays open until
    // the launcher ends: its end stops the remote process.
    let mut inputs = Vec::new();
    for i in 0..l.processes {
        let mut child = command(l, &exe, i, &hosts)
            .env(SECRET_VARIABLE, &secret)
            .spawn()
            .map_err(|e| format!("cannot start process {i}: {e}"))?;
        if let Some(mut input) = child.stdin.take() {
            writeln!(input, "{secret}").map_err(|e| format!("process {i}: {e}"))?;
            inputs.push(input);
        }
        let (label, name) = match l.remote {
            Some(r) => (
                format!("p{i} {}", r.hosts[i]),
                format!("process {i} on {}", r.hosts[i]),
            ),
            None => (format!("p{i}"), format!("process {i}")),
        };
        let said = forward_output(&mut child, label, &log);
        cluster.watch(i, name, said, child);
    }
    let failure = cluster.wait();
    drop(inputs);
    std::thread::sleep(Duration::from_millis(100)); // let the output threads drain
    match failure {
        Some(f) => Err(cluster.explain(f)),
        None => Ok(()),
    }
}

/// A fresh cluster secret: 32 bytes of rand's thread-local CSPRNG (seeded by the operating
/// system; not the job's seed: a secret must not be reproducible), in hex.
fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes);
    crate::handshake::hex(&bytes)
}

/// The command line of process `i`.
fn command(l: &Launch, exe: &Path, i: usize, hosts: &str) -> Command {
    let wrap = l.wrap.map(|w| w(i)).unwrap_or_default();
    let mut cmd = match wrap.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    let words: Vec<String> = [
        vec!["train".to_string()],
        l.job.iter().map(|j| j.display().to_string()).collect(),
        vec!["--processes".into(), l.processes.to_string()],
        vec!["--process".into(), i.to_string()],
        vec!["--workers".into(), l.workers.to_string()],
        vec!["--startup-timeout".into(), l.startup_timeout.to_string()],
        vec!["--hosts".into(), hosts.to_string()],
        l.overrides.to_vec(),
    ]
    .concat();
    if let Some(remote) = l.remote {
        let all = [vec![exe.display().to_string()], words].concat();
        let mut cmd = remote.command(&remote.hosts[i], &all);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_parent(&mut cmd);
        return cmd;
    }
    cmd.args(words)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    die_with_parent(&mut cmd);
    cmd
}

/// On Linux the child gets SIGKILL when the launcher dies (also by SIGKILL, when no destructor
/// runs): a cluster never outlives its launcher.
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (prctl, getppid), allocating nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The launcher may have died before prctl: then nobody would send the signal.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_: &mut Command) {}

/// Copies the child's output lines, prefixed `[pI]`, to the log or to this process's own
/// stdout and stderr.
/// Returns the child's last `error:` line so far, which its failure quotes.
fn forward_output(
    child: &mut Child,
    i: String,
    log: &Option<Arc<Mutex<std::fs::File>>>,
) -> Arc<Mutex<String>> {
    let last_error = Arc::new(Mutex::new(String::new()));
    let streams: [(Option<Box<dyn Read + Send>>, bool); 2] = [
        (child.stdout.take().map(|s| Box::new(s) as _), false),
        (child.stderr.take().map(|s| Box::new(s) as _), true),
    ];
    for (stream, is_err) in streams {
        let Some(stream) = stream else { continue };
        let (log, i, last_error) = (log.clone(), i.clone(), last_error.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if is_err && line.starts_with("error:") {
                    last_error
                        .lock()
                        .expect("no panic holds it")
                        .clone_from(&line);
                }
                let _ = match &log {
                    Some(f) => writeln!(f.lock().unwrap(), "[{i}] {line}"),
                    None if is_err => writeln!(std::io::stderr(), "[{i}] {line}"),
                    None => writeln!(std::io::stdout(), "[{i}] {line}"),
                };
            }
        });
    }
    last_error
}

/// The started processes: a thread per child waits for it, so exits arrive in the order they
/// happen (a poll in index order would name a survivor that failed *because* its peer died).
/// Dropping it (an early error, a panic) kills whatever still runs.
struct Running {
    pids: Vec<Option<u32>>,
    /// Each process's name in messages (`process 1 on b`) and its last `error:` line.
    names: Vec<(String, Arc<Mutex<String>>)>,
    exits: mpsc::Receiver<(usize, std::io::Result<ExitStatus>)>,
    sender: mpsc::Sender<(usize, std::io::Result<ExitStatus>)>,
}

/// Why a cluster failed: the process to blame, if any, and what happened.
#[derive(Clone)]
struct Failure {
    process: Option<usize>,
    message: String,
}

/// How long the others may take to stop by themselves (each names the failed peer) after the
/// first failure, before they are killed.
const GRACE: Duration = Duration::from_secs(2);

impl Running {
    fn new(processes: usize) -> Self {
        let (sender, exits) = mpsc::channel();
        Running {
            pids: vec![None; processes],
            names: vec![Default::default(); processes],
            exits,
            sender,
        }
    }

    fn watch(&mut self, i: usize, name: String, said: Arc<Mutex<String>>, mut child: Child) {
        self.pids[i] = Some(child.id());
        self.names[i] = (name, said);
        let sender = self.sender.clone();
        std::thread::spawn(move || sender.send((i, child.wait())));
    }

    /// Waits for every process; the first failure, if any, names its process: the first that
    /// failed by itself; else one that had to be killed because it did not stop with the
    /// others (a hung process, which they report with [`super::EXIT_LOST_PEER`]); else the
    /// first to fail. A lost-peer exit is a consequence: under load a survivor's exit can be
    /// seen before the exit of the peer it lost.
    ///
    /// On SIGINT or SIGTERM every process gets SIGTERM (an ssh client's end stops its remote
    /// process), and SIGKILL after [`GRACE`]; the failure says so.
    fn wait(&mut self) -> Option<Failure> {
        let (mut first, mut first_own, mut first_hung) = (None, None, None);
        let mut deadline: Option<Instant> = None;
        let mut killed = false;
        let mut stopping = None;
        while self.pids.iter().any(Option::is_some) {
            if stopping.is_none() && interrupted() {
                let running = self.pids.iter().flatten().count();
                stopping = Some(Failure {
                    process: None,
                    message: format!(
                        "interrupted: stopped the {running} process(es) still running"
                    ),
                });
                self.signal_all(libc::SIGTERM);
                deadline.get_or_insert_with(|| Instant::now() + GRACE);
            }
            let exit = match deadline {
                Some(d) if !killed => {
                    let left = d.saturating_duration_since(Instant::now());
                    match self.exits.recv_timeout(left) {
                        Ok(exit) => Some(exit),
                        Err(_) => {
                            self.kill_all();
                            killed = true;
                            self.exits.recv().ok()
                        }
                    }
                }
                _ => match self.exits.recv_timeout(Duration::from_millis(100)) {
                    Ok(exit) => Some(exit),
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(mpsc::RecvTimeoutError::Disconnected) => None,
                },
            };
            let Some((i, status)) = exit else { break };
            if stopping.is_some() {
                self.pids[i] = None;
                continue;
            }
            self.pids[i] = None;
            let why = match status {
                Ok(s) if s.success() => continue,
                Ok(s) if killed => {
                    first_hung.get_or_insert_with(|| Failure {
                        process: Some(i),
                        message: format!(
                            "{} failed first: it made no progress, and did not stop when the \
                             others did ({s}, killed by the launcher)",
                            self.names[i].0
                        ),
                    });
                    continue;
                }
                Ok(s) => s,
                Err(e) => {
                    first.get_or_insert_with(|| Failure {
                        process: Some(i),
                        message: format!("{}: {e}", self.names[i].0),
                    });
                    deadline.get_or_insert_with(|| Instant::now() + GRACE);
                    continue;
                }
            };
            let blame = Failure {
                process: Some(i),
                message: format!(
                    "{} failed first ({why}); the others were stopped",
                    self.names[i].0
                ),
            };
            if first.is_none() {
                first = Some(blame.clone());
                deadline = Some(Instant::now() + GRACE);
            }
            if first_own.is_none() && why.code() != Some(super::EXIT_LOST_PEER) {
                first_own = Some(blame);
            }
        }
        stopping.or(first_own).or(first_hung).or(first)
    }

    /// `failure`'s message with the last `error:` line its process printed.
    fn explain(&self, failure: Failure) -> String {
        let said = failure
            .process
            .map(|i| self.names[i].1.lock().expect("no panic holds it").clone())
            .unwrap_or_default();
        match said.strip_prefix("error:") {
            Some(e) => format!("{}: {}", failure.message, e.trim()),
            None => failure.message,
        }
    }

    /// SIGKILL to every process still running.
    fn kill_all(&mut self) {
        self.signal_all(libc::SIGKILL);
    }

    /// `signal` to every process still running (its waiter has not reaped it, so the pid is
    /// still its own).
    fn signal_all(&self, signal: libc::c_int) {
        for pid in self.pids.iter().flatten() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(*pid as libc::pid_t, signal);
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill_all();
    }
}
