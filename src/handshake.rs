//! An authenticated cluster: gradflow opens the TCP connections between its processes itself
//! and hands them to timely (`initialize_networking_from_sockets`) only after a handshake, so
//! nothing a stray client sends ever reaches timely's own start-up code (which panics on a
//! closed connection and believes any process index it reads).
//!
//! As in timely, process `i` connects to every process below it and accepts a connection from
//! every process above it. Every process has an [`Identity`]: every field that must agree
//! across the cluster (the number of processes and of threads, every field of the job with
//! its overrides and seed, the size and digest of every input file). The handshake on each
//! connection (connector C, listener L), in which the caller proves itself first:
//!
//! 1. C → L: a hello, `GRADFLOW` magic, protocol version, C's index, L's index, the digest of
//!    C's run identity and a fresh random nonce ([`HELLO_LEN`] bytes). It carries nothing
//!    about the job.
//! 2. L checks magic, version and indices, then sends its own hello (its run, a fresh nonce).
//!    Hellos of different runs end the connection there: a listener logs it and goes on
//!    waiting, a connector tries again (the stale process may be gone soon) and its timeout
//!    names the run it met.
//! 3. C → L: `HMAC(secret, "C" ‖ identity digest ‖ hello_C ‖ hello_L)` and
//!    `HMAC(secret, "c" ‖ hello_C ‖ hello_L)`: its identity and the secret, proven apart.
//! 4. L checks the first against its own identity. If it holds, L sends `ACCEPTED` and
//!    `HMAC(secret, "L" ‖ identity digest ‖ …)`, which C checks: both run the same job with the
//!    same secret. If only the second holds (the secret, but another identity), L sends
//!    `DIFFERENT`, `HMAC(secret, "l" ‖ …)` and its identity's entries, C checks the MAC and
//!    answers with its own entries, and both stop at once naming every field that differs.
//!    If neither holds, L sends `REFUSED` and nothing else, and goes on waiting.
//!
//! The secret is `--cluster-secret` or `GRADFLOW_CLUSTER_SECRET` (`gradflow cluster` generates
//! one). Both nonces enter every MAC, so a recorded handshake cannot be replayed, and the role
//! bytes keep one side's MAC from serving as the other's. Entries are sent in plain text only
//! under a secret; without one, every value but the process and thread counts is sent as a
//! digest salted with both nonces, so a mismatch names the field and this process's value, and
//! a caller that does not know the job learns nothing but which fields it guessed wrong.
//! Without a secret a caller must still present the job's full identity (every field and
//! input digest) to be accepted, but anyone who can reach the port can make start-up fail.
//!
//! The run identity ([`run_digest`]; `--run-id`, or the scheduler's job and restart count)
//! keeps a process of an earlier attempt, or of another job on the same ports, from joining:
//! as the MACs cover both hellos, a peer cannot be accepted into a run it does not state.
//! An index is accepted once: a second process claiming it is refused with [`TAKEN`] and
//! fails at once, naming the index.
//!
//! A listener refuses (and logs) whatever fails a check and goes on waiting for the real peer
//! until the start-up timeout. Each handshake runs on its own thread and must finish by a
//! deadline ([`HANDSHAKE_TIMEOUT`] for the whole exchange, not per read, so a client trickling
//! a byte at a time cannot hold it open). At most [`MAX_PENDING`] run at once; a new
//! connection beyond them evicts the oldest unfinished one, so clients that connect and stall
//! can delay the real peer by a round trip, never crowd it out. (A flood of new connections
//! faster than a handshake's round trip is not defended against here.) After start-up the
//! listening sockets are closed.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = hmac::Hmac<Sha256>;

/// The first bytes of every gradflow handshake.
pub const MAGIC: [u8; 8] = *b"GRADFLOW";
/// The handshake's protocol version; processes of different versions refuse each other.
pub const VERSION: u32 = 3;
/// Bytes of a hello: magic, version, from, to, run digest, nonce.
pub const HELLO_LEN: usize = 8 + 4 + 4 + 4 + 16 + 16;
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
/// The most bytes of identity entries read from a peer.
const MAX_ENTRIES_BYTES: u64 = 4 << 20;
/// The most differences named in one error.
const NAMED_DIFFERENCES: usize = 6;

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
/// The byte a listener sends when the caller proved neither the identity nor the secret.
const REFUSED: u8 = 2;
/// The byte a listener sends when the caller proved the secret but runs another identity.
const DIFFERENT: u8 = 3;
/// The byte a listener sends when another process already holds the caller's index.
pub const TAKEN: u8 = 4;

/// One field of an identity.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    name: String,
    value: String,
    /// Sent in plain text even without a secret (the process and thread counts).
    public: bool,
}

/// What must agree across a cluster's processes, field by field: a mismatch is named by its
/// field and both values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Identity {
    entries: Vec<Entry>,
}

impl Identity {
    /// Adds `name` = `value`, sent to a peer as a salted digest unless there is a secret.
    pub fn field(self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.with(name.into(), value.into(), false)
    }

    /// Adds `name` = `value`, always sent in plain text (nothing secret: counts, versions).
    pub fn public(self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.with(name.into(), value.into(), true)
    }

    fn with(mut self, name: String, value: String, public: bool) -> Self {
        self.entries.push(Entry {
            name,
            value,
            public,
        });
        self.entries.sort();
        self
    }

    /// SHA-256 over every entry, each length-prefixed.
    fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for e in &self.entries {
            for part in [e.name.as_bytes(), e.value.as_bytes()] {
                h.update((part.len() as u64).to_le_bytes());
                h.update(part);
            }
        }
        h.finalize().into()
    }

    /// The entries as sent to a peer: plain values under a secret (`plain`) or for public
    /// entries, else the value's digest salted with both hellos.
    fn encode(&self, plain: bool, salt: &[u8]) -> Vec<u8> {
        let mut out = (self.entries.len() as u32).to_le_bytes().to_vec();
        for e in &self.entries {
            let value = match plain || e.public {
                true => e.value.clone(),
                false => salted(salt, &e.name, &e.value),
            };
            out.push(e.public as u8);
            for part in [e.name.as_bytes(), value.as_bytes()] {
                out.extend_from_slice(&(part.len() as u32).to_le_bytes());
                out.extend_from_slice(part);
            }
        }
        out
    }

    /// Reads a peer's entries (at most [`MAX_ENTRIES_BYTES`]).
    fn decode<S: Read>(s: &mut S) -> Result<Identity, String> {
        let mut s = s.take(MAX_ENTRIES_BYTES);
        let mut word = [0u8; 4];
        let mut next_u32 = |s: &mut std::io::Take<&mut S>| -> Result<u32, String> {
            read_or(s, &mut word, "its description")?;
            Ok(u32::from_le_bytes(word))
        };
        let count = next_u32(&mut s)?;
        let mut entries = Vec::new();
        for _ in 0..count {
            let mut public = [0u8; 1];
            read_or(&mut s, &mut public, "its description")?;
            let mut parts = [String::new(), String::new()];
            for part in &mut parts {
                let n = next_u32(&mut s)? as u64;
                let mut bytes = Vec::new();
                (&mut s)
                    .take(n)
                    .read_to_end(&mut bytes)
                    .map_err(|e| e.to_string())?;
                if bytes.len() as u64 != n {
                    return Err("sent a description cut short (or over 4 MiB)".into());
                }
                *part = String::from_utf8_lossy(&bytes).into_owned();
            }
            let [name, value] = parts;
            entries.push(Entry {
                name,
                value,
                public: public[0] == 1,
            });
        }
        Ok(Identity { entries })
    }

    /// How `theirs` (process `peer`'s entries as sent, plain or salted with `salt`) differs
    /// from this identity: one line per field, at most [`NAMED_DIFFERENCES`].
    fn differences(&self, theirs: &Identity, plain: bool, salt: &[u8], peer: usize) -> String {
        use std::collections::BTreeMap;
        let show = |v: &str| format!("`{}`", crate::data::clip(v));
        let mine: BTreeMap<&str, &Entry> =
            self.entries.iter().map(|e| (e.name.as_str(), e)).collect();
        let other: BTreeMap<&str, &Entry> = theirs
            .entries
            .iter()
            .map(|e| (e.name.as_str(), e))
            .collect();
        let mut lines = Vec::new();
        for name in mine
            .keys()
            .chain(other.keys().filter(|n| !mine.contains_key(*n)))
        {
            let line = match (mine.get(name), other.get(name)) {
                (Some(m), None) => {
                    format!("{name}: {} here, absent in process {peer}", show(&m.value))
                }
                (None, Some(o)) if plain || o.public => {
                    format!("{name}: absent here, {} in process {peer}", show(&o.value))
                }
                (None, Some(_)) => format!("{name}: absent here, set in process {peer}"),
                (Some(m), Some(o)) => {
                    let same = match plain || m.public {
                        true => m.value == o.value,
                        false => salted(salt, name, &m.value) == o.value,
                    };
                    match (same, plain || m.public) {
                        (true, _) => continue,
                        (false, true) => format!(
                            "{name}: {} here, {} in process {peer}",
                            show(&m.value),
                            show(&o.value)
                        ),
                        (false, false) => format!(
                            "{name}: {} here, another value in process {peer} (its own \
                             error shows it; a cluster secret shows both here)",
                            show(&m.value)
                        ),
                    }
                }
                (None, None) => continue,
            };
            lines.push(line);
        }
        let more = lines.len().saturating_sub(NAMED_DIFFERENCES);
        lines.truncate(NAMED_DIFFERENCES);
        if more > 0 {
            lines.push(format!("and {more} more"));
        }
        match lines.is_empty() {
            true => "the same fields, yet another digest (another gradflow release?)".into(),
            false => lines.join("; "),
        }
    }
}

/// `value` of field `name` as sent without a secret: its digest salted with both hellos.
fn salted(salt: &[u8], name: &str, value: &str) -> String {
    let mut h = Sha256::new();
    h.update(salt);
    h.update((name.len() as u64).to_le_bytes());
    h.update(name);
    h.update(value);
    hex(&h.finalize()[..12])
}

/// What a process proves and checks in every handshake.
#[derive(Clone)]
pub struct Credentials {
    identity: Identity,
    digest: [u8; 32],
    secret: Vec<u8>,
    /// The run identity's name (for messages) and digest (in every hello).
    run: (String, [u8; 16]),
}

impl Credentials {
    /// Credentials for a process of `identity` with the cluster `secret` (`None`: the empty
    /// secret, so the handshake still checks the whole identity and the indices, but anyone
    /// who knows the job and its data can pass it).
    pub fn new(identity: Identity, secret: Option<&str>) -> Self {
        Credentials {
            digest: identity.digest(),
            identity,
            secret: secret.unwrap_or("").as_bytes().to_vec(),
            run: (String::new(), [0; 16]),
        }
    }

    /// The same credentials in the run named `run` (empty: no run identity, all zeros).
    pub fn in_run(mut self, run: &str) -> Self {
        self.run = (run.to_string(), run_digest(run));
        self
    }

    /// A hello from `from` to `to` in this run.
    fn hello(&self, from: usize, to: usize) -> Hello {
        Hello {
            run: self.run.1,
            ..Hello::new(from, to)
        }
    }

    /// Why a peer's hello of another run is turned away.
    fn other_run(&self, peer: &Hello) -> String {
        let mine = match self.run.0.as_str() {
            "" => "none".to_string(),
            r => format!("`{r}`"),
        };
        let theirs = match peer.run == [0; 16] {
            true => "none".to_string(),
            false => format!("digest {}", hex(&peer.run[..6])),
        };
        format!(
            "belongs to another run (its run identity: {theirs}; this process's: {mine}): a \
             process of an earlier attempt, or of another job on the same ports"
        )
    }

    /// Whether a secret is set (entries then travel in plain text).
    fn plain(&self) -> bool {
        !self.secret.is_empty()
    }

    /// The MAC of `role` over both hellos, with the identity digest when `identity`.
    fn tag(
        &self,
        role: u8,
        identity: bool,
        client: &[u8; HELLO_LEN],
        server: &[u8; HELLO_LEN],
    ) -> HmacSha256 {
        let mut mac =
            HmacSha256::new_from_slice(&self.secret).expect("HMAC takes keys of any size");
        mac.update(b"gradflow-handshake");
        mac.update(&[role]);
        if identity {
            mac.update(&self.digest);
        }
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

/// What a hello carries of run identity `run`: all zeros for none, else the first 16 bytes
/// of SHA-256 over it (a name such as a Slurm job id need not travel in plain text).
pub fn run_digest(run: &str) -> [u8; 16] {
    if run.is_empty() {
        return [0; 16];
    }
    let mut h = Sha256::new();
    h.update(b"gradflow-run");
    h.update(run.as_bytes());
    h.finalize()[..16].try_into().expect("16 bytes")
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
    /// The sender's process index.
    pub from: u32,
    /// The process index the sender believes it is talking to.
    pub to: u32,
    /// The digest of the sender's run identity ([`run_digest`]).
    pub run: [u8; 16],
    /// The sender's fresh random nonce.
    pub nonce: [u8; 16],
}

impl Hello {
    /// A hello from process `from` to process `to` with a fresh nonce.
    pub fn new(from: usize, to: usize) -> Self {
        let mut nonce = [0u8; 16];
        rand::fill(&mut nonce);
        Hello {
            version: VERSION,
            from: from as u32,
            to: to as u32,
            run: [0; 16],
            nonce,
        }
    }

    /// The hello's bytes.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&self.from.to_le_bytes());
        b[16..20].copy_from_slice(&self.to.to_le_bytes());
        b[20..36].copy_from_slice(&self.run);
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
            from: word(12),
            to: word(16),
            run: b[20..36].try_into().expect("16 bytes"),
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

/// Why a listener refused a connection.
#[derive(Debug, PartialEq)]
pub struct Refusal {
    /// What failed.
    pub why: String,
    /// The caller proved the cluster secret but runs another identity: start-up fails at once
    /// (a stranger without the secret is only logged).
    pub mismatch: bool,
}

impl From<String> for Refusal {
    fn from(why: String) -> Self {
        Refusal {
            why,
            mismatch: false,
        }
    }
}

/// The listener's side of the handshake with one connection, as process `me` of `processes`:
/// the index of the peer it authenticated, or why it was refused.
pub fn answer<S: Read + Write>(
    s: &mut S,
    me: usize,
    processes: usize,
    cred: &Credentials,
) -> Result<usize, Refusal> {
    answer_claiming(s, me, processes, cred, &Mutex::new(vec![false; processes]))
}

/// [`answer`], accepting a peer only if no other process holds its index in `claimed` (then
/// taking it for the peer).
fn answer_claiming<S: Read + Write>(
    s: &mut S,
    me: usize,
    processes: usize,
    cred: &Credentials,
    claimed: &Mutex<Vec<bool>>,
) -> Result<usize, Refusal> {
    let failed = |e: std::io::Error| format!("failed during the handshake: {e}");
    let mut client = [0u8; HELLO_LEN];
    read_or(s, &mut client, "its hello")?;
    let hello = Hello::decode(&client)?;
    let from = hello.from as usize;
    let server = cred.hello(me, from).encode();
    s.write_all(&server).map_err(failed)?;
    if hello.run != cred.run.1 {
        return Err(format!("claims to be process {from} but {}", cred.other_run(&hello)).into());
    }
    let mut proofs = [0u8; 2 * TAG_LEN];
    read_or(s, &mut proofs, "its MAC")?;
    let (identity, secret) = proofs.split_at(TAG_LEN);
    let same_job = cred
        .tag(b'C', true, &client, &server)
        .verify_slice(identity);
    if same_job.is_ok() && hello.to as usize == me && from > me && from < processes {
        let taken = {
            let mut claimed = claimed.lock().expect("no panic holds the claims");
            std::mem::replace(&mut claimed[from], true)
        };
        if taken {
            let _ = s.write_all(&[TAKEN]);
            return Err(format!(
                "claims to be process {from}, which is already connected: two processes \
                 were given index {from}"
            )
            .into());
        }
        let tag = cred
            .tag(b'L', true, &client, &server)
            .finalize()
            .into_bytes();
        if let Err(e) = s.write_all(&[ACCEPTED]).and_then(|()| s.write_all(&tag)) {
            claimed.lock().expect("no panic holds the claims")[from] = false;
            return Err(failed(e).into());
        }
        return Ok(from);
    }
    if same_job.is_ok() {
        let _ = s.write_all(&[REFUSED]);
        return Err(format!(
            "claims to be process {} connecting to process {} (this is process {me} of \
             {processes}, which accepts processes {}..{processes})",
            hello.from,
            hello.to,
            me + 1
        )
        .into());
    }
    if cred
        .tag(b'c', false, &client, &server)
        .verify_slice(secret)
        .is_err()
    {
        let _ = s.write_all(&[REFUSED]);
        return Err(format!(
            "claims to be process {from} but failed authentication (a different cluster secret)"
        )
        .into());
    }
    // The caller knows the secret (or there is none) but not this identity: say how they
    // differ, both ways, and fail.
    let salt = [&client[..], &server[..]].concat();
    let mut reply = vec![DIFFERENT];
    reply.extend_from_slice(
        &cred
            .tag(b'l', false, &client, &server)
            .finalize()
            .into_bytes(),
    );
    reply.extend_from_slice(&cred.identity.encode(cred.plain(), &salt));
    s.write_all(&reply).map_err(failed)?;
    let why = match Identity::decode(s) {
        Ok(theirs) => cred
            .identity
            .differences(&theirs, cred.plain(), &salt, from),
        Err(e) => format!("it {e}"),
    };
    Err(Refusal {
        why: format!("process {from} runs another job or cluster: {why}"),
        mismatch: true,
    })
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
    let failed = |e: std::io::Error| Failure::Retry(format!("failed during the handshake: {e}"));
    let client = cred.hello(me, peer).encode();
    s.write_all(&client).map_err(failed)?;
    let mut server = [0u8; HELLO_LEN];
    read_or(s, &mut server, "its hello").map_err(Failure::Retry)?;
    let hello = Hello::decode(&server).map_err(Failure::Fatal)?;
    if hello.run != cred.run.1 {
        return Err(Failure::Retry(cred.other_run(&hello)));
    }
    if hello.from as usize != peer || hello.to as usize != me {
        return Err(Failure::Fatal(format!(
            "answers as process {} (to process {}), not as process {peer}",
            hello.from, hello.to
        )));
    }
    let mut proofs = cred
        .tag(b'C', true, &client, &server)
        .finalize()
        .into_bytes()
        .to_vec();
    proofs.extend_from_slice(
        &cred
            .tag(b'c', false, &client, &server)
            .finalize()
            .into_bytes(),
    );
    s.write_all(&proofs).map_err(failed)?;
    let mut answer = [0u8; 1 + TAG_LEN];
    read_or(s, &mut answer[..1], "its answer").map_err(Failure::Retry)?;
    let forged = || Failure::Fatal("failed authentication (a different cluster secret)".into());
    match answer[0] {
        ACCEPTED => {
            read_or(s, &mut answer[1..], "its MAC").map_err(Failure::Fatal)?;
            cred.tag(b'L', true, &client, &server)
                .verify_slice(&answer[1..])
                .map_err(|_| forged())
        }
        TAKEN => Err(Failure::Fatal(format!(
            "already has a process {me}: two processes were given index {me} (check --process, \
             or the scheduler's rank variables: docs/clusters.md)"
        ))),
        REFUSED => Err(Failure::Fatal(
            "refused this process: failed authentication (a different cluster secret), or a \
             process index it does not accept (its log says which)"
                .into(),
        )),
        DIFFERENT => {
            read_or(s, &mut answer[1..], "its MAC").map_err(Failure::Fatal)?;
            cred.tag(b'l', false, &client, &server)
                .verify_slice(&answer[1..])
                .map_err(|_| forged())?;
            let theirs = Identity::decode(s).map_err(Failure::Fatal)?;
            let salt = [&client[..], &server[..]].concat();
            // Our side, so that it names the differences too.
            let _ = s.write_all(&cred.identity.encode(cred.plain(), &salt));
            Err(Failure::Fatal(format!(
                "runs another job or cluster: {}",
                cred.identity
                    .differences(&theirs, cred.plain(), &salt, peer)
            )))
        }
        _ => Err(Failure::Fatal(
            "sent an unknown answer to our handshake".into(),
        )),
    }
}

/// Connects process `me` to every other process of `addresses` (one `host:port` per process;
/// a listener may name several, separated by spaces, as in timely), authenticating each
/// connection, within `timeout`. The result is timely's: a stream to each other process, in
/// order, `None` at `me`. Every process below is dialled at once, so a timeout names each
/// one not reached with its last attempt, and each one above that never connected.
pub fn connect(
    addresses: &[String],
    me: usize,
    cred: &Credentials,
    timeout: Duration,
) -> Result<Vec<Option<TcpStream>>, String> {
    let n = addresses.len();
    let deadline = Instant::now() + timeout;
    // Listen before connecting, so that peers above find us as early as possible.
    let listeners = match me + 1 < n {
        true => listen(&addresses[me])?,
        false => Vec::new(),
    };
    let accepting = {
        let cred = cred.clone();
        let waiting = Waiting::new(me, deadline, timeout);
        std::thread::spawn(move || accept_peers(listeners, me, n, &cred, deadline, waiting))
    };
    let (tx, rx) = mpsc::channel();
    let last: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(vec!["no attempt".into(); me]));
    for (peer, address) in addresses[..me].iter().enumerate() {
        let (tx, cred, address, last) = (tx.clone(), cred.clone(), address.clone(), last.clone());
        std::thread::spawn(move || {
            let _ = tx.send((peer, connect_to(&address, me, peer, &cred, deadline, &last)));
        });
    }
    drop(tx);
    let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let mut unreached = Vec::new();
    let mut waiting = Waiting::new(me, deadline, timeout);
    let mut answered = 0;
    while answered < me {
        let (peer, result) = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(r) => r,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                waiting.report(|| {
                    let last = last.lock().expect("no panic holds it");
                    let whom = (0..me)
                        .filter(|&p| streams[p].is_none())
                        .map(|p| format!("process {p} at {} ({})", addresses[p], last[p]));
                    named(whom.collect())
                });
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        answered += 1;
        match result {
            Ok(s) => streams[peer] = Some(s),
            Err(Failure::Fatal(why)) => {
                return Err(format!("process {peer} at {} {why}", addresses[peer]))
            }
            Err(Failure::Retry(last)) => unreached.push((peer, last)),
        }
    }
    let (unconnected, detail) = match accepting
        .join()
        .expect("the accepting thread does not panic")
    {
        Ok(accepted) => {
            for (i, s) in accepted {
                streams[i] = Some(s);
            }
            (Vec::new(), String::new())
        }
        Err(Unmet::TimedOut(missing, detail)) => (missing, detail),
        Err(Unmet::Mismatch(why)) => return Err(why),
    };
    if unreached.is_empty() && unconnected.is_empty() {
        return Ok(streams);
    }
    unreached.sort();
    let mut parts = Vec::new();
    if !unreached.is_empty() {
        let each = unreached.iter().map(|(p, last)| {
            format!(
                "process {p} at {} (dialled until the deadline; last attempt: {last}{})",
                addresses[*p],
                hint(last)
            )
        });
        parts.push(format!("not reached: {}", named(each.collect())));
    }
    if !unconnected.is_empty() {
        let each = unconnected
            .iter()
            .map(|p| format!("process {p} ({})", addresses[*p]));
        let hint = match detail.is_empty() {
            true => {
                " (none tried: is each started, with the same addresses, and can it reach \
                     this host and port?)"
            }
            false => "",
        };
        parts.push(format!(
            "never connected to this process at {}: {}{detail}{hint}",
            addresses[me],
            named(each.collect())
        ));
    }
    Err(format!(
        "timed out after {} s waiting for all {n} processes to connect; {}",
        timeout.as_secs(),
        parts.join("; ")
    ))
}

/// Names joined with commas, at most 16 of them and how many more.
fn named(mut names: Vec<String>) -> String {
    let more = names.len().saturating_sub(16);
    names.truncate(16);
    if more > 0 {
        names.push(format!("and {more} more"));
    }
    names.join(", ")
}

/// What a failed attempt most likely means, for a person reading a timeout.
fn hint(last: &str) -> &'static str {
    let has = |s: &str| last.contains(s);
    if has("Connection refused") {
        " — nothing listens there: the process is not started (yet), or a firewall rejects the port"
    } else if has("timed out") || has("did not send") {
        " — no answer: a firewall drops the port, or the address is one this machine cannot reach (a wrong interface?)"
    } else if has("No route") || has("unreachable") {
        " — no route to that address: a wrong address or network interface"
    } else if has("cannot resolve") {
        " — the name does not resolve on this machine"
    } else {
        ""
    }
}

/// Binds every address of this process's entry; an address in use names the port and what
/// usually holds it.
fn listen(entry: &str) -> Result<Vec<TcpListener>, String> {
    entry
        .split_whitespace()
        .map(|a| {
            let l = TcpListener::bind(a).map_err(|e| match e.kind() {
                ErrorKind::AddrInUse => format!(
                    "cannot listen on {a}: the port is in use (a process of an earlier run, \
                     another job, or two processes given this index; `ss -ltnp` names it)"
                ),
                ErrorKind::AddrNotAvailable => format!(
                    "cannot listen on {a}: not an address of this machine (this process's \
                     line of the addresses names another host, or the wrong index: {e})"
                ),
                _ => format!("cannot listen on {a}: {e}"),
            })?;
            l.set_nonblocking(true)
                .map_err(|e| format!("cannot listen on {a}: {e}"))?;
            Ok(l)
        })
        .collect()
}

/// Why the listener did not connect every process above it.
enum Unmet {
    /// The deadline passed: the processes still missing, and what was refused.
    TimedOut(Vec<usize>, String),
    /// A process with the secret runs another job or cluster: what differs.
    Mismatch(String),
}

/// Connects to `peer` at `address` and authenticates, retrying until `deadline` while the
/// peer is not there yet; the last failed attempt is kept in `tried[peer]` for reports.
fn connect_to(
    address: &str,
    me: usize,
    peer: usize,
    cred: &Credentials,
    deadline: Instant,
    tried: &Mutex<Vec<String>>,
) -> Result<TcpStream, Failure> {
    let mut last = String::from("no attempt");
    loop {
        tried.lock().expect("no panic holds it")[peer].clone_from(&last);
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
) -> Result<Accepted, Unmet> {
    let mut peers: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let missing = |peers: &[Option<TcpStream>]| -> Vec<usize> {
        (me + 1..n).filter(|&i| peers[i].is_none()).collect()
    };
    let (tx, rx) = mpsc::channel();
    let claimed = Arc::new(Mutex::new(vec![false; n]));
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
            return Err(Unmet::TimedOut(missing(&peers), detail));
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
                        let (tx, cred, claimed) = (tx.clone(), cred.clone(), claimed.clone());
                        let until = deadline.min(Instant::now() + HANDSHAKE_TIMEOUT);
                        std::thread::spawn(move || {
                            let result = stream
                                .set_nonblocking(false)
                                .and(stream.set_nodelay(true))
                                .map_err(|e| Refusal::from(e.to_string()))
                                .and_then(|_| {
                                    let s = &mut Deadline {
                                        stream: &mut stream,
                                        until,
                                    };
                                    answer_claiming(s, me, n, &cred, &claimed)
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
                            claimed.lock().expect("no panic holds the claims")[i] = false;
                            refuse(from, e.to_string());
                        }
                    }
                }
                Ok((i, _)) => {
                    refuse(from, format!("process {i} is already connected"));
                }
                Err(r) if r.mismatch => {
                    return Err(Unmet::Mismatch(format!(
                        "{} (connected from {from})",
                        r.why
                    )));
                }
                Err(r) => {
                    refuse(from, r.why);
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

    fn identity(epochs: &str, workers: &str) -> Identity {
        Identity::default()
            .public("-n (processes)", "3")
            .public("-w (threads per process)", workers)
            .field("train.epochs", epochs)
            .field("train.seed", "5")
    }

    fn cred(epochs: &str, secret: Option<&str>) -> Credentials {
        Credentials::new(identity(epochs, "1"), secret)
    }

    /// Runs both sides over real loopback sockets.
    fn handshake(
        listener: (usize, &Credentials),
        connector: (usize, usize, &Credentials),
    ) -> (Result<usize, Refusal>, Result<(), Failure>) {
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

    fn fatal(r: Result<(), Failure>) -> String {
        match r {
            Err(Failure::Fatal(m)) => m,
            other => panic!("not fatal: {other:?}"),
        }
    }

    #[test]
    fn the_same_identity_and_secret_pass_and_anything_else_is_refused_on_both_sides() {
        let good = cred("2", Some("s3cret"));
        assert_eq!(handshake((0, &good), (2, 0, &good)), (Ok(2), Ok(())));
        let open = cred("2", None);
        assert_eq!(handshake((0, &open), (1, 0, &open)), (Ok(1), Ok(())));

        let other_secret = cred("2", Some("guess"));
        let (l, c) = handshake((0, &good), (1, 0, &other_secret));
        let l = l.unwrap_err();
        assert!(
            !l.mismatch && l.why.contains("different cluster secret"),
            "{l:?}"
        );
        assert!(fatal(c).contains("failed authentication"));

        // Another identity with the secret: both sides name the field and both values, and
        // the listener's refusal is fatal (no waiting out the timeout).
        let other_job = cred("3", Some("s3cret"));
        let (l, c) = handshake((0, &good), (1, 0, &other_job));
        let l = l.unwrap_err();
        assert!(l.mismatch, "{l:?}");
        assert!(
            l.why.contains("train.epochs: `2` here, `3` in process 1"),
            "{}",
            l.why
        );
        let c = fatal(c);
        assert!(
            c.contains("train.epochs: `3` here, `2` in process 0"),
            "{c}"
        );
        assert!(!c.contains("train.seed"), "only what differs: {c}");

        // Without a secret the counts are named both ways, other values by this side only.
        let (l, c) = handshake(
            (0, &Credentials::new(identity("2", "1"), None)),
            (1, 0, &Credentials::new(identity("3", "2"), None)),
        );
        let l = l.unwrap_err().why;
        assert!(
            l.contains("-w (threads per process): `1` here, `2` in process 1"),
            "{l}"
        );
        assert!(
            l.contains("train.epochs: `2` here, another value in process 1"),
            "{l}"
        );
        assert!(!l.contains("`3`"), "a value sent without a secret: {l}");
        assert!(fatal(c).contains("train.epochs: `3` here, another value"));

        // A process index the listener does not accept from (itself, below it, beyond the
        // cluster), or a connector that believes it talks to another process.
        for (from, to) in [(0, 0), (1, 2), (7, 0)] {
            let (l, c) = handshake((0, &good), (from, to, &good));
            assert!(l.is_err(), "{from}->{to}");
            assert!(matches!(c, Err(Failure::Fatal(_))), "{from}->{to}: {c:?}");
        }
    }

    /// A stranger without the secret learns nothing of the job before it proves itself: the
    /// listener's hello carries no job id, and a wrong proof gets one byte, `REFUSED`.
    /// Without a secret, a caller that does not know the job's full identity is refused too.
    #[test]
    fn a_caller_proves_itself_before_the_listener_reveals_anything() {
        for secret in [Some("s3cret"), None] {
            let cred = cred("2", secret);
            let hello = Hello::new(1, 0).encode();
            let mut input = hello.to_vec();
            // A guess: the empty secret, an identity of its own.
            let stranger = Credentials::new(Identity::default().field("job", "guess"), None);
            let server_nonce_unknown = [0u8; HELLO_LEN];
            input.extend_from_slice(
                &stranger
                    .tag(b'C', true, &hello, &server_nonce_unknown)
                    .finalize()
                    .into_bytes(),
            );
            input.extend_from_slice(&[0u8; TAG_LEN]);
            let mut p = pipe(input);
            let refused = answer(&mut p, 0, 2, &cred).unwrap_err();
            assert!(!refused.mismatch, "{refused:?}");
            assert_eq!(
                p.output.len(),
                HELLO_LEN + 1,
                "{secret:?}: only a hello and one byte"
            );
            assert_eq!(p.output[HELLO_LEN], REFUSED);
            let theirs = Hello::decode(p.output[..HELLO_LEN].try_into().unwrap()).unwrap();
            assert_eq!((theirs.from, theirs.to), (0, 1));
        }
    }

    #[test]
    fn a_recorded_handshake_cannot_be_replayed() {
        let cred = cred("2", Some("s3cret"));
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
        assert!(refused.why.contains("failed authentication"), "{refused:?}");
    }

    #[test]
    fn malformed_hellos_are_refused_with_a_reason_and_never_panic() {
        let cred = cred("2", None);
        let valid = Hello::new(1, 0).encode();
        let refusal = |bytes: Vec<u8>| answer(&mut pipe(bytes), 0, 2, &cred).unwrap_err().why;
        assert!(refusal(vec![]).contains("closed the connection before its hello"));
        assert!(refusal(valid[..20].to_vec()).contains("before its hello"));
        assert!(
            refusal(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n1234567890123456789012345".to_vec())
                .contains("not a gradflow process")
        );
        let mut version = valid;
        version[8] = 9;
        assert!(refusal(version.to_vec()).contains("handshake version 9"));
        // A valid hello without the MACs that must follow it.
        assert!(refusal(valid.to_vec()).contains("before its MAC"));
        // Descriptions that lie about their lengths are cut, never allocated.
        let mut lying = 1u32.to_le_bytes().to_vec();
        lying.push(0);
        lying.extend_from_slice(&u32::MAX.to_le_bytes());
        let e = Identity::decode(&mut Cursor::new(lying)).unwrap_err();
        assert!(e.contains("cut short"), "{e}");
    }

    /// A process of another run is turned away after the hellos, before any MAC: the
    /// listener logs it and goes on, the connector may try again (the stale one may be gone
    /// soon); the same run passes. Runs travel as digests.
    #[test]
    fn a_process_of_another_run_is_turned_away_without_failing_the_run() {
        let now = cred("2", Some("s3cret")).in_run("slurm-7.0.r1");
        let stale = cred("2", Some("s3cret")).in_run("slurm-7.0.r0");
        let (l, c) = handshake((0, &now), (1, 0, &stale));
        let l = l.unwrap_err();
        assert!(
            !l.mismatch && l.why.contains("belongs to another run"),
            "{l:?}"
        );
        assert!(
            l.why.contains("`slurm-7.0.r1`") && !l.why.contains("r0"),
            "{}",
            l.why
        );
        match c {
            Err(Failure::Retry(why)) => assert!(why.contains("another run"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(handshake((0, &now), (1, 0, &now)), (Ok(1), Ok(())));
        assert_ne!(run_digest("a"), run_digest("b"));
        assert_eq!(run_digest(""), [0; 16]);
    }

    /// An index is accepted once: a second process claiming it is told so and fails.
    #[test]
    fn a_second_process_with_a_taken_index_is_told_so() {
        let good = cred("2", Some("s3cret"));
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let listener = good.clone();
        let side = std::thread::spawn(move || {
            let claimed = Mutex::new(vec![false, false, true]);
            let (mut s, _) = l.accept().unwrap();
            answer_claiming(&mut s, 0, 3, &listener, &claimed)
        });
        let mut s = TcpStream::connect(addr).unwrap();
        let c = fatal(greet(&mut s, 2, 0, &good));
        assert!(c.contains("two processes were given index 2"), "{c}");
        let l = side.join().unwrap().unwrap_err();
        assert!(l.why.contains("already connected"), "{l:?}");
    }

    #[test]
    fn hellos_round_trip() {
        let h = Hello::new(3, 1);
        assert_eq!(Hello::decode(&h.encode()), Ok(h));
        assert_ne!(Hello::new(3, 1).nonce, h.nonce, "nonces are fresh");
    }
}
