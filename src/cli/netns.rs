//! Emulated links for `gradflow bench`: each process in its own network namespace, joined by a
//! bridge through a veth pair, with `tc` shaping both directions of every pair (`tbf` for the
//! rate, `netem` for delay where the kernel has it). Addresses come from a private range and
//! exist only inside these namespaces. Needs root and `ip`/`tc` (iproute2); without them a
//! shaped link runs on plain loopback and the report says so. Everything is torn down when the
//! [`Network`] is dropped (also after a failed cell or Ctrl-C), and leftovers of an earlier run
//! that was killed are removed before setting up.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::bench::Link;

/// Names: namespaces `gfbench0..`, host ends `gfbench0h..`, the bridge `gfbench-br`.
const PREFIX: &str = "gfbench";
const BRIDGE: &str = "gfbench-br";
/// The private range the namespaces use: 10.213.0.0/24, process `i` at .(i + 1).
const SUBNET: &str = "10.213.0";
/// The port every process listens on (each has its own address).
const PORT: u16 = 2101;
/// Held (`flock`) while a bench has emulated links up: the names are fixed, so a second bench
/// would tear down the first one's network.
const LOCK: &str = "/run/lock/gradflow-bench.lock";

/// The network a link's cells run on.
pub enum Network {
    /// Plain loopback; `why` says why a shaped link could not be emulated, if it was asked for.
    Loopback { why: Option<String> },
    /// Namespaces on a bridge, shaped; `_lock` holds [`LOCK`] while they exist.
    Shaped {
        link: Link,
        processes: usize,
        notes: Vec<String>,
        _lock: std::fs::File,
    },
}

impl Network {
    /// Sets up the network for `link` with room for `processes` processes.
    pub fn for_link(link: &Link, processes: usize) -> Result<Network, String> {
        if !link.shaped() {
            return Ok(Network::Loopback { why: None });
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(Network::Loopback {
                why: Some("not root: ran on loopback, unshaped".into()),
            });
        }
        if run("ip", &["-V"]).is_err() || run("tc", &["-V"]).is_err() {
            return Ok(Network::Loopback {
                why: Some("no iproute2 (ip, tc): ran on loopback, unshaped".into()),
            });
        }
        let lock = take_lock()?;
        cleanup();
        let mut net = Network::Shaped {
            link: link.clone(),
            processes,
            notes: Vec::new(),
            _lock: lock,
        };
        // On an error, dropping `net` removes what was made.
        net.build()?;
        Ok(net)
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        match self {
            Network::Loopback { why: None } => "loopback, unshaped".into(),
            Network::Loopback { why: Some(w) } => w.clone(),
            Network::Shaped { link, notes, .. } => {
                let mut s = format!(
                    "network namespaces on a bridge, tbf {} each way",
                    link.rate.as_deref().unwrap_or("unlimited")
                );
                if let Some(Ok(bits)) = link.rate_bits() {
                    s += &format!(" (bucket {} bytes)", link.bucket(bits));
                }
                for n in notes {
                    s += "; ";
                    s += n;
                }
                s
            }
        }
    }

    /// `host:port` of each of `n` processes (None: the launcher's loopback ports).
    pub fn hosts(&self, n: usize) -> Option<Vec<String>> {
        match self {
            Network::Loopback { .. } => None,
            Network::Shaped { .. } => Some(
                (0..n)
                    .map(|i| format!("{SUBNET}.{}:{PORT}", i + 1))
                    .collect(),
            ),
        }
    }

    /// The words that start process `i` in its namespace.
    pub fn wrap(&self, i: usize) -> Vec<String> {
        match self {
            Network::Loopback { .. } => Vec::new(),
            Network::Shaped { .. } => ["ip", "netns", "exec", &format!("{PREFIX}{i}")]
                .map(String::from)
                .to_vec(),
        }
    }

    fn build(&mut self) -> Result<(), String> {
        let Network::Shaped {
            link,
            processes,
            notes,
            ..
        } = self
        else {
            return Ok(());
        };
        run("ip", &["link", "add", BRIDGE, "type", "bridge"])?;
        run("ip", &["link", "set", BRIDGE, "up"])?;
        let rate = link.rate_bits().transpose()?;
        let mut delay_note = None;
        for i in 0..*processes {
            let ns = format!("{PREFIX}{i}");
            let (inner, host) = (format!("{PREFIX}{i}n"), format!("{PREFIX}{i}h"));
            run("ip", &["netns", "add", &ns])?;
            run(
                "ip",
                &["link", "add", &inner, "type", "veth", "peer", "name", &host],
            )?;
            run("ip", &["link", "set", &inner, "netns", &ns])?;
            run("ip", &["link", "set", &host, "master", BRIDGE])?;
            run("ip", &["link", "set", &host, "up"])?;
            let addr = format!("{SUBNET}.{}/24", i + 1);
            in_ns(&ns, "ip", &["addr", "add", &addr, "dev", &inner])?;
            in_ns(&ns, "ip", &["link", "set", &inner, "up"])?;
            in_ns(&ns, "ip", &["link", "set", "lo", "up"])?;
            // Both directions: the namespace's end shapes what the process sends, the host's
            // end what it receives.
            for (netns, dev) in [(Some(ns.as_str()), inner.as_str()), (None, host.as_str())] {
                if let Some(d) = &link.delay {
                    let mut args =
                        vec!["qdisc", "add", "dev", dev, "root", "handle", "1:", "netem"];
                    args.extend(["delay", d]);
                    if tc(netns, &args).is_err() {
                        delay_note =
                            Some(format!("delay {d} not emulated: no netem in this kernel"));
                    }
                }
                if let Some(bits) = rate {
                    let (rate_s, burst) = (format!("{bits}bit"), link.bucket(bits).to_string());
                    let parent = if link.delay.is_some() && delay_note.is_none() {
                        vec!["parent", "1:1", "handle", "10:"]
                    } else {
                        vec!["root"]
                    };
                    let mut args = vec!["qdisc", "add", "dev", dev];
                    args.extend(parent);
                    args.extend(["tbf", "rate", &rate_s, "burst", &burst, "latency", "100ms"]);
                    tc(netns, &args)?;
                }
            }
        }
        notes.extend(delay_note);
        if *processes >= 2 {
            match probe() {
                Ok(mbit) => notes.push(format!("measured {mbit:.1} Mbit/s from process 0 to 1")),
                Err(e) => notes.push(format!("throughput probe failed: {e}")),
            }
        }
        Ok(())
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        if let Network::Shaped { .. } = self {
            cleanup();
        }
    }
}

/// Takes [`LOCK`], failing at once (with a message saying why) when another bench holds it.
fn take_lock() -> Result<std::fs::File, String> {
    use std::os::fd::AsRawFd;
    let _ = std::fs::create_dir_all("/run/lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK)
        .map_err(|e| format!("{LOCK}: {e}"))?;
    // SAFETY: a valid open descriptor; the lock goes with it when the file is closed.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(format!(
            "another gradflow bench has emulated links up (it holds {LOCK}); run one suite with \
             shaped links at a time"
        ));
    }
    Ok(f)
}

/// Removes every namespace named `gfbench*` (which takes its veth pair), any `gfbench*` link
/// left in this namespace (a run killed between creating a pair and moving one end) and the
/// bridge; errors are ignored (there may be nothing to remove).
fn cleanup() {
    let listed = Command::new("ip").args(["netns", "list"]).output();
    let names = listed
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for ns in names
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(PREFIX))
    {
        let _ = run("ip", &["netns", "del", ns]);
    }
    let links = Command::new("ip").args(["-o", "link", "show"]).output();
    let links = links
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    // Lines look like `12: gfbench1h@gfbench1n: <...>`.
    for name in links
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n))
        .filter(|n| n.starts_with(PREFIX) && *n != BRIDGE)
    {
        let _ = run("ip", &["link", "del", name]);
    }
    let _ = run("ip", &["link", "del", BRIDGE]);
}

/// Runs a command, failing with its stderr.
fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn in_ns(ns: &str, cmd: &str, args: &[&str]) -> Result<(), String> {
    let mut all = vec!["netns", "exec", ns, cmd];
    all.extend_from_slice(args);
    run("ip", &all)
}

fn tc(ns: Option<&str>, args: &[&str]) -> Result<(), String> {
    match ns {
        Some(ns) => in_ns(ns, "tc", args),
        None => run("tc", args),
    }
}

/// Moves the calling thread into namespace `ns` (only this thread: `setns` is per thread).
fn enter(ns: &str) -> Result<(), String> {
    let path = format!("/var/run/netns/{ns}");
    let f = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
    use std::os::fd::AsRawFd;
    // SAFETY: a valid open descriptor of a network namespace; affects this thread only.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!("setns {ns}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Sends for a second from process 0's namespace to process 1's and returns the rate the
/// receiver saw, in Mbit/s.
fn probe() -> Result<f64, String> {
    let addr = format!("{SUBNET}.2:{}", PORT + 1);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = std::thread::spawn({
        let addr = addr.clone();
        move || -> Result<f64, String> {
            enter(&format!("{PREFIX}1"))?;
            let listener = TcpListener::bind(&addr).map_err(|e| format!("bind {addr}: {e}"))?;
            let _ = ready_tx.send(());
            let (mut s, _) = listener.accept().map_err(|e| e.to_string())?;
            let mut buf = vec![0u8; 1 << 16];
            let (mut total, mut first) = (0u64, None);
            loop {
                let n = s.read(&mut buf).map_err(|e| e.to_string())?;
                if n == 0 {
                    break;
                }
                first.get_or_insert_with(Instant::now);
                total += n as u64;
            }
            let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
            Ok(total as f64 * 8.0 / secs.max(1e-9) / 1e6)
        }
    });
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| "the receiver did not start".to_string())?;
    let sender = std::thread::spawn(move || -> Result<(), String> {
        enter(&format!("{PREFIX}0"))?;
        let mut s = TcpStream::connect(&addr).map_err(|e| format!("connect {addr}: {e}"))?;
        let buf = vec![0u8; 1 << 16];
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(1) {
            s.write_all(&buf).map_err(|e| e.to_string())?;
        }
        Ok(())
    });
    sender.join().map_err(|_| "sender panicked".to_string())??;
    receiver
        .join()
        .map_err(|_| "receiver panicked".to_string())?
}
