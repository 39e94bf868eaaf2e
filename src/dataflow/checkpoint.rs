//! Checkpoints: everything a run needs to continue from the start of a round, written
//! atomically while it trains (`train.checkpoint = { every_rounds = N, dir = "..." }`), and
//! read back by `--resume DIR`.
//!
//! **What is kept.** At the start of round `R` (every `N` rounds), before it computes the
//! round's batch, each worker's gradient operator writes `DIR/round-R/worker-W.bin`: its
//! replica of the weights (or, with `train.state = "sharded"`, its shard and the weights it
//! pulled for round `R`), its error-feedback memory, its update rule's state, its `sharded`
//! downlink residual and the statistics of round `R - 1` it has yet to report. At that moment
//! every operator of that worker is exactly "after round `R - 1`": every exchange of round `R`
//! waits for this worker's round-`R` gradient, so nothing of round `R` has run on it. The data
//! order needs no state: batches are a function of (seed, epoch, worker), replayed on resume.
//! Worker 0's metrics collector writes `metrics.bin` when it has folded in every report of
//! round `R - 1`: its partial sums and how much of the rows log belongs to the run so far.
//!
//! **The rows log.** The collector (process 0) appends every metrics row to
//! `DIR/metrics-rows-JOB.bin` as it emits it (a length-prefixed record each), so a checkpoint
//! records only the log's length, row count and SHA-256 ([`RowsMark`]), not the rows: memory
//! stays flat however long the run. A run that starts writes a new log (a resumed run copies
//! the rows up to its checkpoint into it first, checking length, count and checksum) and
//! renames it over the old one, whose prefix it repeats byte for byte, so every checkpoint
//! left in the directory still describes it.
//!
//! **When a round is complete.** A process writes `complete-process-P` into `round-R` once its
//! first worker starts round `R + 1` (which implies that every worker of every process has
//! written its file of round `R`) and, on process 0, the metrics are written. It then deletes
//! its files of all but the last two complete rounds. Processes killed at any moment differ
//! by at most one complete round, so the last two always share one; on resume they agree on
//! the latest round every process has complete (exchanged over the authenticated connections
//! before timely starts).
//!
//! **Files.** Each is `GFCKPT` magic and version, the state (bincode), and a SHA-256 of both;
//! it is written to a temporary name, synced and renamed. Reading checks magic, checksum, job,
//! round, worker, worker count and dimension, and names the file in every error.
//!
//! **Resuming.** A process offers the complete rounds whose own files are intact (a damaged
//! file is named in a note, and the older round is offered instead), so a damaged latest
//! checkpoint resumes from the one before. The marker records each input file this process
//! read (size and xxh3 digest, [`InputPrint`]): resuming on changed data is an error naming the
//! file.

use std::collections::BTreeSet;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::WorkerState;
use crate::metrics::{MetricsRow, Traffic};
use crate::snapshot::NonZero;

const MAGIC: &[u8; 8] = b"GFCKPT\x00\x04";
const KEEP: usize = 2;

/// `train.checkpoint`: write a checkpoint every `every_rounds` rounds into `dir`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSpec {
    /// Rounds between checkpoints.
    pub every_rounds: u64,
    /// The directory (created if missing); every process of a cluster writes its own workers'
    /// files there (a shared or a local directory).
    pub dir: PathBuf,
}

/// What a worker carries from round `R - 1` into its report at round `R`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Carried {
    /// Waiting time of round `R - 1`.
    pub wait_ms: f64,
    /// Decode and sum of round `R - 1`.
    pub aggregate_ms: f64,
    /// Update of round `R - 1`.
    pub update_ms: f64,
    /// Traffic after round `R - 1`'s gradient messages.
    pub traffic: Traffic,
    /// Traffic of the run so far.
    pub traffic_total: Traffic,
    /// An online run's: where its stream stood after the rows of rounds before `R`, where a
    /// resumed run reads on.
    pub stream: StreamPosition,
}

/// How far an online run has read its stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamPosition {
    /// The byte offset after the last row read.
    pub offset: u64,
    /// Rows read (the next row's number: row `n` goes to worker `n mod workers`).
    pub rows: u64,
}

/// One worker's file.
#[derive(Serialize, Deserialize)]
struct WorkerFile {
    job: [u8; 16],
    round: u64,
    worker: u32,
    workers: u32,
    dim: u32,
    weights: NonZero,
    #[serde(with = "serde_bytes")]
    memory: Vec<u8>,
    #[serde(with = "serde_bytes")]
    optimizer: Vec<u8>,
    #[serde(with = "serde_bytes")]
    downlink: Vec<u8>,
    /// Without a replica (`train.state = "sharded"`): the weights pulled for the round.
    pulled: Vec<(u32, f32)>,
    carried: Carried,
}

/// Checkpointing of one process, shared by its workers.
#[derive(Clone)]
pub struct Checkpoints(Arc<Shared>);

struct Shared {
    spec: Option<CheckpointSpec>,
    job: [u8; 16],
    /// The inputs this process reads, recorded in its markers.
    inputs: Vec<InputPrint>,
    process: usize,
    threads: usize,
    workers: usize,
    progress: Mutex<Progress>,
}

#[derive(Default)]
struct Progress {
    /// Rounds whose files every process has written.
    written: BTreeSet<u64>,
    /// Rounds whose metrics are written (process 0).
    metrics: BTreeSet<u64>,
    /// Complete rounds, oldest first.
    complete: Vec<u64>,
    /// Resuming: the checkpoint's directory and worker 0's metrics state, taken by the
    /// collector.
    restored_metrics: Option<(PathBuf, Vec<u8>)>,
    /// The first error, reported by the next caller.
    error: Option<String>,
}

impl std::fmt::Debug for Checkpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Checkpoints({:?})", self.0.spec)
    }
}

impl PartialEq for Checkpoints {
    fn eq(&self, other: &Self) -> bool {
        self.0.spec == other.0.spec && self.0.job == other.0.job
    }
}

fn round_dir(dir: &Path, round: u64) -> PathBuf {
    dir.join(format!("round-{round:012}"))
}

fn marker(process: usize) -> String {
    format!("complete-process-{process}")
}

/// An input file as a run read it: what a checkpoint records so that a resumed run can tell
/// that its data changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputPrint {
    /// The path, as the job names it.
    pub file: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// The xxh3-64 digest of its bytes (hex).
    pub xxh3: String,
}

impl InputPrint {
    /// Reads `path` whole (~10 GB/s from the page cache) and digests it; a directory (a
    /// table's part files), every file in it with its name.
    pub fn of(path: &Path) -> Result<InputPrint, String> {
        let err = |e: std::io::Error| format!("{}: {e}", path.display());
        let (mut hasher, mut buf, mut bytes) =
            (xxhash_rust::xxh3::Xxh3::new(), vec![0u8; 1 << 20], 0u64);
        let parts = crate::data::source::input_parts(path).map_err(err)?;
        for part in &parts {
            let err = |e: std::io::Error| format!("{}: {e}", part.display());
            if path.is_dir() {
                let name = part.file_name().unwrap_or_default().as_encoded_bytes();
                hasher.update(&(name.len() as u64).to_le_bytes());
                hasher.update(name);
            }
            let mut file = crate::data::source::open_input(part).map_err(err)?;
            loop {
                let n = file.read(&mut buf).map_err(err)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                bytes += n as u64;
            }
        }
        Ok(InputPrint {
            file: path.display().to_string(),
            bytes,
            xxh3: format!("{:016x}", hasher.digest()),
        })
    }
}

/// A completion marker: the job, the round and the inputs this process read.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Marker {
    job: String,
    round: u64,
    /// Absent in markers of earlier versions, which are not checked.
    #[serde(default)]
    input: Vec<InputPrint>,
}

/// The text of a completion marker.
fn marker_text(job: &[u8; 16], round: u64, inputs: &[InputPrint]) -> String {
    let marker = Marker {
        job: crate::handshake::hex(job),
        round,
        input: inputs.to_vec(),
    };
    toml::to_string(&marker).expect("a marker is plain TOML")
}

/// The most bytes of a marker file that are read.
const MAX_MARKER: u64 = 1 << 20;

/// The marker at `path`: `None` when absent; an error when it is not a marker of `job`'s
/// round `round`.
fn read_marker(path: &Path, job: [u8; 16], round: u64) -> Result<Option<Marker>, String> {
    let Ok(file) = crate::data::source::open_input(path) else {
        return Ok(None);
    };
    let mut text = String::new();
    let read = file.take(MAX_MARKER).read_to_string(&mut text);
    let marker = read
        .ok()
        .and_then(|_| toml::from_str::<Marker>(&text).ok())
        .filter(|m| m.job == crate::handshake::hex(&job) && m.round == round);
    marker.map(Some).ok_or_else(|| {
        format!(
            "--resume: {}: a checkpoint of another job (or damaged): resume with the job file \
             and overrides that wrote it",
            path.display()
        )
    })
}

/// Writes `bytes` to `path` atomically ([`crate::atomic`]).
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), String> {
    crate::atomic::write(path, bytes).map_err(|e| format!("checkpoint: {}: {e}", path.display()))
}

/// What a checkpoint file holds: magic, `state` and a SHA-256 of both.
pub fn seal(state: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + state.len() + 32);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(state);
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    out
}

/// The state inside a sealed file, after checking magic and checksum.
fn unseal<'a>(bytes: &'a [u8], path: &Path) -> Result<&'a [u8], String> {
    let bad = |why: &str| format!("{}: not a usable checkpoint file: {why}", path.display());
    if bytes.len() < MAGIC.len() + 32 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(bad("no gradflow checkpoint magic (or another version)"));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 32);
    if Sha256::digest(body).as_slice() != sum {
        return Err(bad("checksum mismatch (truncated or damaged)"));
    }
    Ok(&body[MAGIC.len()..])
}

/// The bytes of checkpoint file `path`: a regular file only (a FIFO in a file's place would
/// block a plain read forever).
fn read(path: &Path) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    crate::data::source::open_input(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(bytes)
}

impl Checkpoints {
    /// Checkpointing as `spec` says (`None`: none, but a resumed run still hands its restored
    /// metrics through) for process `process` (of `threads` workers) of a run over `workers`
    /// workers, of the job with id `job` ([`crate::job::Job::cluster_id`]) whose inputs are
    /// `inputs`.
    pub fn new(
        spec: Option<CheckpointSpec>,
        job: [u8; 16],
        inputs: Vec<InputPrint>,
        process: usize,
        threads: usize,
        workers: usize,
    ) -> Result<Self, String> {
        if let Some(spec) = &spec {
            std::fs::create_dir_all(&spec.dir)
                .map_err(|e| format!("train.checkpoint.dir: {}: {e}", spec.dir.display()))?;
        }
        Ok(Checkpoints(Arc::new(Shared {
            spec,
            job,
            inputs,
            process,
            threads: threads.max(1),
            workers,
            progress: Mutex::default(),
        })))
    }

    fn progress(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.0.progress.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a checkpoint is taken at the start of round `r` of `plan` (not the last, and
    /// not the round a resumed run starts at: that one exists).
    pub fn due(&self, r: u64, plan: &super::TrainPlan) -> bool {
        plan.checkpoint_rounds().due(r)
    }

    /// Rounds between checkpoints (0: none).
    pub fn every(&self) -> u64 {
        self.0.spec.as_ref().map_or(0, |s| s.every_rounds)
    }

    fn dir(&self) -> &Path {
        self.0.spec.as_ref().map_or(Path::new(""), |s| &s.dir)
    }

    /// Writes worker `worker`'s state at the start of round `round`.
    pub fn save_worker(
        &self,
        round: u64,
        worker: u32,
        st: &WorkerState,
        carried: Carried,
    ) -> Result<(), String> {
        let saved = |what: &str, state: Option<Vec<u8>>| {
            state.ok_or_else(|| {
                format!("checkpoint: the {what} cannot be saved (it does not implement save)")
            })
        };
        let file = WorkerFile {
            job: self.0.job,
            round,
            worker,
            workers: self.0.workers as u32,
            dim: st.model.weights.len() as u32,
            weights: st.model.weights.read(NonZero::of),
            memory: saved(
                &format!("memory '{}'", st.model.memory.name()),
                st.model.memory.save(),
            )?,
            optimizer: saved("update rule", st.model.optimizer.save())?,
            downlink: saved(
                "downlink residual",
                crate::memory::Memory::save(&st.model.downlink),
            )?,
            pulled: st.model.pulled.clone(),
            carried,
        };
        let dir = round_dir(self.dir(), round);
        std::fs::create_dir_all(&dir).map_err(|e| format!("checkpoint: {}: {e}", dir.display()))?;
        let path = dir.join(format!("worker-{worker:04}.bin"));
        write_atomic(&path, &seal(&crate::snapshot::encode(&file)))
    }

    /// Writes worker 0's metrics state of round `round` (process 0).
    pub fn save_metrics(&self, round: u64, state: &[u8]) -> Result<(), String> {
        let dir = round_dir(self.dir(), round);
        std::fs::create_dir_all(&dir).map_err(|e| format!("checkpoint: {}: {e}", dir.display()))?;
        let mut body = metrics_header(&self.0.job, round);
        body.extend_from_slice(state);
        write_atomic(&dir.join("metrics.bin"), &seal(&body))?;
        let mut p = self.progress();
        p.metrics.insert(round);
        self.complete(&mut p)
    }

    /// Called by the process's first worker when it starts round `r` of `plan`: every
    /// checkpoint before `r` is written everywhere (but the one a resumed run started from,
    /// which is complete already).
    pub fn started(&self, r: u64, plan: &super::TrainPlan) -> Result<(), String> {
        let every = self.every();
        let mut p = self.progress();
        if let Some(e) = &p.error {
            return Err(e.clone());
        }
        if every == 0 {
            return Ok(());
        }
        // Only checkpoints this run wrote: a resumed run's earlier rounds are not its own (the
        // round before the one it resumed from may be pruned already).
        let last = (r.saturating_sub(1) / every) * every;
        if last > plan.start_round && r > last && !p.complete.contains(&last) {
            p.written.insert(last);
        }
        self.complete(&mut p)
    }

    /// Marks every round that is written and (process 0) has its metrics; keeps the last two.
    fn complete(&self, p: &mut Progress) -> Result<(), String> {
        let ready: Vec<u64> = p
            .written
            .iter()
            .copied()
            .filter(|r| self.0.process != 0 || p.metrics.contains(r))
            .collect();
        for r in ready {
            p.written.remove(&r);
            p.metrics.remove(&r);
            let dir = round_dir(self.dir(), r);
            let text = marker_text(&self.0.job, r, &self.0.inputs);
            if let Err(e) = write_atomic(&dir.join(marker(self.0.process)), text.as_bytes()) {
                p.error.get_or_insert(e.clone());
                return Err(e);
            }
            p.complete.push(r);
            while p.complete.len() > KEEP {
                let old = p.complete.remove(0);
                self.remove_own(old);
            }
        }
        Ok(())
    }

    /// Deletes this process's files of round `round` (and the directory once it is empty).
    fn remove_own(&self, round: u64) {
        let dir = round_dir(self.dir(), round);
        let _ = std::fs::remove_file(dir.join(marker(self.0.process)));
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let mine = match name
                    .strip_prefix("worker-")
                    .and_then(|n| n.strip_suffix(".bin"))
                {
                    Some(w) => w.parse::<usize>().is_ok_and(|w| self.is_local(w)),
                    None => self.0.process == 0 && name == "metrics.bin",
                };
                if mine {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let _ = std::fs::remove_dir(&dir);
    }

    fn is_local(&self, worker: usize) -> bool {
        worker / self.0.threads == self.0.process
    }

    /// Records a failure to write (reported to the workers by [`Checkpoints::started`]).
    pub fn fail(&self, e: String) {
        self.progress().error.get_or_insert(e);
    }

    /// Resuming: hands worker 0's restored metrics state, read from the checkpoint in `dir`,
    /// to the collector.
    pub fn set_restored_metrics(&self, dir: &Path, state: Vec<u8>) {
        self.progress().restored_metrics = Some((dir.to_path_buf(), state));
    }

    /// Resuming: the checkpoint's directory and worker 0's metrics state, once.
    pub fn take_restored_metrics(&self) -> Option<(PathBuf, Vec<u8>)> {
        self.progress().restored_metrics.take()
    }

    /// The directory checkpoints are written to (`None` when the job has none).
    pub fn dir_if_any(&self) -> Option<&Path> {
        self.0.spec.as_ref().map(|s| s.dir.as_path())
    }

    /// The job's id.
    pub fn job(&self) -> [u8; 16] {
        self.0.job
    }

    /// Before the run starts: removes this process's checkpoints in the directory it writes to
    /// that do not describe this run: those newer than the round it resumes from (`resumed`:
    /// the directory and round), or all of them when it starts afresh or resumed from another
    /// directory. Returns a note for a run that starts afresh over earlier checkpoints.
    pub fn discard_stale(&self, resumed: Option<(&Path, u64)>) -> Option<String> {
        let dir = self.dir_if_any()?;
        let same = |a: &Path| a.canonicalize().ok() == dir.canonicalize().ok();
        let keep_to = resumed.and_then(|(from, round)| same(from).then_some(round));
        let rounds = complete_rounds(dir, self.0.job, self.0.process).unwrap_or_default();
        let stale: Vec<u64> = rounds
            .into_iter()
            .filter(|&r| keep_to.is_none_or(|to| r > to))
            .collect();
        stale.iter().for_each(|&r| self.remove_own(r));
        (resumed.is_none() && !stale.is_empty()).then(|| {
            format!(
                "train.checkpoint.dir {} held checkpoints of an earlier run of this job (rounds \
                 {stale:?}); this run starts afresh and replaced them (--resume DIR continues \
                 a run)",
                dir.display()
            )
        })
    }
}

/// How much of the rows log a checkpoint's run had written.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RowsMark {
    /// Bytes.
    pub len: u64,
    /// Rows.
    pub rows: u64,
    /// SHA-256 of those bytes.
    pub sha256: [u8; 32],
}

/// The largest record of the rows log (a row is about 300 bytes).
const MAX_ROW_RECORD: usize = 1 << 16;

/// The metrics rows of a run so far (see the module docs), appended by the collector.
pub struct RowsLog {
    path: PathBuf,
    file: BufWriter<std::fs::File>,
    len: u64,
    rows: u64,
    sha: Sha256,
}

fn rows_log_path(dir: &Path, job: &[u8; 16]) -> PathBuf {
    dir.join(format!("metrics-rows-{}.bin", crate::handshake::hex(job)))
}

impl RowsLog {
    /// Starts the rows log of a run of job `job` in `dir` (`None`: keep no log). A resumed
    /// run (`resumed`: the checkpoint's directory and mark) first reads the rows up to the
    /// mark, checking them, hands each to `each` and copies it into the new log.
    pub fn begin(
        dir: Option<&Path>,
        job: &[u8; 16],
        resumed: Option<(&Path, &RowsMark)>,
        each: &mut dyn FnMut(MetricsRow),
    ) -> Result<Option<RowsLog>, String> {
        let mut log = match dir {
            Some(dir) => {
                let path = rows_log_path(dir, job);
                let tmp = path.with_extension("new");
                let file = std::fs::File::create(&tmp)
                    .map_err(|e| format!("checkpoint: {}: {e}", tmp.display()))?;
                Some(RowsLog {
                    path,
                    file: BufWriter::new(file),
                    len: 0,
                    rows: 0,
                    sha: Sha256::new(),
                })
            }
            None => None,
        };
        if let Some((from, mark)) = resumed {
            let path = rows_log_path(from, job);
            let name = path.display().to_string();
            let file = std::fs::File::open(&path).map_err(|e| format!("--resume: {name}: {e}"));
            let input = std::io::BufReader::new(file?);
            let replayed = replay(input, &name, mark, |record, row| {
                if let Some(log) = &mut log {
                    log.write_record(record)?;
                }
                each(row);
                Ok(())
            });
            if let (Err(_), Some(log)) = (&replayed, &log) {
                let _ = std::fs::remove_file(log.path.with_extension("new"));
            }
            replayed?;
        }
        if let Some(log) = &mut log {
            log.sync()?;
            let tmp = log.path.with_extension("new");
            std::fs::rename(&tmp, &log.path).map_err(|e| log.err(e))?;
        }
        Ok(log)
    }

    fn err(&self, e: impl std::fmt::Display) -> String {
        format!("checkpoint: {}: {e}", self.path.display())
    }

    fn write_record(&mut self, record: &[u8]) -> Result<(), String> {
        let head = (record.len() as u32).to_le_bytes();
        for part in [&head[..], record] {
            self.file.write_all(part).map_err(|e| self.err(e))?;
            self.sha.update(part);
        }
        self.len += (head.len() + record.len()) as u64;
        self.rows += 1;
        Ok(())
    }

    fn sync(&mut self) -> Result<(), String> {
        self.file.flush().map_err(|e| self.err(e))?;
        self.file.get_ref().sync_data().map_err(|e| self.err(e))
    }

    /// Appends `row`.
    pub fn append(&mut self, row: &MetricsRow) -> Result<(), String> {
        self.write_record(&crate::snapshot::encode(row))
    }

    /// The log so far, written through to the disk: what a checkpoint records.
    pub fn mark(&mut self) -> Result<RowsMark, String> {
        self.sync()?;
        Ok(RowsMark {
            len: self.len,
            rows: self.rows,
            sha256: self.sha.clone().finalize().into(),
        })
    }
}

impl RowsMark {
    /// The mark of all of `log`, a rows log of `rows` rows.
    pub fn covering(log: &[u8], rows: u64) -> RowsMark {
        RowsMark {
            len: log.len() as u64,
            rows,
            sha256: Sha256::digest(log).into(),
        }
    }
}

/// The rows of a rows log (`input`, named `name` in errors) up to `mark`, each handed to
/// `each`, checked as on resume.
pub fn read_rows(
    input: &[u8],
    name: &str,
    mark: &RowsMark,
    mut each: impl FnMut(MetricsRow),
) -> Result<(), String> {
    replay(input, name, mark, |_, row| {
        each(row);
        Ok(())
    })
}

/// Reads the rows log `input` (named `name`) up to `mark`, handing each record and its row to
/// `each`; checks every record's length, the row count and the checksum, and names the file
/// and the record in errors. Reads no more than the mark's length, and allocates no more than
/// one record's bound.
fn replay(
    input: impl Read,
    name: &str,
    mark: &RowsMark,
    mut each: impl FnMut(&[u8], MetricsRow) -> Result<(), String>,
) -> Result<(), String> {
    let mut input = input.take(mark.len);
    let (mut sha, mut read, mut record) = (Sha256::new(), 0u64, Vec::new());
    for n in 0..mark.rows {
        let bad = |why: String| format!("--resume: {name}: row {n}: {why}");
        let mut head = [0u8; 4];
        input.read_exact(&mut head).map_err(|_| {
            bad(format!(
                "the log ends before the checkpoint's {} bytes",
                mark.len
            ))
        })?;
        let len = u32::from_le_bytes(head) as usize;
        if len > MAX_ROW_RECORD {
            return Err(bad(format!("a record of {len} bytes (damaged)")));
        }
        record.resize(len, 0);
        input.read_exact(&mut record).map_err(|_| {
            bad(format!(
                "the log ends before the checkpoint's {} bytes",
                mark.len
            ))
        })?;
        sha.update(head);
        sha.update(&record);
        read += 4 + len as u64;
        let row: MetricsRow = crate::snapshot::decode(&record, &format!("{name}: row {n}"))?;
        each(&record, row)?;
    }
    if read != mark.len || sha.finalize().as_slice() != mark.sha256 {
        return Err(format!(
            "--resume: {name}: the rows log does not match the checkpoint (damaged, or replaced \
             by another run)"
        ));
    }
    Ok(())
}

/// The rounds that process `process` has complete in `dir`, increasing. A marker of another
/// job is an error: resuming needs the same job file and overrides.
pub fn complete_rounds(dir: &Path, job: [u8; 16], process: usize) -> Result<Vec<u64>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("--resume: {}: {e}", dir.display()))?;
    let mut rounds = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(round) = name
            .strip_prefix("round-")
            .and_then(|r| r.parse::<u64>().ok())
        else {
            continue;
        };
        if read_marker(&e.path().join(marker(process)), job, round)?.is_some() {
            rounds.push(round);
        }
    }
    rounds.sort_unstable();
    Ok(rounds)
}

/// Where process `process` (of `threads` workers, in a run of `workers`) can resume from in
/// `dir`: its complete rounds whose own files are intact (checksums, and the job, round,
/// worker and worker count each file records), increasing, and a note for each round passed
/// over (a damaged, swapped or foreign file, a FIFO in a file's place). With `inputs`, a round recorded on other inputs is an error naming
/// the file that changed.
pub fn resumable_rounds(
    dir: &Path,
    job: [u8; 16],
    process: usize,
    threads: usize,
    workers: usize,
    inputs: Option<&[InputPrint]>,
) -> Result<(Vec<u64>, Vec<String>), String> {
    let (mut rounds, mut notes) = (Vec::new(), Vec::new());
    for round in complete_rounds(dir, job, process)? {
        let at = round_dir(dir, round);
        if let Some(inputs) = inputs {
            let marker = read_marker(&at.join(marker(process)), job, round)?;
            check_inputs(&marker.map(|m| m.input).unwrap_or_default(), inputs)?;
        }
        let workers = (process * threads..(process + 1) * threads).map(|w| {
            let path = at.join(format!("worker-{w:04}.bin"));
            let slot = WorkerSlot {
                job,
                round,
                worker: w as u32,
                workers,
            };
            read(&path).and_then(|b| worker_file(&b, &path, slot).map(|_| ()))
        });
        let metrics = (process == 0).then(|| {
            let path = at.join("metrics.bin");
            read(&path).and_then(|b| metrics_state(&b, &path, &job, round).map(|_| ()))
        });
        let damaged = workers.chain(metrics).find_map(Result::err);
        match damaged {
            None => rounds.push(round),
            Some(e) => notes.push(format!("{e}; round {round} is passed over")),
        }
    }
    Ok((rounds, notes))
}

/// Whether the inputs a checkpoint `recorded` are the run's `current` ones (a checkpoint of an
/// earlier version recorded none: not checked).
fn check_inputs(recorded: &[InputPrint], current: &[InputPrint]) -> Result<(), String> {
    if recorded.is_empty() {
        return Ok(());
    }
    for was in recorded {
        let now = current.iter().find(|c| c.file == was.file);
        let why = match now {
            None => "the job no longer reads it".to_string(),
            Some(now) if now.bytes != was.bytes => {
                format!("{} bytes then, {} now", was.bytes, now.bytes)
            }
            Some(now) if now.xxh3 != was.xxh3 => "its content changed".into(),
            Some(_) => continue,
        };
        return Err(format!(
            "--resume: {}: the input changed since the checkpoint was written ({why}): a \
             resumed run must read the data it was trained on; start afresh without --resume",
            was.file
        ));
    }
    if let Some(new) = current
        .iter()
        .find(|c| !recorded.iter().any(|r| r.file == c.file))
    {
        return Err(format!(
            "--resume: {}: the checkpoint's run did not read this input: start afresh \
             without --resume",
            new.file
        ));
    }
    Ok(())
}

/// Which worker file a worker restores, and what the file must match.
#[derive(Clone, Copy, Debug)]
pub struct WorkerSlot {
    /// The job id.
    pub job: [u8; 16],
    /// The checkpoint's round.
    pub round: u64,
    /// The restoring worker.
    pub worker: u32,
    /// The run's number of workers.
    pub workers: usize,
}

/// Restores the state of `at.worker` from round `at.round` of `dir` into `st`, a fresh state
/// for the job; returns what the worker carries into its first report.
pub fn restore_worker(dir: &Path, at: WorkerSlot, st: &mut WorkerState) -> Result<Carried, String> {
    let path = round_dir(dir, at.round).join(format!("worker-{:04}.bin", at.worker));
    restore_worker_from(&read(&path)?, &path, at, st)
}

/// [`restore_worker`] from the bytes of the file at `path` (named in errors).
pub fn restore_worker_from(
    bytes: &[u8],
    path: &Path,
    at: WorkerSlot,
    st: &mut WorkerState,
) -> Result<Carried, String> {
    let f = worker_file(bytes, path, at)?;
    let name = path.display().to_string();
    let mismatch = |what: String| Err(format!("{name}: {what}"));
    if f.dim as usize != st.model.weights.len() {
        return mismatch(format!(
            "a model of {} weights, this job's data makes {}",
            f.dim,
            st.model.weights.len()
        ));
    }
    let dim = st.model.shard.map_or(0, |s| s.owners.dim);
    let increasing = f.pulled.windows(2).all(|w| w[0].0 < w[1].0);
    if !increasing || f.pulled.iter().any(|&(k, w)| k >= dim || !w.is_finite()) {
        return mismatch("pulled weights out of order, beyond the model or not finite".into());
    }
    let field = |what: &str| format!("{name}: {what}");
    st.model.weights.restore_with(|weights| {
        weights.fill(0.0); // a warm start's weights: the checkpoint's replace them
        f.weights.restore(weights, &field("weights"))
    })?;
    st.model.memory.restore(&f.memory).map_err(|e| field(&e))?;
    st.model
        .optimizer
        .restore(&f.optimizer)
        .map_err(|e| field(&e))?;
    st.restored_optimizer = Some(f.optimizer);
    crate::memory::Memory::restore(&mut st.model.downlink, &f.downlink).map_err(|e| field(&e))?;
    st.model.pulled = f.pulled;
    Ok(f.carried)
}

/// What a metrics file starts with: its kind, the job and the round, so that a file moved from
/// another round or run is refused (its checksum alone would pass).
fn metrics_header(job: &[u8; 16], round: u64) -> Vec<u8> {
    let mut h = b"METRICS\0".to_vec();
    h.extend_from_slice(job);
    h.extend_from_slice(&round.to_le_bytes());
    h
}

/// The state in the metrics file `bytes` (at `path`), checked to be job `job`'s of `round`.
fn metrics_state<'a>(
    bytes: &'a [u8],
    path: &Path,
    job: &[u8; 16],
    round: u64,
) -> Result<&'a [u8], String> {
    let body = unseal(bytes, path)?;
    let want = metrics_header(job, round);
    match body.strip_prefix(&want[..]) {
        Some(state) => Ok(state),
        None => {
            let theirs = body
                .get(24..32)
                .map(|r| u64::from_le_bytes(r.try_into().expect("8")));
            let why = match (
                body.get(..8) == Some(&want[..8]),
                body.get(8..24) == Some(job),
                theirs,
            ) {
                (true, true, Some(r)) => {
                    format!("holds the metrics of round {r}, not of round {round}")
                }
                (true, false, _) => "the metrics of another job's run".into(),
                _ => "not a metrics file of this version".into(),
            };
            Err(format!("{}: {why}", path.display()))
        }
    }
}

/// The worker file in `bytes` (at `path`), checked to be `at`'s: the job, the round, the
/// worker and the run's worker count it records.
fn worker_file(bytes: &[u8], path: &Path, at: WorkerSlot) -> Result<WorkerFile, String> {
    let name = path.display().to_string();
    let f: WorkerFile = crate::snapshot::decode(unseal(bytes, path)?, &name)?;
    let mismatch = |what: String| Err(format!("{name}: {what}"));
    if f.job != at.job {
        return mismatch(
            "a checkpoint of another job: resume with the job file and overrides that wrote it"
                .into(),
        );
    }
    if (f.round, f.worker) != (at.round, at.worker) {
        return mismatch(format!("holds round {} of worker {}", f.round, f.worker));
    }
    if f.workers as usize != at.workers {
        return mismatch(format!(
            "written by a run of {} workers, this one has {}: resume with the same \
             processes and threads",
            f.workers, at.workers
        ));
    }
    Ok(f)
}

/// Worker 0's metrics state of round `round` of job `job` in `dir`.
pub fn read_metrics(dir: &Path, job: &[u8; 16], round: u64) -> Result<Vec<u8>, String> {
    let path = round_dir(dir, round).join("metrics.bin");
    let bytes = read(&path)?;
    Ok(metrics_state(&bytes, &path, job, round)?.to_vec())
}

/// The most rounds a process offers when the processes agree on where to resume.
const MAX_OFFERED: usize = 64;

/// Agrees with the other processes of a cluster, over their authenticated connections
/// (`streams`, `None` at this process's own index), on the round to resume from: the latest
/// that every process has complete. `mine` is this process's complete rounds, `None` when it
/// does not resume; every process must resume or none. Returns the agreed round.
pub fn agree(
    streams: &mut [Option<std::net::TcpStream>],
    addresses: &[String],
    mine: Option<&[u64]>,
    timeout: std::time::Duration,
) -> Result<Option<u64>, String> {
    use std::io::Read;
    let offered: Vec<u64> = mine
        .map(|m| m.iter().rev().take(MAX_OFFERED).copied().collect())
        .unwrap_or_default();
    let mut message = vec![mine.is_some() as u8];
    message.extend_from_slice(&(offered.len() as u32).to_le_bytes());
    offered
        .iter()
        .for_each(|r| message.extend_from_slice(&r.to_le_bytes()));
    for (i, s) in streams.iter_mut().enumerate() {
        if let Some(s) = s {
            s.write_all(&message)
                .map_err(|e| format!("process {i} ({}): {e}", addresses[i]))?;
        }
    }
    let mut common: BTreeSet<u64> = offered.iter().copied().collect();
    for (i, s) in streams.iter_mut().enumerate() {
        let Some(s) = s else { continue };
        let peer = format!("process {i} ({})", addresses[i]);
        let failed = |e: std::io::Error| format!("{peer}: no answer about resuming: {e}");
        s.set_read_timeout(Some(timeout)).map_err(failed)?;
        let mut head = [0u8; 5];
        s.read_exact(&mut head).map_err(failed)?;
        let n = u32::from_le_bytes(head[1..].try_into().expect("4 bytes")) as usize;
        if head[0] > 1 || n > MAX_OFFERED {
            return Err(format!("{peer}: a malformed answer about resuming"));
        }
        let mut rounds = vec![0u8; 8 * n];
        s.read_exact(&mut rounds).map_err(failed)?;
        s.set_read_timeout(None).map_err(failed)?;
        match (head[0] == 1, mine.is_some()) {
            (true, false) => return Err(format!("{peer} resumes from a checkpoint, this process was not given --resume: give every process the same --resume DIR")),
            (false, true) => return Err(format!("{peer} was not given --resume, this process was: give every process the same --resume DIR")),
            _ => {}
        }
        let theirs: BTreeSet<u64> = rounds
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        common = common.intersection(&theirs).copied().collect();
    }
    match mine {
        None => Ok(None),
        Some(_) => common.last().copied().map(Some).ok_or_else(|| {
            format!(
                "--resume: the processes have no complete checkpoint in common (this one has \
                 rounds {offered:?})"
            )
        }),
    }
}
