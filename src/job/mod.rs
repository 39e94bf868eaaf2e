//! Job files (TOML) and their command-line overrides.
//!
//! A job names its data, model, optimizer, training schedule, exchange strategy, compressor,
//! seed and outputs. Every table rejects unknown fields, and every value is range-checked; the
//! error names the field. Relative paths are relative to the working directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::codec::{CodecSpec, ErrorFeedback};
use crate::data::cache::{self, CachedRows};
use crate::data::gather::gather;
use crate::data::libsvm::{read_libsvm_part, PartRows};
use crate::data::synth::{self, CtrParams, GsparParams};
use crate::data::table::{FeatureSpec, JoinSpec, LabelSpec, TableInput, TableSpec};
use crate::data::{Dataset, LibsvmOptions, Part, RowFilter};
use crate::dataflow::checkpoint::CheckpointSpec;
use crate::dataflow::{ProgramInputs, ReplicaMode, TrainPlan, WorkerData};
use crate::exchange::sketch::SketchParams;
use crate::exchange::{ExchangeKind, Ownership};
use crate::memory::MemorySpec;
use crate::model::{Fm, Linear, LossFn, LossName, Mlp, ModelFn, Task};
pub use crate::model::{MAX_CLASSES, MAX_FACTORS, MAX_HIDDEN};
use crate::optim::OptimizerConfig;

/// What a worker loads: its rows, the model's number of features, the feature map of a table
/// job (TOML) and notes for the user.
pub type Loaded = (WorkerData, u32, Option<String>, Vec<String>);

/// The most rounds a job may run (epochs x rounds per epoch): a billion rounds take days at the
/// fastest round this runtime makes (~1 ms), so a larger count is a mistake in the job file
/// (e.g. a batch fraction of 1e-12), not a plan.
pub const MAX_ROUNDS: u64 = 1_000_000_000;

/// A training job.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// `[data]`: where the rows come from.
    #[serde(default)]
    pub data: DataSection,
    /// `[model]`: loss and regularisation.
    #[serde(default)]
    pub model: ModelSection,
    /// `[optimizer]`: update rule and hyper-parameters.
    #[serde(default)]
    pub optimizer: OptimizerConfig,
    /// `[train]`: schedule, exchange, compressor, seed.
    #[serde(default)]
    pub train: TrainSection,
    /// `[output]`: files to write.
    #[serde(default)]
    pub output: OutputSection,
}

/// The format of the data files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// LibSVM / SVMlight text.
    #[default]
    Libsvm,
    /// CSV with a header (plain, gzip or zstd), turned into features by `[data.label]`,
    /// `[data.features]` and `[[data.join]]`.
    Csv,
    /// IDX images and labels (MNIST's format; plain, gzip or zstd): `train` and `test` name
    /// the images files, `train_labels` and `test_labels` their labels.
    Idx,
    /// Rows prepared by the job's program in its own dataflow
    /// ([`crate::dataflow::Training::gradient_on`]): `dim` gives the number of features (the
    /// model is sized before any row exists), `files` the program's inputs.
    Program,
}

impl Format {
    /// The format a data file's name implies, compressed or not: `.csv` a CSV table; `.svm`,
    /// `.libsvm` or `.txt` LibSVM; `…-idx3-ubyte` or `.idx` IDX images. `None`: no telling.
    pub fn from_extension(path: &Path) -> Option<Format> {
        let name = path.file_name()?.to_str()?.to_ascii_lowercase();
        let name = [".gz", ".zst"]
            .iter()
            .find_map(|z| name.strip_suffix(z))
            .unwrap_or(&name);
        let ext = name.rsplit_once('.').map(|(_, e)| e);
        match ext {
            Some("csv") => Some(Format::Csv),
            Some("svm" | "libsvm" | "txt") => Some(Format::Libsvm),
            Some("idx") => Some(Format::Idx),
            _ if name.contains("-idx") && name.ends_with("ubyte") => Some(Format::Idx),
            _ => None,
        }
    }
}

/// `[data]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataSection {
    /// `libsvm` (default), `csv`, `idx` or `program`.
    pub format: Format,
    /// Training file. Absent: the generated dataset of `[data.synth]` (by default the embedded
    /// CTR-like set).
    pub train: Option<PathBuf>,
    /// Test file. Absent: `test_fraction` of the rows are held out.
    pub test: Option<PathBuf>,
    /// IDX: the labels of `train`'s images.
    pub train_labels: Option<PathBuf>,
    /// IDX: the labels of `test`'s images.
    pub test_labels: Option<PathBuf>,
    /// Fraction held out for testing when there is no test file.
    pub test_fraction: f64,
    /// How rows are held out: `hash` (a seeded hash of the row number, the default) or `tail`
    /// (the last `test_fraction` of the rows in file order: a time split).
    pub test_split: TestSplit,
    /// Indices in the files start at 0.
    pub zero_based: bool,
    /// Declared number of features (an index beyond it is an error); absent: from the data.
    pub dim: Option<u32>,
    /// The largest dimension the data may declare or imply (default [`crate::data::MAX_DIM`],
    /// 2^27): one stray index in a file must not make every worker allocate gigabytes.
    pub max_dim: u32,
    /// Generated data, used when `train` is absent.
    pub synth: SynthSection,
    /// CSV: the label's column and rule.
    pub label: Option<LabelSpec>,
    /// CSV: the features.
    pub features: FeatureSpec,
    /// CSV: dimension tables joined to the rows.
    pub join: Vec<JoinSpec>,
    /// CSV: the strings that mean a missing value.
    pub missing: Vec<String>,
    /// CSV: the field delimiter.
    pub delimiter: char,
    /// `program`: the files the job's program reads, by name
    /// ([`crate::dataflow::Training::file`]).
    pub files: BTreeMap<String, PathBuf>,
    /// A directory for a cache of every worker's loaded rows ([`crate::data::cache`]): the
    /// first run writes it, later runs of the same job on the same files and workers read it
    /// instead of parsing. Absent: no cache.
    pub cache: Option<PathBuf>,
}

impl DataSection {
    /// The table spec of a CSV job.
    pub fn table(&self) -> TableSpec {
        TableSpec {
            label: self.label.clone().unwrap_or_default(),
            features: self.features.clone(),
            join: self.join.clone(),
            missing: self.missing.clone(),
            delimiter: self.delimiter,
        }
    }
}

impl Default for DataSection {
    fn default() -> Self {
        DataSection {
            train: None,
            test: None,
            train_labels: None,
            test_labels: None,
            test_fraction: 0.25,
            test_split: TestSplit::Hash,
            zero_based: false,
            dim: None,
            max_dim: crate::data::MAX_DIM,
            synth: SynthSection::default(),
            format: Format::Libsvm,
            label: None,
            features: FeatureSpec::default(),
            join: Vec::new(),
            missing: TableSpec::default().missing,
            delimiter: ',',
            files: BTreeMap::new(),
            cache: None,
        }
    }
}

/// Which generator `[data.synth]` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SynthKind {
    /// CTR-like: Zipf feature popularity, binary features, logistic labels.
    #[default]
    Ctr,
    /// The GSpar paper's synthetic logistic data.
    Gspar,
    /// A real CTR table's structure: one value from each of 14 categorical fields (popular
    /// values at low indices) plus two hashed crosses; `dim` and `nnz` are fixed by the layout
    /// (105,060 features, 16 per row).
    Fields,
    /// Planted pairwise interactions: `nnz` fields of `dim / nnz` values each, one value per
    /// row, and labels decided mostly by a hidden rank-4 factorization machine's pairwise term.
    Pairs,
}

/// The most nonzeros a generated set may hold (it is made in memory, 8 bytes each).
pub const MAX_SYNTH_NONZEROS: u64 = 1 << 31;

/// `[data.synth]`: parameters of the generated dataset (defaults: the embedded quickstart set).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SynthSection {
    /// Generator.
    pub kind: SynthKind,
    /// Rows.
    pub rows: usize,
    /// Features.
    pub dim: u32,
    /// Mean active features per row (ctr); fields (pairs).
    pub nnz: usize,
    /// Shrink factor for small magnitudes (gspar).
    pub c1: f64,
    /// Magnitudes at or below this are shrunk (gspar).
    pub c2: f64,
    /// Seed of the generator.
    pub seed: u64,
}

impl Default for SynthSection {
    fn default() -> Self {
        let c = CtrParams::default();
        let g = GsparParams::default();
        SynthSection {
            kind: SynthKind::Ctr,
            rows: c.rows,
            dim: c.dim,
            nnz: c.nnz,
            c1: g.c1,
            c2: g.c2,
            seed: c.seed,
        }
    }
}

impl SynthSection {
    /// Checks the parameters, naming the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.rows == 0 || self.dim == 0 || (self.kind == SynthKind::Ctr && self.nnz == 0) {
            return Err("data.synth: rows, dim and nnz must be positive".into());
        }
        if self.kind == SynthKind::Pairs && (self.nnz < 2 || self.nnz > self.dim as usize) {
            return Err(format!(
                "data.synth: kind \"pairs\" needs 2 <= nnz (its fields) <= dim, got nnz = {}, dim = {}",
                self.nnz, self.dim
            ));
        }
        if self.kind == SynthKind::Ctr && self.nnz > self.dim as usize {
            return Err(format!(
                "data.synth: nnz = {} is more than dim = {}: a row has at most dim features",
                self.nnz, self.dim
            ));
        }
        // The set is made in memory, 8 bytes a nonzero: bound it before the first row.
        let per_row = match self.kind {
            SynthKind::Ctr | SynthKind::Pairs => self.nnz as u128,
            SynthKind::Fields => 16,
            SynthKind::Gspar => self.dim as u128,
        };
        if self.rows as u128 * per_row > MAX_SYNTH_NONZEROS as u128 {
            return Err(format!(
                "data.synth: rows = {} of {per_row} features each is over {MAX_SYNTH_NONZEROS} \
                 nonzeros ({} GiB in memory): generate fewer rows",
                self.rows,
                (MAX_SYNTH_NONZEROS * 8) >> 30
            ));
        }
        Ok(())
    }

    /// Generates the whole dataset.
    pub fn generate(&self) -> Dataset {
        match self.kind {
            SynthKind::Ctr => synth::ctr(&CtrParams {
                rows: self.rows,
                dim: self.dim,
                nnz: self.nnz,
                seed: self.seed,
                ..CtrParams::default()
            }),
            SynthKind::Fields => synth::fields(&synth::FieldsParams {
                rows: self.rows,
                seed: self.seed,
                ..Default::default()
            }),
            SynthKind::Pairs => synth::pairs(&synth::PairsParams {
                rows: self.rows,
                fields: self.nnz as u32,
                values: self.dim / self.nnz as u32,
                seed: self.seed,
                ..Default::default()
            }),
            SynthKind::Gspar => synth::gspar(&GsparParams {
                rows: self.rows,
                dim: self.dim,
                c1: self.c1,
                c2: self.c2,
                seed: self.seed,
            }),
        }
    }
}

/// How `data.test_fraction` of the rows are held out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestSplit {
    /// A seeded hash of the row number (independent of the number of workers).
    #[default]
    Hash,
    /// The last rows of the file, in order (a chronological split).
    Tail,
}

/// Which model `[model]` trains.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// One weight per feature and output ([`Linear`]).
    #[default]
    Linear,
    /// A factorization machine of `factors` factors per feature ([`crate::model::Fm`]).
    Fm,
    /// A neural network of `hidden` ReLU layers over an embedding bag
    /// ([`crate::model::Mlp`]).
    Mlp,
}

/// `[model]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelSection {
    /// `linear`, `fm` or `mlp`.
    pub kind: ModelKind,
    /// `fm`: factors per feature.
    pub factors: u32,
    /// `mlp`: the units of its one or two hidden layers; the first is each feature's vector.
    pub hidden: Vec<u32>,
    /// `fm`, `mlp`: standard deviation of the factors' (the features' vectors') initial values
    /// (normal, from `train.seed`).
    pub init_std: f32,
    /// `fm`: λ of the factors (default: `lambda`).
    pub lambda_factors: Option<f32>,
    /// `logistic`, `hinge`, `squared` or `softmax` (with `classes`).
    pub loss: LossName,
    /// Softmax: the number of classes `K` (labels `0..K`); the model has `K` weights per
    /// feature.
    pub classes: Option<u32>,
    /// L2 regularisation λ (not applied to the intercept).
    pub lambda: f32,
    /// Add an intercept: a feature of value 1 in every row, the model's last key, exempt from λ.
    pub intercept: bool,
}

impl Default for ModelSection {
    fn default() -> Self {
        ModelSection {
            kind: ModelKind::Linear,
            factors: 8,
            hidden: vec![64],
            init_std: 0.01,
            lambda_factors: None,
            loss: LossName::Logistic,
            classes: None,
            lambda: 0.01,
            intercept: true,
        }
    }
}

/// What `train.exchange = "auto"` and `train.compressor = "auto"` leave to be chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Auto {
    /// The exchange: `sharded` or `allgather`.
    pub exchange: bool,
    /// The compressor, among those that keep the model's loss
    /// ([`crate::exchange::cost::keeps_the_loss`]), each with its paper's memory.
    pub compressor: bool,
}

impl Auto {
    /// Whether anything is left to choose.
    pub fn any(self) -> bool {
        self.exchange || self.compressor
    }

    /// Removes `"auto"` from `train.exchange` and `train.compressor` (a name or a table named
    /// so) of a job's table, leaving their defaults, and says which it removed.
    /// Also refuses `"auto"` where it is no choice: with parameters, in `train.downlink`, or
    /// in another case (`"AUTO"`).
    fn take(table: &mut toml::Table) -> Result<Auto, String> {
        let Some(train) = table.get_mut("train").and_then(|t| t.as_table_mut()) else {
            return Ok(Auto::default());
        };
        let name = |v: &toml::Value| match v {
            toml::Value::String(s) => Some(s.clone()),
            toml::Value::Table(t) => t.get("name").and_then(|n| n.as_str()).map(String::from),
            _ => None,
        };
        for field in ["exchange", "compressor", "downlink", "memory"] {
            let Some(v) = train.get(field) else { continue };
            let Some(n) = name(v).filter(|n| n.eq_ignore_ascii_case("auto")) else {
                continue;
            };
            if field == "downlink" || field == "memory" {
                return Err(format!(
                    "train.{field}: \"auto\" is not a choice here: auto chooses train.exchange \
                     and train.compressor (with its memory and downlink); name one here"
                ));
            }
            if n != "auto" {
                return Err(format!(
                    "train.{field}: `{n}`: names are lower case, \"auto\""
                ));
            }
            if matches!(v, toml::Value::Table(t) if t.len() > 1) {
                return Err(format!(
                    "train.{field}: \"auto\" takes no parameters (it tries each codec at its \
                     defaults); name a codec to set them"
                ));
            }
        }
        let is_auto = |v: Option<&toml::Value>| v.and_then(name).is_some_and(|n| n == "auto");
        let auto = Auto {
            exchange: is_auto(train.get("exchange")),
            compressor: is_auto(train.get("compressor")),
        };
        if auto.exchange {
            train.remove("exchange");
        }
        if auto.compressor {
            train.remove("compressor");
        }
        Ok(auto)
    }
}

/// `[train]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainSection {
    /// Passes over the training data.
    pub epochs: u64,
    /// Mini-batch size as a fraction of the training set (0.1: ten rounds per epoch).
    pub batch_fraction: f64,
    /// `sharded`, `allgather` or `sketch` (`"auto"` in a job file: [`TrainSection::auto`]).
    pub exchange: ExchangeKind,
    /// Gradient codec, e.g. `{ name = "none" }` (`"auto"` in a job file: [`TrainSection::auto`]).
    pub compressor: CodecSpec,
    /// Which of `exchange` and `compressor` the job file set to `"auto"`: chosen before
    /// training from a round's cost measured on the job's own gradients and link.
    #[serde(skip)]
    pub auto: Auto,
    /// Error-feedback memory beside the compressor: `"none"`, `"residual"` or
    /// `{ name = "dgc", momentum = 0.9 }`. Absent: what the compressor's paper does (residual for
    /// topk and threshold, and for signsgd unless the optimizer is Adam; none for the others;
    /// dgc for the `sketch` exchange).
    pub memory: Option<MemorySpec>,
    /// Codec of the `sharded` downlink (the owners' model changes), with a residual at the owner.
    pub downlink: CodecSpec,
    /// Key ownership under `sharded`: `hashed` (default) or `ranges`.
    pub ownership: Ownership,
    /// `sharded` only: each worker asks the owners for the weights of its next mini-batch's
    /// keys (and of its test rows before an evaluation) instead of receiving every change.
    pub pull: bool,
    /// Where the workers of a process keep the model: `auto` (default: one per process when
    /// it can be shared and is larger than about a core's L2 cache, or its two workers'
    /// cores measure near), `worker` or `process`.
    pub replica: ReplicaMode,
    /// Parameters of the `sketch` exchange.
    pub sketch: SketchParams,
    /// Pipelined rounds: round `r`'s gradient is computed on the model after round
    /// `r - 1 - staleness`, so that up to `staleness` rounds' messages are in flight while the
    /// next round computes (0: every round waits for the last one's changes, exact SGD).
    /// Deterministic; `sharded` (without `pull`) and `allgather`, one replica per worker.
    pub staleness: u64,
    /// With `staleness ≥ 1`: correct each gradient for the rounds in flight with strength λ
    /// (DC-ASGD, Zheng et al. 2017: `g + λ·g⊙g⊙(w − w_bak)`); 0: no correction.
    pub delay_compensation: f32,
    /// Seed of every random choice (split, batches, randomised codecs).
    pub seed: u64,
    /// Also evaluate on the test rows every this many rounds (metrics rows of kind `eval`), so
    /// that time to a target loss is not bound to epoch ends; 0: at epoch ends only.
    pub eval_every: u64,
    /// How the test AUC is computed: from scores in this many bins (a power of two, 2 to 2^32;
    /// each worker sends counts per bin it uses, 3-15 bytes a bin, whatever the test set's size),
    /// or `"exact"` (every distinct score its own bin). The binned AUC is within a stated bound
    /// of the exact one ([`crate::model::ScoreBins`]).
    pub auc_bins: AucBins,
    /// Warm start: begin from the weights of this model file (written by `train` for the same
    /// features, dimension and loss); the optimizer state and error-feedback memory start
    /// fresh.
    pub init_model: Option<PathBuf>,
    /// Write a checkpoint every `every_rounds` rounds into `dir`:
    /// `checkpoint = { every_rounds = 100, dir = "ckpt" }`; `train --resume DIR` continues.
    pub checkpoint: Option<CheckpointSpec>,
}

impl Default for TrainSection {
    fn default() -> Self {
        TrainSection {
            auto: Auto::default(),
            epochs: 10,
            batch_fraction: 0.1,
            exchange: ExchangeKind::Sharded,
            compressor: CodecSpec::default(),
            memory: None,
            downlink: CodecSpec::default(),
            ownership: Ownership::Hashed,
            pull: false,
            replica: ReplicaMode::Auto,
            sketch: SketchParams::default(),
            staleness: 0,
            delay_compensation: 0.0,
            seed: 42,
            eval_every: 0,
            auc_bins: AucBins::default(),
            init_model: None,
            checkpoint: None,
        }
    }
}

/// The most rounds `train.staleness` lets be in flight: more only delays the model further
/// (the papers pipeline one or two rounds).
pub const MAX_STALENESS: u64 = 16;

/// `train.auc_bins`: a bin count (a power of two) or `"exact"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "AucBinsText", into = "AucBinsText")]
pub struct AucBins {
    /// Bits of a score's order key that pick its bin: `2^bits` bins, 32 exact.
    bits: u8,
}

impl AucBins {
    /// Every distinct score its own bin.
    pub const EXACT: AucBins = AucBins { bits: 32 };

    /// Bits of a score's order key that pick its bin (32: exact).
    pub fn bits(self) -> u8 {
        self.bits
    }
}

impl Default for AucBins {
    /// 65,536 bins: a bin spans under 1% of its scores' value.
    fn default() -> Self {
        AucBins { bits: 16 }
    }
}

/// How `train.auc_bins` is written.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum AucBinsText {
    Count(i64),
    Word(String),
    /// Anything else (a float, a table): an error that says what is expected.
    #[serde(skip_serializing)]
    Other(serde::de::IgnoredAny),
}

impl TryFrom<AucBinsText> for AucBins {
    type Error = String;

    fn try_from(t: AucBinsText) -> Result<Self, String> {
        let expected = "expected a power of two from 2 to 4294967296 (e.g. 65536), or \"exact\"";
        match t {
            AucBinsText::Count(n) if (2..=1 << 32).contains(&n) && (n as u64).is_power_of_two() => {
                Ok(AucBins {
                    bits: n.trailing_zeros() as u8,
                })
            }
            AucBinsText::Word(w) if w == "exact" => Ok(AucBins::EXACT),
            AucBinsText::Count(n) => Err(format!("auc_bins = {n}: {expected}")),
            AucBinsText::Word(w) => Err(format!("auc_bins = \"{w}\": {expected}")),
            AucBinsText::Other(_) => Err(format!("auc_bins: {expected}")),
        }
    }
}

impl From<AucBins> for AucBinsText {
    fn from(b: AucBins) -> Self {
        match b.bits {
            32 => AucBinsText::Word("exact".into()),
            bits => AucBinsText::Count(1 << bits),
        }
    }
}

/// `[output]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputSection {
    /// Metrics CSV (one row per round and per epoch).
    pub metrics: Option<PathBuf>,
    /// Final model file.
    pub model: Option<PathBuf>,
    /// A directory to write every worker's mini-batch gradient of every round into
    /// (`round00012-worker1.bin`, the format of `gradflow codec compare --input`).
    pub gradients: Option<PathBuf>,
}

/// A job that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The file cannot be read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// TOML syntax, an unknown field or a value of the wrong type.
    #[error("{path}: {}", clip_lines(.message))]
    Parse { path: PathBuf, message: String },
    /// A value out of range; names the field.
    #[error("{path}: {}", clip_lines(.message))]
    Invalid { path: PathBuf, message: String },
    /// A `--set` override that is not `key.path=value`, or whose value cannot be read.
    #[error("bad override '{}': {}", crate::data::clip(.0), clip_lines(.1))]
    Override(String, String),
}

impl Job {
    /// The id a cluster's processes compare in their handshake ([`crate::handshake`]): a
    /// digest of the whole job but its `[output]` section (which only process 0 uses), so that
    /// processes given different job files or overrides refuse each other.
    pub fn cluster_id(&self) -> [u8; 16] {
        let training = Job {
            output: OutputSection::default(),
            ..self.clone()
        };
        let text = toml::to_string(&training).unwrap_or_else(|_| format!("{training:?}"));
        crate::handshake::job_id(&text)
    }

    /// Every field of the job that a cluster's processes must share (all but `output`), as
    /// dotted names and TOML values: what the handshake compares, naming the one that differs.
    pub fn cluster_fields(&self) -> Vec<(String, String)> {
        fn flatten(prefix: &str, table: &toml::Table, out: &mut Vec<(String, String)>) {
            for (k, v) in table {
                let name = match prefix {
                    "" => k.clone(),
                    p => format!("{p}.{k}"),
                };
                match v {
                    toml::Value::Table(t) => flatten(&name, t, out),
                    v => out.push((name, v.to_string())),
                }
            }
        }
        let training = Job {
            output: OutputSection::default(),
            ..self.clone()
        };
        let mut out = Vec::new();
        if let Ok(table) = toml::Table::try_from(&training) {
            flatten("", &table, &mut out);
        }
        out
    }

    /// The whole job as a job file: every field, `"auto"` where the job file said so. Parsing
    /// it gives this job back.
    pub fn to_toml(&self) -> String {
        let mut table = toml::Table::try_from(self).expect("a job serializes");
        let train = table.get_mut("train").and_then(|t| t.as_table_mut());
        if let Some(train) = train {
            let auto = self.train.auto;
            for (field, is_auto) in [("exchange", auto.exchange), ("compressor", auto.compressor)] {
                if is_auto {
                    train.insert(field.into(), "auto".into());
                }
            }
        }
        shortest_floats(&mut table);
        toml::to_string(&table).expect("a table serializes")
    }

    /// Loads `path` and applies `overrides` (`section.field=value`, the value in TOML syntax, or a
    /// bare string), then validates.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Job, JobError> {
        let text = crate::data::source::read_input_text(path).map_err(|source| JobError::Io {
            path: path.into(),
            source,
        })?;
        Self::parse(&text, path, overrides)
    }

    /// Parses job text; `path` only names it in errors.
    pub fn parse(text: &str, path: &Path, overrides: &[String]) -> Result<Job, JobError> {
        let parse_err = |e: toml::de::Error| JobError::Parse {
            path: path.into(),
            message: with_auto(e.to_string().trim_end()),
        };
        let mut table: toml::Table = toml::from_str(text).map_err(parse_err)?;
        for o in overrides {
            apply_override(&mut table, o)?;
        }
        let auto = Auto::take(&mut table).map_err(|message| JobError::Parse {
            path: path.into(),
            message,
        })?;
        let format_given = table.get("data").and_then(|d| d.get("format")).is_some();
        let loss_given = table.get("model").and_then(|m| m.get("loss")).is_some();
        let mut job = if overrides.is_empty() && !auto.any() {
            // The text itself, so that errors point at its lines.
            toml::from_str::<Job>(text).map_err(parse_err)?
        } else {
            Job::deserialize(toml::Value::Table(table)).map_err(|e| {
                let e = with_auto(e.to_string().trim_end());
                JobError::Parse {
                    path: path.into(),
                    message: match overrides.is_empty() {
                        true => e,
                        false => {
                            let shown: Vec<_> =
                                overrides.iter().map(|o| crate::data::clip(o)).collect();
                            format!("after overrides {shown:?}: {e}")
                        }
                    },
                }
            })?
        };
        job.train.auto = auto;
        if !format_given {
            let implied = job.data.train.as_deref().and_then(Format::from_extension);
            job.data.format = implied.unwrap_or(job.data.format);
        }
        // Classes named by the label imply softmax over that many.
        let named = job
            .data
            .label
            .as_ref()
            .map_or(0, |l| l.classes.len() as u32);
        if named > 0 {
            if !loss_given {
                job.model.loss = LossName::Softmax;
            }
            if job.model.loss == LossName::Softmax {
                job.model.classes = job.model.classes.or(Some(named));
            }
        }
        job.validate().map_err(|message| JobError::Invalid {
            path: path.into(),
            message,
        })?;
        Ok(job)
    }

    /// What `"auto"` cannot be combined with.
    fn validate_auto(&self) -> Result<(), String> {
        let t = &self.train;
        let what = match (t.auto.exchange, t.auto.compressor) {
            (false, false) => return Ok(()),
            (true, false) => "train.exchange = \"auto\"",
            (false, true) => "train.compressor = \"auto\"",
            (true, true) => "train.exchange and train.compressor = \"auto\"",
        };
        if t.auto.compressor && t.memory.is_some() {
            return Err(format!(
                "train.memory: {what} chooses each codec with its paper's memory; remove \
                 train.memory (or name the compressor)"
            ));
        }
        if !t.auto.exchange && t.exchange == ExchangeKind::Sketch {
            return Err(format!(
                "{what}: chooses among the sharded and allgather exchanges' codecs; the sketch \
                 exchange has its own"
            ));
        }
        if t.pull {
            return Err(format!(
                "train.pull: {what} does not cover pull; remove one"
            ));
        }
        if t.checkpoint.is_some() {
            return Err(format!(
                "train.checkpoint: {what} may choose differently when resumed (the choice is \
                 measured); run once, then checkpoint the configuration it printed"
            ));
        }
        if self.data.format == Format::Program {
            return Err(format!(
                "data.format: {what} measures the job's rows before training, and a program's \
                 rows arrive in its own dataflow; name the exchange and compressor"
            ));
        }
        Ok(())
    }

    /// Checks value ranges; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        let t = &self.train;
        if t.epochs == 0 {
            return Err("train.epochs: must be at least 1".into());
        }
        self.validate_auto()?;
        if let Some(c) = &t.checkpoint {
            if c.every_rounds == 0 {
                return Err("train.checkpoint.every_rounds: must be at least 1".into());
            }
            if c.dir.as_os_str().is_empty() {
                return Err("train.checkpoint.dir: must name a directory".into());
            }
        }
        if !(t.batch_fraction > 0.0 && t.batch_fraction <= 1.0) {
            return Err(format!(
                "train.batch_fraction: must be in (0, 1], got {}",
                t.batch_fraction
            ));
        }
        let per_epoch = self.rounds_per_epoch();
        match t.epochs.checked_mul(per_epoch) {
            Some(rounds) if rounds <= MAX_ROUNDS => {}
            _ => {
                return Err(format!(
                    "train.epochs x rounds per epoch (1 / train.batch_fraction = {per_epoch}) is \
                     {} rounds, more than the limit of {MAX_ROUNDS}: lower train.epochs or raise \
                     train.batch_fraction",
                    t.epochs as u128 * per_epoch as u128
                ))
            }
        }
        let d = &self.data;
        if !(0.0..1.0).contains(&d.test_fraction) {
            return Err(format!(
                "data.test_fraction: must be in [0, 1), got {}",
                d.test_fraction
            ));
        }
        if d.dim == Some(0) {
            return Err("data.dim: must be positive".into());
        }
        if d.max_dim == 0 || d.max_dim == u32::MAX {
            return Err(format!(
                "data.max_dim: must be 1 to {} (the intercept takes one more key)",
                u32::MAX - 1
            ));
        }
        let above_cap = |what: String, dim: u64| {
            format!(
                "{what} makes a model of {dim} features, more than data.max_dim = {}: raise \
                 data.max_dim in [data] if every worker has the memory (4-16 bytes per feature)",
                d.max_dim
            )
        };
        if let Some(dim) = d.dim.filter(|&n| n > d.max_dim) {
            return Err(above_cap(format!("data.dim = {dim}"), dim as u64));
        }
        if d.train.is_none() && d.synth.dim > d.max_dim {
            return Err(above_cap(
                format!("data.synth.dim = {}", d.synth.dim),
                d.synth.dim as u64,
            ));
        }
        let table_fields =
            d.label.is_some() || d.features != FeatureSpec::default() || !d.join.is_empty();
        if d.format == Format::Csv {
            if d.train.is_none() {
                return Err("data.train: a csv job needs a training file".into());
            }
            if d.dim.is_some() || d.zero_based {
                return Err("data.dim, data.zero_based: LibSVM settings, not used with csv".into());
            }
            d.table().validate()?;
        } else if table_fields {
            return Err(
                "data.label, data.features, data.join: set data.format = \"csv\" to use them"
                    .into(),
            );
        }
        let hashed = d.features.hashed_width();
        if hashed > d.max_dim as u64 {
            let what = match (d.features.hash_bits, d.features.text.is_empty()) {
                (Some(b), true) => format!("data.features.hash_bits = {b}"),
                _ => "data.features' hash_bits (the table's and its text columns')".into(),
            };
            return Err(above_cap(what, hashed));
        }
        if d.format == Format::Program {
            if d.dim.is_none() {
                return Err(
                    "data.dim: a program's rows need the number of features up front \
                            (the model is sized before the dataflow prepares any row)"
                        .into(),
                );
            }
            let named = [
                ("data.train", d.train.is_some()),
                ("data.test", d.test.is_some()),
                ("data.zero_based", d.zero_based),
            ];
            if let Some((field, _)) = named.iter().find(|f| f.1) {
                return Err(format!(
                    "{field}: not used with data.format = \"program\"; name the program's \
                     inputs in [data.files]"
                ));
            }
        } else if !d.files.is_empty() {
            return Err(
                "data.files: the inputs of a job program; set data.format = \"program\"".into(),
            );
        }
        let idx = d.format == Format::Idx;
        if idx {
            if d.train.is_none() || d.train_labels.is_none() {
                return Err("data.train, data.train_labels: an idx job needs both".into());
            }
            if d.test.is_some() != d.test_labels.is_some() {
                return Err("data.test, data.test_labels: an idx test set needs both".into());
            }
            if d.dim.is_some() || d.zero_based {
                return Err("data.dim, data.zero_based: LibSVM settings, not used with idx".into());
            }
        } else if d.train_labels.is_some() || d.test_labels.is_some() {
            return Err(
                "data.train_labels, data.test_labels: set data.format = \"idx\" to use them".into(),
            );
        }
        if d.train.is_none() {
            d.synth.validate()?;
        } else if d.test.is_some()
            && d.test_fraction != DataSection::default().test_fraction
            && d.test_fraction != 0.0
        {
            return Err(
                "data.test_fraction: not used when data.test names a test file; remove one".into(),
            );
        }
        let named = self
            .data
            .label
            .as_ref()
            .map_or(0, |l| l.classes.len() as u32);
        if named > 0 && (self.model.loss, self.model.classes) != (LossName::Softmax, Some(named)) {
            return Err(format!(
                "data.label.classes: names {named} classes, which takes model.loss = \"softmax\" \
                 with model.classes = {named} (both the default with named classes)"
            ));
        }
        match (self.model.loss, self.model.classes) {
            (LossName::Softmax, None) => {
                return Err("model.classes: softmax needs the number of classes".into())
            }
            (LossName::Softmax, Some(k)) if !(2..=MAX_CLASSES).contains(&k) => {
                return Err(format!(
                    "model.classes: must be 2 to {MAX_CLASSES}, got {k}"
                ))
            }
            (LossName::Softmax, _) | (_, None) => {}
            (loss, Some(_)) => {
                return Err(format!(
                    "model.classes: only softmax has classes, not {}",
                    loss.as_str()
                ))
            }
        }
        if !(self.model.lambda.is_finite() && self.model.lambda >= 0.0) {
            return Err(format!(
                "model.lambda: must be a finite number >= 0, got {}",
                self.model.lambda
            ));
        }
        let m = &self.model;
        if m.kind == ModelKind::Fm {
            if m.loss == LossName::Softmax {
                return Err("model.kind: fm has one output; softmax needs linear".into());
            }
            if !(1..=MAX_FACTORS).contains(&m.factors) {
                return Err(format!(
                    "model.factors: must be 1 to {MAX_FACTORS}, got {}",
                    m.factors
                ));
            }
            if !(m.init_std.is_finite() && m.init_std > 0.0) {
                return Err(format!(
                    "model.init_std: must be a finite number > 0 (factors that start at 0 \
                     get no gradient), got {}",
                    m.init_std
                ));
            }
            if let Some(l) = m.lambda_factors.filter(|l| !(l.is_finite() && *l >= 0.0)) {
                return Err(format!(
                    "model.lambda_factors: must be a finite number >= 0, got {l}"
                ));
            }
        } else if m.lambda_factors.is_some() {
            return Err("model.lambda_factors: for model.kind = \"fm\"".into());
        }
        if m.kind == ModelKind::Mlp {
            let sizes = (1..=2).contains(&m.hidden.len())
                && m.hidden.iter().all(|h| (1..=MAX_HIDDEN).contains(h));
            if !sizes {
                return Err(format!(
                    "model.hidden: one or two layers of 1 to {MAX_HIDDEN} units, got {:?}",
                    m.hidden
                ));
            }
            if !(m.init_std.is_finite() && m.init_std > 0.0) {
                return Err(format!(
                    "model.init_std: must be a finite number > 0, got {}",
                    m.init_std
                ));
            }
        } else if m.hidden != ModelSection::default().hidden {
            return Err("model.hidden: for model.kind = \"mlp\"".into());
        }
        crate::codec::build_codec(&self.train.compressor)
            .map_err(|e| format!("train.compressor: {e}"))?;
        crate::codec::build_codec(&self.train.downlink)
            .map_err(|e| format!("train.downlink: {e}"))?;
        self.train.sketch.validate()?;
        if self.train.exchange == ExchangeKind::Sketch
            && self.train.compressor != CodecSpec::default()
        {
            return Err(
                "train.compressor: the sketch exchange sends count sketches and exact \
                 values, not codec messages; set compressor = { name = \"none\" }"
                    .into(),
            );
        }
        if self.train.exchange != ExchangeKind::Sharded
            && self.train.downlink != CodecSpec::default()
        {
            return Err("train.downlink: only the sharded exchange has a downlink".into());
        }
        if self.train.pull {
            if self.train.exchange != ExchangeKind::Sharded {
                return Err("train.pull: only the sharded exchange pulls weights".into());
            }
            if self.train.downlink != CodecSpec::default() {
                return Err(
                    "train.pull: pulled weights travel exact; train.downlink must be none".into(),
                );
            }
        }
        let dc = self.train.delay_compensation;
        if !(dc.is_finite() && dc >= 0.0) {
            return Err(format!(
                "train.delay_compensation = {dc}: λ must be a finite number ≥ 0"
            ));
        }
        if dc > 0.0 && self.train.staleness == 0 {
            return Err(format!(
                "train.delay_compensation = {dc}: it corrects for rounds in flight, and \
                 train.staleness is 0"
            ));
        }
        if self.train.staleness > 0 {
            let s = self.train.staleness;
            if s > MAX_STALENESS {
                return Err(format!(
                    "train.staleness = {s}: at most {MAX_STALENESS} rounds may be in flight"
                ));
            }
            if self.train.exchange == ExchangeKind::Sketch && self.memory() != MemorySpec::None {
                return Err(format!(
                    "train.staleness = {s}: the sketch exchange's memory ({}) learns which of \
                     its values a round sent only from the round's update, after the next \
                     rounds' vectors have taken them again; pipeline it with memory = \"none\", \
                     or run it with staleness = 0",
                    self.memory().name()
                ));
            }
            if self.train.pull {
                return Err(format!(
                    "train.staleness = {s}: pulled weights answer the next round's batch; \
                     train.pull runs with staleness = 0"
                ));
            }
            if self.train.replica == ReplicaMode::Process {
                return Err(format!(
                    "train.staleness = {s}: a replica shared by the workers of a process is \
                     written by its owners as soon as their round ends; set replica = \"worker\" \
                     (or \"auto\")"
                ));
            }
        }
        if self.train.replica == ReplicaMode::Process
            && (self.train.exchange != ExchangeKind::Sharded || self.train.pull)
        {
            return Err(
                "train.replica = \"process\": one replica per process needs the sharded \
                 exchange without pull"
                    .into(),
            );
        }
        self.optimizer.validate()
    }

    /// One line naming how gradients move: exchange, codec, memory (resolved), downlink,
    /// ownership, pull, or the sketch's parameters.
    pub fn describe_exchange(&self) -> String {
        let t = &self.train;
        if t.auto.any() {
            let fixed = match (t.auto.exchange, t.auto.compressor) {
                (true, true) => String::new(),
                (true, false) => format!(" among compressor {}", t.compressor.name()),
                _ => format!(" among the {} exchange's compressors", t.exchange.name()),
            };
            return format!("auto{fixed} (chosen from a round measured before training)");
        }
        let name = |c: &CodecSpec| c.name().to_string();
        match t.exchange {
            ExchangeKind::Sketch => {
                let s = &t.sketch;
                let or_default =
                    |x: u32, d: &str| if x == 0 { d.to_string() } else { x.to_string() };
                format!(
                    "sketch, k {}, P {}, {} rows x {} columns, recovery {}, memory {}",
                    or_default(s.k, "1% of dim"),
                    s.p,
                    s.rows,
                    or_default(s.columns, "P·k/rows"),
                    format!("{:?}", s.recovery).to_lowercase(),
                    self.memory().name()
                )
            }
            ExchangeKind::Allgather => format!(
                "allgather, compressor {}, memory {}",
                name(&t.compressor),
                self.memory().name()
            ),
            ExchangeKind::Sharded => format!(
                "sharded ({:?} ownership), compressor {}, memory {}, {}",
                t.ownership,
                name(&t.compressor),
                self.memory().name(),
                if t.pull {
                    "pull".to_string()
                } else {
                    format!("downlink {}", name(&t.downlink))
                }
            )
            .replace("Hashed", "hashed")
            .replace("Ranges", "ranges"),
        }
    }

    /// The uplink memory: the job's, or the paper default of its compressor and exchange.
    pub fn memory(&self) -> MemorySpec {
        if let Some(m) = &self.train.memory {
            return m.clone();
        }
        if self.train.exchange == ExchangeKind::Sketch {
            return MemorySpec::Dgc { momentum: 0.9 };
        }
        let adam = self.optimizer.kind == crate::optim::OptimizerKind::Adam;
        match crate::codec::build_codec(&self.train.compressor).map(|c| c.error_feedback()) {
            Ok(ErrorFeedback::Residual) => MemorySpec::Residual,
            Ok(ErrorFeedback::ResidualUnlessAdam) if !adam => MemorySpec::Residual,
            Ok(ErrorFeedback::LazyResidualUnlessAdam) if !adam => MemorySpec::LazyResidual,
            _ => MemorySpec::None,
        }
    }

    /// Rounds per epoch: `ceil(1 / batch_fraction)` (at most 2^53 for a valid fraction).
    pub fn rounds_per_epoch(&self) -> u64 {
        (1.0 / self.train.batch_fraction - 1e-9).ceil().max(1.0) as u64
    }

    /// The rows worker `worker` of `workers` trains and tests on, and the model's dimension
    /// (the intercept included). Deterministic: every worker computes the same dimension and
    /// split.
    pub fn load_worker_data(
        &self,
        worker: usize,
        workers: usize,
    ) -> Result<(WorkerData, u32), String> {
        let (data, dim) = self.load_rows(worker, workers)?;
        self.with_intercept(data, dim)
    }

    /// Adds the intercept to `data` of dimension `dim` when the job has one: the model's
    /// dimension grows by one. A dimension above `data.max_dim` (a vocabulary that large) is
    /// an error.
    fn with_intercept(&self, mut data: WorkerData, dim: u32) -> Result<(WorkerData, u32), String> {
        if dim > self.data.max_dim {
            return Err(format!(
                "the data has {dim} features, more than data.max_dim = {}: raise data.max_dim \
                 in [data] if every worker has the memory (4-16 bytes per feature), or hash \
                 the features (data.features.hash_bits)",
                self.data.max_dim
            ));
        }
        let width = self.width() as u64;
        let dense = self.model_fn(dim + 1).dense() as u64;
        let keys = (dim as u64 + self.model.intercept as u64) * width + dense;
        if width > 1 && keys > self.data.max_dim as u64 + width {
            let per = match self.model.kind {
                ModelKind::Linear => format!("model.classes = {width}"),
                ModelKind::Fm => format!("model.factors = {}", self.model.factors),
                ModelKind::Mlp => format!("model.hidden = {:?}", self.model.hidden),
            };
            return Err(format!(
                "the data has {dim} features: with {per} the model has {keys} weights, more \
                 than data.max_dim = {} (plus the intercept's): raise data.max_dim in [data] \
                 if every worker has the memory (4-16 bytes per weight), or hash the features \
                 (data.features.hash_bits)",
                self.data.max_dim
            ));
        }
        self.check_labels(&data)?;
        if !self.model.intercept {
            return Ok((data, dim));
        }
        data.train.add_intercept();
        data.test.add_intercept();
        Ok((data, dim + 1))
    }

    /// What a job with `data.format = "program"` names for its program.
    pub fn program_inputs(&self) -> Option<ProgramInputs> {
        (self.data.format == Format::Program).then(|| ProgramInputs {
            files: self.data.files.clone(),
            test_fraction: self.data.test_fraction,
        })
    }

    /// What the table pipeline needs of a CSV job.
    pub fn table_input(&self) -> TableInput {
        let d = &self.data;
        TableInput {
            spec: d.table(),
            train: d.train.clone().unwrap_or_default(),
            test: d.test.clone(),
            test_fraction: d.test_fraction,
            tail: d.test_split == TestSplit::Tail,
            seed: self.train.seed,
            classification: self.loss().task() == Task::Binary,
        }
    }

    /// As [`Job::load_worker_data`], on a timely worker, for every format: a CSV job runs its
    /// differential-dataflow pipeline on the workers. Also returns the feature map (TOML) of a
    /// CSV job and notes for the user. With `data.cache`, the rows come from the cache when
    /// every worker has a current one, and are loaded and cached otherwise.
    ///
    /// A batch fraction that would give some worker a batch of less than one row is an error
    /// (the workers compare their row counts, so each reports the same smallest valid value).
    pub fn load_on(&self, worker: &mut timely::worker::Worker) -> Result<Loaded, String> {
        let loaded = match &self.data.cache {
            Some(dir) if self.data.format != Format::Program => self.load_cached(worker, dir),
            _ => self.load_fresh(worker),
        };
        if self.data.format == Format::Program {
            return loaded; // the program's dataflow brings the rows later
        }
        // Every worker joins the comparison, a worker whose loading failed too.
        let rows = loaded
            .as_ref()
            .map_or(u64::MAX, |l| l.0.train.rows() as u64);
        let counts = gather(worker, vec![((worker.index(), rows), 1)], |c| c);
        let fewest = counts.iter().min_by_key(|(_, rows)| *rows);
        if let (Ok(_), Some(&(w, rows))) = (&loaded, fewest) {
            self.check_batch(w, rows)?;
        }
        loaded
    }

    /// Whether every batch of a worker with `rows` training rows (worker `w`, the one with the
    /// fewest) holds at least one row.
    fn check_batch(&self, w: usize, rows: u64) -> Result<(), String> {
        let per_epoch = self.rounds_per_epoch();
        if rows >= per_epoch {
            return Ok(());
        }
        if rows == 0 {
            return Err(format!(
                "worker {w} has no training rows: the data has fewer rows than the run has \
                 workers (use fewer workers or more data)"
            ));
        }
        Err(format!(
            "train.batch_fraction = {} makes {per_epoch} rounds an epoch, but worker {w} trains \
             on {rows} rows: its batches would hold less than one row. With this data and \
             these workers the smallest valid value is {} (1/{rows})",
            self.train.batch_fraction,
            1.0 / rows.max(1) as f64,
        ))
    }

    /// [`Job::load_on`] through the cache in `dir`. Whether to read it is decided by all
    /// workers together (the loaders exchange summaries, so either every worker loads or none
    /// does): one worker's missing, stale or damaged file makes them all load and rewrite.
    fn load_cached(
        &self,
        worker: &mut timely::worker::Worker,
        dir: &Path,
    ) -> Result<Loaded, String> {
        let (index, peers) = (worker.index(), worker.peers());
        let path = cache::path(dir, index, peers);
        let key = self.cache_key(index, peers);
        let hit = match key {
            Some(key) => cache::read(&path, key),
            None => Err(cache::Miss::Absent),
        };
        let every_worker_hit = !gather(worker, vec![(hit.is_ok(), 1)], |c| c).contains(&false);
        let miss = match (every_worker_hit, hit) {
            (true, Ok(c)) => {
                let data = WorkerData {
                    train: c.train,
                    test: c.test,
                    ignored_test_features: c.ignored_test_features,
                };
                self.check_labels(&data)?;
                let mut notes = c.notes;
                notes.push(format!("data: read from the cache {}", dir.display()));
                return Ok((data, c.dim, c.features, notes));
            }
            (_, hit) => hit.err(),
        };
        let (data, dim, features, mut notes) = self.load_fresh(worker)?;
        let Some(key) = key else {
            return Ok((data, dim, features, notes));
        };
        let rows = CachedRows {
            dim,
            train: data.train,
            test: data.test,
            ignored_test_features: data.ignored_test_features,
            features,
            notes: notes.clone(),
        };
        notes.push(match cache::write(&path, key, &rows) {
            Ok(bytes) => format!(
                "data: wrote the cache {} ({:.1} MB for worker {index}; {}); later runs of \
                 this job read it",
                dir.display(),
                bytes as f64 / 1e6,
                match miss {
                    Some(miss) => miss.to_string(),
                    None => "another worker's cache was missing or stale".into(),
                }
            ),
            Err(e) => format!("data: could not write the cache {}: {e}", path.display()),
        });
        let data = WorkerData {
            train: rows.train,
            test: rows.test,
            ignored_test_features: rows.ignored_test_features,
        };
        Ok((data, dim, rows.features, notes))
    }

    /// Every file the job reads its rows from: training and test files (and their IDX
    /// labels), joined tables, a program's named inputs.
    pub fn input_files(&self) -> impl Iterator<Item = &PathBuf> {
        let d = &self.data;
        [&d.train, &d.test, &d.train_labels, &d.test_labels]
            .into_iter()
            .flatten()
            .chain(d.join.iter().map(|j| &j.file))
            .chain(d.files.values())
    }

    /// The fingerprint a cache file is written under: gradflow's version and executable,
    /// everything in the job that decides the rows (the data section, the loss, classes and
    /// intercept, the split's seed), the worker's place, and each input file's size and
    /// modification time. `None` when an input cannot be looked at (loading then reports it).
    fn cache_key(&self, worker: usize, peers: usize) -> Option<u64> {
        use std::fmt::Write;
        let data = DataSection {
            cache: None,
            ..self.data.clone()
        };
        let m = &self.model;
        let mut text = format!(
            "gradflow {} cache 1\n{}\n{:?} {:?} {} seed {} worker {worker} of {peers}\n",
            env!("CARGO_PKG_VERSION"),
            toml::to_string(&data).ok()?,
            m.loss,
            m.classes,
            m.intercept,
            self.train.seed,
        );
        let exe = std::env::current_exe().ok();
        for path in exe.iter().chain(self.input_files()) {
            let meta = std::fs::metadata(path).ok()?;
            let modified = meta
                .modified()
                .ok()?
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?;
            writeln!(
                text,
                "{} {} {}",
                path.display(),
                meta.len(),
                modified.as_nanos()
            )
            .ok()?;
        }
        Some(xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
    }

    /// [`Job::load_on`] without the cache.
    fn load_fresh(&self, worker: &mut timely::worker::Worker) -> Result<Loaded, String> {
        if self.data.format == Format::Program {
            // The program's dataflow brings the rows; the model's size is the job's.
            let dim = self
                .data
                .dim
                .expect("validated: a program job has data.dim");
            let (data, dim) = self.with_intercept(WorkerData::empty(dim), dim)?;
            return Ok((data, dim, None, vec![]));
        }
        if self.data.format != Format::Csv {
            let part = Part {
                index: worker.index(),
                count: worker.peers(),
            };
            if self.data.train.is_none() || self.data.format == Format::Idx {
                let (data, dim) = self.load_worker_data(part.index, part.count)?;
                return Ok((data, dim, None, vec![]));
            }
            // Each worker parses its own byte range; the parts' summaries reach every worker.
            let mut share = |summary: PartSummary| -> Vec<PartSummary> {
                gather(worker, vec![(summary, 1)], |c| c)
            };
            let read = self.libsvm_part(part, None);
            let summaries = share(PartSummary::of(part, &read));
            let (mut data, dim) = self.split_libsvm(part, read, &summaries)?;
            if self.data.test.is_some() {
                let read = self.libsvm_part(part, Some(dim));
                let summaries = share(PartSummary::of(part, &read));
                first_error(&summaries)?;
                if summaries.iter().all(|s| s.rows == 0) {
                    let path = self.data.test.as_deref().unwrap_or(Path::new("data.test"));
                    return Err(format!(
                        "{}: no rows to test on (the file is empty or has only comments); \
                         remove data.test to hold out data.test_fraction of the training rows",
                        path.display()
                    ));
                }
                data.test = read?.data;
                data.ignored_test_features = summaries.iter().map(|s| s.ignored).sum();
            }
            let (data, dim) = self.with_intercept(data, dim)?;
            return Ok((data, dim, None, vec![]));
        }
        let p = crate::data::table::prepare(worker, &self.table_input())?;
        let data = WorkerData {
            train: p.train,
            test: p.test,
            ignored_test_features: 0,
        };
        let (data, dim) = self.with_intercept(data, p.map.dim)?;
        let map = toml::to_string(&p.map).map_err(|e| format!("feature map: {e}"))?;
        Ok((data, dim, Some(map), p.notes))
    }

    /// Part `part` of the training file (`test_dim: None`) or of the test file, whose features
    /// beyond the training dimension are ignored.
    fn libsvm_part(&self, part: Part, test_dim: Option<u32>) -> Result<PartRows, String> {
        let d = &self.data;
        let (path, opts) = match test_dim {
            None => (
                d.train.as_ref(),
                LibsvmOptions {
                    zero_based: d.zero_based,
                    dim: d.dim,
                    ignore_beyond_dim: false,
                    max_dim: d.max_dim,
                    classes: self.classes(),
                    binary: self.loss().task() == Task::Binary,
                },
            ),
            Some(dim) => (
                d.test.as_ref(),
                LibsvmOptions {
                    zero_based: d.zero_based,
                    dim: Some(dim),
                    ignore_beyond_dim: true,
                    max_dim: d.max_dim,
                    classes: self.classes(),
                    binary: self.loss().task() == Task::Binary,
                },
            ),
        };
        let path = path.ok_or("no file to read")?;
        read_libsvm_part(path, &opts, part).map_err(|e| e.to_string())
    }

    /// This worker's training and test rows from its part of the training file, numbered
    /// after the rows of the parts before it, so that the split (hash or tail) is the whole
    /// file's for any number of workers; and the dimension, the largest of every part's.
    fn split_libsvm(
        &self,
        part: Part,
        read: Result<PartRows, String>,
        summaries: &[PartSummary],
    ) -> Result<(WorkerData, u32), String> {
        first_error(summaries)?;
        let rows = read?.data;
        let d = &self.data;
        let dim = d
            .dim
            .unwrap_or_else(|| summaries.iter().map(|s| s.dim).max().unwrap_or(0));
        let total: u64 = summaries.iter().map(|s| s.rows).sum();
        if total == 0 {
            return Err(format!(
                "{}: no rows to train on (the file is empty or has only comments)",
                d.train
                    .as_deref()
                    .unwrap_or(std::path::Path::new("data.train"))
                    .display()
            ));
        }
        let before: u64 = summaries
            .iter()
            .filter(|s| (s.part as usize) < part.index)
            .map(|s| s.rows)
            .sum();
        let test_fraction = if d.test.is_some() {
            0.0
        } else {
            d.test_fraction
        };
        let filter = RowFilter {
            worker: 0,
            workers: 1,
            test_fraction,
            seed: self.train.seed,
            tail_from: (d.test_split == TestSplit::Tail && test_fraction > 0.0)
                .then(|| RowFilter::tail_start(total as usize, test_fraction)),
        };
        let (mut train, mut test) = rows.into_split_numbered(before as usize, &filter);
        train.dim = dim;
        test.dim = dim;
        Ok((
            WorkerData {
                train,
                test,
                ignored_test_features: 0,
            },
            dim,
        ))
    }

    /// The intercept's first key in a model of `features` features (the intercept is the last
    /// feature; its keys are the model's last `width`), if the job has one.
    pub fn intercept_key(&self, features: u32) -> Option<u32> {
        self.model.intercept.then(|| (features - 1) * self.width())
    }

    /// The job's model (`model.kind`) for data of `features` features, the intercept included:
    /// linear, of [`Self::outputs`] margins per row, or a factorization machine.
    pub fn model_fn(&self, features: u32) -> ModelFn {
        let m = &self.model;
        match m.kind {
            ModelKind::Linear => ModelFn::new(Linear::new(self.outputs())),
            ModelKind::Fm => {
                let intercept = m.intercept.then(|| features - 1);
                ModelFn::new(Fm::new(m.factors, m.init_std, intercept))
            }
            ModelKind::Mlp => ModelFn::new(Mlp::new(&m.hidden, self.outputs(), m.init_std)),
        }
    }

    /// Weights per feature of the job's model.
    pub fn width(&self) -> u32 {
        match self.model.kind {
            ModelKind::Linear => self.outputs(),
            ModelKind::Fm => 1 + self.model.factors,
            ModelKind::Mlp => self.model.hidden[0],
        }
    }

    /// The job's loss.
    pub fn loss(&self) -> LossFn {
        self.model.loss.build(self.outputs())
    }

    /// The number of classes labels must name, for softmax.
    fn classes(&self) -> Option<u32> {
        (self.model.loss == LossName::Softmax).then(|| self.outputs())
    }

    /// Outputs per row of the job's model: `model.classes` for softmax, 1 otherwise.
    pub fn outputs(&self) -> u32 {
        match self.model.loss {
            LossName::Softmax => self.model.classes.unwrap_or(2),
            _ => 1,
        }
    }

    /// An error naming the first label of `data` the loss cannot train or test on (a class
    /// outside `0..model.classes`), and where it is. The LibSVM and IDX readers check labels
    /// as they read them; this covers every source.
    fn check_labels(&self, data: &WorkerData) -> Result<(), String> {
        if self.classes().is_none() {
            return Ok(()); // every finite label is one the loss reads
        }
        let loss = self.loss();
        let sides = [
            (&data.train, self.data.train.as_deref(), "training"),
            (&data.test, self.data.test.as_deref(), "test"),
        ];
        for (rows, file, side) in sides {
            if let Some((i, e)) = rows
                .labels
                .iter()
                .enumerate()
                .find_map(|(i, &l)| loss.check_label(l).err().map(|e| (i, e)))
            {
                let file = file.or(self.data.train.as_deref());
                let file = file.map_or("the generated data".into(), |f| f.display().to_string());
                return Err(format!(
                    "{file}: {side} row {} of this worker's share: {e}",
                    i + 1
                ));
            }
        }
        Ok(())
    }

    /// [`Job::load_worker_data`] before the intercept.
    fn load_rows(&self, worker: usize, workers: usize) -> Result<(WorkerData, u32), String> {
        if self.data.format == Format::Csv {
            return Err("a csv job's rows are prepared on timely workers: use Job::load_on".into());
        }
        if self.data.format == Format::Program {
            return Err(
                "data.format = \"program\": the rows come from the job's program, which \
                 prepares them in its dataflow"
                    .into(),
            );
        }
        let d = &self.data;
        if d.format == Format::Idx {
            return self.load_idx(worker, workers);
        }
        let mut filter = self.row_filter(worker, workers);
        // An ordered split needs the number of rows first.
        let tail = d.test_split == TestSplit::Tail && filter.test_fraction > 0.0;
        match &d.train {
            Some(_) => {
                // Without timely workers to share the parts: this worker reads every part,
                // as each worker would read its own, and combines them the same way.
                let parts: Vec<Part> = (0..workers)
                    .map(|index| Part {
                        index,
                        count: workers,
                    })
                    .collect();
                let read: Vec<_> = parts.iter().map(|&p| self.libsvm_part(p, None)).collect();
                let summaries: Vec<PartSummary> = parts
                    .iter()
                    .zip(&read)
                    .map(|(p, r)| PartSummary::of(*p, r))
                    .collect();
                let (mut data, dim) =
                    self.split_libsvm(parts[worker], read[worker].clone(), &summaries)?;
                if d.test.is_some() {
                    let read: Vec<_> = parts
                        .iter()
                        .map(|&p| self.libsvm_part(p, Some(dim)))
                        .collect();
                    let summaries: Vec<PartSummary> = parts
                        .iter()
                        .zip(&read)
                        .map(|(p, r)| PartSummary::of(*p, r))
                        .collect();
                    first_error(&summaries)?;
                    data.test = read[worker].clone()?.data;
                    data.ignored_test_features = summaries.iter().map(|s| s.ignored).sum();
                }
                Ok((data, dim))
            }
            None => {
                let mut all = d.synth.generate();
                all.dim = d.dim.unwrap_or(all.dim).max(all.dim);
                if tail {
                    filter.tail_from =
                        Some(RowFilter::tail_start(all.rows(), filter.test_fraction));
                }
                let (train, test) = all.split(&filter);
                let dim = all.dim;
                let ignored_test_features = 0;
                Ok((
                    WorkerData {
                        train,
                        test,
                        ignored_test_features,
                    },
                    dim,
                ))
            }
        }
    }

    /// Which rows worker `worker` of `workers` keeps and holds out: `data.test_fraction` of
    /// them unless a test file is named (an ordered split's first test row is set once the
    /// rows are counted).
    fn row_filter(&self, worker: usize, workers: usize) -> RowFilter {
        let d = &self.data;
        RowFilter {
            worker,
            workers,
            test_fraction: if d.test.is_some() {
                0.0
            } else {
                d.test_fraction
            },
            seed: self.train.seed,
            tail_from: None,
        }
    }

    /// An IDX job's rows of worker `worker` of `workers`: every worker reads the (small,
    /// compressed) files whole and keeps its rows, as with generated data.
    fn load_idx(&self, worker: usize, workers: usize) -> Result<(WorkerData, u32), String> {
        let d = &self.data;
        // The images of `side` ("train" or "test"), at least one.
        let read = |images: &Option<PathBuf>, labels: &Option<PathBuf>, side: &str| {
            let (Some(images), Some(labels)) = (images, labels) else {
                return Err(format!("data.{side}, data.{side}_labels: no file to read"));
            };
            let data = crate::data::idx::read_idx(images, labels, d.max_dim, self.classes())
                .map_err(|e| e.to_string())?;
            if data.rows() == 0 {
                return Err(format!("{}: no images to {side} on", images.display()));
            }
            Ok(data)
        };
        let all = read(&d.train, &d.train_labels, "train")?;
        let mut filter = self.row_filter(worker, workers);
        if d.test_split == TestSplit::Tail && filter.test_fraction > 0.0 {
            filter.tail_from = Some(RowFilter::tail_start(all.rows(), filter.test_fraction));
        }
        let (train, mut test) = all.split(&filter);
        if let Some(path) = &d.test {
            let all_test = read(&d.test, &d.test_labels, "test")?;
            if all_test.dim != all.dim {
                return Err(format!(
                    "{}: images of {} pixels, the training images have {}",
                    path.display(),
                    all_test.dim,
                    all.dim
                ));
            }
            filter.test_fraction = 0.0;
            filter.tail_from = None;
            test = all_test.split(&filter).0;
        }
        let data = WorkerData {
            train,
            test,
            ignored_test_features: 0,
        };
        Ok((data, all.dim))
    }

    /// The plan all workers share, given the data's features (the intercept included) and
    /// threads per process: the model has `features × width` keys.
    pub fn plan(&self, dim: u32, threads_per_process: usize) -> TrainPlan {
        let model = self.model_fn(dim);
        TrainPlan {
            dim: dim * model.width() + model.dense(),
            model,
            loss: self.loss(),
            lambda: self.model.lambda,
            lambda_factors: (self.model.kind == ModelKind::Fm)
                .then(|| self.model.lambda_factors.unwrap_or(self.model.lambda)),
            intercept: self.intercept_key(dim),
            optimizer: self.optimizer.clone(),
            custom_optimizer: None,
            custom_exchange: None,
            exchange: self.train.exchange,
            codec: self.train.compressor.clone(),
            memory: self.memory(),
            downlink: self.train.downlink.clone(),
            ownership: self.train.ownership,
            pull: self.train.pull,
            staleness: self.train.staleness,
            delay_compensation: self.train.delay_compensation,
            replica: self.train.replica,
            core_distance_ns: None,
            dump_gradients: self.output.gradients.clone(),
            sketch: self.train.sketch.clone(),
            rounds_per_epoch: self.rounds_per_epoch(),
            eval_every: self.train.eval_every,
            auc_bits: self.train.auc_bins.bits(),
            epochs: self.train.epochs,
            seed: self.train.seed,
            threads_per_process,
            initial_weights: None,
            start_round: 0,
            checkpoints: None,
            choice: None,
        }
    }
}

/// A serde message listing the exchanges, with `auto` beside them (it is taken out of the job
/// before serde sees it, so serde does not list it).
fn with_auto(message: &str) -> String {
    let names = "`sharded`, `allgather`, `sketch`";
    message.replace(names, &format!("{names}, or `auto`"))
}

/// `message` with each line cut to [`ERROR_LINE_CHARS`] characters and control characters
/// escaped: a 10 MB value in a job file is not echoed whole.
fn clip_lines(message: &str) -> String {
    let lines: Vec<_> = message
        .lines()
        .map(|l| crate::data::clip_to(l, ERROR_LINE_CHARS))
        .collect();
    lines.join("\n")
}

/// The longest line of a job error.
const ERROR_LINE_CHARS: usize = 400;

/// Sets `a.b.c = value` in `table`; the value is parsed as TOML, else taken as a string.
fn apply_override(table: &mut toml::Table, o: &str) -> Result<(), JobError> {
    let shape = || JobError::Override(o.into(), "expected section.field=value".into());
    let (key, raw) = o.split_once('=').ok_or_else(shape)?;
    let path: Vec<&str> = key.trim().split('.').collect();
    if path.iter().any(|p| p.is_empty()) {
        return Err(shape());
    }
    let raw = raw.trim();
    let value = match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").unwrap(),
        // A number TOML cannot hold (past 2^63 - 1, a float that overflows) is not a string.
        Err(e) if raw.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c)) => {
            let why = e.message().trim_end().to_string();
            return Err(JobError::Override(o.into(), format!("`{raw}`: {why}")));
        }
        Err(_) => toml::Value::String(raw.to_string()),
    };
    let mut cur = table;
    for part in &path[..path.len() - 1] {
        let entry = cur
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = entry
            .as_table_mut()
            .ok_or_else(|| JobError::Override(o.into(), format!("{part} is not a table")))?;
    }
    cur.insert(path[path.len() - 1].to_string(), value);
    Ok(())
}

/// Writes every float of `table` that is an `f32` widened (`lr = 0.01` serializes as
/// 0.009999999776482582) as that `f32`'s shortest decimal, which reads back as the same `f32`.
fn shortest_floats(table: &mut toml::Table) {
    fn fix(v: &mut toml::Value) {
        match v {
            toml::Value::Float(x) if (*x as f32) as f64 == *x && x.is_finite() => {
                *x = (*x as f32).to_string().parse().unwrap_or(*x);
            }
            toml::Value::Array(a) => a.iter_mut().for_each(fix),
            toml::Value::Table(t) => t.iter_mut().for_each(|(_, v)| fix(v)),
            _ => {}
        }
    }
    table.iter_mut().for_each(|(_, v)| fix(v));
}

/// What every worker needs to know of each part of a LibSVM file.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
struct PartSummary {
    /// The part's index (summaries sort by it).
    part: u64,
    /// Its rows.
    rows: u64,
    /// One past its largest feature index (or the declared dimension).
    dim: u32,
    /// Its ignored features.
    ignored: u64,
    /// Its first error.
    error: Option<String>,
}

impl PartSummary {
    fn of(part: Part, read: &Result<PartRows, String>) -> PartSummary {
        let part = part.index as u64;
        match read {
            Ok(p) => PartSummary {
                part,
                rows: p.data.rows() as u64,
                dim: p.data.dim,
                ignored: p.ignored_features,
                error: None,
            },
            Err(e) => PartSummary {
                part,
                rows: 0,
                dim: 0,
                ignored: 0,
                error: Some(e.clone()),
            },
        }
    }
}

/// The first error in file order, which every worker reports.
fn first_error(summaries: &[PartSummary]) -> Result<(), String> {
    match summaries.iter().find_map(|s| s.error.clone()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Job, JobError> {
        Job::parse(text, Path::new("job.toml"), &[])
    }

    #[test]
    fn the_format_follows_the_file_name_unless_given() {
        let implied = |name: &str| Format::from_extension(Path::new(name));
        assert_eq!(implied("d/flights.csv.gz"), Some(Format::Csv));
        assert_eq!(implied("F.CSV"), Some(Format::Csv));
        assert_eq!(implied("a9a.libsvm.zst"), Some(Format::Libsvm));
        assert_eq!(implied("train.svm"), Some(Format::Libsvm));
        assert_eq!(implied("train-images-idx3-ubyte.gz"), Some(Format::Idx));
        assert_eq!(implied("rows.parquet"), None);
        assert_eq!(implied("csv"), None);
        let csv = "[data]\ntrain = \"x.csv\"\n[data.label]\ncolumn = \"y\"\n\
                   [data.features]\ncategorical = [\"a\"]\n";
        assert_eq!(parse(csv).unwrap().data.format, Format::Csv);
        // A format given, in the file or by an override, is kept (and checked).
        let given =
            format!("{csv}\n[model]\n").replace("[data]\n", "[data]\nformat = \"libsvm\"\n");
        let e = parse(&given).unwrap_err().to_string();
        assert!(e.contains("set data.format = \"csv\""), "{e}");
        let o = Job::parse(csv, Path::new("j"), &["data.format=\"libsvm\"".into()]);
        assert!(o.is_err());
        let svm = parse("[data]\ntrain = \"x.svm\"").unwrap();
        assert_eq!(svm.data.format, Format::Libsvm);
    }

    #[test]
    fn auto_leaves_the_defaults_and_refuses_what_it_cannot_choose_with() {
        let job = parse("[train]\nexchange = \"auto\"\ncompressor = \"auto\"").unwrap();
        assert_eq!(
            (
                job.train.auto,
                job.train.exchange,
                job.train.compressor.clone()
            ),
            (
                Auto {
                    exchange: true,
                    compressor: true
                },
                ExchangeKind::Sharded,
                CodecSpec::default()
            )
        );
        assert!(job.describe_exchange().starts_with("auto"));
        let fixed =
            parse("[train]\nexchange = \"allgather\"\ncompressor = { name = \"auto\" }").unwrap();
        assert_eq!(
            fixed.train.auto,
            Auto {
                exchange: false,
                compressor: true
            }
        );
        assert_eq!(fixed.train.exchange, ExchangeKind::Allgather);
        let with_override = Job::parse(
            "",
            Path::new("job.toml"),
            &["train.exchange=auto".to_string()],
        )
        .unwrap();
        assert!(with_override.train.auto.exchange && !with_override.train.auto.compressor);
        for (extra, field) in [
            ("memory = \"residual\"", "train.memory"),
            ("pull = true", "train.pull"),
            (
                "checkpoint = { dir = \"c\", every_rounds = 5 }",
                "train.checkpoint",
            ),
        ] {
            let e = parse(&format!("[train]\ncompressor = \"auto\"\n{extra}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(field), "{e}");
        }
        let e = parse("[train]\nexchange = \"sketch\"\ncompressor = \"auto\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sketch"), "{e}");
        let e = parse("[data]\nformat = \"program\"\n[train]\nexchange = \"auto\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("data.format"), "{e}");
        // Anything else named auto is still an unknown name.
        assert!(parse("[train]\ndownlink = \"auto\"").is_err());
    }

    #[test]
    fn empty_job_is_the_default() {
        let job = parse("").unwrap();
        assert_eq!(job, Job::default());
        assert_eq!(job.rounds_per_epoch(), 10);
    }

    #[test]
    fn unknown_and_invalid_fields_are_named() {
        let e = parse("[train]\nepochz = 3\n").unwrap_err().to_string();
        assert!(e.contains("epochz") && e.contains("line 2"), "{e}");
        let e = parse("[model]\nloss = \"cubic\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cubic"), "{e}");
        for (text, says) in [
            ("[train]\nepochs = 9223372036854775807\n", "train.epochs"),
            (
                "[train]\nbatch_fraction = 1e-12\n",
                "train.batch_fraction = 1000000000000",
            ),
            (
                "[train]\nepochs = 10000001\nbatch_fraction = 0.01\n",
                "1000000100 rounds",
            ),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("limit"), "{text}: {e}");
        }
        assert!(parse("[train]\nepochs = 10000000\nbatch_fraction = 0.01\n").is_ok());
        let e = parse("[train]\nbatch_fraction = 1.5\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("train.batch_fraction"), "{e}");
        let e = parse("[optimizer]\nlr = -1\n").unwrap_err().to_string();
        assert!(e.contains("optimizer.lr"), "{e}");
        let e = parse("[train]\ncompressor = { name = \"zip\" }\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("zip"), "{e}");
        let e = parse("[bogus]\n").unwrap_err().to_string();
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn a_program_job_names_its_dimension_and_files() {
        let ok = "[data]\nformat = \"program\"\ndim = 100\n[data.files]\nflights = \"f.csv\"\n";
        let job = parse(ok).unwrap();
        let inputs = job.program_inputs().unwrap();
        assert_eq!(inputs.files["flights"], PathBuf::from("f.csv"));
        assert_eq!(inputs.test_fraction, 0.25);
        // The model is sized from data.dim (plus the intercept); the program brings the rows.
        let e = job.load_worker_data(0, 1).unwrap_err();
        assert!(e.contains("program"), "{e}");
        for (text, says) in [
            ("[data]\nformat = \"program\"\n", "data.dim"),
            (
                "[data]\nformat = \"program\"\ndim = 10\ntrain = \"a.svm\"\n",
                "data.train",
            ),
            (
                "[data]\nformat = \"program\"\ndim = 10\nzero_based = true\n",
                "data.zero_based",
            ),
            ("[data.files]\nflights = \"f.csv\"\n", "data.files"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
        assert!(parse("").unwrap().program_inputs().is_none());
    }

    #[test]
    fn auc_bins_are_a_power_of_two_or_exact() {
        let bits =
            |v: &str| parse(&format!("[train]\nauc_bins = {v}\n")).map(|j| j.train.auc_bins.bits());
        assert_eq!(bits("65536").unwrap(), 16);
        assert_eq!(bits("2").unwrap(), 1);
        assert_eq!(bits("4294967296").unwrap(), 32);
        assert_eq!(bits("\"exact\"").unwrap(), 32);
        assert_eq!(parse("").unwrap().train.auc_bins, AucBins::default());
        for bad in ["1000", "1", "0", "8589934592", "\"Exact\"", "-4", "65536.0"] {
            let e = bits(bad).unwrap_err().to_string();
            assert!(
                e.contains("auc_bins") && e.contains("power of two"),
                "{bad}: {e}"
            );
        }
        // The job file a run writes (`--print-job`, checkpoints) reads back the same.
        let job = parse("[train]\nauc_bins = \"exact\"\n").unwrap();
        let text = toml::to_string(&job).unwrap();
        assert_eq!(parse(&text).unwrap().train.auc_bins, AucBins::EXACT);
    }

    #[test]
    fn dimensions_above_max_dim_are_errors_that_say_how_to_raise_it() {
        let csv = "[data]\nformat = \"csv\"\ntrain = \"t.csv\"\n[data.label]\ncolumn = \"y\"\n\
                   [data.features]\ncategorical = [\"a\"]\n";
        for (text, says) in [
            ("[data]\ndim = 200000000\n", "data.dim = 200000000"),
            ("[data]\ndim = 11\nmax_dim = 10\n", "data.dim = 11"),
            ("[data.synth]\ndim = 200000000\n", "data.synth.dim"),
            (
                &format!("{csv}hash_bits = 31\n"),
                "data.features.hash_bits = 31",
            ),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(
                e.contains(says) && e.contains("raise data.max_dim"),
                "{text}: {e}"
            );
        }
        assert!(parse(&format!("{csv}hash_bits = 27\n")).is_ok());
        let raised = format!(
            "[data]\nmax_dim = 2147483648\n{}hash_bits = 31\n",
            &csv[7..]
        );
        assert!(parse(&raised).is_ok(), "{raised}");
        for bad in ["0", "4294967295"] {
            let e = parse(&format!("[data]\nmax_dim = {bad}\n")).unwrap_err();
            assert!(e.to_string().contains("data.max_dim"), "{e}");
        }
    }

    #[test]
    fn the_intercept_is_the_last_key_of_every_row_and_exempt_from_lambda() {
        let text = "[data.synth]\nrows = 200\ndim = 50\nnnz = 5\n";
        let with = parse(text).unwrap();
        let (data, dim) = with.load_worker_data(0, 1).unwrap();
        assert_eq!(dim, 51);
        assert_eq!((data.train.dim, data.test.dim), (51, 51));
        for d in [&data.train, &data.test] {
            for i in 0..d.rows() {
                let (k, v) = d.row(i);
                assert_eq!((k.last(), v.last()), (Some(&50), Some(&1.0)));
                assert!(k[..k.len() - 1].iter().all(|&k| k < 50));
            }
        }
        assert_eq!(with.plan(dim, 1).intercept, Some(50));
        let without = parse(&format!("{text}[model]\nintercept = false\n")).unwrap();
        let (data, dim) = without.load_worker_data(0, 1).unwrap();
        assert_eq!(dim, 50);
        assert!(data.train.indices.iter().all(|&k| k < 50));
        assert_eq!(without.plan(dim, 1).intercept, None);
    }

    #[test]
    fn overrides_replace_fields_and_are_checked() {
        let job = Job::parse(
            "[train]\nepochs = 3\n",
            Path::new("j"),
            &["train.epochs=5".into(), "train.exchange=allgather".into()],
        )
        .unwrap();
        assert_eq!(job.train.epochs, 5);
        assert_eq!(job.train.exchange, ExchangeKind::Allgather);
        let e = Job::parse("", Path::new("j"), &["train.epochx=5".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("epochx"), "{e}");
        assert!(Job::parse("", Path::new("j"), &["noequals".into()]).is_err());
    }

    #[test]
    fn exchange_fields_are_checked_and_memory_defaults_follow_the_papers() {
        for (text, says) in [
            (
                "[train]\npull = true\nexchange = \"allgather\"\n",
                "train.pull",
            ),
            (
                "[train]\npull = true\ndownlink = { name = \"topk\" }\n",
                "train.downlink must be none",
            ),
            (
                "[train]\nreplica = \"process\"\nexchange = \"allgather\"\n",
                "train.replica",
            ),
            ("[train]\nreplica = \"everywhere\"\n", "replica"),
            (
                "[train]\ndownlink = { name = \"topk\", ratio = 2.0 }\n",
                "train.downlink",
            ),
            ("[train]\nmemory = \"resid\"\n", "resid"),
            (
                "[train]\nexchange = \"allgather\"\ndownlink = { name = \"topk\" }\n",
                "only the sharded exchange has a downlink",
            ),
            ("[train]\nownership = \"random\"\n", "random"),
            ("[train.sketch]\nrows = 40\n", "train.sketch.rows"),
            (
                "[train]\nexchange = \"sketch\"\ncompressor = { name = \"topk\" }\n",
                "sketch exchange",
            ),
            ("[train.sketch]\ncolumns = -1\n", "columns"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
        let memory = |text: &str| parse(text).unwrap().memory();
        assert_eq!(memory(""), MemorySpec::None);
        let topk = "[train]\ncompressor = { name = \"topk\" }\n";
        assert_eq!(memory(topk), MemorySpec::Residual);
        let sign = "[train]\ncompressor = { name = \"signsgd\" }\n";
        assert_eq!(memory(sign), MemorySpec::None, "with Adam");
        let sign_sgd = format!("{sign}[optimizer]\nkind = \"sgd\"\n");
        assert_eq!(memory(&sign_sgd), MemorySpec::Residual);
        let sketchml = "[train]\ncompressor = { name = \"sketchml\" }\n";
        assert_eq!(memory(sketchml), MemorySpec::None, "with Adam");
        let sketchml_sgd = format!("{sketchml}[optimizer]\nkind = \"sgd\"\n");
        assert_eq!(memory(&sketchml_sgd), MemorySpec::LazyResidual);
        let sketch = "[train]\nexchange = \"sketch\"\n";
        assert_eq!(memory(sketch), MemorySpec::Dgc { momentum: 0.9 });
        let explicit = "[train]\ncompressor = { name = \"topk\" }\nmemory = \"none\"\n";
        assert_eq!(memory(explicit), MemorySpec::None);
    }
}
