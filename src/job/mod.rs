//! Job files (TOML) and their command-line overrides.
//!
//! A job names its data, model, optimizer, training schedule, exchange strategy, compressor,
//! seed and outputs. Every table rejects unknown fields, and every value is range-checked; the
//! error names the field. Relative paths are relative to the working directory.

mod load;
mod overrides;
mod plan;
mod schema;
#[cfg(test)]
mod tests;
mod validate;

pub use schema::*;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dataflow::WorkerData;
use crate::model::LossName;
pub use crate::model::{MAX_CLASSES, MAX_FACTORS, MAX_HIDDEN};
use crate::optim::OptimizerConfig;

use overrides::{apply_override, clip_lines, shortest_floats, with_auto};

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
}
