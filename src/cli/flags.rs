//! The job's fields as command-line flags: `--data`, `--label`, `--compressor NAME:k=v` and the
//! rest, turned into the `section.field=value` overrides a job file would take, checked as the
//! job's own fields are.

use std::path::PathBuf;

use clap::Args;
use serde::Deserialize;

use crate::codec::{build_codec, CodecSpec, CODECS};
use crate::data::table::TextSpec;

/// The data's fields of a job from the command line (`train`, `cluster`, `data prepare`), and
/// `--set`: each flag sets one field of the job file (or of the defaults, without one).
#[derive(Args, Debug, Clone, Default)]
pub struct DataFlags {
    /// The training data (data.train): a CSV table (`.csv`, gzip or zstd too), a Parquet
    /// table (`.parquet`, or a directory of part files with --format parquet), LibSVM (`.svm`,
    /// `.libsvm`, `.txt`) or IDX images; the format follows the name unless --format says
    /// otherwise. `-`: LibSVM rows on standard input, trained on as they arrive (an online
    /// run; needs --dim).
    #[arg(
        long = "train-file",
        visible_alias = "data",
        value_name = "FILE",
        help_heading = "Data"
    )]
    train_file: Option<PathBuf>,
    /// Follow the training file as it grows, or a directory's part files as they appear,
    /// training on the new rows (data.follow; an online run, ended by --max-rows,
    /// --max-seconds or SIGINT/SIGTERM).
    #[arg(long, help_heading = "Data")]
    follow: bool,
    /// A stream: every process reads its own (its standard input, or --data on its machine),
    /// and its rows train on its workers (data.each_process_reads).
    #[arg(long = "each-process-reads", help_heading = "Data")]
    each_process_reads: bool,
    /// LibSVM: the number of features (data.dim); a stream needs it.
    #[arg(long, value_name = "N", help_heading = "Data")]
    dim: Option<u32>,
    /// A stream's malformed row (data.on_bad_row): stop (the default) or skip.
    #[arg(long = "on-bad-row", value_name = "stop|skip", help_heading = "Data")]
    on_bad_row: Option<String>,
    /// The test data (data.test), in the training data's format; without it, data.test_fraction
    /// of the rows are held out.
    #[arg(long = "test-file", value_name = "FILE", help_heading = "Data")]
    test_file: Option<PathBuf>,
    /// The data's format (data.format): csv, parquet, libsvm or idx.
    #[arg(long, help_heading = "Data")]
    format: Option<String>,
    /// CSV: the label (data.label): COLUMN (its value), COLUMN>X (1 when above X, else 0),
    /// COLUMN=VALUE (1 when equal to VALUE) or COLUMN=V1,V2 (1 when one of them).
    #[arg(long, value_name = "SPEC", help_heading = "Data")]
    label: Option<String>,
    /// CSV: categorical columns, one feature per value (data.features.categorical).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "COLUMNS",
        help_heading = "Data"
    )]
    categorical: Vec<String>,
    /// CSV: numeric columns (data.features.numeric), each COLUMN or COLUMN:TRANSFORM (raw,
    /// standardize, log1p, bucket).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "COLUMNS",
        help_heading = "Data"
    )]
    numeric: Vec<String>,
    /// CSV: a free-text column, its words and word n-grams hashed into a range of its own
    /// (data.features.text): COLUMN or COLUMN:k=v,... with ngrams, hash_bits, lowercase,
    /// binary, normalize, e.g. `review:ngrams=2,normalize=true`; repeat for more columns.
    #[arg(long, value_name = "COLUMN[:K=V,..]", help_heading = "Data")]
    text: Vec<String>,
    /// CSV: crosses of categorical columns, date parts or bucketised columns, `a:b` (or
    /// `a:b:c`), comma-separated or repeated (data.features.crosses).
    #[arg(long, value_delimiter = ',', value_name = "A:B", help_heading = "Data")]
    cross: Vec<String>,
    /// CSV: hash the features into 2^BITS instead of a vocabulary (data.features.hash_bits).
    #[arg(long, value_name = "BITS", help_heading = "Data")]
    hash_bits: Option<u32>,
    /// The fraction of rows held out for testing without a test file (data.test_fraction).
    #[arg(long, help_heading = "Data")]
    test_fraction: Option<f64>,
    /// Cache every worker's loaded rows in DIR (data.cache): the first run writes it, later
    /// runs of the same job on unchanged files read it instead of parsing.
    #[arg(long, value_name = "DIR", help_heading = "Data")]
    cache: Option<PathBuf>,
    /// Set any job field: --set section.field=value (TOML value syntax); repeatable, applied
    /// after the flags above.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

/// Job fields from the command line, shared by `train` and `cluster`: the data's, and the
/// common fields of the other sections.
#[derive(Args, Debug, Clone, Default)]
pub struct Overrides {
    #[command(flatten)]
    data: DataFlags,
    /// The model (model.kind): linear, fm (a factorization machine, with --factors) or mlp
    /// (a neural network, with --hidden).
    #[arg(long, value_name = "KIND", help_heading = "Model and optimizer")]
    model: Option<String>,
    /// A factorization machine's factors per feature (model.factors).
    #[arg(long, help_heading = "Model and optimizer")]
    factors: Option<u32>,
    /// A network's hidden layers, one or two sizes (model.hidden): 128 or 128,64.
    #[arg(
        long,
        value_name = "UNITS",
        value_delimiter = ',',
        help_heading = "Model and optimizer"
    )]
    hidden: Option<Vec<u32>>,
    /// The loss (model.loss): logistic, hinge, squared or softmax (with --classes).
    #[arg(long, help_heading = "Model and optimizer")]
    loss: Option<String>,
    /// Softmax: the number of classes (model.classes).
    #[arg(long, help_heading = "Model and optimizer")]
    classes: Option<u32>,
    /// L2 regularisation (model.lambda).
    #[arg(long, help_heading = "Model and optimizer")]
    lambda: Option<f32>,
    /// The optimizer (optimizer.kind): sgd, momentum, adam, adagrad or ftrl.
    #[arg(long, help_heading = "Model and optimizer")]
    optimizer: Option<String>,
    /// The learning rate (optimizer.lr).
    #[arg(long, help_heading = "Model and optimizer")]
    lr: Option<f32>,
    /// Passes over the training data (train.epochs).
    #[arg(long, help_heading = "Training")]
    epochs: Option<u64>,
    /// The mini-batch as a fraction of the training rows (train.batch_fraction).
    #[arg(long, help_heading = "Training")]
    batch_fraction: Option<f64>,
    /// An online run: rows a round, all workers together (train.batch_rows).
    #[arg(long, value_name = "N", help_heading = "Training")]
    batch_rows: Option<u64>,
    /// An online run: stop after N rows (train.max_rows).
    #[arg(long, value_name = "N", help_heading = "Training")]
    max_rows: Option<u64>,
    /// An online run: stop after S seconds (train.max_seconds).
    #[arg(long, value_name = "S", help_heading = "Training")]
    max_seconds: Option<f64>,
    /// The gradient exchange (train.exchange): sharded, allgather, sketch or auto.
    #[arg(long, help_heading = "Training")]
    exchange: Option<String>,
    /// The gradient codec (train.compressor): NAME or NAME:param=value,... (as in `codec
    /// compare`), e.g. sketchml or topk:ratio=0.01; auto chooses by measuring.
    #[arg(long, value_name = "CODEC", help_heading = "Training")]
    compressor: Option<String>,
    /// Error feedback beside the codec (train.memory): none, residual, lazy_residual or
    /// dgc[:momentum=0.9].
    #[arg(long, value_name = "MEMORY", help_heading = "Training")]
    memory: Option<String>,
    /// The codec of the sharded exchange's downlink (train.downlink), as --compressor.
    #[arg(long, value_name = "CODEC", help_heading = "Training")]
    downlink: Option<String>,
    /// Evaluate on the test rows every N rounds too (train.eval_every).
    #[arg(long, value_name = "N", help_heading = "Training")]
    eval_every: Option<u64>,
    /// The seed of every random choice (train.seed).
    #[arg(long, help_heading = "Training")]
    seed: Option<u64>,
    /// Warm start from this model file (train.init_model): its weights, fresh optimizer state.
    #[arg(long = "init-model", value_name = "FILE", help_heading = "Training")]
    init_model: Option<PathBuf>,
    /// The metrics CSV (output.metrics).
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    metrics: Option<PathBuf>,
    /// The model file (output.model), for `predict` and warm starts.
    #[arg(long = "model-out", value_name = "FILE", help_heading = "Output")]
    model_out: Option<PathBuf>,
    /// An online run: rewrite the model file every N rows while training goes on
    /// (output.snapshot_rows).
    #[arg(long = "snapshot-rows", value_name = "N", help_heading = "Output")]
    snapshot_rows: Option<u64>,
    /// An online run: rewrite the model file every S seconds while training goes on
    /// (output.snapshot_seconds).
    #[arg(long = "snapshot-seconds", value_name = "S", help_heading = "Output")]
    snapshot_seconds: Option<f64>,
    /// Write every worker's mini-batch gradient of every round into DIR, in the format of
    /// `gradflow codec compare --input` (output.gradients).
    #[arg(long = "dump-gradients", value_name = "DIR", help_heading = "Output")]
    dump_gradients: Option<PathBuf>,
}

/// A TOML value as an override writes it.
fn toml_text(v: impl Into<toml::Value>) -> String {
    v.into().to_string()
}

impl DataFlags {
    /// The flags as `section.field=value` overrides, `--set` last.
    pub(super) fn to_sets(&self) -> Result<Vec<String>, String> {
        let mut v = Vec::new();
        self.push_sets(&mut v)?;
        v.extend(self.set.iter().cloned());
        Ok(v)
    }

    /// The flags but `--set` as overrides, onto `v`.
    fn push_sets(&self, v: &mut Vec<String>) -> Result<(), String> {
        let nonempty = |items: &[String]| (!items.is_empty()).then(|| items.to_vec());
        let numeric = nonempty(&self.numeric)
            .map(|n| toml_text(n.iter().map(|n| numeric_table(n)).collect::<Vec<_>>()));
        let crosses = nonempty(&self.cross)
            .map(|c| {
                c.iter()
                    .map(|c| cross_list(c))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        let text = nonempty(&self.text)
            .map(|t| {
                t.iter()
                    .map(|t| text_table(t))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        let label = self.label.as_deref().map(label_fields).transpose()?;
        let label = label.into_iter().flatten();
        push_fields(
            v,
            label
                .map(|(field, value)| (format!("data.label.{field}"), Some(value)))
                .chain(named_fields([
                    ("data.train", self.train_file.as_deref().map(path_text)),
                    ("data.test", self.test_file.as_deref().map(path_text)),
                    ("data.follow", self.follow.then(|| toml_text(true))),
                    (
                        "data.each_process_reads",
                        self.each_process_reads.then(|| toml_text(true)),
                    ),
                    ("data.dim", self.dim.map(toml_text)),
                    ("data.on_bad_row", self.on_bad_row.as_deref().map(toml_text)),
                    ("data.format", self.format.as_deref().map(toml_text)),
                    (
                        "data.features.categorical",
                        nonempty(&self.categorical).map(toml_text),
                    ),
                    ("data.features.numeric", numeric),
                    ("data.features.text", text.map(toml_text)),
                    ("data.features.crosses", crosses.map(toml_text)),
                    ("data.features.hash_bits", self.hash_bits.map(toml_text)),
                    ("data.test_fraction", self.test_fraction.map(toml_text)),
                    ("data.cache", self.cache.as_deref().map(path_text)),
                ])),
        );
        Ok(())
    }
}

/// A path as a TOML string.
fn path_text(p: &std::path::Path) -> String {
    toml_text(p.display().to_string())
}

/// `(field, value)` pairs with owned field names.
fn named_fields<const N: usize>(
    fields: [(&str, Option<String>); N],
) -> impl Iterator<Item = (String, Option<String>)> + '_ {
    fields.into_iter().map(|(f, x)| (f.to_string(), x))
}

/// Appends `field=value` for every field with a value.
fn push_fields(v: &mut Vec<String>, fields: impl Iterator<Item = (String, Option<String>)>) {
    v.extend(fields.filter_map(|(field, value)| Some(format!("{field}={}", value?))));
}

impl Overrides {
    /// The flags as `section.field=value` overrides, in the order of the job's sections, with
    /// `--set` last.
    pub(super) fn to_sets(&self) -> Result<Vec<String>, String> {
        let mut v = Vec::new();
        self.data.push_sets(&mut v)?;
        let codec = |flag, x: &Option<String>, table| {
            x.as_deref()
                .map(|x| named_value(flag, x, table))
                .transpose()
        };
        let fields = named_fields([
            ("model.kind", self.model.as_deref().map(toml_text)),
            ("model.factors", self.factors.map(toml_text)),
            ("model.hidden", self.hidden.clone().map(toml_text)),
            ("model.loss", self.loss.as_deref().map(toml_text)),
            ("model.classes", self.classes.map(toml_text)),
            // f32 in decimal as written (as f64 it would be 0.009999999776482582).
            ("model.lambda", self.lambda.map(|x| x.to_string())),
            ("optimizer.kind", self.optimizer.as_deref().map(toml_text)),
            ("optimizer.lr", self.lr.map(|x| x.to_string())),
            ("train.epochs", self.epochs.map(|x| toml_text(x as i64))),
            ("train.batch_fraction", self.batch_fraction.map(toml_text)),
            (
                "train.batch_rows",
                self.batch_rows.map(|x| toml_text(x as i64)),
            ),
            ("train.max_rows", self.max_rows.map(|x| toml_text(x as i64))),
            ("train.max_seconds", self.max_seconds.map(toml_text)),
            ("train.exchange", self.exchange.as_deref().map(toml_text)),
            (
                "train.compressor",
                codec("--compressor", &self.compressor, codec_table)?,
            ),
            (
                "train.memory",
                codec("--memory", &self.memory, plain_table)?,
            ),
            (
                "train.downlink",
                codec("--downlink", &self.downlink, codec_table)?,
            ),
            (
                "train.eval_every",
                self.eval_every.map(|x| toml_text(x as i64)),
            ),
            ("train.seed", self.seed.map(|x| toml_text(x as i64))),
            (
                "train.init_model",
                self.init_model.as_deref().map(path_text),
            ),
            ("output.metrics", self.metrics.as_deref().map(path_text)),
            ("output.model", self.model_out.as_deref().map(path_text)),
            (
                "output.snapshot_rows",
                self.snapshot_rows.map(|x| toml_text(x as i64)),
            ),
            (
                "output.snapshot_seconds",
                self.snapshot_seconds.map(toml_text),
            ),
            (
                "output.gradients",
                self.dump_gradients.as_deref().map(path_text),
            ),
        ]);
        push_fields(&mut v, fields);
        v.extend(self.data.set.iter().cloned());
        Ok(v)
    }

    pub(super) fn to_args(&self) -> Result<Vec<String>, String> {
        Ok(self
            .to_sets()?
            .into_iter()
            .flat_map(|s| ["--set".to_string(), s])
            .collect())
    }
}

/// `--label`'s fields of `data.label`: `COLUMN`, `COLUMN>X` or `COLUMN=VALUE`.
fn label_fields(spec: &str) -> Result<Vec<(&'static str, String)>, String> {
    let at = spec.find(['>', '=']);
    let column = at.map_or(spec, |i| &spec[..i]).trim();
    if column.is_empty() {
        return Err(format!(
            "--label '{spec}': expected COLUMN, COLUMN>X or COLUMN=VALUE"
        ));
    }
    let mut fields = vec![("column", toml_text(column))];
    match at.map(|i| (&spec[i..i + 1], spec[i + 1..].trim())) {
        None => {}
        Some((">", x)) => {
            let x: f64 = x
                .parse()
                .ok()
                .filter(|x: &f64| x.is_finite())
                .ok_or_else(|| format!("--label '{spec}': '{x}' is not a number"))?;
            fields.push(("above", toml_text(x)));
        }
        Some((_, value)) if value.contains(',') => {
            let values: Vec<String> = value.split(',').map(|v| v.trim().to_string()).collect();
            fields.push(("positive", toml_text(values)));
        }
        Some((_, value)) => fields.push(("equals", toml_text(value))),
    }
    Ok(fields)
}

/// `--numeric`'s `COLUMN` or `COLUMN:TRANSFORM` as a `data.features.numeric` entry.
fn numeric_table(item: &str) -> toml::Value {
    let mut t = toml::Table::new();
    let (column, transform) = item.split_once(':').unwrap_or((item, ""));
    t.insert("column".into(), column.trim().into());
    if !transform.is_empty() {
        t.insert("transform".into(), transform.trim().into());
    }
    toml::Value::Table(t)
}

/// `--text`'s `COLUMN` or `COLUMN:k=v,...` as a `data.features.text` entry, checked.
fn text_table(item: &str) -> Result<toml::Value, String> {
    let (column, params) = item.split_once(':').unwrap_or((item, ""));
    let params: Vec<String> = params.split(',').map(|p| p.trim().to_string()).collect();
    let mut t = plain_table(column.trim(), &params).map_err(|e| format!("--text {e}"))?;
    let column = t.remove("name").expect("plain_table names it");
    t.insert("column".into(), column);
    let t = toml::Value::Table(t);
    TextSpec::deserialize(t.clone())
        .map_err(|e| format!("--text '{item}': {}", e.to_string().trim_end()))?;
    Ok(t)
}

/// `--cross`'s `a:b[:c...]` as a `data.features.crosses` entry.
fn cross_list(item: &str) -> Result<Vec<String>, String> {
    let parts: Vec<String> = item.split(':').map(|p| p.trim().to_string()).collect();
    if parts.len() < 2 || parts.iter().any(String::is_empty) {
        return Err(format!(
            "--cross '{item}': expected two or more slots joined by ':', e.g. origin:dest"
        ));
    }
    Ok(parts)
}

/// A named thing with parameters, `NAME` or `NAME:k=v,...`, as a table built by `table`;
/// `auto`, and a memory's name alone, as the string a job file would have.
fn named_value(
    flag: &str,
    spec: &str,
    table: fn(&str, &[String]) -> Result<toml::Table, String>,
) -> Result<String, String> {
    let (name, params) = spec.split_once(':').unwrap_or((spec, ""));
    let name = name.trim();
    let is_memory = flag == "--memory";
    if name == "auto" {
        if flag == "--downlink" || is_memory {
            return Err(format!(
                "{flag}: auto is not a choice here: auto chooses --exchange and --compressor \
                 (with their memory and downlink); name one"
            ));
        }
        if !params.trim().is_empty() {
            return Err(format!(
                "{flag}: auto takes no parameters (it tries each codec at its defaults); name \
                 a codec to set them"
            ));
        }
        return Ok(toml_text(name));
    }
    if is_memory && params.is_empty() {
        return Ok(toml_text(name));
    }
    let params: Vec<String> = params.split(',').map(|p| p.trim().to_string()).collect();
    let t = table(name, &params).map_err(|e| format!("{flag}: {e}"))?;
    Ok(toml::Value::Table(t).to_string())
}

/// `{ name = NAME, k = v, ... }` from `k=v` items, each value read as TOML or else as a string.
fn plain_table(name: &str, params: &[String]) -> Result<toml::Table, String> {
    let mut table = toml::Table::new();
    table.insert("name".into(), toml::Value::String(name.to_string()));
    for p in params.iter().filter(|p| !p.is_empty()) {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("{name}: '{p}' is not param=value"))?;
        let value = match toml::from_str::<toml::Table>(&format!("v = {v}")) {
            Ok(mut t) => t.remove("v").unwrap(),
            Err(_) => toml::Value::String(v.to_string()),
        };
        table.insert(k.trim().to_string(), value);
    }
    Ok(table)
}

/// A codec's table from its name and `k=v` parameters, checked: an unknown codec or
/// parameter is an error naming it.
pub(super) fn codec_table(name: &str, params: &[String]) -> Result<toml::Table, String> {
    if CodecSpec::with_defaults(name).is_none() {
        return Err(format!(
            "unknown codec '{name}' (known: {})",
            CODECS.names().join(", ")
        ));
    }
    let table = plain_table(name, params)?;
    let spec = CodecSpec::deserialize(toml::Value::Table(table.clone()))
        .map_err(|e| format!("{name}: {}", e.to_string().trim_end()))?;
    build_codec(&spec).map_err(|e| format!("{name}: {e}"))?;
    Ok(table)
}
