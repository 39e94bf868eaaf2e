//! `gradflow predict`: a saved model's predictions for LibSVM, IDX or raw CSV rows, written as
//! lines, CSV or JSON lines.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::data::{read_libsvm, Dataset, LibsvmOptions, RowFilter};
use crate::model::file::ModelFile;
use crate::model::{EvalPart, Model, ModelLoss};

#[derive(Args, Debug)]
pub(super) struct PredictArgs {
    /// A model file written by `train` (output.model).
    model: PathBuf,
    /// The data: LibSVM, IDX images (with --labels), or for a model trained on a table, a raw
    /// CSV table (the label column is optional), read through the model's feature map.
    data: PathBuf,
    /// Indices in LibSVM data start at 0.
    #[arg(long)]
    zero_based: bool,
    /// IDX images (a model trained with data.format = "idx"): their labels file; the data is
    /// then the images file.
    #[arg(long)]
    labels: Option<PathBuf>,
    /// Write the predictions here (default, or `-`: standard output; the summary goes to
    /// standard error). A row's prediction is its class (1 or 0 for two classes) followed by
    /// the probability (logistic: of class 1; softmax: of the predicted class) or the margin
    /// (hinge); for squared loss, the value.
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// CSV tables: a column to write beside each prediction as the row's id.
    #[arg(long)]
    id: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = PredictFormat::Lines)]
    format: PredictFormat,
    /// The largest model to load, in features (plus an intercept): the data.max_dim of the
    /// job that trained it (default 2^27). The header is checked before anything is allocated.
    #[arg(long, default_value_t = crate::data::MAX_DIM)]
    max_dim: u32,
}

/// Before scoring a row: `-o` can be written (a regular or new file, its directory created)
/// and is none of the inputs, so a bad output path fails at once, not after the last row.
fn check_output(a: &PredictArgs) -> Result<(), String> {
    let Some(out) = a.out.as_deref().filter(|o| o.as_os_str() != "-") else {
        return Ok(());
    };
    let io = |e: std::io::Error| format!("-o {}: {e}", out.display());
    crate::atomic::target(out).map_err(io)?;
    let inputs = [Some(&a.model), Some(&a.data), a.labels.as_ref()];
    crate::atomic::refuse_inputs("-o", out, inputs.into_iter().flatten().map(|p| p.as_path()))?;
    crate::atomic::create_parent(out).map_err(io)
}

/// How `predict` writes predictions.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum PredictFormat {
    /// A line per row: the prediction, then the probability or margin (space-separated).
    Lines,
    /// CSV with a header: `id,prediction[,probability|margin]` (id: the --id column, else the
    /// 1-based row).
    Csv,
    /// JSON lines: `{"id": ..., "prediction": ..., "probability": ...}` (a numeric id column
    /// gives numbers).
    Json,
}

pub(super) fn predict(a: PredictArgs) -> Result<(), String> {
    check_output(&a)?;
    let (model, note) = ModelFile::load_noted(&a.model, a.max_dim)?;
    if let Some(note) = note {
        eprintln!("note: {note}");
    }
    let loss = model
        .builtin_loss()
        .map_err(|e| format!("{}: {e}", a.model.display()))?;
    let model_fn = model
        .builtin_model()
        .map_err(|e| format!("{}: {e}", a.model.display()))?;
    let dim = model.weights.len() as u32;
    // The data's own features lie below the intercept's (the last feature); a softmax model
    // has `classes` keys per feature, a network its dense weights after the features'.
    let data_dim = model.intercept.unwrap_or(dim - model_fn.dense()) / model_fn.width();
    if a.labels.is_some() && model.features.is_some() {
        return Err(format!(
            "--labels: for IDX images; {} reads CSV tables through its feature map",
            a.model.display()
        ));
    }
    let (mut data, ids, labelled, ignored, class_names) = read_rows(&a, &model, &*loss, data_dim)?;
    if model.intercept.is_some() {
        data.add_intercept();
    }
    let mut line = format!("rows {}", data.rows());
    // Rows without a label (NaN) are predicted but not scored.
    let scored: Vec<u32> = (0..data.rows() as u32)
        .filter(|&i| !data.labels[i as usize].is_nan())
        .collect();
    // A label the loss cannot read (a class outside 0..K in a table) is the data's error.
    if let Some((i, e)) = scored.iter().find_map(|&i| {
        let label = data.labels[i as usize];
        loss.check_label(label).err().map(|e| (i as usize, e))
    }) {
        let row = ids.get(i).cloned().unwrap_or_else(|| (i + 1).to_string());
        return Err(format!("{}: row {row}: {e}", a.data.display()));
    }
    if labelled && !scored.is_empty() {
        line += &score(&data, &scored, &model, &*model_fn, &*loss);
    }
    if let Some(n) = ignored {
        line += &format!("  ({n})");
    }
    eprintln!("{line}");
    let columns = PredictionColumns::of(&*loss);
    let write = |w: &mut dyn std::io::Write| -> std::io::Result<()> {
        let rows = Rows {
            data: &data,
            ids: &ids,
        };
        let scorer = (&*model_fn, &model.weights[..]);
        write_predictions(w, &a, scorer, rows, &*loss, columns, &class_names)
    };
    match a.out.as_deref().filter(|o| o.as_os_str() != "-") {
        Some(out) => {
            let io = |e: std::io::Error| format!("{}: {e}", out.display());
            crate::atomic::create_parent(out).map_err(io)?;
            let mut file = crate::atomic::AtomicFile::create(out).map_err(io)?;
            write(&mut file).map_err(io)?;
            file.commit().map_err(io)?;
            eprintln!("predictions: {}", out.display());
        }
        None => {
            let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
            write(&mut stdout)
                .and_then(|()| stdout.flush())
                .map_err(|e| format!("standard output: {e}"))?;
        }
    }
    Ok(())
}

/// The rows to predict: the rows, their ids (a table's `--id` column), whether they have
/// labels, a note on ignored values, and the class names.
type ToPredict = (Dataset, Vec<String>, bool, Option<String>, Vec<String>);

/// The rows to predict, read as the model was trained: a CSV table through the model's
/// feature map, IDX images, or LibSVM rows. Returns the rows, their ids (a table's `--id`
/// column), whether they have labels, a note on ignored values, and the class names.
fn read_rows(
    a: &PredictArgs,
    model: &ModelFile,
    loss: &dyn ModelLoss,
    data_dim: u32,
) -> Result<ToPredict, String> {
    Ok(match &model.features {
        Some(text) => {
            let map: crate::data::table::FeatureMap = toml::from_str(text)
                .map_err(|e| format!("{}: feature map: {e}", a.model.display()))?;
            map.check()
                .map_err(|e| format!("{}: feature map: {e}", a.model.display()))?;
            if map.dim != data_dim {
                return Err(format!(
                    "{}: the feature map has {} features, the weights {data_dim}",
                    a.model.display(),
                    map.dim
                ));
            }
            // A model file names its join tables, and predict reads them: say which.
            for j in &map.spec.join {
                eprintln!(
                    "note: joining {} (named by {})",
                    crate::data::clip(&j.file.display().to_string()),
                    a.model.display()
                );
            }
            let e = crate::data::table::encode_file(&map, &a.data, a.id.as_deref())?;
            let note = (e.unknown > 0).then(|| {
                format!(
                    "{} values not in the training vocabulary {}",
                    e.unknown,
                    if map.spec.features.min_count > 1 {
                        "counted as their column's \"other\""
                    } else {
                        "ignored"
                    }
                )
            });
            let classes = map.spec.label.classes.clone();
            (e.data, e.ids, e.labelled, note, classes)
        }
        None if a.labels.is_some() => {
            if a.id.is_some() {
                return Err("--id: IDX images have no columns; it applies to CSV tables".into());
            }
            let labels = a.labels.as_deref().expect("matched");
            let images = crate::data::idx::read_idx(&a.data, labels, a.max_dim, model.classes)
                .map_err(|e| e.to_string())?;
            if images.dim != data_dim {
                return Err(format!(
                    "{}: images of {} pixels, but the model has {data_dim} features",
                    a.data.display(),
                    images.dim
                ));
            }
            (images, Vec::new(), true, None, Vec::new())
        }
        None => {
            if a.id.is_some() {
                return Err("--id: LibSVM rows have no columns; it applies to CSV tables".into());
            }
            let opts = LibsvmOptions {
                zero_based: a.zero_based,
                dim: Some(data_dim),
                ignore_beyond_dim: true,
                classes: model.classes,
                binary: loss.task() == crate::model::Task::Binary,
                ..LibsvmOptions::default()
            };
            let split =
                read_libsvm(&a.data, &opts, &RowFilter::all()).map_err(|e| e.to_string())?;
            let note = (split.ignored_features > 0).then(|| {
                format!(
                    "{} features beyond the model's dimension {data_dim} ignored",
                    split.ignored_features
                )
            });
            (split.train, Vec::new(), true, note, Vec::new())
        }
    })
}

/// The metrics of the model on the `scored` rows of `data` (those with a label).
fn score(
    data: &Dataset,
    scored: &[u32],
    model: &ModelFile,
    model_fn: &dyn Model,
    loss: &dyn ModelLoss,
) -> String {
    let mut line = String::new();
    let mut with_labels = crate::data::Dataset::new(data.dim);
    for &i in scored {
        let (k, v) = data.row(i as usize);
        with_labels.push_row(k, v, data.labels[i as usize]);
    }
    let exact = crate::job::AucBins::EXACT.bits();
    let part = EvalPart::evaluate(&with_labels, &model.weights, model_fn, loss, exact);
    let s = part.summary(loss);
    line += &format!(
        "  scored {}  loss {:.4}",
        part.count,
        s.loss.unwrap_or(f64::NAN)
    );
    if let Some(acc) = s.accuracy {
        line += &format!("  accuracy {acc:.4}");
    }
    if let Some(auc) = s.auc {
        line += &format!("  auc {auc:.4}");
    }
    if let Some(r) = s.rmse {
        line += &format!("  rmse {r:.4}");
    }
    line
}

/// What `predict` writes for a row besides its id: the prediction (the class for
/// classification, 1 or 0 for two classes), and for classification how sure it is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum PredictionColumns {
    /// The value (regression).
    Value,
    /// The class and the probability of the positive class (logistic).
    Probability,
    /// The class and the margin (hinge, or a program's own two-class loss).
    Margin,
    /// The most likely class and its probability (softmax of the margins).
    ClassProbability,
}

impl PredictionColumns {
    fn of(loss: &dyn crate::model::ModelLoss) -> Self {
        match loss.task() {
            crate::model::Task::Regression => Self::Value,
            crate::model::Task::Multiclass => Self::ClassProbability,
            crate::model::Task::Binary if loss.name() == "logistic" => Self::Probability,
            crate::model::Task::Binary => Self::Margin,
        }
    }

    /// The name of the second column, if any.
    fn second(self) -> Option<&'static str> {
        match self {
            Self::Value => None,
            Self::Probability | Self::ClassProbability => Some("probability"),
            Self::Margin => Some("margin"),
        }
    }

    /// The prediction and the second column of a row with `margins`.
    fn row(self, loss: &dyn crate::model::ModelLoss, margins: &[f32]) -> (f32, Option<f32>) {
        let score = loss.predict(margins);
        match self {
            Self::Value => (score, None),
            Self::Probability | Self::Margin => {
                (if margins[0] > 0.0 { 1.0 } else { 0.0 }, Some(score))
            }
            Self::ClassProbability => {
                let top = margins.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum: f32 = margins.iter().map(|m| (m - top).exp()).sum();
                let class = score as usize;
                let p = margins
                    .get(class)
                    .map_or(f32::NAN, |m| (m - top).exp() / sum);
                (score, Some(p))
            }
        }
    }
}

/// The rows `predict` writes predictions of, and their ids (empty: their 1-based numbers).
struct Rows<'a> {
    data: &'a crate::data::Dataset,
    ids: &'a [String],
}

/// Writes one prediction per row in `a.format`: the id (the `--id` column's value, else the
/// 1-based row), the prediction (a class by its name in `class_names`, when the label named
/// them) and, for classification, the second column of `columns`.
fn write_predictions(
    w: &mut dyn std::io::Write,
    a: &PredictArgs,
    (model, weights): (&dyn Model, &[f32]),
    rows: Rows,
    loss: &dyn crate::model::ModelLoss,
    columns: PredictionColumns,
    class_names: &[String],
) -> std::io::Result<()> {
    let Rows { data, ids } = rows;
    // JSON ids are numbers when every one is (row numbers, a numeric id column).
    let numeric_ids = ids.iter().all(|id| is_json_number(id));
    let second = columns.second();
    if a.format == PredictFormat::Csv {
        let tail = second.map(|s| format!(",{s}")).unwrap_or_default();
        writeln!(w, "id,prediction{tail}")?;
    }
    let mut m = vec![0.0f32; model.outputs() as usize];
    let mut scratch = Vec::new();
    for i in 0..data.rows() {
        let (k, v) = data.row(i);
        model.forward(weights, k, v, &mut m, &mut scratch);
        let (number, extra) = columns.row(loss, &m);
        let name = match columns {
            PredictionColumns::ClassProbability => class_names.get(number as usize),
            _ => None,
        };
        let prediction = match (name, a.format) {
            (Some(n), PredictFormat::Csv) => csv_field(n),
            (Some(n), PredictFormat::Json) => json_string(n),
            (Some(n), PredictFormat::Lines) => n.clone(),
            (None, PredictFormat::Json) => json_number(number),
            (None, _) => number.to_string(),
        };
        let id = ids.get(i).cloned().unwrap_or_else(|| (i + 1).to_string());
        match (a.format, extra) {
            (PredictFormat::Lines, None) => writeln!(w, "{prediction}"),
            (PredictFormat::Lines, Some(x)) => writeln!(w, "{prediction} {x}"),
            (PredictFormat::Csv, None) => writeln!(w, "{},{prediction}", csv_field(&id)),
            (PredictFormat::Csv, Some(x)) => writeln!(w, "{},{prediction},{x}", csv_field(&id)),
            (PredictFormat::Json, _) => {
                let id = match numeric_ids {
                    true => id,
                    false => json_string(&id),
                };
                let tail = match (second, extra) {
                    (Some(name), Some(x)) => format!(", \"{name}\": {}", json_number(x)),
                    _ => String::new(),
                };
                writeln!(w, "{{\"id\": {id}, \"prediction\": {prediction}{tail}}}")
            }
        }?;
    }
    Ok(())
}

/// Whether `s` is written as a JSON number would be, and reads back as itself (`007`, `1e400`
/// and `NaN` are not).
fn is_json_number(s: &str) -> bool {
    match s.parse::<i64>() {
        Ok(n) => n.to_string() == s,
        Err(_) => s
            .parse::<f64>()
            .is_ok_and(|x| x.is_finite() && x.to_string() == s),
    }
}

/// A number for JSON: `null` for what JSON cannot write (NaN, infinities).
fn json_number(x: f32) -> String {
    match x.is_finite() {
        true => x.to_string(),
        false => "null".into(),
    }
}

/// A CSV field, quoted when it needs to be.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
