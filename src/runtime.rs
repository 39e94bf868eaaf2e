//! Running a job: timely's configuration (threads, or a cluster of processes over TCP), the
//! communication hooks that count bytes on the wire, the start-up timeout, and failure handling.
//!
//! timely's own argument parser (getopts) is not used: the command line belongs to clap, so the
//! configuration is built here from [`ClusterSpec`].

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use timely::communication::allocator::zero_copy::initialize::initialize_networking_from_sockets;
use timely::communication::allocator::{AllocatorBuilder, ProcessBuilder};
use timely::worker::Worker;
use timely::CommunicationConfig;

use crate::cores::CoreDistance;
use crate::dataflow::checkpoint::{self, Checkpoints};
use crate::dataflow::heartbeat::Heartbeat;
use crate::dataflow::{
    build_training, InitialWeights, ReplicaSlot, Supervisor, TrainHandle, TrainPlan, Training,
    WarmWeights, WorkerData,
};
use crate::exchange::{Owners, StateMode};
use crate::handshake::{self, Credentials, Identity};
use crate::job::Job;
use crate::metrics::{MetricsRow, RowOutput, Traffic, WireBytes, WireCounters};
use crate::model::file::{ModelFile, ModelStream};

/// Where this process sits in the computation.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// Worker threads per process.
    pub workers: usize,
    /// Number of processes.
    pub processes: usize,
    /// This process's index.
    pub process: usize,
    /// File with one `host:port` per line for each process (default: `localhost:2101+i`).
    pub hostfile: Option<PathBuf>,
    /// The processes' `host:port` addresses given directly (the `cluster` launcher's way: no
    /// file to leave behind); used instead of `hostfile` when not empty.
    pub hosts: Vec<String>,
    /// How long to wait for every process to connect.
    pub startup_timeout: Duration,
    /// How long another process may stay silent (no heartbeat) before this one stops with an
    /// error naming it.
    pub peer_timeout: Duration,
    /// The secret every process of the cluster proves it knows in the handshake
    /// ([`crate::handshake`]); `None`: the handshake checks job and index only.
    pub secret: Option<String>,
    /// The run identity every process must state ([`handshake::run_digest`]): a process of
    /// an earlier attempt or of another job on the same ports cannot join. Empty: none.
    pub run: String,
    /// Resume from the latest checkpoint in this directory that every process has complete
    /// ([`crate::dataflow::checkpoint`]).
    pub resume: Option<PathBuf>,
    /// Keep every metrics row in memory for [`RunOutcome::rows`] (the default). The CLI turns
    /// it off: its rows go to the metrics CSV as they are final, so memory stays flat however
    /// long the run.
    pub keep_rows: bool,
}

/// One process's entry of the addresses: one or more `host:port`, separated by spaces, each
/// with a host and a port from 1 to 65535 (a name is resolved only when dialled).
fn check_address(entry: &str) -> Result<(), String> {
    if entry.is_empty() {
        return Err("an empty address".into());
    }
    for a in entry.split_whitespace() {
        let port = a.rsplit_once(':').filter(|(host, _)| !host.is_empty());
        match port.map(|(_, p)| p.parse::<u16>()) {
            Some(Ok(p)) if p > 0 => {}
            _ => {
                return Err(format!(
                    "`{a}` is not host:port with a port from 1 to 65535"
                ))
            }
        }
    }
    Ok(())
}

/// The environment variable that carries the cluster secret (the `cluster` launcher sets it
/// for its processes; unlike a command-line argument, it is not visible to other users).
pub const SECRET_VARIABLE: &str = "GRADFLOW_CLUSTER_SECRET";

impl Default for ClusterSpec {
    fn default() -> Self {
        ClusterSpec {
            workers: 1,
            processes: 1,
            process: 0,
            hostfile: None,
            hosts: Vec::new(),
            startup_timeout: Duration::from_secs(60),
            peer_timeout: Duration::from_secs(60),
            secret: None,
            run: String::new(),
            resume: None,
            keep_rows: true,
        }
    }
}

impl ClusterSpec {
    /// Addresses of all processes, in process order: `--hosts`, the first `processes` entries
    /// of the hostfile (one per line; blank lines and `#` comments skipped), or
    /// `localhost:2101+i`. Each entry is checked before any process listens or dials: one or
    /// more `host:port` (a listener may name several, separated by spaces), and no address
    /// given to two processes. Errors name the hostfile's line or the `--hosts` position.
    pub fn addresses(&self) -> Result<Vec<String>, String> {
        // (where an entry came from, the entry)
        let entries: Vec<(String, String)> = match self.listed()? {
            Some(hosts) if !self.hosts.is_empty() && hosts.len() != self.processes => {
                return Err(format!(
                    "--hosts has {} addresses but --processes is {}",
                    hosts.len(),
                    self.processes
                ));
            }
            Some(hosts) if hosts.len() < self.processes => {
                return Err(format!(
                    "{}: has {} addresses but --processes is {}",
                    self.hostfile.as_ref().expect("a hostfile").display(),
                    hosts.len(),
                    self.processes
                ));
            }
            Some(hosts) => hosts.into_iter().take(self.processes).collect(),
            None => {
                let local = |i: usize| format!("localhost:{}", 2101 + i);
                return Ok((0..self.processes).map(local).collect());
            }
        };
        let mut seen: Vec<(&str, &str)> = Vec::new();
        for (place, entry) in &entries {
            check_address(entry).map_err(|e| format!("{place}: {e}"))?;
            for a in entry.split_whitespace() {
                if let Some((first, _)) = seen.iter().find(|(_, b)| *b == a) {
                    return Err(format!(
                        "{place}: `{a}` is given to two processes (also at {first})"
                    ));
                }
                seen.push((place, a));
            }
        }
        Ok(entries.into_iter().map(|(_, entry)| entry).collect())
    }

    /// Every entry of `--hosts` or the hostfile (one per line; blank lines and `#` comments
    /// skipped), unchecked, with where it came from (`--hosts, address 2`, `file:line`);
    /// `None` when neither is given.
    pub fn listed(&self) -> Result<Option<Vec<(String, String)>>, String> {
        if !self.hosts.is_empty() {
            let place = |i: usize| format!("--hosts, address {}", i + 1);
            let hosts = self.hosts.iter().enumerate();
            return Ok(Some(
                hosts
                    .map(|(i, h)| (place(i), h.trim().to_owned()))
                    .collect(),
            ));
        }
        let Some(path) = &self.hostfile else {
            return Ok(None);
        };
        let text = crate::data::source::read_input_text(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
        Ok(Some(
            lines
                .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
                .map(|(n, l)| (format!("{}:{n}", path.display()), l.to_owned()))
                .collect(),
        ))
    }

    fn check(&self) -> Result<(), String> {
        if self.workers == 0 || self.processes == 0 {
            return Err("--workers and --processes must be at least 1".into());
        }
        if self.process >= self.processes {
            return Err(format!(
                "--process {} is not below --processes {}",
                self.process, self.processes
            ));
        }
        Ok(())
    }

    /// timely's configuration of a single process (a cluster is built from sockets).
    fn config(&self) -> Result<CommunicationConfig, String> {
        self.check()?;
        Ok(if self.workers > 1 {
            CommunicationConfig::Process(self.workers)
        } else {
            CommunicationConfig::Thread
        })
    }
}

/// What a process learns from a run.
#[derive(Clone, Debug, Default)]
pub struct RunOutcome {
    /// The plan that ran.
    pub plan: Option<TrainPlan>,
    /// Metrics rows (process 0 only, with [`ClusterSpec::keep_rows`]; wire columns are the
    /// bytes process 0 sent). The job's `output.metrics` CSV, when it has one, is written
    /// while the run trains.
    pub rows: Vec<MetricsRow>,
    /// Final model (process 0 only; none under `train.state = "sharded"`, whose model file
    /// merges the owners' shards).
    pub weights: Option<Vec<f32>>,
    /// Bytes this process sent to other processes.
    pub wire: WireBytes,
    /// Payload bytes this process's workers sent and received, by direction.
    pub traffic: Traffic,
    /// `(worker, digest of its final replica)` for this process's workers: replicas that must
    /// agree bit for bit have equal digests.
    pub replica_digests: Vec<(u32, u64)>,
    /// Whether this process's workers kept one replica of the model (`train.replica`).
    pub shared_replica: bool,
    /// Wall-clock seconds of the run (start-up included).
    pub seconds: f64,
    /// Whether a program's loop stopped early ([`crate::dataflow::Training::gradient_until`]):
    /// the round training ended at (the rounds before it were trained) and why.
    pub stopped: Option<(u64, String)>,
    /// What a user should know about the data (e.g. test features beyond the training
    /// dimension, which were ignored).
    pub notes: Vec<String>,
    /// The feature map of a table job (TOML), for the model file.
    pub features: Option<String>,
    /// Worker 0's time to read and prepare its data, and its rows, for people.
    pub loaded: String,
}

/// Builds the observer worker 0 calls for each metrics row, once its data is loaded: given the
/// plan and a line on the data for people (worker 0's rows and time to read them; empty for a
/// program's rows, which arrive in its dataflow), to show before the first row.
pub type ObserverFactory =
    Arc<dyn Fn(&TrainPlan, &str) -> Box<dyn FnMut(&MetricsRow)> + Send + Sync>;

/// An observer that ignores everything.
pub fn quiet() -> ObserverFactory {
    Arc::new(|_, _| Box::new(|_| {}))
}

/// What worker 0 alone hands back: its metrics rows (to finish once the wire counts are
/// complete), the final model, the plan and an early stop.
struct FirstWorker {
    output: RowOutput,
    weights: Option<Vec<f32>>,
    plan: TrainPlan,
    stopped: Option<(u64, String)>,
}

/// What one worker thread hands back.
struct WorkerReport {
    index: u32,
    traffic: Traffic,
    digest: u64,
    /// Whether the worker's replica was its process's, shared.
    shared: bool,
    /// Worker 0 only.
    first: Option<FirstWorker>,
    /// Notes about the data (every worker reads the same files, so worker 0's stand for all).
    notes: Vec<String>,
    /// The feature map (TOML) of a table job.
    features: Option<String>,
    /// How long reading and preparing the data took, for people.
    loaded: String,
    /// The rows a program's dataflow handed the worker (training, test).
    prepared: Option<(u64, u64)>,
}

type WorkerResult = Result<WorkerReport, String>;

/// A table job's feature map (TOML).
type Features = Option<String>;

/// Notes about the data, for the user.
type Notes = Vec<String>;

/// A digest of a replica's exact bits.
pub fn replica_digest(weights: &[f32]) -> u64 {
    weights.iter().fold(0x9e37_79b9_7f4a_7c15, |h, w| {
        crate::data::partition::mix64(h, w.to_bits() as u64)
    })
}

/// A training program: what each worker builds in its dataflow scope from its [`Training`]
/// context. [`standard`] is the loop `gradflow train` runs; a program of one's own gets the
/// same runtime through [`run_program`] (or the whole command line through
/// `gradflow::cli::main_with`).
pub type Program =
    Arc<dyn for<'s> Fn(timely::dataflow::Scope<'s, ()>, Training) -> TrainHandle + Send + Sync>;

/// The standard training loop ([`build_training`]).
pub fn standard() -> Program {
    Arc::new(build_training)
}

/// Runs `job` with the standard loop as this process of `cluster` (see [`run_program`]).
pub fn run_job(
    job: &Job,
    cluster: &ClusterSpec,
    supervisor: &Supervisor,
    observer: ObserverFactory,
) -> Result<RunOutcome, String> {
    run_program(job, cluster, supervisor, observer, standard())
}

/// Runs `job` as this process of `cluster`, each worker building its loop with `program`:
/// timely's threads or TCP cluster, the job's data read by every worker (its own byte ranges),
/// bytes on the wire counted, failures supervised. Returns when every local worker is done, or
/// with the first error of this process (a failed operator anywhere in the cluster, a worker
/// that panicked, a peer that disconnected, a peer that never connected within the start-up
/// timeout).
pub fn run_program(
    job: &Job,
    cluster: &ClusterSpec,
    supervisor: &Supervisor,
    observer: ObserverFactory,
    program: Program,
) -> Result<RunOutcome, String> {
    let started = Instant::now();
    let (builders, workers) = Process::start(job, cluster, supervisor, observer, program)?;
    let wire = workers.wire.clone();
    let guards = timely::execute::execute_from(
        builders.0,
        builders.1,
        timely::WorkerConfig::default(),
        move |worker| workers.run(worker),
    )?;
    let results = join_workers(guards, supervisor)?;
    let mut outcome = gather_reports(results, supervisor, &wire)?;
    outcome.seconds = started.elapsed().as_secs_f64();
    Ok(outcome)
}

/// What every worker thread of this process shares: the job, the cluster's shape, and what
/// the process prepared before its workers started (communication, checkpoints, a warm
/// start, the shared replica's slot).
struct Process {
    job: Arc<Job>,
    job_id: [u8; 16],
    process: usize,
    threads: usize,
    processes: usize,
    peer_timeout: Duration,
    keep_rows: bool,
    supervisor: Supervisor,
    wire: WireCounters,
    resume: Resume,
    checkpoints: Option<Checkpoints>,
    warm_start: Option<Arc<WarmStart>>,
    replica: ReplicaSlot,
    distance: Arc<CoreDistance>,
    observer: ObserverFactory,
    program: Program,
}

impl Process {
    /// Prepares this process of `cluster`: its outputs checked (process 0), its connections to
    /// the others, the checkpoints it writes or resumes from, the warm start read once.
    fn start(
        job: &Job,
        cluster: &ClusterSpec,
        supervisor: &Supervisor,
        observer: ObserverFactory,
        program: Program,
    ) -> Result<(Builders, Process), String> {
        if cluster.process == 0 {
            check_outputs(job)?;
        }
        // Only process 0 writes metrics rows, with their per-round wire bytes.
        let wire = match cluster.process {
            0 => WireCounters::new(),
            _ => WireCounters::totals_only(),
        };
        // What a checkpoint records of the inputs, and a resumed run checks. (A cluster's
        // processes also compare them at start-up: same names, other content is refused by
        // name.)
        let fingerprinted =
            job.train.checkpoint.is_some() || cluster.resume.is_some() || cluster.processes > 1;
        let inputs = match fingerprinted {
            true => job
                .input_files()
                .map(|p| checkpoint::InputPrint::of(p))
                .collect::<Result<Vec<_>, String>>()?,
            false => Vec::new(),
        };
        let (builders, resume) = start_communication(job, &wire, cluster, &inputs)?;
        let job_id = job.cluster_id();
        let checkpoints = open_checkpoints(job, cluster, job_id, inputs, &resume)?;
        if cluster.processes > 1 {
            supervisor.watch_own_progress(cluster.process, cluster.peer_timeout);
        }
        // Read once per process; every worker checks it against the data it loads.
        let warm_start = match &job.train.init_model {
            Some(path) => Some(Arc::new(WarmStart::load(path, job)?)),
            None => None,
        };
        let process = Process {
            job: Arc::new(job.clone()),
            job_id,
            process: cluster.process,
            threads: cluster.workers,
            processes: cluster.processes,
            peer_timeout: cluster.peer_timeout,
            keep_rows: cluster.keep_rows,
            supervisor: supervisor.clone(),
            wire,
            resume,
            checkpoints,
            warm_start,
            // The workers of a process keep one replica of the model when the job allows it;
            // for a small model, when their cores are near (measured once the data is loaded).
            replica: ReplicaSlot::default(),
            distance: Arc::new(CoreDistance::default()),
            observer,
            program,
        };
        Ok((builders, process))
    }

    /// One worker thread from start to end. Any failure is the supervisor's (the first one
    /// wins), and stops this worker's heartbeat.
    fn run(&self, worker: &mut Worker) -> WorkerResult {
        let sup = &self.supervisor;
        // Once installed, timely's logger records every operator's schedule and every message
        // (~1 µs a round per worker). Only a cluster needs it, to tell progress bytes from
        // data bytes on the network; one process has no network.
        let cluster = self.processes > 1;
        if cluster {
            self.wire.register_worker(worker);
        }
        let heartbeat = cluster
            .then(|| Heartbeat::start(worker, self.processes, self.peer_timeout, sup.clone()));
        let report = self.train(worker, heartbeat.as_ref());
        if let Some(h) = heartbeat {
            h.stop(worker);
        }
        report.inspect_err(|e| sup.fail(e.clone()))
    }

    /// The worker's steps: load and plan, build the loop, run it, report.
    fn train(&self, worker: &mut Worker, heartbeat: Option<&Heartbeat>) -> WorkerResult {
        let index = worker.index();
        let started = Instant::now();
        let (data, plan, features, mut notes) = self.plan(worker)?;
        let loaded = match &plan.live {
            Some(live) => format!(
                "data: {} as it arrives ({}, {} features), rounds of {} rows{}",
                live.origin.name(),
                live.format.lines.name(),
                plan.data_dim(),
                live.batch_rows,
                match data.test.rows() {
                    0 => String::new(),
                    _ => format!("; {}", row_shares(&data, index)),
                }
            ),
            None => format!(
                "data: read and prepared in {:.2} s ({})",
                started.elapsed().as_secs_f64(),
                row_shares(&data, index)
            ),
        };
        if data.ignored_test_features > 0 {
            notes.push(format!(
                "the test file has {} features beyond the training data's dimension {}; they \
                 have no weight and were ignored",
                data.ignored_test_features,
                plan.data_dim()
            ));
        }
        let training = self.training(index, &plan, data, &loaded)?;
        let handle = worker.dataflow::<(), _, _>(|scope| (self.program)(scope, training));
        self.drive(worker, heartbeat)?;
        let st = handle.state.borrow();
        let first = (index == 0).then(|| FirstWorker {
            output: std::mem::take(&mut *handle.output.borrow_mut()),
            // Without a replica the model is the shards' (the model file merges them).
            weights: st.model.shard.is_none().then(|| st.model.weights.to_vec()),
            plan: TrainPlan {
                loss: handle.loss.clone(),
                model: handle.model.clone(),
                ..plan
            },
            stopped: st.stopped.clone(),
        });
        Ok(WorkerReport {
            index: index as u32,
            traffic: st.model.traffic_total,
            digest: st.model.weights.read(replica_digest),
            shared: st.model.weights.is_shared(),
            first,
            notes,
            features,
            loaded,
            prepared: st.prepared_rows,
        })
    }

    /// The worker's rows and its plan: the warm start, the `"auto"` choice, the resumed round,
    /// the checkpoints and the cores' distance.
    fn plan(
        &self,
        worker: &mut Worker,
    ) -> Result<(WorkerData, TrainPlan, Features, Notes), String> {
        let (job, threads, index) = (&self.job, self.threads, worker.index());
        let (data, dim, features, notes) = job.load_on(worker)?;
        job.check_model_keys(dim)?;
        let mut plan = job.plan(dim, threads);
        if index % threads == 0 {
            check_memory(&plan, threads, self.processes)?;
        }
        if let Some(start) = &self.warm_start {
            let place = (index as u32, (threads * self.processes) as u32);
            plan.initial_weights = Some(start.weights_for(&plan, &features, place, &data.train)?);
        }
        if job.train.auto.any() {
            let choice = crate::auto::choose(worker, job, &data, &plan, &self.supervisor)?;
            if index == 0 {
                println!("{}", choice.report);
                crate::metrics::flush_stdout();
            }
            let initial = plan.initial_weights.take();
            plan = choice.job.plan(dim, threads);
            plan.initial_weights = initial;
            plan.choice = Some(choice.cost);
        }
        plan.start_round = self.resume.as_ref().map_or(0, |(_, r)| *r);
        plan.checkpoints = self.checkpoints.clone();
        if let Some(s) = plan.live.as_mut().and_then(|l| l.snapshots.as_mut()) {
            s.features.clone_from(&features); // a table stream's snapshots carry its map
        }
        if plan.replica_depends_on_distance(threads * self.processes) {
            let sup = &self.supervisor;
            plan.core_distance_ns =
                (self.distance)
                    .measure(index % threads, Duration::from_secs(5), || sup.is_failed());
        }
        Ok((data, plan, features, notes))
    }

    /// The worker's [`Training`]: its observer and output (worker 0), the program's inputs,
    /// the shared replica, and the state restored from a checkpoint.
    fn training(
        &self,
        index: usize,
        plan: &TrainPlan,
        data: WorkerData,
        loaded: &str,
    ) -> Result<Training, String> {
        let (job, peers) = (&self.job, self.threads * self.processes);
        let observer = if index == 0 {
            let program = job.data.format == crate::job::Format::Program;
            (self.observer)(plan, if program { "" } else { loaded })
        } else {
            Box::new(|_: &MetricsRow| {})
        };
        let (sup, wire) = (self.supervisor.clone(), Some(self.wire.clone()));
        let mut training = Training::new(plan, data, sup, wire, observer);
        if let Some(inputs) = job.program_inputs() {
            training.expect_rows(inputs);
        }
        training.place_model(&self.replica, index as u32, peers)?;
        if index == 0 && self.process == 0 {
            let csv = job.output.metrics.as_deref();
            let output = RowOutput::new(csv, self.keep_rows, Some(self.wire.clone()));
            training.set_output(output);
        }
        if let Some((dir, round)) = &self.resume {
            let state = training.state();
            let st = &mut *state.borrow_mut();
            let at = checkpoint::WorkerSlot {
                job: self.job_id,
                round: *round,
                worker: index as u32,
                workers: peers,
            };
            let carried = checkpoint::restore_worker(dir, at, st)?;
            // An online run reads its followed file on from where the checkpoint's rounds
            // had read it.
            let stream = carried.stream;
            st.carried = Some(carried);
            if let Some(live) = training.plan_mut().live.as_mut() {
                live.resume_at(stream)?;
            }
        }
        Ok(training)
    }

    /// Steps the worker until its dataflows are done, or until the run failed anywhere (its
    /// dataflows are then dropped).
    fn drive(&self, worker: &mut Worker, heartbeat: Option<&Heartbeat>) -> Result<(), String> {
        let running = |w: &Worker| match heartbeat {
            Some(h) => h.others_installed(w),
            None => w.has_dataflows(),
        };
        let sup = &self.supervisor;
        while running(worker) {
            if sup.is_failed() {
                for id in worker.installed_dataflows() {
                    worker.drop_dataflow(id);
                }
                return Err(sup.message().unwrap_or_else(|| "failed".into()));
            }
            worker.step_or_park(Some(Duration::from_millis(100)));
        }
        Ok(())
    }
}

/// The checkpoints a run writes or resumes from, with stale ones of earlier runs discarded.
/// The rows of the run, and each worker's share of the training rows (their range beyond 8
/// workers): `261908 training and 65354 test rows; training rows per worker 130954, 130954`.
/// Before the workers compared their rows (a program's), this worker's.
fn row_shares(data: &WorkerData, index: usize) -> String {
    let shares = &data.shares;
    if shares.len() < 2 {
        return format!(
            "{} training and {} test rows{}",
            data.train.rows(),
            data.test.rows(),
            if shares.is_empty() {
                format!(" on worker {index}")
            } else {
                String::new()
            }
        );
    }
    let (train, test) = shares.iter().fold((0, 0), |t, s| (t.0 + s.0, t.1 + s.1));
    let each: Vec<u64> = shares.iter().map(|s| s.0).collect();
    let per = match each.len() {
        2..=8 => each
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        _ => format!(
            "from {} to {}",
            each.iter().min().unwrap_or(&0),
            each.iter().max().unwrap_or(&0)
        ),
    };
    format!("{train} training and {test} test rows; training rows per worker {per}")
}

fn open_checkpoints(
    job: &Job,
    cluster: &ClusterSpec,
    job_id: [u8; 16],
    inputs: Vec<checkpoint::InputPrint>,
    resume: &Resume,
) -> Result<Option<Checkpoints>, String> {
    let threads = cluster.workers;
    let checkpoints = match (&job.train.checkpoint, resume) {
        (None, None) => return Ok(None),
        (spec, _) => Checkpoints::new(
            spec.clone(),
            job_id,
            inputs,
            cluster.process,
            threads,
            threads * cluster.processes,
        )?,
    };
    let resumed = resume.as_ref().map(|(dir, round)| (dir.as_path(), *round));
    if let Some(note) = checkpoints.discard_stale(resumed) {
        eprintln!("note: process {}: {note}", cluster.process);
    }
    if let Some((dir, round)) = resume {
        if cluster.process == 0 {
            let metrics = checkpoint::read_metrics(dir, &job_id, *round)?;
            checkpoints.set_restored_metrics(dir, metrics);
        }
        eprintln!(
            "note: process {}: resuming from round {round} of {}",
            cluster.process,
            dir.display()
        );
    }
    Ok(Some(checkpoints))
}

/// Refuses a model whose state would not fit this process's memory limit ([`crate::mem::limit`]),
/// with the figures, before anything model-sized is allocated: the kernel would otherwise end
/// the run halfway.
fn check_memory(plan: &TrainPlan, threads: usize, processes: usize) -> Result<(), String> {
    let Some((limit, source)) = crate::mem::limit() else {
        return Ok(());
    };
    let peers = (threads * processes) as u32;
    let (need, what) = plan.state_bytes(threads as u32, peers);
    if need <= limit {
        return Ok(());
    }
    let human = crate::metrics::human_bytes;
    let hint = match plan.state {
        StateMode::Sharded => "run more processes (each holds 1/W of the model), or raise the limit",
        StateMode::Replicated => {
            "set train.state = \"sharded\" and run more processes (each then holds 1/W of the model), or raise the limit"
        }
    };
    Err(format!(
        "the model's state needs {} here ({what}), more than {} allowed by {source}: {hint}",
        human(need),
        human(limit)
    ))
}

/// Waits for the worker threads on another thread, so that a failure anywhere in the process
/// (flagged by operators, or by the panic hook when a peer's connection breaks) ends the wait
/// promptly.
fn join_workers(
    guards: timely::communication::initialize::WorkerGuards<WorkerResult>,
    supervisor: &Supervisor,
) -> Result<Vec<Result<WorkerResult, String>>, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let results = guards.join();
        let _ = tx.send(results);
    });
    let mut failed_at: Option<Instant> = None;
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(results) => return Ok(results),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(supervisor
                    .message()
                    .unwrap_or_else(|| "worker threads ended without a result".into()));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if supervisor.is_failed() {
                    let t = *failed_at.get_or_insert_with(Instant::now);
                    if t.elapsed() > Duration::from_secs(3) {
                        return Err(supervisor.message().unwrap_or_else(|| "failed".into()));
                    }
                }
            }
        }
    }
}

/// The process's outcome from its workers' reports: traffic, replicas, worker 0's model and
/// metrics rows, the wire's totals.
fn gather_reports(
    results: Vec<Result<WorkerResult, String>>,
    supervisor: &Supervisor,
    wire: &WireCounters,
) -> Result<RunOutcome, String> {
    let mut outcome = RunOutcome::default();
    let mut output = None;
    let mut prepared: Option<(u64, u64)> = None;
    for r in results {
        let report = match r {
            Ok(Ok(report)) => report,
            Ok(Err(e)) => return Err(supervisor.message().unwrap_or(e)),
            Err(panic) => return Err(supervisor.message().unwrap_or(panic)),
        };
        if let Some((train, test)) = report.prepared {
            let total = prepared.get_or_insert((0, 0));
            (total.0, total.1) = (total.0 + train, total.1 + test);
        }
        outcome.traffic.add(&report.traffic);
        outcome.replica_digests.push((report.index, report.digest));
        outcome.shared_replica |= report.shared;
        if let Some(first) = report.first {
            output = Some(first.output);
            outcome.stopped = first.stopped;
            outcome.weights = first.weights;
            outcome.plan = Some(first.plan);
            outcome.notes = report.notes;
            outcome.features = report.features;
            outcome.loaded = report.loaded;
        }
    }
    if let Some(m) = supervisor.message() {
        return Err(m);
    }
    // The communication threads have ended with the guards: the wire counts are complete,
    // and so are the rows that waited for them.
    outcome.wire = wire.totals();
    if let Some(mut output) = output {
        outcome.rows = output.finish()?;
    }
    if let Some((train, test)) = prepared {
        outcome.loaded = format!(
            "data: prepared by the program's dataflow: {train} training and {test} test rows \
             in this process"
        );
    }
    Ok(outcome)
}

/// A warm start (`train.init_model`): the model file's header, read once per process, and
/// its weights: under replicated state every weight, read once and shared by the process's
/// workers; under `train.state = "sharded"` each worker reads only its own keys' and those its
/// first batch reaches ([`WarmStart::weights_for`]).
struct WarmStart {
    path: PathBuf,
    /// The model's header (no weights).
    model: ModelFile,
    /// The model's number of weights.
    dim: u32,
    max_dim: u32,
    /// Every weight (replicated state).
    all: Option<Arc<WarmWeights>>,
}

impl WarmStart {
    fn load(path: &Path, job: &Job) -> Result<Self, String> {
        let stream = ModelStream::open(path, job.data.max_dim)?;
        if let Some(note) = &stream.note {
            eprintln!("note: train.init_model: {note}");
        }
        let (model, dim) = (stream.header.clone(), stream.dim);
        let all = match job.train.state {
            StateMode::Replicated => {
                let mut all = crate::mem::try_zeroed_vec::<f32>(dim as usize)
                    .ok_or_else(|| format!("{}: {dim} weights do not fit", path.display()))?;
                for (k, w) in stream.weights_where(path, |_| true)? {
                    all[k as usize] = w;
                }
                Some(Arc::new(WarmWeights::All(all)))
            }
            StateMode::Sharded => None,
        };
        Ok(WarmStart {
            path: path.to_path_buf(),
            model,
            dim,
            max_dim: job.data.max_dim,
            all,
        })
    }

    /// The weights to start from, if the model fits `plan` and the job's feature map
    /// (`features`, of a CSV job): the same dimension, intercept, loss and features, so that
    /// every weight lands on the feature it was learnt for.
    /// Worker `me` (of `peers`, its training rows `train`) reads them under sharded state.
    fn weights_for(
        &self,
        plan: &TrainPlan,
        features: &Option<String>,
        (me, peers): (u32, u32),
        train: &crate::data::Dataset,
    ) -> Result<InitialWeights, String> {
        let (path, model) = (&self.path, &self.model);
        let mismatch = |what: String| {
            format!(
                "{}: train.init_model does not fit this job: {what}",
                path.display()
            )
        };
        if model.intercept.is_some() != plan.intercept.is_some() {
            let has = |k: Option<u32>| if k.is_some() { "has" } else { "has no" };
            return Err(mismatch(format!(
                "it {} intercept, the job {} (model.intercept)",
                has(model.intercept),
                has(plan.intercept)
            )));
        }
        let len = self.dim;
        if len != plan.dim {
            return Err(mismatch(format!(
                "it has {len} weights, the job's data makes a model of {}",
                plan.dim
            )));
        }
        if model.intercept != plan.intercept {
            return Err(mismatch(format!(
                "its intercept is key {:?}, the job's {:?}",
                model.intercept, plan.intercept
            )));
        }
        // The model and the loss are checked by the training loop, once the program has
        // chosen its own (InitialWeights::misfit).
        if &model.features != features {
            return Err(mismatch(
                "its feature map differs from the job's (another schema, vocabulary or hashing): \
                 its weights would land on other features"
                    .into(),
            ));
        }
        let weights = match &self.all {
            Some(all) => all.clone(),
            None => {
                let owners = Owners::new(plan.ownership, plan.dim, peers, plan.seed);
                let first = crate::dataflow::first_batch_features(train, plan, me);
                let (width, dense) = (plan.model.width(), plan.dense_keys());
                let stream = ModelStream::open(path, self.max_dim)?;
                let pairs = stream.weights_where(path, |k| {
                    owners.owner(k) == me
                        || dense.contains(&k)
                        || first.binary_search(&(k / width)).is_ok()
                })?;
                let dim = self.dim;
                Arc::new(WarmWeights::Owned { dim, pairs })
            }
        };
        Ok(InitialWeights {
            weights,
            from: path.display().to_string(),
            model: model.model.clone().unwrap_or_else(|| "linear".into()),
            loss: model.loss.clone(),
        })
    }
}

/// Runs a CSV job's table pipeline as this process of `cluster` and writes what it prepares
/// into `out`: `part-WWW.bin` per worker (the rows it read, [`crate::data::table::write_rows`])
/// and, from worker 0, `features.toml` (the feature map). Returns `(training rows, test rows)`
/// of this process.
pub fn prepare_job(
    job: &Job,
    cluster: &ClusterSpec,
    out: &std::path::Path,
) -> Result<(usize, usize), String> {
    use crate::data::table::{write_rows, PreparedRow};
    if !job.data.format.is_table() {
        return Err("data prepare: the job's data.format must be csv or parquet".into());
    }
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let wire = WireCounters::new();
    let (builders, _) = start_communication(job, &wire, cluster, &[])?;
    let (job, out) = (Arc::new(job.clone()), out.to_path_buf());
    let guards = timely::execute::execute_from(
        builders.0,
        builders.1,
        timely::WorkerConfig::default(),
        move |worker| -> Result<(usize, usize), String> {
            let p = crate::data::table::prepare(worker, &job.table_input())?;
            let mut rows = Vec::with_capacity(p.train.rows() + p.test.rows());
            for (data, ids, test) in [
                (&p.train, &p.train_ids, false),
                (&p.test, &p.test_ids, true),
            ] {
                for (i, &id) in ids.iter().enumerate() {
                    let (k, v) = data.row(i);
                    rows.push(PreparedRow {
                        id,
                        test,
                        label: data.labels[i],
                        keys: k.to_vec(),
                        values: v.to_vec(),
                    });
                }
            }
            rows.sort_by_key(|r| r.id);
            let path = out.join(format!("part-{:03}.bin", worker.index()));
            write_rows(&path, p.map.dim, &rows).map_err(|e| format!("{}: {e}", path.display()))?;
            if worker.index() == 0 {
                let map = toml::to_string(&p.map).map_err(|e| format!("feature map: {e}"))?;
                let path = out.join("features.toml");
                crate::atomic::write(&path, map).map_err(|e| format!("{}: {e}", path.display()))?;
            }
            Ok((p.train.rows(), p.test.rows()))
        },
    )?;
    let mut total = (0, 0);
    for r in guards.join() {
        let (a, b) = r.map_err(|e| e.to_string())??;
        total = (total.0 + a, total.1 + b);
    }
    Ok(total)
}

/// Before training: every output file of the job can be written (its directory is created and
/// a temporary file made beside it), so that a bad path is found before the run, not after.
fn check_outputs(job: &Job) -> Result<(), String> {
    let out = &job.output;
    let files = [
        ("output.model", &out.model),
        ("output.metrics", &out.metrics),
    ];
    for (field, path) in files {
        let Some(path) = path else { continue };
        let cannot =
            |e: std::io::Error| format!("{field}: {}: cannot be written: {e}", path.display());
        crate::atomic::create_parent(path).map_err(cannot)?;
        drop(crate::atomic::AtomicFile::create(path).map_err(cannot)?);
        let inputs = job.input_files().chain(&job.train.init_model);
        crate::atomic::refuse_inputs(field, path, inputs.map(|p| p.as_path()))?;
    }
    if let Some(dir) = &out.gradients {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("output.gradients: {}: {e}", dir.display()))?;
    }
    Ok(())
}

type Builders = (Vec<AllocatorBuilder>, Box<dyn std::any::Any + Send>);

/// Where a resumed run starts: the checkpoint directory and round.
type Resume = Option<(PathBuf, u64)>;

/// Builds the communication layer. A cluster's processes connect to each other through
/// gradflow's authenticated handshake ([`crate::handshake`]), which must complete within the
/// start-up timeout, and timely takes the connected sockets.
fn start_communication(
    job: &Job,
    wire: &WireCounters,
    cluster: &ClusterSpec,
    inputs: &[checkpoint::InputPrint],
) -> Result<(Builders, Resume), String> {
    let hooks = wire.hooks();
    let id = job.cluster_id();
    let mut passed_over: Option<String> = None;
    let mine = match &cluster.resume {
        Some(dir) => {
            let (process, threads) = (cluster.process, cluster.workers);
            let workers = threads * cluster.processes;
            let (rounds, notes) =
                checkpoint::resumable_rounds(dir, id, process, threads, workers, Some(inputs))?;
            for note in &notes {
                eprintln!("note: process {process}: {note}");
            }
            passed_over = notes.last().cloned();
            Some(rounds)
        }
        None => None,
    };
    let resume = |round: Option<u64>| -> Result<Resume, String> {
        match (&cluster.resume, round) {
            (Some(dir), Some(r)) => Ok(Some((dir.clone(), r))),
            (Some(dir), None) => Err(format!(
                "--resume {}: no complete checkpoint of this job for process {}{}",
                dir.display(),
                cluster.process,
                match &passed_over {
                    Some(why) => format!(" (the last passed over: {why})"),
                    None => String::new(),
                }
            )),
            _ => Ok(None),
        }
    };
    if cluster.processes == 1 {
        let round = mine.as_ref().and_then(|m| m.last().copied());
        return Ok((cluster.config()?.try_build_with(hooks)?, resume(round)?));
    }
    cluster.check()?;
    if cluster.secret.is_none() {
        eprintln!(
            "note: process {}: no cluster secret (--cluster-secret or {SECRET_VARIABLE}): \
             processes check each other's job and index, not a secret",
            cluster.process
        );
    }
    let credentials = Credentials::new(identity(job, cluster, inputs), cluster.secret.as_deref())
        .in_run(&cluster.run);
    let addresses = cluster.addresses()?;
    let mut sockets = handshake::connect(
        &addresses,
        cluster.process,
        &credentials,
        cluster.startup_timeout,
    )?;
    let round = checkpoint::agree(
        &mut sockets,
        &addresses,
        mine.as_deref(),
        cluster.startup_timeout,
    )?;
    let resume = resume(round)?;
    let threads = cluster.workers;
    let local =
        ProcessBuilder::new_typed_vector(threads, hooks.refill.clone(), hooks.spill.clone());
    let (builders, guard) =
        initialize_networking_from_sockets(local, sockets, cluster.process, threads, hooks)
            .map_err(|e| format!("cannot start timely's network threads: {e}"))?;
    let builders = builders.into_iter().map(AllocatorBuilder::Tcp).collect();
    Ok(((builders, Box::new(guard)), resume))
}

/// What this process must share with every other of the cluster: the counts, the release,
/// every job field (overrides and seed included) and every input file's size and digest.
fn identity(job: &Job, cluster: &ClusterSpec, inputs: &[checkpoint::InputPrint]) -> Identity {
    let mut id = Identity::default()
        .public("-n (processes)", cluster.processes.to_string())
        .public("-w (threads per process)", cluster.workers.to_string())
        .public("gradflow", env!("CARGO_PKG_VERSION"));
    for (name, value) in job.cluster_fields() {
        id = id.field(name, value);
    }
    for input in inputs {
        let value = format!("{} bytes, xxh3 {}", input.bytes, input.xxh3);
        id = id.field(format!("input {}", input.file), value);
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The data line gives the run's rows and each worker's share once the workers compared
    /// them, their range beyond 8 workers, and a worker's own rows before.
    #[test]
    fn the_data_line_gives_totals_and_each_workers_share() {
        let mut data = WorkerData::empty(4);
        assert_eq!(
            row_shares(&data, 3),
            "0 training and 0 test rows on worker 3"
        );
        data.shares = vec![(10, 2)];
        assert_eq!(row_shares(&data, 0), "0 training and 0 test rows");
        data.shares = vec![(10, 2), (7, 3)];
        assert_eq!(
            row_shares(&data, 0),
            "17 training and 5 test rows; training rows per worker 10, 7"
        );
        data.shares = (1..=9).map(|w| (w * 10, 1)).collect();
        assert_eq!(
            row_shares(&data, 0),
            "450 training and 9 test rows; training rows per worker from 10 to 90"
        );
    }

    fn from_file(text: &str, processes: usize) -> Result<Vec<String>, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(&path, text).unwrap();
        let spec = ClusterSpec {
            processes,
            hostfile: Some(path.clone()),
            ..Default::default()
        };
        let place = format!("{}:", path.display());
        spec.addresses().map_err(|e| e.replace(&place, "hosts:"))
    }

    /// A hostfile's entries in process order (comments, blank lines and extra lines skipped),
    /// and each malformed or repeated address an error naming its line.
    #[test]
    fn hostfile_addresses_are_checked_and_name_their_line() {
        let text = "# cluster\n\n  10.0.0.1:2101  \n[::1]:7000 10.0.0.2:7000\nnot an address\n";
        let want = ["10.0.0.1:2101", "[::1]:7000 10.0.0.2:7000"];
        assert_eq!(from_file(text, 2).unwrap(), want);
        for (text, error) in [
            ("a:1\nb:99999\n", "hosts:2: `b:99999` is not host:port"),
            ("a:1\n\nb\n", "hosts:3: `b` is not host:port"),
            ("a:1\n:2\n", "hosts:2: `:2` is not host:port"),
            ("a:1\nb:0\n", "hosts:2: `b:0` is not host:port"),
            ("a:1\nb:x\n", "hosts:2: `b:x` is not host:port"),
            (
                "a:1\nb:2 a:1\n",
                "hosts:2: `a:1` is given to two processes (also at hosts:1)",
            ),
        ] {
            let e = from_file(text, 2).unwrap_err();
            assert!(e.starts_with(error), "{text:?}: {e}");
        }
        assert!(from_file("a:1\n", 2)
            .unwrap_err()
            .contains("has 1 addresses"));
    }

    /// `--hosts` entries are checked as the hostfile's are, by position.
    #[test]
    fn listed_hosts_are_checked_by_position() {
        let spec = |hosts: &[&str]| ClusterSpec {
            processes: hosts.len(),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            ..Default::default()
        };
        assert_eq!(spec(&["a:1", "b:2"]).addresses().unwrap(), ["a:1", "b:2"]);
        let e = spec(&["a:1", ""]).addresses().unwrap_err();
        assert_eq!(e, "--hosts, address 2: an empty address");
        let e = spec(&["a:1", "a:1"]).addresses().unwrap_err();
        assert!(
            e.contains("given to two processes (also at --hosts, address 1)"),
            "{e}"
        );
        let local = ClusterSpec {
            processes: 2,
            ..Default::default()
        };
        assert_eq!(
            local.addresses().unwrap(),
            ["localhost:2101", "localhost:2102"]
        );
    }
}
