//! An authenticated cluster: gradflow opens the TCP connections between its processes itself
//! and hands them to timely (`initialize_networking_from_sockets`) only after a handshake, so
//! nothing a stray client sends ever reaches timely's own start-up code (which panics on a
//! closed connection and believes any process index it reads).
//!
//! As in timely, process `i` connects to every process below it and accepts a connection from
//! every process above it. The handshake on each connection (connector C, listener L):
//!
//! 1. C → L: a hello, `GRADFLOW` magic, protocol version, job id, C's index, L's index and a
//!    fresh random nonce ([`HELLO_LEN`] bytes);
//! 2. L → C: L's own hello and `HMAC(secret, "L" ‖ hello_C ‖ hello_L)`;
//! 3. C checks L's hello and MAC, then sends `HMAC(secret, "C" ‖ hello_C ‖ hello_L)`;
//! 4. L checks C's hello and MAC and sends one byte: accepted.
//!
//! The MAC is HMAC-SHA256 keyed with the cluster secret (`--cluster-secret` or
//! `GRADFLOW_CLUSTER_SECRET`; `gradflow cluster` generates one). Both nonces enter both MACs,
//! so a recorded handshake cannot be replayed, and the role byte keeps L's MAC from serving as
//! C's. The job id is a digest of the job, so two processes of different jobs refuse each other
//! with a message saying so. A listener refuses (and logs) whatever fails a check and goes on
//! waiting for the real peer until the start-up timeout. Each handshake runs on its own thread
//! and must finish by a deadline ([`HANDSHAKE_TIMEOUT`] for the whole exchange, not per read,
//! so a client trickling a byte at a time cannot hold it open). At most [`MAX_PENDING`] run at
//! once; a new connection beyond them evicts the oldest unfinished one, so clients that
//! connect and stall can delay the real peer by a round trip, never crowd it out. (A flood of
//! new connections faster than a handshake's round trip is not defended against here.) After
//! start-up the listening sockets are closed.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = hmac::Hmac<Sha256>;

/// The first bytes of every gradflow handshake.
pub const MAGIC: [u8; 8] = *b"GRADFLOW";
/// The handshake's protocol version; processes of different versions refuse each other.
pub const VERSION: u32 = 1;
/// Bytes of a hello: magic, version, job id, from, to, nonce.
pub const HELLO_LEN: usize = 8 + 4 + 16 + 4 + 4 + 16;
/// Bytes of a MAC (HMAC-SHA256).
pub const TAG_LEN: usize = 32;
/// Handshakes a listener runs at once; a further connection evicts the oldest.
pub const MAX_PENDING: usize = 32;
/// The longest a whole handshake may take (bounded by the start-up timeout).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Refusals logged one by one; further ones are only counted.
const LOGGED_REFUSALS: usize = 10;
/// How often a process that waits for others to connect says which.
const REPORT_EVERY: Duration = Duration::from_secs(5);

/// Says on standard error, every [`REPORT_EVERY`], which processes this one still waits for
/// at start-up: a cluster that does not start shows what it stalls on before it times out.
struct Waiting {
    me: usize,
    started: Instant,
    timeout: Duration,
    next: Instant,
}

impl Waiting {
    fn new(me: usize, deadline: Instant, timeout: Duration) -> Self {
        let started = deadline.checked_sub(timeout).unwrap_or_else(Instant::now);
        Waiting {
            me,
            started,
            timeout,
            next: started + REPORT_EVERY,
        }
    }

    /// Reports `whom` (e.g. "process 1 at host:2102") when a report is due.
    fn report(&mut self, whom: impl FnOnce() -> String) {
        let now = Instant::now();
        if now >= self.next {
            eprintln!(
                "process {}: waiting for {}, {} s of {}",
                self.me,
                whom(),
                now.duration_since(self.started).as_secs(),
                self.timeout.as_secs()
            );
            self.next = now + REPORT_EVERY;
        }
    }
}
/// The byte a listener sends when it accepts a peer.
const ACCEPTED: u8 = 1;

/// What a process proves and checks in every handshake.
#[derive(Clone)]
pub struct Credentials {
    /// The job's id ([`job_id`]).
    pub job: [u8; 16],
    secret: Vec<u8>,
}

impl Credentials {
    /// Credentials for job `job` with the cluster `secret` (`None`: the empty secret, so the
    /// handshake still checks magic, version, job and index, but anyone who knows the job can
    /// pass it).
    pub fn new(job: [u8; 16], secret: Option<&str>) -> Self {
        Credentials {
            job,
            secret: secret.unwrap_or("").as_bytes().to_vec(),
        }
    }

    fn tag(&self, role: u8, client: &[u8; HELLO_LEN], server: &[u8; HELLO_LEN]) -> HmacSha256 {
        let mut mac =
            HmacSha256::new_from_slice(&self.secret).expect("HMAC takes keys of any size");
        mac.update(b"gradflow-handshake");
        mac.update(&[role]);
        mac.update(client);
        mac.update(server);
        mac
    }
}

/// The id of a job: the first 16 bytes of SHA-256 over its canonical text.
pub fn job_id(canonical: &str) -> [u8; 16] {
    let digest = Sha256::digest(canonical.as_bytes());
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    id
}

/// Lower-case hex of `bytes` (job ids, secrets).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A parsed hello.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hello {
    /// Protocol version.
    pub version: u32,
    /// Job id.
    pub job: [u8; 16],
    /// The sender's process index.
    pub from: u32,
    /// The process index the sender believes it is talking to.
    pub to: u32,
    /// The sender's fresh random nonce.
    pub nonce: [u8; 16],
}

impl Hello {
    fn new(job: [u8; 16], from: usize, to: usize) -> Self {
        let mut nonce = [0u8; 16];
        rand::fill(&mut nonce);
        Hello {
            version: VERSION,
            job,
            from: from as u32,
            to: to as u32,
            nonce,
        }
    }

    /// The hello's bytes.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..28].copy_from_slice(&self.job);
        b[28..32].copy_from_slice(&self.from.to_le_bytes());
        b[32..36].copy_from_slice(&self.to.to_le_bytes());
        b[36..].copy_from_slice(&self.nonce);
        b
    }

    /// Parses a hello, checking its magic and version.
    pub fn decode(b: &[u8; HELLO_LEN]) -> Result<Hello, String> {
        if b[..8] != MAGIC {
            return Err("not a gradflow process (no handshake magic)".into());
        }
        let word = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let version = word(8);
        if version != VERSION {
            return Err(format!(
                "speaks handshake version {version}, this process {VERSION} (another gradflow release)"
            ));
        }
        Ok(Hello {
            version,
            job: b[12..28].try_into().expect("16 bytes"),
            from: word(28),
            to: word(32),
            nonce: b[36..].try_into().expect("16 bytes"),
        })
    }
}

fn read_or<S: Read>(s: &mut S, buf: &mut [u8], what: &str) -> Result<(), String> {
    s.read_exact(buf).map_err(|e| match e.kind() {
        ErrorKind::UnexpectedEof => format!("closed the connection before {what}"),
        ErrorKind::WouldBlock | ErrorKind::TimedOut => format!("did not send {what} in time"),
        _ => format!("failed before {what}: {e}"),
    })
}

/// A socket whose every read and write must finish by one deadline: the timeouts are set to
/// what is left of it before each call.
struct Deadline<'a> {
    stream: &'a mut TcpStream,
    until: Instant,
}

impl Deadline<'_> {
    fn left(&self) -> std::io::Result<Duration> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                ErrorKind::TimedOut,
                "handshake deadline",
            ));
        }
        Ok(left)
    }
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.stream.set_read_timeout(Some(self.left()?))?;
        self.stream.read(buf)
    }
}

impl Write for Deadline<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.set_write_timeout(Some(self.left()?))?;
        self.stream.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

/// The listener's side of the handshake with one connection, as process `me` of `processes`:
/// the index of the peer it authenticated, or why it was refused.
pub fn answer<S: Read + Write>(
    s: &mut S,
    me: usize,
    processes: usize,
    cred: &Credentials,
) -> Result<usize, String> {
    let mut client = [0u8; HELLO_LEN];
    read_or(s, &mut client, "its hello")?;
    let hello = Hello::decode(&client)?;
    let server = Hello::new(cred.job, me, hello.from as usize).encode();
    let tag = cred.tag(b'L', &client, &server).finalize().into_bytes();
    s.write_all(&server)
        .and_then(|_| s.write_all(&tag))
        .map_err(|e| format!("failed during the handshake: {e}"))?;
    check_job(&hello, cred)?;
    let from = hello.from as usize;
    if hello.to as usize != me || from <= me || from >= processes {
        return Err(format!(
            "claims to be process {} connecting to process {} (this is process {me} of {processes}, \
             which accepts processes {}..{processes})",
            hello.from,
            hello.to,
            me + 1
        ));
    }
    let mut theirs = [0u8; TAG_LEN];
    read_or(s, &mut theirs, "its MAC").map_err(|e| {
        format!("{e} (a process given another cluster secret stops here, refusing ours)")
    })?;
    cred.tag(b'C', &client, &server)
        .verify_slice(&theirs)
        .map_err(|_| {
            format!("claims to be process {from} but failed authentication (a different cluster secret)")
        })?;
    s.write_all(&[ACCEPTED])
        .map_err(|e| format!("failed during the handshake: {e}"))?;
    Ok(from)
}

fn check_job(hello: &Hello, cred: &Credentials) -> Result<(), String> {
    if hello.job != cred.job {
        return Err(format!(
            "runs another job (id {}, this process's {}): every process needs the same job file \
             and overrides",
            hex(&hello.job),
            hex(&cred.job)
        ));
    }
    Ok(())
}

/// How a connector's handshake failed.
#[derive(Debug, PartialEq)]
pub enum Failure {
    /// Worth trying again (the peer may not be up yet).
    Retry(String),
    /// The peer is not the process it should be, or refused us: trying again will not help.
    Fatal(String),
}

/// The connector's side of the handshake, as process `me` connecting to process `peer`.
pub fn greet<S: Read + Write>(
    s: &mut S,
    me: usize,
    peer: usize,
    cred: &Credentials,
) -> Result<(), Failure> {
    let client = Hello::new(cred.job, me, peer).encode();
    s.write_all(&client)
        .map_err(|e| Failure::Retry(format!("failed during the handshake: {e}")))?;
    let mut reply = [0u8; HELLO_LEN + TAG_LEN];
    read_or(s, &mut reply, "its reply").map_err(Failure::Retry)?;
    let server: [u8; HELLO_LEN] = reply[..HELLO_LEN].try_into().expect("hello bytes");
    let hello = Hello::decode(&server).map_err(Failure::Fatal)?;
    check_job(&hello, cred).map_err(Failure::Fatal)?;
    if hello.from as usize != peer || hello.to as usize != me {
        return Err(Failure::Fatal(format!(
            "answers as process {} (to process {}), not as process {peer}",
            hello.from, hello.to
        )));
    }
    cred.tag(b'L', &client, &server)
        .verify_slice(&reply[HELLO_LEN..])
        .map_err(|_| Failure::Fatal("failed authentication (a different cluster secret)".into()))?;
    let tag = cred.tag(b'C', &client, &server).finalize().into_bytes();
    s.write_all(&tag)
        .map_err(|e| Failure::Retry(format!("failed during the handshake: {e}")))?;
    let mut accepted = [0u8; 1];
    read_or(s, &mut accepted, "accepting us")
        .map_err(|e| Failure::Fatal(format!("{e}: it refused this process (its log says why)")))?;
    if accepted[0] != ACCEPTED {
        return Err(Failure::Fatal(
            "sent an unknown answer to our handshake".into(),
        ));
    }
    Ok(())
}

/// Connects process `me` to every other process of `addresses` (one `host:port` per process;
/// a listener may name several, separated by spaces, as in timely), authenticating each
/// connection, within `timeout`. The result is timely's: a stream to each other process, in
/// order, `None` at `me`.
pub fn connect(
    addresses: &[String],
    me: usize,
    cred: &Credentials,
    timeout: Duration,
) -> Result<Vec<Option<TcpStream>>, String> {
    let n = addresses.len();
    let deadline = Instant::now() + timeout;
    let timed_out = |missing: &[usize], detail: String| {
        let names: Vec<String> = missing
            .iter()
            .map(|&i| format!("process {i} ({})", addresses[i]))
            .collect();
        format!(
            "timed out after {} s waiting for all {n} processes to connect (addresses: {}); \
             not connected: {}{detail}",
            timeout.as_secs(),
            addresses.join(", "),
            names.join(", ")
        )
    };
    // Listen before connecting, so that peers above find us as early as possible.
    let listeners = if me + 1 < n {
        addresses[me]
            .split_whitespace()
            .map(|a| {
                let l = TcpListener::bind(a).map_err(|e| format!("cannot listen on {a}: {e}"))?;
                l.set_nonblocking(true)
                    .map_err(|e| format!("cannot listen on {a}: {e}"))?;
                Ok(l)
            })
            .collect::<Result<Vec<_>, String>>()?
    } else {
        Vec::new()
    };
    let accepting = {
        let cred = cred.clone();
        let waiting = Waiting::new(me, deadline, timeout);
        std::thread::spawn(move || accept_peers(listeners, me, n, &cred, deadline, waiting))
    };
    let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    for peer in 0..me {
        let waiting = Waiting::new(me, deadline, timeout);
        match connect_to(&addresses[peer], me, peer, cred, deadline, waiting) {
            Ok(s) => streams[peer] = Some(s),
            Err(Failure::Fatal(why)) => {
                return Err(format!("process {peer} at {} {why}", addresses[peer]))
            }
            Err(Failure::Retry(last)) => {
                let missing: Vec<usize> = (peer..me).collect();
                return Err(timed_out(&missing, format!(" (last attempt: {last})")));
            }
        }
    }
    match accepting
        .join()
        .expect("the accepting thread does not panic")
    {
        Ok(accepted) => {
            for (i, s) in accepted {
                streams[i] = Some(s);
            }
            Ok(streams)
        }
        Err((missing, detail)) => Err(timed_out(&missing, detail)),
    }
}

/// Connects to `peer` at `address` and authenticates, retrying until `deadline` while the
/// peer is not there yet.
fn connect_to(
    address: &str,
    me: usize,
    peer: usize,
    cred: &Credentials,
    deadline: Instant,
    mut waiting: Waiting,
) -> Result<TcpStream, Failure> {
    let mut last = String::from("no attempt");
    loop {
        waiting.report(|| format!("process {peer} at {address} ({last})"));
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Failure::Retry(last));
        }
        match dial(address, left.min(Duration::from_secs(2))) {
            Ok(mut s) => {
                let until = Instant::now() + left.min(HANDSHAKE_TIMEOUT);
                let greeted = greet(
                    &mut Deadline {
                        stream: &mut s,
                        until,
                    },
                    me,
                    peer,
                    cred,
                );
                match greeted {
                    Ok(()) => {
                        s.set_read_timeout(None)
                            .and(s.set_write_timeout(None))
                            .map_err(|e| Failure::Retry(e.to_string()))?;
                        return Ok(s);
                    }
                    Err(Failure::Retry(why)) => last = why,
                    Err(fatal) => return Err(fatal),
                }
            }
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(100).min(left));
    }
}

/// One connection attempt to `address` (each of its resolved addresses in turn).
fn dial(address: &str, limit: Duration) -> Result<TcpStream, String> {
    let resolved: Vec<SocketAddr> = address
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {address}: {e}"))?
        .collect();
    let mut last = format!("{address} resolves to no address");
    for a in resolved {
        match TcpStream::connect_timeout(&a, limit) {
            Ok(s) => {
                s.set_nodelay(true).map_err(|e| e.to_string())?;
                return Ok(s);
            }
            Err(e) => last = format!("cannot connect to {a}: {e}"),
        }
    }
    Err(last)
}

type Accepted = Vec<(usize, TcpStream)>;

/// Accepts and authenticates a connection from every process above `me`, refusing (and
/// logging) every other; on timeout, the processes still missing and what was refused.
fn accept_peers(
    listeners: Vec<TcpListener>,
    me: usize,
    n: usize,
    cred: &Credentials,
    deadline: Instant,
    mut waiting: Waiting,
) -> Result<Accepted, (Vec<usize>, String)> {
    let mut peers: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let missing = |peers: &[Option<TcpStream>]| -> Vec<usize> {
        (me + 1..n).filter(|&i| peers[i].is_none()).collect()
    };
    let (tx, rx) = mpsc::channel();
    // Unfinished handshakes, oldest first: an id and a handle to cut the connection.
    let mut pending: VecDeque<(u64, TcpStream)> = VecDeque::new();
    let (mut next_id, mut evicted) = (0u64, Vec::new());
    let mut refused = 0usize;
    let mut last_refusal = String::new();
    let mut refuse = |from: SocketAddr, why: String| {
        refused += 1;
        if refused <= LOGGED_REFUSALS {
            eprintln!("process {me}: refused a connection from {from}: {why}");
        } else if refused == LOGGED_REFUSALS + 1 {
            eprintln!("process {me}: refusing more connections; they are counted, not logged");
        }
        last_refusal = format!("{from}: {why}");
        refused
    };
    while !missing(&peers).is_empty() {
        waiting.report(|| {
            let whom: Vec<String> = missing(&peers)
                .iter()
                .map(|i| format!("process {i}"))
                .collect();
            format!("{} to connect", whom.join(", "))
        });
        if Instant::now() >= deadline {
            let detail = match refused {
                0 => String::new(),
                r => format!(" ({r} connection(s) refused; the last from {last_refusal})"),
            };
            return Err((missing(&peers), detail));
        }
        for l in &listeners {
            loop {
                match l.accept() {
                    Ok((mut stream, from)) => {
                        let handle = match stream.try_clone() {
                            Ok(h) => h,
                            Err(e) => {
                                refuse(from, e.to_string());
                                continue;
                            }
                        };
                        if pending.len() >= MAX_PENDING {
                            let (id, oldest) = pending.pop_front().expect("full");
                            let _ = oldest.shutdown(Shutdown::Both);
                            evicted.push(id);
                        }
                        let id = next_id;
                        next_id += 1;
                        pending.push_back((id, handle));
                        let (tx, cred) = (tx.clone(), cred.clone());
                        let until = deadline.min(Instant::now() + HANDSHAKE_TIMEOUT);
                        std::thread::spawn(move || {
                            let result = stream
                                .set_nonblocking(false)
                                .and(stream.set_nodelay(true))
                                .map_err(|e| e.to_string())
                                .and_then(|_| {
                                    let s = &mut Deadline {
                                        stream: &mut stream,
                                        until,
                                    };
                                    answer(s, me, n, &cred)
                                });
                            let _ = tx.send((id, from, result.map(|i| (i, stream))));
                        });
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    // A connection that failed before we took it (reset, aborted), or no
                    // file descriptors left for now: the listener itself is fine.
                    Err(_) => break,
                }
            }
        }
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(20));
        while let Ok((id, from, result)) = rx.recv_timeout(wait) {
            pending.retain(|(p, _)| *p != id);
            let was_evicted = evicted.iter().position(|&e| e == id);
            if let Some(at) = was_evicted {
                evicted.swap_remove(at);
            }
            // (One that finished just before it was cut is taken as any other.)
            if was_evicted.is_some() && result.is_err() {
                let why = format!(
                    "had not finished its handshake when {MAX_PENDING} newer connections \
                     arrived (evicted)"
                );
                refuse(from, why);
                continue;
            }
            match result {
                Ok((i, stream)) if peers[i].is_none() => {
                    let cleared = stream
                        .set_read_timeout(None)
                        .and(stream.set_write_timeout(None));
                    match cleared {
                        Ok(()) => peers[i] = Some(stream),
                        Err(e) => {
                            refuse(from, e.to_string());
                        }
                    }
                }
                Ok((i, _)) => {
                    refuse(from, format!("process {i} is already connected"));
                }
                Err(why) => {
                    refuse(from, why);
                }
            }
            if missing(&peers).is_empty() {
                break;
            }
        }
    }
    Ok(peers
        .into_iter()
        .enumerate()
        .filter_map(|(i, s)| s.map(|s| (i, s)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A connection replayed from bytes: what one side reads, and what it writes.
    struct Pipe {
        input: Cursor<Vec<u8>>,
        output: Vec<u8>,
    }

    impl Read for Pipe {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.input.read(buf)
        }
    }

    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.output.write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn pipe(input: Vec<u8>) -> Pipe {
        Pipe {
            input: Cursor::new(input),
            output: Vec::new(),
        }
    }

    /// Runs both sides over real loopback sockets.
    fn handshake(
        listener: (usize, &Credentials),
        connector: (usize, usize, &Credentials),
    ) -> (Result<usize, String>, Result<(), Failure>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (me, cred) = (listener.0, listener.1.clone());
        let side = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            answer(&mut s, me, 3, &cred)
        });
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let greeted = greet(&mut s, connector.0, connector.1, connector.2);
        drop(s);
        (side.join().unwrap(), greeted)
    }

    #[test]
    fn the_same_job_and_secret_pass_and_anything_else_is_refused_on_both_sides() {
        let job = job_id("[train]\nepochs = 2\n");
        let good = Credentials::new(job, Some("s3cret"));
        assert_eq!(handshake((0, &good), (2, 0, &good)), (Ok(2), Ok(())));

        let other_secret = Credentials::new(job, Some("guess"));
        let (l, c) = handshake((0, &good), (1, 0, &other_secret));
        assert!(l.unwrap_err().contains("another cluster secret"));
        assert!(matches!(c, Err(Failure::Fatal(m)) if m.contains("failed authentication")));

        let other_job = Credentials::new(job_id("[train]\nepochs = 3\n"), Some("s3cret"));
        let (l, c) = handshake((0, &good), (1, 0, &other_job));
        assert!(l.unwrap_err().contains("runs another job"));
        assert!(matches!(c, Err(Failure::Fatal(m)) if m.contains("runs another job")));

        // A process index the listener does not accept from (itself, below it, beyond the
        // cluster), or a connector that believes it talks to another process.
        for (from, to) in [(0, 0), (1, 2), (7, 0)] {
            let (l, c) = handshake((0, &good), (from, to, &good));
            assert!(l.is_err(), "{from}->{to}");
            assert!(matches!(c, Err(Failure::Fatal(_))), "{from}->{to}: {c:?}");
        }
    }

    #[test]
    fn a_recorded_handshake_cannot_be_replayed() {
        let cred = Credentials::new(job_id("job"), Some("s3cret"));
        // Record a connector's messages in a successful handshake...
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let listener_cred = cred.clone();
        let side = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            answer(&mut s, 0, 2, &listener_cred)
        });
        let mut recorded = Vec::new();
        {
            let mut s = TcpStream::connect(addr).unwrap();
            struct Tap<'a>(&'a mut TcpStream, &'a mut Vec<u8>);
            impl Read for Tap<'_> {
                fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
                    self.0.read(b)
                }
            }
            impl Write for Tap<'_> {
                fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                    self.1.extend_from_slice(b);
                    self.0.write(b)
                }
                fn flush(&mut self) -> std::io::Result<()> {
                    self.0.flush()
                }
            }
            greet(&mut Tap(&mut s, &mut recorded), 1, 0, &cred).unwrap();
        }
        assert_eq!(side.join().unwrap(), Ok(1));
        // ... and play them back to a listener: its fresh nonce makes the old MAC wrong.
        let mut replay = pipe(recorded);
        let refused = answer(&mut replay, 0, 2, &cred).unwrap_err();
        assert!(refused.contains("failed authentication"), "{refused}");
    }

    #[test]
    fn malformed_hellos_are_refused_with_a_reason_and_never_panic() {
        let cred = Credentials::new(job_id("job"), None);
        let valid = Hello::new(cred.job, 1, 0).encode();
        let refusal = |bytes: Vec<u8>| answer(&mut pipe(bytes), 0, 2, &cred).unwrap_err();
        assert!(refusal(vec![]).contains("closed the connection before its hello"));
        assert!(refusal(valid[..20].to_vec()).contains("before its hello"));
        assert!(
            refusal(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n1234567890123456789012345".to_vec())
                .contains("not a gradflow process")
        );
        let mut version = valid;
        version[8] = 9;
        assert!(refusal(version.to_vec()).contains("handshake version 9"));
        // A valid hello without the MAC that must follow it.
        assert!(refusal(valid.to_vec()).contains("before its MAC"));
        // Every single-byte corruption of a hello is caught by a check or by the MAC.
        for at in 0..HELLO_LEN {
            let mut bad = valid;
            bad[at] ^= 0x40;
            let mut input = bad.to_vec();
            input.extend_from_slice(&[0u8; TAG_LEN]);
            assert!(answer(&mut pipe(input), 0, 2, &cred).is_err(), "byte {at}");
        }
    }

    #[test]
    fn hellos_round_trip() {
        let h = Hello::new(job_id("x"), 3, 1);
        assert_eq!(Hello::decode(&h.encode()), Ok(h));
        assert_ne!(Hello::new(h.job, 3, 1).nonce, h.nonce, "nonces are fresh");
    }
}
