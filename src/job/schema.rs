//! The sections of a job file and their defaults: what a job can say.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::codec::CodecSpec;
pub use crate::data::stream::OnBadRow;
use crate::data::synth::{self, CtrParams, GsparParams};
use crate::data::table::{FeatureSpec, JoinSpec, LabelSpec, TableSpec};
use crate::data::Dataset;
use crate::dataflow::checkpoint::CheckpointSpec;
use crate::dataflow::ReplicaMode;
use crate::exchange::sketch::SketchParams;
use crate::exchange::{ExchangeKind, Ownership, StateMode};
use crate::memory::MemorySpec;
use crate::model::{LossName, MODELS};

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
    /// A Parquet table (a file, or a directory of part files as Spark writes it), turned into
    /// features as a CSV table is ([`crate::data::table::parquet`]).
    Parquet,
    /// IDX images and labels (MNIST's format; plain, gzip or zstd): `train` and `test` name
    /// the images files, `train_labels` and `test_labels` their labels.
    Idx,
    /// Rows prepared by the job's program in its own dataflow
    /// ([`crate::dataflow::Training::gradient_on`]): `dim` gives the number of features (the
    /// model is sized before any row exists), `files` the program's inputs.
    Program,
}

impl Format {
    /// Whether rows come from a table (CSV or Parquet) through `[data.label]`,
    /// `[data.features]` and `[[data.join]]`.
    pub fn is_table(self) -> bool {
        matches!(self, Format::Csv | Format::Parquet)
    }

    /// The format a data file's name implies, compressed or not: `.csv` a CSV table,
    /// `.parquet` or `.parq` a Parquet table; `.svm`,
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
            Some("parquet" | "parq") => Some(Format::Parquet),
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
    /// `libsvm` (default), `csv`, `parquet`, `idx` or `program`.
    pub format: Format,
    /// Training file. Absent: the generated dataset of `[data.synth]` (by default the embedded
    /// CTR-like set). `"-"`: standard input, read as it arrives (an online run).
    pub train: Option<PathBuf>,
    /// Follow `train` as it grows, training on rows as they are appended (an online run), or,
    /// for a directory, on its part files as they appear, until `train.max_rows`,
    /// `train.max_seconds` or a signal.
    pub follow: bool,
    /// A stream: the first worker of every process reads its own (its standard input, or
    /// `train` on its machine) and its rows go to that process's workers; otherwise the first
    /// worker of process 0 reads the one stream for all.
    pub each_process_reads: bool,
    /// A stream's malformed row: `stop` the run (the default, as for files) or `skip` it
    /// (counted; the first few quoted).
    pub on_bad_row: OnBadRow,
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
            follow: false,
            each_process_reads: false,
            on_bad_row: OnBadRow::Stop,
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ModelKind {
    /// One weight per feature and output ([`Linear`]).
    #[default]
    Linear,
    /// A factorization machine of `factors` factors per feature ([`crate::model::Fm`]).
    Fm,
    /// A neural network of `hidden` ReLU layers over an embedding bag
    /// ([`crate::model::Mlp`]).
    Mlp,
    /// A model added by [`crate::model::register`], by name.
    Added(&'static str),
}

impl ModelKind {
    /// The `model.kind` name.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Linear => "linear",
            ModelKind::Fm => "fm",
            ModelKind::Mlp => "mlp",
            ModelKind::Added(name) => name,
        }
    }
}

impl std::str::FromStr for ModelKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "linear" => Ok(ModelKind::Linear),
            "fm" => Ok(ModelKind::Fm),
            "mlp" => Ok(ModelKind::Mlp),
            _ => MODELS
                .added(s)
                .map(|(name, _)| ModelKind::Added(name))
                .ok_or_else(|| MODELS.unknown(s)),
        }
    }
}

crate::named::serde_by_name!(ModelKind);

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
    pub(super) fn take(table: &mut toml::Table) -> Result<Auto, String> {
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
    /// An online run: rows a round, all workers together.
    pub batch_rows: u64,
    /// An online run: the longest a row waits for its round to fill, in milliseconds (a slow
    /// stream's rounds are then smaller).
    pub batch_ms: u64,
    /// An online run: stop after this many rows.
    pub max_rows: Option<u64>,
    /// An online run: stop after this many seconds.
    pub max_seconds: Option<f64>,
    /// An online run: say so when no row has come for this many seconds (the run waits on).
    pub stall_seconds: f64,
    /// An online run: the progressive AUC is reported over consecutive windows of this many
    /// rows (each closed at the end of a round).
    pub auc_window: u64,
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
    /// Where the weights and the optimizer state live: `replicated` (default: every worker,
    /// or process, keeps the whole model) or `sharded` (each key only with its owner; the
    /// `sharded` exchange, pulling; `hashed` ownership is served as `strided`).
    pub state: StateMode,
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
            batch_rows: 1000,
            batch_ms: 1000,
            max_rows: None,
            max_seconds: None,
            stall_seconds: 60.0,
            auc_window: 100_000,
            exchange: ExchangeKind::Sharded,
            compressor: CodecSpec::default(),
            memory: None,
            downlink: CodecSpec::default(),
            ownership: Ownership::Hashed,
            pull: false,
            state: StateMode::Replicated,
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
    /// An online run: rewrite the model file every this many rows while training goes on (a
    /// snapshot `predict` can read at any time: each is written whole, then renamed).
    pub snapshot_rows: Option<u64>,
    /// An online run: rewrite the model file every this many seconds while training goes on.
    pub snapshot_seconds: Option<f64>,
    /// A directory to write every worker's mini-batch gradient of every round into
    /// (`round00012-worker1.bin`, the format of `gradflow codec compare --input`).
    pub gradients: Option<PathBuf>,
}
