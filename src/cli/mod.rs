//! Command-line interface (clap). Thin: parses arguments, calls the library, prints.
//!
//! In the library so that a job program gets the whole command line with its own training loop:
//! `fn main() -> ExitCode { gradflow::cli::main_with(my_program) }` (see `jobs/`).

mod bench;
mod cluster;
mod flags;
mod netns;
mod predict;

use flags::{codec_table, DataFlags, Overrides};
use predict::{predict, PredictArgs};

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

use crate::codec::measure::{measure_codec, measure_keys, read_gradient, synth_gradient};
use crate::codec::{CodecSpec, CODECS};
use crate::data::write_libsvm;
use crate::dataflow::Supervisor;
use crate::job::{Job, SynthKind, SynthSection};
use crate::metrics::{epoch_line, human_bytes, MetricsRow, Progressive, SilentCodec};
use crate::model::file::ModelFile;
use crate::model::SparseGrad;
use crate::runtime::{run_program, standard, ClusterSpec, ObserverFactory, Program};
use serde::Deserialize;

/// Data-parallel SGD on timely dataflow with pluggable, measured gradient exchange.
#[derive(Parser, Debug)]
#[command(
    name = "gradflow",
    version,
    about,
    after_help = "Examples:
  gradflow train jobs/quickstart.toml -w 2              train on the embedded dataset, 2 threads
  gradflow cluster jobs/quickstart.toml -n 2            the same job as 2 processes over TCP
  gradflow bench bench/quick.toml                       a benchmark suite, with its report
  gradflow codec compare --synth 1000000,100000         every codec on one gradient

The user guide is in docs/: docs/jobs.md has every job field, docs/results.md what was measured."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Train a job: in this process's threads, or as one process of a TCP cluster.
    #[command(after_help = "Examples:
  gradflow train jobs/quickstart.toml -w 2 --metrics out/m.csv
  gradflow train jobs/ctr.toml --set 'train.exchange=\"allgather\"' --set optimizer.lr=0.05
  gradflow train job.toml -n 2 -p 0 --hostfile hosts     (and -p 1 on the second machine)")]
    Train(TrainArgs),
    /// Start N local processes of a job on loopback and wait for all of them.
    #[command(after_help = "Example:
  gradflow cluster jobs/quickstart.toml -n 2 -w 1")]
    Cluster(ClusterArgs),
    /// Start a job's processes on their hosts over ssh, from this machine, and wait for all
    /// of them: their output prefixed with index and host, one failure stops all, Ctrl-C
    /// stops all. The binary, the job file and this directory must be at the same paths on
    /// every host (a shared filesystem; checked first).
    #[command(after_help = "Examples:
  gradflow launch jobs/quickstart.toml --hosts node1:2,node2:2
  gradflow launch jobs/quickstart.toml --hostfile hosts --ssh 'ssh -p 2222' --restarts 3")]
    Launch(LaunchArgs),
    /// Run a benchmark suite: every cell (codec x exchange x processes x link x model) as a real
    /// cluster, over emulated links when root; writes results.csv and summary.md.
    #[command(after_help = "Examples:
  gradflow bench bench/quick.toml                                  2 cells on loopback
  gradflow bench bench/bandwidth.toml --dry-run                    list the cells, check their jobs
  gradflow bench bench/bandwidth.toml --only '*100mbit*/allgather/*' --out out/bw")]
    Bench(bench::BenchArgs),
    /// Score a saved model on a LibSVM file or a raw CSV table (through its feature map) and write
    /// its predictions.
    #[command(after_help = "Examples:
  gradflow predict out/quickstart-model.txt flights.csv --id tailnum --format csv -o p.csv
  gradflow predict model.txt test.svm > predictions.txt     (the summary goes to stderr)")]
    Predict(PredictArgs),
    /// Dataset utilities: generate a LibSVM set, or prepare a CSV job's rows once.
    #[command(
        subcommand,
        after_help = "Examples:
  gradflow data synth --kind ctr --rows 600000 --dim 100000 --nnz 15 --out train.svm
  gradflow data synth --kind fields --rows 200000 -o fields.svm
  gradflow data synth --kind pairs --rows 100000 --dim 10000 --nnz 10 -o pairs.svm
  gradflow data prepare jobs/quickstart.toml --out out/prepared -w 2"
    )]
    Data(DataCommand),
    /// Measure gradient codecs and key coders on one gradient.
    #[command(
        subcommand,
        after_help = "Examples:
  gradflow codec compare --synth 1000000,100000                    every codec, a table
  gradflow codec compare --synth 100000,10000 --codecs sketchml,topk:ratio=0.01 --csv
  gradflow codec keys --synth 29000000,1000000"
    )]
    Codec(CodecCommand),
}

#[derive(Subcommand, Debug)]
enum CodecCommand {
    /// Size, speed and error of each codec (median times over --repeats runs after a warm-up).
    #[command(after_help = "Examples:
  gradflow codec compare --synth 1000000,100000 --codecs topk:ratio=0.01,keys=raw,fastsgd
  gradflow train jobs/ctr.toml --dump-gradients out/g && \\
    gradflow codec compare --input out/g/round00010-worker0.bin --dim 100001
  (--dim is the model's: jobs/ctr.toml's 100,000 features and the intercept)")]
    Compare(CompareArgs),
    /// Size and speed of each key coder against the entropy bound log2(C(D, d)) / d.
    #[command(after_help = "Example:
  gradflow codec keys --synth 29000000,1000000 --csv")]
    Keys(GradientSource),
}

/// Where the gradient comes from.
#[derive(Args, Debug)]
struct GradientSource {
    /// Gradient file: little-endian u64 count, count u32 keys (strictly increasing), count f32 values.
    #[arg(long, requires = "dim", conflicts_with = "synth")]
    input: Option<PathBuf>,
    /// Dimension of --input.
    #[arg(long)]
    dim: Option<u32>,
    /// Generate one instead: D,d[,seed] (d uniform keys of D, Laplace(0, 0.01) values).
    #[arg(long, value_name = "D,d[,seed]")]
    synth: Option<String>,
    /// Timed runs per measurement.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Print CSV (for machines) instead of an aligned table (for people).
    #[arg(long)]
    csv: bool,
}

#[derive(Args, Debug)]
struct CompareArgs {
    #[command(flatten)]
    source: GradientSource,
    /// Codecs to measure (default: all), comma-separated, each with optional parameters:
    /// `topk:ratio=0.01,keys=rice,fastsgd`.
    #[arg(long, value_delimiter = ',')]
    codecs: Vec<String>,
}

#[derive(Args, Debug)]
struct TrainArgs {
    /// The job file (TOML). Without one, the flags below set the job's fields on top of the
    /// defaults (which train on a generated CTR-like set).
    job: Option<PathBuf>,
    #[command(flatten)]
    place: ProcessArgs,
    /// No per-epoch output.
    #[arg(short, long)]
    quiet: bool,
    /// Print the whole job (the file with the flags applied, every field) as TOML and exit
    /// without training: keep it as a job file.
    #[arg(long)]
    print_job: bool,
    /// Continue from the latest checkpoint in DIR (train.checkpoint) that every process has
    /// complete; the job file and overrides must be those that wrote it.
    #[arg(long, value_name = "DIR")]
    resume: Option<PathBuf>,
    #[command(flatten)]
    overrides: Overrides,
}

/// The most worker threads a process runs: timely's workers spin while they wait, so many more
/// threads than cores are many times slower, never faster.
const MAX_THREADS: u64 = 256;
/// The most processes in a cluster (each connects to every other).
const MAX_PROCESSES: u64 = 4096;
/// The longest timeout, in seconds: a week.
const MAX_TIMEOUT_S: u64 = 7 * 24 * 3600;

/// A whole number from `LO` to `HI`, checked where the flag is parsed.
fn count<const LO: u64, const HI: u64>(s: &str) -> Result<usize, String> {
    let n: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{}` is not a whole number", crate::data::clip(s)))?;
    match (LO..=HI).contains(&n) {
        true => Ok(n as usize),
        false => Err(format!("{n} is out of range: {LO} to {HI}")),
    }
}

/// A timeout in seconds, from 1 to [`MAX_TIMEOUT_S`].
fn seconds(s: &str) -> Result<u64, String> {
    count::<1, MAX_TIMEOUT_S>(s).map(|n| n as u64)
}

/// Where a process sits in a cluster (`train`, `data prepare`).
#[derive(Args, Debug)]
struct ProcessArgs {
    /// Worker threads per process (1 to 256).
    #[arg(short = 'w', long = "workers", default_value_t = 1, value_parser = count::<1, MAX_THREADS>)]
    workers: usize,
    /// Number of processes in the cluster (1 to 4096; default: the scheduler's, see
    /// docs/clusters.md, or 1).
    #[arg(short = 'n', long, value_parser = count::<1, MAX_PROCESSES>)]
    processes: Option<usize>,
    /// This process's index in the cluster (default: the scheduler's: Slurm, Open MPI, PMI,
    /// torchrun-style RANK/WORLD_SIZE, a Kubernetes Indexed Job; or 0).
    #[arg(short = 'p', long, value_parser = count::<0, { MAX_PROCESSES - 1 }>)]
    process: Option<usize>,
    /// File with one host:port per line, one line per process (default: localhost:2101+i).
    #[arg(long, conflicts_with = "hosts")]
    hostfile: Option<PathBuf>,
    /// The processes' host:port addresses, comma-separated, instead of a hostfile.
    #[arg(long, value_delimiter = ',')]
    hosts: Vec<String>,
    /// Seconds to wait for every process to connect (1 to 604800, a week).
    #[arg(long, default_value_t = 60, value_parser = seconds)]
    startup_timeout: u64,
    /// Seconds another process may make no progress (send no heartbeat) before this one stops
    /// with an error naming it (1 to 604800).
    #[arg(long, default_value_t = 60, value_parser = seconds)]
    peer_timeout: u64,
    /// The secret every process proves it knows when the processes connect (HMAC-SHA256
    /// handshake); a stray or wrong client is refused. Prefer the environment variable: a
    /// command line is visible to other users. `gradflow cluster` generates one.
    #[arg(long, env = "GRADFLOW_CLUSTER_SECRET", hide_env_values = true)]
    cluster_secret: Option<String>,
    /// This attempt's run identity, which every process must state to join: a process left
    /// from an earlier attempt, or another job on the same ports, is refused (default: the
    /// scheduler's job and restart count; `cluster` and `launch` pass a fresh one).
    #[arg(long, env = "GRADFLOW_RUN_ID")]
    run_id: Option<String>,
}

impl ProcessArgs {
    /// The process's place: the flags, or where neither `-p` nor `-n` is given, the
    /// scheduler's environment ([`crate::placement`]), with a line saying which.
    fn spec(&self) -> Result<(ClusterSpec, Option<String>), String> {
        let (mut spec, note) = self.place()?;
        let var = |n: &str| std::env::var(n).ok();
        let scheduled = crate::placement::run_identity(&var);
        let note = match (&self.run_id, scheduled) {
            (Some(run), _) => {
                spec.run = run.clone();
                note
            }
            (None, Some((run, from))) if spec.processes > 1 => {
                let said = format!("cluster: run `{}`, from {from}", crate::data::clip(&run));
                spec.run = run;
                Some(match note {
                    Some(n) => format!("{n}\n{said}"),
                    None => said,
                })
            }
            (None, _) => note,
        };
        Ok((spec, note))
    }

    /// The process's index, count and addresses, with a line saying where they came from
    /// when not from `-p`.
    fn place(&self) -> Result<(ClusterSpec, Option<String>), String> {
        let mut spec = self.flags_spec();
        if self.process.is_some() {
            return Ok((spec, None));
        }
        let found = match self.processes {
            Some(_) => None,
            None => crate::placement::from_environment(&|n| std::env::var(n).ok())?,
        };
        let Some(place) = found else {
            return own_entry(spec, self.processes);
        };
        if place.processes as u64 > MAX_PROCESSES {
            return Err(format!(
                "{}: more than {MAX_PROCESSES} processes",
                place.source
            ));
        }
        (spec.process, spec.processes) = (place.process, place.processes);
        let flagged = !spec.hosts.is_empty() || spec.hostfile.is_some();
        match place.hosts {
            Some(hosts) if !flagged => spec.hosts = hosts,
            None if !flagged && place.processes > 1 && !place.one_machine => {
                return Err(format!(
                    "{}: names no peer addresses, and the processes are not all on this \
                     machine: pass --hostfile or --hosts (docs/clusters.md)",
                    place.source
                ))
            }
            _ => {}
        }
        let note = format!(
            "cluster: process {} of {}, from {}",
            place.process, place.processes, place.source
        );
        Ok((spec, Some(note)))
    }

    /// The place the flags give.
    fn flags_spec(&self) -> ClusterSpec {
        ClusterSpec {
            workers: self.workers,
            processes: self.processes.unwrap_or(1),
            process: self.process.unwrap_or(0),
            hostfile: self.hostfile.clone(),
            hosts: self.hosts.clone(),
            startup_timeout: Duration::from_secs(self.startup_timeout),
            peer_timeout: Duration::from_secs(self.peer_timeout),
            secret: self.cluster_secret.clone().filter(|s| !s.is_empty()),
            run: self.run_id.clone().unwrap_or_default(),
            resume: None,
            // The metrics CSV is written as rows are final; nothing needs them in memory.
            keep_rows: false,
        }
    }
}

/// `spec` placed by the one entry of its `--hosts` or hostfile that names this machine, when
/// there are entries and no `-p`; its `-n`, or else the number of entries, is the count.
fn own_entry(
    mut spec: ClusterSpec,
    processes: Option<usize>,
) -> Result<(ClusterSpec, Option<String>), String> {
    let Some(listed) = spec.listed()? else {
        return Ok((spec, None));
    };
    let n = processes.unwrap_or(listed.len());
    if n <= 1 || n > listed.len() {
        return Ok((spec, None));
    }
    let entries: Vec<String> = listed[..n].iter().map(|(_, e)| e.clone()).collect();
    let place = |i: usize| listed[i].0.clone();
    let i = crate::placement::own_entry(&entries, &place, &mut crate::placement::is_local_host)?;
    (spec.process, spec.processes) = (i, n);
    let note = format!(
        "cluster: process {i} of {n}, from {} (`{}`), the address that is this machine's",
        listed[i].0, entries[i]
    );
    Ok((spec, Some(note)))
}

#[derive(Args, Debug)]
struct ClusterArgs {
    /// The job file (TOML); without one, the flags set the job's fields (as for `train`).
    job: Option<PathBuf>,
    /// Number of local processes (1 to 4096).
    #[arg(short = 'n', long, value_parser = count::<1, MAX_PROCESSES>)]
    processes: usize,
    #[command(flatten)]
    run: LauncherArgs,
}

#[derive(Args, Debug)]
struct LaunchArgs {
    /// The job file (TOML); without one, the flags set the job's fields.
    job: Option<PathBuf>,
    /// Hosts and their processes: `a:2,b:2` (a host without `:N` runs one).
    #[arg(long, value_delimiter = ',', required_unless_present = "hostfile")]
    hosts: Vec<String>,
    /// A hostfile of `host slots=N` lines (Open MPI's, Horovod's and DeepSpeed's format).
    #[arg(long, conflicts_with = "hosts")]
    hostfile: Option<PathBuf>,
    /// The port a host's first process listens on; its next ones take the following ports.
    #[arg(long, default_value_t = 2101)]
    port: u16,
    /// The ssh command (the host and the remote command follow it).
    #[arg(long, default_value = "ssh -o BatchMode=yes")]
    ssh: String,
    #[command(flatten)]
    run: LauncherArgs,
}

/// What `cluster` and `launch` pass every process, and their restarts.
#[derive(Args, Debug)]
struct LauncherArgs {
    /// Worker threads per process (1 to 256).
    #[arg(short = 'w', long = "workers", default_value_t = 1, value_parser = count::<1, MAX_THREADS>)]
    workers: usize,
    /// Seconds to wait for every process to connect (1 to 604800, a week).
    #[arg(long, default_value_t = 60, value_parser = seconds)]
    startup_timeout: u64,
    /// Seconds a process may make no progress before the others stop naming it (1 to 604800).
    #[arg(long, default_value_t = 60, value_parser = seconds)]
    peer_timeout: u64,
    /// No per-epoch output from the processes.
    #[arg(short, long)]
    quiet: bool,
    /// Every process continues from the latest checkpoint in DIR (see `train --resume`).
    #[arg(long, value_name = "DIR")]
    resume: Option<PathBuf>,
    /// When a process fails, stop every process and start them all again from the last
    /// checkpoint every process completed (train.checkpoint), up to N times (0 to 100).
    #[arg(long, default_value_t = 0, value_name = "N", value_parser = count::<0, 100>)]
    restarts: usize,
    #[command(flatten)]
    overrides: Overrides,
}

#[derive(Subcommand, Debug)]
enum DataCommand {
    /// Write a deterministic synthetic dataset in LibSVM format.
    #[command(after_help = "Example:
  gradflow data synth --rows 600000 --dim 100000 --nnz 15 --out train.svm")]
    Synth(SynthArgs),
    /// Run a CSV job's table pipeline (on the job's workers and processes) and write its
    /// feature map (features.toml) and each worker's prepared rows (part-WWW.bin) to --out.
    #[command(after_help = "Example:
  gradflow data prepare jobs/quickstart.toml --out out/prepared -w 2")]
    Prepare(Box<PrepareArgs>),
}

#[derive(Args, Debug)]
struct PrepareArgs {
    /// The job file (TOML) of a CSV table; without one, the data flags describe the table.
    job: Option<PathBuf>,
    /// Output directory.
    #[arg(long, short)]
    out: PathBuf,
    #[command(flatten)]
    place: ProcessArgs,
    #[command(flatten)]
    data: DataFlags,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum SynthKindArg {
    /// CTR-like: Zipf feature popularity, binary features, logistic labels.
    Ctr,
    /// The GSpar paper's synthetic logistic data (§4).
    Gspar,
    /// A real CTR table's structure: one value of each of 14 categorical fields plus two
    /// hashed crosses (105,060 features, 16 a row; --dim and --nnz do not apply).
    Fields,
    /// Planted pairwise interactions: --nnz fields of --dim/--nnz values, one value of each a
    /// row; a hidden factorization machine's pairwise term decides most labels.
    Pairs,
}

#[derive(Args, Debug)]
struct SynthArgs {
    /// Generator.
    #[arg(long, value_enum, default_value_t = SynthKindArg::Ctr)]
    kind: SynthKindArg,
    /// Rows.
    #[arg(long, default_value_t = 40_000)]
    rows: usize,
    /// Features.
    #[arg(long, default_value_t = 100_000)]
    dim: u32,
    /// Mean active features per row (ctr); fields (pairs).
    #[arg(long, default_value_t = 40)]
    nnz: usize,
    /// Shrink factor C1 for small magnitudes (gspar).
    #[arg(long, default_value_t = 0.01)]
    c1: f64,
    /// Threshold C2 below which magnitudes are shrunk (gspar).
    #[arg(long, default_value_t = 0.9)]
    c2: f64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output file.
    #[arg(long, short)]
    out: PathBuf,
}

/// The exit status of a `train` process that stopped because its connection to another
/// process broke (that process failed or died first); 1 is every other error. The `cluster`
/// launcher blames a process with another status before one with this.
pub const EXIT_LOST_PEER: i32 = 3;

/// The `gradflow` command: the command line with the standard training loop.
pub fn main() -> std::process::ExitCode {
    main_with(standard())
}

/// The `gradflow` command line with `program` as the training loop of `train`, and of the
/// processes `cluster` and `bench` start (they run this same executable): a job program gets
/// every command and option, clusters, supervision, metrics and model output included.
pub fn main_with(program: Program) -> std::process::ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away
    // (`gradflow ... | head`) instead of panicking on the failed write.
    // SAFETY: restoring the default action of a signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let matches = with_part_names(<Cli as clap::CommandFactory>::command()).get_matches();
    let cli =
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match run(cli, program) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            // As a shell reports a command ended by Ctrl-C.
            match cluster::interrupted() {
                true => std::process::ExitCode::from(130),
                false => std::process::ExitCode::FAILURE,
            }
        }
    }
}

/// The command line with every name `--exchange`, `--compressor` and `--model` take in their
/// help: the built-in parts and those this program registered.
fn with_part_names(cli: clap::Command) -> clap::Command {
    let names = |r: Vec<&str>| r.join(", ");
    let (exchanges, codecs, models) = (
        names(crate::exchange::EXCHANGES.names()),
        names(CODECS.names()),
        names(crate::model::MODELS.names()),
    );
    let listed = |sub: clap::Command| {
        sub.mut_arg("exchange", |a| {
            a.help(format!(
                "The gradient exchange (train.exchange): {exchanges} or auto"
            ))
        })
        .mut_arg("compressor", |a| {
            a.help(format!(
                "The gradient codec (train.compressor): NAME or NAME:param=value,... (as in \
                 `codec compare`), NAME one of {codecs}; auto chooses by measuring"
            ))
        })
        .mut_arg("model", |a| {
            a.help(format!(
                "The model (model.kind): {models} (fm with --factors, mlp with --hidden)"
            ))
        })
    };
    cli.mut_subcommand("train", listed)
        .mut_subcommand("cluster", listed)
}

/// Runs a parsed command line, training with `program`.
pub fn run(cli: Cli, program: Program) -> Result<(), String> {
    match cli.command {
        Command::Train(a) => train(a, program),
        Command::Cluster(a) => cluster_command(a),
        Command::Launch(a) => launch_command(a),
        Command::Bench(a) => bench::run(a),
        Command::Predict(a) => predict(a),
        Command::Data(DataCommand::Synth(a)) => data_synth(a),
        Command::Data(DataCommand::Prepare(a)) => data_prepare(*a),
        Command::Codec(CodecCommand::Compare(a)) => codec_compare(a),
        Command::Codec(CodecCommand::Keys(a)) => codec_keys(a),
    }
}

/// `gradflow cluster`: the processes, started again from the last complete checkpoint after a
/// failure, up to `--restarts` times.
fn cluster_command(a: ClusterArgs) -> Result<(), String> {
    let restarts = Restarts {
        job: a.job.as_deref(),
        run: &a.run,
        processes: a.processes,
    };
    restarts.run(|args| {
        cluster::run(
            a.job.as_deref(),
            a.processes,
            a.run.workers,
            a.run.startup_timeout,
            args,
        )
    })
}

/// `gradflow launch`: the processes on their hosts over ssh, with the same restarts.
fn launch_command(a: LaunchArgs) -> Result<(), String> {
    let slots = match &a.hostfile {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            hostfile_slots(&text).map_err(|e| format!("{}:{e}", path.display()))?
        }
        None => host_slots(&a.hosts)?,
    };
    // Process `i`'s host and address: each host's processes listen on --port and up.
    let mut hosts = Vec::new();
    let mut addresses = Vec::new();
    for (host, n) in &slots {
        for slot in 0..*n {
            let port = a.port as usize + slot;
            if port > u16::MAX as usize {
                return Err(format!(
                    "--port {}: {n} processes on {host} need ports beyond 65535",
                    a.port
                ));
            }
            hosts.push(host.clone());
            addresses.push(format!("{host}:{port}"));
        }
    }
    if hosts.len() as u64 > MAX_PROCESSES {
        return Err(format!(
            "{} processes: at most {MAX_PROCESSES}",
            hosts.len()
        ));
    }
    let absolute =
        |p: &std::path::Path| std::path::absolute(p).map_err(|e| format!("{}: {e}", p.display()));
    let job = a.job.as_deref().map(absolute).transpose()?;
    let remote = cluster::Remote {
        ssh: a.ssh.split_whitespace().map(String::from).collect(),
        hosts,
        dir: absolute(std::path::Path::new("."))?,
    };
    if remote.ssh.is_empty() {
        return Err("--ssh: an empty command".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
    remote.check(&exe, job.as_deref())?;
    let processes = addresses.len();
    eprintln!(
        "launch: {processes} processes on {} host(s) over `{}`",
        slots.len(),
        a.ssh
    );
    let restarts = Restarts {
        job: a.job.as_deref(),
        run: &a.run,
        processes,
    };
    restarts.run(|args| {
        cluster::launch(&cluster::Launch {
            startup_timeout: a.run.startup_timeout,
            hosts: Some(addresses.clone()),
            remote: Some(&remote),
            ..cluster::Launch::local(job.as_deref(), processes, a.run.workers, args)
        })
    })
}

/// `a:2,b:2` (a host without `:N` runs one process).
fn host_slots(list: &[String]) -> Result<Vec<(String, usize)>, String> {
    list.iter()
        .map(|h| {
            let (host, n) = h.trim().rsplit_once(':').unwrap_or((h.trim(), "1"));
            let n = count::<1, MAX_THREADS>(n).map_err(|e| format!("--hosts `{h}`: {e}"))?;
            match host.is_empty() {
                true => Err(format!("--hosts `{h}`: no host")),
                false => Ok((host.to_string(), n)),
            }
        })
        .collect()
}

/// A hostfile of `host slots=N` lines (Open MPI's, Horovod's, DeepSpeed's; `slots` defaults
/// to 1; `#` comments and blank lines skipped); errors are `line: message`.
fn hostfile_slots(text: &str) -> Result<Vec<(String, usize)>, String> {
    let mut slots = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace();
        let Some(host) = words.next() else { continue };
        let mut n = 1;
        for word in words {
            let value = word
                .strip_prefix("slots=")
                .ok_or(format!("{}: `{word}` is not slots=N", i + 1))?;
            n = count::<1, MAX_THREADS>(value).map_err(|e| format!("{}: slots: {e}", i + 1))?;
        }
        slots.push((host.to_string(), n));
    }
    match slots.is_empty() {
        true => Err("0: no host".into()),
        false => Ok(slots),
    }
}

/// What a restarting launcher needs: the job (for its checkpoints) and the arguments every
/// attempt passes its processes.
struct Restarts<'a> {
    job: Option<&'a std::path::Path>,
    run: &'a LauncherArgs,
    processes: usize,
}

impl Restarts<'_> {
    /// Runs `start` (a cluster, given its processes' extra arguments) and, after a failure,
    /// again with `--resume` from the last checkpoint every process completed, up to
    /// `restarts` times, saying why and from where.
    fn run(&self, mut start: impl FnMut(&[String]) -> Result<(), String>) -> Result<(), String> {
        // The job's checkpoints, which a restart resumes from.
        let checkpoints = match self.run.restarts {
            0 => None,
            _ => {
                let job = load_job(self.job, &self.run.overrides.to_sets()?)?;
                let dir = job.train.checkpoint.as_ref().map(|c| c.dir.clone()).ok_or(
                    "--restarts: the job writes no checkpoints (train.checkpoint), so a \
                     restart would start over",
                )?;
                Some((dir, job.cluster_id()))
            }
        };
        let mut resume = self.run.resume.clone();
        // Each attempt is a run of its own: a process left from an earlier one cannot join.
        let launch = crate::handshake::hex(&rand::random::<[u8; 6]>());
        for attempt in 0..=self.run.restarts {
            let args = [
                vec!["--run-id".to_string(), format!("{launch}.{attempt}")],
                self.run
                    .quiet
                    .then(|| "--quiet".to_string())
                    .into_iter()
                    .collect(),
                vec![
                    "--peer-timeout".to_string(),
                    self.run.peer_timeout.to_string(),
                ],
                resume
                    .iter()
                    .flat_map(|d| ["--resume".to_string(), d.display().to_string()])
                    .collect(),
                self.run.overrides.to_args()?,
            ]
            .concat();
            let failure = match start(&args) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            // Ctrl-C stops the launcher; it is no failure to restart after.
            let last = attempt == self.run.restarts || cluster::interrupted();
            let Some((dir, job_id)) = checkpoints.as_ref().filter(|_| !last) else {
                return Err(match self.run.restarts {
                    0 => failure,
                    n => format!("{failure} (after {n} restart(s))"),
                });
            };
            // The last round every process completed: `train --resume` starts there.
            let complete = (0..self.processes)
                .map(|p| crate::dataflow::checkpoint::complete_rounds(dir, *job_id, p))
                .collect::<Result<Vec<_>, _>>()
                .unwrap_or_default();
            let common = (complete.first().cloned().unwrap_or_default().into_iter())
                .filter(|r| complete.iter().all(|c| c.contains(r)))
                .max();
            let from = match common {
                Some(r) => format!(
                    "from round {r} (the last complete checkpoint in {})",
                    dir.display()
                ),
                None => "from the start (no complete checkpoint yet)".to_string(),
            };
            eprintln!(
                "cluster: {failure}\ncluster: restart {} of {}: every process again, {from}",
                attempt + 1,
                self.run.restarts
            );
            resume = common.map(|_| dir.clone()).or(resume);
        }
        unreachable!("the last attempt returns")
    }
}

/// A gradient's dimension for `codec compare`/`keys`, at most [`crate::data::MAX_DIM`]: a
/// codec's buffers may be dense in it.
fn within_max_dim(what: &str, dim: u32) -> Result<(), String> {
    match dim > crate::data::MAX_DIM {
        true => Err(format!(
            "{what} = {dim} is over {}, the largest model dimension gradflow trains by default \
             (a codec's buffers may be dense in it)",
            crate::data::MAX_DIM
        )),
        false => Ok(()),
    }
}

impl GradientSource {
    fn load(&self) -> Result<(SparseGrad, u32), String> {
        match (&self.input, &self.synth) {
            (Some(path), None) => {
                let dim = self.dim.ok_or("--input needs --dim")?;
                within_max_dim("--dim", dim)?;
                Ok((read_gradient(path, dim)?, dim))
            }
            (None, Some(spec)) => {
                let parts: Vec<&str> = spec.split(',').map(str::trim).collect();
                let num = |i: usize, what: &str| -> Result<u64, String> {
                    parts[i]
                        .parse()
                        .map_err(|_| format!("--synth: bad {what} '{}'", parts[i]))
                };
                if !(2..=3).contains(&parts.len()) {
                    return Err(format!("--synth expects D,d[,seed], got '{spec}'"));
                }
                let dim = u32::try_from(num(0, "D")?)
                    .map_err(|_| "--synth: D must fit in 32 bits".to_string())?;
                let d = num(1, "d")? as usize;
                if dim == 0 || d == 0 || d > dim as usize {
                    return Err(format!("--synth: need 0 < d <= D, got D = {dim}, d = {d}"));
                }
                within_max_dim("--synth: D", dim)?;
                let seed = if parts.len() == 3 { num(2, "seed")? } else { 1 };
                Ok((synth_gradient(dim, d, 0.01, seed), dim))
            }
            _ => Err("give either --input FILE --dim D or --synth D,d[,seed]".into()),
        }
    }
}

/// Prints rows as CSV (`csv_out`) or as an aligned table for people (numbers to four
/// significant digits, empty cells as `-`).
fn print_rows<T: serde::Serialize>(rows: &[T], csv_out: bool) -> Result<(), String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in rows {
        w.serialize(r).map_err(|e| e.to_string())?;
    }
    let bytes = w.into_inner().map_err(|e| e.to_string())?;
    if csv_out {
        print!("{}", String::from_utf8_lossy(&bytes));
        return Ok(());
    }
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(&bytes[..]);
    let table: Vec<Vec<String>> = reader
        .records()
        .enumerate()
        .map(|(i, r)| {
            let r = r.map_err(|e| e.to_string())?;
            Ok(r.iter()
                .map(|cell| {
                    if i == 0 {
                        cell.to_string()
                    } else {
                        human_cell(cell)
                    }
                })
                .collect())
        })
        .collect::<Result<_, String>>()?;
    let columns = table.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| table.iter().map(|row| row[c].len()).max().unwrap_or(0))
        .collect();
    for row in &table {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, &w))| {
                if c == 0 {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        println!("{}", cells.join("  "));
    }
    Ok(())
}

/// A CSV cell for people: integers as they are, other numbers to four significant digits.
fn human_cell(cell: &str) -> String {
    match cell.parse::<f64>() {
        _ if cell.is_empty() => "-".into(),
        Ok(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{x:.0}"),
        Ok(x) => {
            let digits = (3 - x.abs().log10().floor() as i32).clamp(0, 8) as usize;
            format!("{x:.digits$}")
        }
        Err(_) => cell.to_string(),
    }
}

/// Parses `--codecs`: codec names, each optionally followed by parameters,
/// `topk:ratio=0.01,keys=rice,fastsgd` (a `key=value` item belongs to the codec before it).
/// Returns (label, spec) pairs; an unknown codec or parameter is an error naming it.
fn codec_specs(items: &[String]) -> Result<Vec<(String, CodecSpec)>, String> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for item in items.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        match item.split_once(':') {
            Some((name, param)) => groups.push((name.to_string(), vec![param.to_string()])),
            None if item.contains('=') => match groups.last_mut() {
                Some(g) => g.1.push(item.to_string()),
                None => {
                    return Err(format!(
                        "--codecs: parameter '{item}' before any codec name"
                    ))
                }
            },
            None => groups.push((item.to_string(), Vec::new())),
        }
    }
    groups
        .into_iter()
        .map(|(name, params)| {
            let table = codec_table(&name, &params).map_err(|e| format!("--codecs: {e}"))?;
            let spec = CodecSpec::deserialize(toml::Value::Table(table))
                .map_err(|e| format!("--codecs {name}: {}", e.to_string().trim_end()))?;
            let label = if params.is_empty() {
                name
            } else {
                format!("{name}:{}", params.join(","))
            };
            Ok((label, spec))
        })
        .collect()
}

fn codec_compare(a: CompareArgs) -> Result<(), String> {
    let (g, dim) = a.source.load()?;
    let specs = if a.codecs.is_empty() {
        CODECS
            .names()
            .into_iter()
            .map(|n| (n.to_string(), CodecSpec::with_defaults(n).unwrap()))
            .collect()
    } else {
        codec_specs(&a.codecs)?
    };
    let mut rows = Vec::new();
    for (label, spec) in &specs {
        rows.push(measure_codec(spec, label, &g, dim, a.source.repeats)?);
    }
    print_rows(&rows, a.source.csv)
}

fn codec_keys(a: GradientSource) -> Result<(), String> {
    let (g, dim) = a.load()?;
    print_rows(&measure_keys(&g.keys, dim, a.repeats)?, a.csv)
}

/// The observer of `train`: the data line, then a line per epoch and per evaluation on
/// standard output (so that `| tee log` keeps them), warnings on standard error, and a progress
/// bar of the epoch's rounds when standard error is a terminal.
///
/// An online run prints its progressive loss instead ([`Progressive`], kept in `progressive`
/// for the last line), and the test metrics when it evaluates.
fn printer(quiet: bool, progressive: Arc<Mutex<Progressive>>) -> ObserverFactory {
    Arc::new(move |plan, data| {
        let mut silent = SilentCodec::default();
        if plan.live.is_some() {
            let progressive = progressive.clone();
            if !quiet && !data.is_empty() {
                println!("{data}");
            }
            return Box::new(move |row: &MetricsRow| {
                if let Some(w) = silent.observe(row) {
                    eprintln!("{w}");
                }
                let mut p = progressive.lock().unwrap_or_else(|e| e.into_inner());
                let line = match row.kind {
                    "round" => p.add(row),
                    "eval" | "epoch" if row.test_loss.is_some_and(f64::is_finite) => {
                        Some(crate::metrics::eval_line(row))
                    }
                    _ => None,
                };
                if let Some(line) = line.filter(|_| !quiet) {
                    println!("{line}");
                    crate::metrics::flush_stdout();
                }
            });
        }
        if quiet {
            return Box::new(move |row: &MetricsRow| {
                if let Some(w) = silent.observe(row) {
                    eprintln!("{w}");
                }
            });
        }
        if !data.is_empty() {
            println!("{data}");
            crate::metrics::flush_stdout();
        }
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new(plan.rounds_per_epoch);
            b.set_style(
                ProgressStyle::with_template(
                    "epoch {prefix} [{bar:30}] {pos}/{len} rounds {elapsed}",
                )
                .unwrap()
                .progress_chars("=> "),
            );
            // A resumed run starts into its epoch.
            b.set_prefix((plan.start_round / plan.rounds_per_epoch + 1).to_string());
            b.set_position(plan.start_round % plan.rounds_per_epoch);
            b
        });
        // Prints above the bar, if there is one.
        let above = |bar: &Option<ProgressBar>, print: &dyn Fn()| match bar {
            Some(b) => b.suspend(print),
            None => print(),
        };
        let epochs = plan.epochs;
        Box::new(move |row: &MetricsRow| {
            if let Some(w) = silent.observe(row) {
                above(&bar, &|| eprintln!("{w}"));
            }
            let line = match row.kind {
                "epoch" => epoch_line(row),
                "eval" => crate::metrics::eval_line(row),
                "round" => {
                    bar.iter().for_each(|b| b.inc(1));
                    return;
                }
                _ => return,
            };
            above(&bar, &|| println!("{line}"));
            crate::metrics::flush_stdout();
            match (&bar, row.kind) {
                (Some(b), "epoch") if row.epoch >= epochs => b.finish_and_clear(),
                (Some(b), "epoch") => {
                    b.reset();
                    b.set_prefix((row.epoch + 1).to_string());
                }
                _ => {}
            }
        })
    })
}

/// The latest round process `process` could resume from in the job's checkpoint directory.
fn last_checkpoint(job: &Job, a: &TrainArgs, process: usize) -> Option<u64> {
    let dir = &job.train.checkpoint.as_ref()?.dir;
    let (spec, _) = a.place.spec().ok()?;
    let rounds = crate::dataflow::checkpoint::resumable_rounds(
        dir,
        job.cluster_id(),
        process,
        spec.workers,
        spec.workers * spec.processes,
        None,
    );
    rounds.ok()?.0.last().copied()
}

/// After a failure: where the last complete checkpoint is and how to continue from it. A run
/// that resumed from that same checkpoint (`started_from`) and wrote no newer one is not told
/// to run the command that just failed.
fn resume_hint(
    job: &Job,
    a: &TrainArgs,
    process: usize,
    started_from: Option<u64>,
) -> Option<String> {
    let dir = &job.train.checkpoint.as_ref()?.dir;
    let last = last_checkpoint(job, a, process)?;
    if a.resume.is_some() && started_from == Some(last) {
        return Some(format!(
            "note: process {process}: this run resumed from round {last} in {} and wrote no \
             newer checkpoint; resuming again fails the same way until the error above is \
             mended",
            dir.display()
        ));
    }
    Some(format!(
        "note: process {process}: the last complete checkpoint is round {last} in {}; continue \
         with `gradflow train {}--resume {}` (the same job, flags, processes and threads)",
        dir.display(),
        a.job
            .iter()
            .map(|j| format!("{} ", j.display()))
            .collect::<String>(),
        dir.display()
    ))
}

/// The job of a command line: the file, or the defaults, with the flags applied.
fn load_job(path: Option<&std::path::Path>, sets: &[String]) -> Result<Job, String> {
    let job = match path {
        Some(path) => Job::load(path, sets),
        None => Job::parse("", std::path::Path::new("the command line"), sets),
    };
    job.map_err(|e| e.to_string())
}

fn train(a: TrainArgs, program: Program) -> Result<(), String> {
    let job = load_job(a.job.as_deref(), &a.overrides.to_sets()?)?;
    if a.print_job {
        print!("{}", job.to_toml());
        return Ok(());
    }
    let (place, note) = a.place.spec()?;
    if let Some(note) = note {
        eprintln!("{note}");
    }
    let spec = ClusterSpec {
        resume: a.resume.clone(),
        ..place
    };
    let supervisor = Supervisor::new();
    supervisor.install_panic_hook();
    let started_from = a
        .resume
        .as_ref()
        .and_then(|_| last_checkpoint(&job, &a, spec.process));
    let quiet = a.quiet || spec.process != 0;
    if !quiet {
        println!("exchange: {}", job.describe_exchange());
    }
    let progressive = Arc::new(Mutex::new(Progressive::default()));
    if job.stream().is_some() {
        // A signal ends the stream; the run then writes its model.
        crate::dataflow::live::stop_on_signals();
    }
    let observer = printer(quiet, progressive.clone());
    let outcome = match run_program(&job, &spec, &supervisor, observer, program) {
        Ok(o) => o,
        Err(e) => {
            // A process of a broken cluster may have threads stuck on dead peers: exit now.
            eprintln!("error: process {}: {e}", spec.process);
            if let Some(hint) = resume_hint(&job, &a, spec.process, started_from) {
                eprintln!("{hint}");
            }
            let code = match supervisor.lost_peer() {
                Some(_) => EXIT_LOST_PEER,
                None => 1,
            };
            std::process::exit(code);
        }
    };
    if spec.processes > 1 {
        let (w, t) = (outcome.wire, outcome.traffic);
        println!(
            "process {} sent {} up + {} down + {} statistics and evaluations, received {} up + {} down (payload, to and from other processes); wire: {} bytes on data channels in {} messages ({}) and {} bytes on progress channels ({}); peak memory {}",
            spec.process,
            human_bytes(t.up_sent),
            human_bytes(t.down_sent),
            human_bytes(t.eval_sent),
            human_bytes(t.up_received),
            human_bytes(t.down_received),
            w.data,
            w.data_messages,
            human_bytes(w.data),
            w.progress,
            human_bytes(w.progress),
            crate::mem::peak_resident().map_or("unknown".into(), human_bytes)
        );
    }
    let program = job.data.format == crate::job::Format::Program;
    if !a.quiet && program && !outcome.loaded.is_empty() {
        // Every process with prepared rows of its own (a program's) says how many once its
        // dataflow is done; other jobs' data line came before the epochs.
        println!("{}", outcome.loaded);
    }
    if spec.process == 0 {
        for note in &outcome.notes {
            eprintln!("note: {note}");
        }
        let plan = outcome.plan.as_ref().ok_or("worker 0 returned no plan")?;
        if let Some(path) = &job.output.metrics {
            println!("metrics: {}", path.display());
        }
        if let Some(path) = &job.output.model {
            let model = ModelFile {
                loss: plan.loss.name().to_string(),
                weights: outcome.weights.clone().unwrap_or_default(),
                intercept: plan.intercept,
                classes: (plan.loss.outputs() > 1).then(|| plan.loss.outputs()),
                model: (plan.model.name() != "linear").then(|| plan.model.spec()),
                features: outcome.features.clone(),
            };
            if plan.state == crate::exchange::StateMode::Sharded {
                // Each worker wrote its shard beside the model file.
                let shards: Vec<_> = (0..(spec.workers * spec.processes) as u32)
                    .map(|w| crate::model::file::shard_path(path, w))
                    .collect();
                model.save_from_shards(path, plan.dim, &shards)?;
            } else {
                model
                    .save(path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            println!("model: {}", path.display());
        }
        let workers = spec.workers * spec.processes;
        let asked = plan.replica_depends_on_distance(workers);
        let cores = match plan.core_distance_ns {
            Some(ns) => format!("; auto: their cores measured {ns:.0} ns apart"),
            None if asked => "; auto: their cores' distance could not be measured".into(),
            None => String::new(),
        };
        if outcome.shared_replica {
            println!(
                "replica: one model for the {} workers of the process (train.replica{cores})",
                spec.workers
            );
        } else if asked {
            println!("replica: one model per worker (train.replica{cores})");
        }
        let mut p = progressive.lock().unwrap_or_else(|e| e.into_inner());
        match &outcome.stopped {
            _ if plan.live.is_some() => println!(
                "{}\ntrained online on {} rows in {} rounds on {workers} worker(s) in {:.2} s: \
                 progressive loss {:.4}",
                p.line(),
                p.rows,
                p.rounds,
                outcome.seconds,
                p.loss()
            ),
            Some((round, why)) => println!(
                "stopped early: trained {round} of {} rounds (into epoch {} of {}) on {workers} \
                 worker(s) in {:.2} s: {why}",
                plan.rounds(),
                round.saturating_sub(1) / plan.rounds_per_epoch + 1,
                plan.epochs,
                outcome.seconds
            ),
            None => println!(
                "trained {} epochs ({} rounds) on {workers} worker(s) in {:.2} s",
                plan.epochs,
                plan.rounds(),
                outcome.seconds
            ),
        }
    }
    Ok(())
}

fn data_prepare(a: PrepareArgs) -> Result<(), String> {
    let job = load_job(a.job.as_deref(), &a.data.to_sets()?)?;
    let (spec, note) = a.place.spec()?;
    if let Some(note) = note {
        eprintln!("{note}");
    }
    let started = std::time::Instant::now();
    let (train, test) = crate::runtime::prepare_job(&job, &spec, &a.out)?;
    println!(
        "prepared {train} training and {test} test rows on process {} in {:.2} s: {}",
        spec.process,
        started.elapsed().as_secs_f64(),
        a.out.display()
    );
    Ok(())
}

fn data_synth(a: SynthArgs) -> Result<(), String> {
    let kind = match a.kind {
        SynthKindArg::Ctr => SynthKind::Ctr,
        SynthKindArg::Gspar => SynthKind::Gspar,
        SynthKindArg::Fields => SynthKind::Fields,
        SynthKindArg::Pairs => SynthKind::Pairs,
    };
    let section = SynthSection {
        kind,
        rows: a.rows,
        dim: a.dim,
        nnz: a.nnz,
        c1: a.c1,
        c2: a.c2,
        seed: a.seed,
    };
    section.validate().map_err(|e| {
        e.replace("data.synth: ", "")
            .replace("nnz", "--nnz")
            .replace("dim", "--dim")
            .replace("rows", "--rows")
    })?;
    crate::atomic::target(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let data = section.generate();
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    write_libsvm(&a.out, &data).map_err(|e| format!("{}: {e}", a.out.display()))?;
    println!(
        "wrote {} rows, {} features, {} nonzeros to {}",
        data.rows(),
        data.dim,
        data.nnz(),
        a.out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The command lines of a help text's examples: each line that starts with `gradflow`, up
    /// to its comment (two spaces), a `&&`, a parenthesis or a redirection, split as a shell would split
    /// words in single quotes.
    fn example_lines(help: &str) -> Vec<Vec<String>> {
        let lines = help.lines().map(str::trim_start);
        let commands = lines.filter(|l| l.starts_with("gradflow "));
        let command = |l: &str| {
            let end = ["  ", "&&", "(", " >"]
                .iter()
                .filter_map(|m| l.find(m))
                .min();
            l[..end.unwrap_or(l.len())].to_owned()
        };
        commands
            .map(command)
            .map(|l| {
                // Outside quotes, spaces split; a quoted span is one word without its quotes.
                let (mut words, mut word, mut quoted) = (Vec::new(), String::new(), false);
                for c in l.chars().chain([' ']) {
                    match c {
                        '\'' => quoted = !quoted,
                        ' ' if !quoted && !word.is_empty() => words.push(std::mem::take(&mut word)),
                        ' ' if !quoted => {}
                        _ => word.push(c),
                    }
                }
                words
            })
            .collect()
    }

    fn job_of(args: &[&str]) -> Result<Job, String> {
        let cli = Cli::try_parse_from(args).map_err(|e| e.to_string())?;
        let Command::Train(a) = cli.command else {
            panic!("not train")
        };
        load_job(a.job.as_deref(), &a.overrides.to_sets()?)
    }

    /// The one-line flags make the job a file would: each flag its field.
    #[test]
    fn flags_set_the_fields_a_job_file_would() {
        let flags = job_of(&[
            "gradflow",
            "train",
            "--data",
            "f.csv",
            "--label",
            "delay>15",
            "--categorical",
            "carrier,origin",
            "--numeric",
            "distance:bucket,seats",
            "--cross",
            "origin:carrier",
            "--cross",
            "carrier:origin:distance",
            "--test-fraction",
            "0.3",
            "--loss",
            "hinge",
            "--lambda",
            "1e-5",
            "--optimizer",
            "sgd",
            "--lr",
            "0.5",
            "--epochs",
            "3",
            "--batch-fraction",
            "0.05",
            "--exchange",
            "allgather",
            "--compressor",
            "topk:ratio=0.01,keys=raw",
            "--memory",
            "dgc:momentum=0.8",
            "--eval-every",
            "7",
            "--seed",
            "9",
            "--model-out",
            "m.txt",
            "--metrics",
            "m.csv",
        ])
        .unwrap();
        let file = r#"
            [data]
            train = "f.csv"
            test_fraction = 0.3
            [data.label]
            column = "delay"
            above = 15
            [data.features]
            categorical = ["carrier", "origin"]
            numeric = [{ column = "distance", transform = "bucket" }, { column = "seats" }]
            crosses = [["origin", "carrier"], ["carrier", "origin", "distance"]]
            [model]
            loss = "hinge"
            lambda = 1e-5
            [optimizer]
            kind = "sgd"
            lr = 0.5
            [train]
            epochs = 3
            batch_fraction = 0.05
            exchange = "allgather"
            compressor = { name = "topk", ratio = 0.01, keys = "raw" }
            memory = { name = "dgc", momentum = 0.8 }
            eval_every = 7
            seed = 9
            [output]
            model = "m.txt"
            metrics = "m.csv"
        "#;
        let from_file = Job::parse(file, std::path::Path::new("j.toml"), &[]).unwrap();
        assert_eq!(flags, from_file);
        assert_eq!(
            flags.data.format,
            crate::job::Format::Csv,
            "from the extension"
        );

        // The printed job reads back as the same job, "auto" included.
        let printed = flags.to_toml();
        let back = Job::parse(&printed, std::path::Path::new("p"), &[]).unwrap();
        assert_eq!(back, flags, "{printed}");
        let auto = job_of(&[
            "gradflow",
            "train",
            "--compressor",
            "auto",
            "--memory",
            "none",
        ]);
        assert!(
            auto.unwrap_err().contains("train.memory"),
            "auto picks the memory"
        );
        let auto = job_of(&[
            "gradflow",
            "train",
            "--exchange",
            "auto",
            "--compressor",
            "auto",
        ]);
        let auto = auto.unwrap();
        let back = Job::parse(&auto.to_toml(), std::path::Path::new("p"), &[]).unwrap();
        assert!(back.train.auto.exchange && back.train.auto.compressor);
        assert_eq!(back, auto);
        // --set comes after the flags.
        let job = job_of(&[
            "gradflow",
            "train",
            "--epochs",
            "3",
            "--set",
            "train.epochs=4",
        ]);
        assert_eq!(job.unwrap().train.epochs, 4);
    }

    /// A malformed flag is an error naming it.
    #[test]
    fn bad_flags_are_errors_naming_the_flag() {
        let err = |args: &[&str]| {
            let mut all = vec!["gradflow", "train"];
            all.extend(args);
            job_of(&all).unwrap_err()
        };
        let job = job_of(&[
            "gradflow",
            "train",
            "--data",
            "r.csv",
            "--label",
            "ok=yes, Yes",
            "--categorical",
            "a",
        ]);
        let label = job.unwrap().data.label.unwrap();
        assert_eq!(
            (label.equals, label.positive),
            (None, vec!["yes".into(), "Yes".into()])
        );
        let e = err(&["--label", ">3"]);
        assert!(e.contains("--label '>3'"), "{e}");
        let e = err(&["--label", "delay>soon"]);
        assert!(e.contains("'soon' is not a number"), "{e}");
        let e = err(&["--cross", "origin"]);
        assert!(e.contains("--cross 'origin'"), "{e}");
        let e = err(&["--compressor", "zip"]);
        assert!(e.contains("--compressor: unknown codec 'zip'"), "{e}");
        let e = err(&["--compressor", "topk:ratio"]);
        assert!(
            e.contains("--compressor: topk: 'ratio' is not param=value"),
            "{e}"
        );
        let e = err(&["--compressor", "topk:speed=3"]);
        assert!(
            e.contains("--compressor: topk") && e.contains("speed"),
            "{e}"
        );
        let e = err(&["--memory", "forgetful"]);
        assert!(e.contains("forgetful"), "{e}");
        let e = err(&["--format", "parquet"]);
        assert!(e.contains("parquet"), "{e}");
    }

    /// `--hosts a:2,b` and a `host slots=N` hostfile give each host its processes; a bad
    /// count is an error naming the entry or the line.
    #[test]
    fn launch_hosts_and_hostfiles_give_slots() {
        let hosts = ["a:2".to_string(), "b".into()];
        let want = vec![("a".to_string(), 2), ("b".to_string(), 1)];
        assert_eq!(host_slots(&hosts).unwrap(), want);
        assert!(host_slots(&["a:0".into()]).unwrap_err().contains("`a:0`"));
        assert!(host_slots(&[":2".into()]).unwrap_err().contains("no host"));
        let text = "# cluster\na slots=2\n\nb   # one\n";
        assert_eq!(hostfile_slots(text).unwrap(), want);
        assert!(hostfile_slots("a slots=2\nb slots=x\n")
            .unwrap_err()
            .starts_with("2: slots"));
        assert!(hostfile_slots("a max=2\n")
            .unwrap_err()
            .starts_with("1: `max=2`"));
        assert!(hostfile_slots("# nothing\n").is_err());
    }

    /// Every help page shows examples, and each example parses as its command line.
    #[test]
    fn every_help_has_examples_that_parse() {
        let cli = Cli::command();
        let mut helps = vec![("gradflow".to_owned(), cli.get_after_help().cloned())];
        for sub in cli.get_subcommands() {
            let nested = sub.get_subcommands().filter(|s| s.get_name() != "help");
            let nested: Vec<_> = nested.collect();
            // Every page: a command's, a group's (`data`, `codec`) and each of its commands'.
            helps.push((sub.get_name().to_owned(), sub.get_after_help().cloned()));
            for n in nested {
                let name = format!("{} {}", sub.get_name(), n.get_name());
                helps.push((name, n.get_after_help().cloned()));
            }
        }
        assert_eq!(helps.len(), 12, "gradflow, 7 commands and 4 in 2 groups");
        for (name, help) in helps {
            let help = help.unwrap_or_else(|| panic!("`{name} --help` has no examples"));
            let examples = example_lines(&help.to_string());
            assert!(!examples.is_empty(), "`{name} --help`: no example line");
            for args in examples {
                if let Err(e) = Cli::try_parse_from(&args) {
                    panic!("`{name} --help`: {args:?} does not parse: {e}");
                }
            }
        }
    }
}
