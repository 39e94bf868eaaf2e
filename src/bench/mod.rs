//! Benchmark suites: a base job and axes (compressors with their memory and downlink, exchange,
//! processes, links, models, repeats), expanded into cells that each run as a real cluster.
//! This module holds what does not launch anything: the suite file, its cells and their job
//! files, and the report computed from the cells' metrics ([`report`]). `gradflow bench` runs
//! the cells.
//!
//! A suite file (paths relative to it):
//!
//! ```toml
//! job = "exchange.toml"            # the base job
//! processes = [2, 4]               # W: processes of `workers` threads each
//! exchange = ["sharded", "allgather"]
//! links = ["loopback", { name = "100mbit", rate = "100mbit" }]
//! repeats = 1
//! target = 0.01                    # time to within 1% of the baseline's final test loss
//! target_of = "final"              # or "lowest": of its lowest (noisy or overfitting curves)
//! baseline = { exchange = "sharded", compressor = "none" }
//!
//! [set]                            # any job field, in every cell
//! "train.epochs" = 2
//! "train.eval_every" = 10
//!
//! [[compressor]]                   # a codec table, plus optional label, memory, downlink, pull, state,
//!                                  # staleness
//! name = "none"
//!
//! [[compressor]]
//! name = "topk"
//! ratio = 0.01
//! memory = "residual"
//!
//! [[model]]                        # optional: model fields plus an optional optimizer table
//! loss = "logistic"
//! optimizer = { kind = "adam", lr = 0.01 }
//! ```
//!
//! A cell's processes all run on this machine, so a suite is bounded: at most
//! [`MAX_CELL_PROCESSES`] processes and workers per cell, [`MAX_REPEATS`] repeats and
//! [`MAX_CELLS`] cells.

pub mod fit;
pub mod plot;
pub mod report;

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::codec::CodecSpec;
use crate::exchange::ExchangeKind;
use crate::job::Job;
use crate::memory::MemorySpec;

/// The most processes, or worker threads per process, a suite's cell may start: all of a
/// cell's processes run on this machine.
pub const MAX_CELL_PROCESSES: usize = 64;
/// The most repeats of each cell a suite may ask for.
pub const MAX_REPEATS: usize = 1000;
/// The most cells a suite may expand into (each is a whole training run).
pub const MAX_CELLS: usize = 10_000;

/// A suite file as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteFile {
    job: PathBuf,
    #[serde(default = "one")]
    repeats: usize,
    #[serde(default = "default_target")]
    target: f64,
    #[serde(default)]
    target_of: TargetOf,
    #[serde(default = "default_processes")]
    processes: Vec<usize>,
    #[serde(default = "one")]
    workers: usize,
    #[serde(default)]
    exchange: Vec<String>,
    #[serde(default)]
    links: Vec<LinkEntry>,
    #[serde(default)]
    compressor: Vec<toml::Table>,
    #[serde(default)]
    model: Vec<toml::Table>,
    #[serde(default)]
    set: toml::Table,
    #[serde(default)]
    baseline: Option<BaselineEntry>,
}

fn one() -> usize {
    1
}
fn default_target() -> f64 {
    0.01
}
fn default_processes() -> Vec<usize> {
    vec![2]
}

#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum LinkEntry {
    Name(String),
    Table(Link),
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BaselineEntry {
    exchange: String,
    compressor: String,
}

/// A link between processes: loopback, or a shaped link in network namespaces.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// Name in the report.
    pub name: String,
    /// Rate, as `tc` takes it (`10mbit`, `1gbit`); absent: unshaped.
    #[serde(default)]
    pub rate: Option<String>,
    /// One-way delay (`5ms`), which needs the kernel's `netem`; absent: none.
    #[serde(default)]
    pub delay: Option<String>,
    /// The shaped link's token bucket, bytes (at least two 1,514-byte frames); absent:
    /// [`Link::bucket_bytes`] of its rate.
    #[serde(default)]
    pub burst: Option<u64>,
}

impl Link {
    /// The plain loopback link.
    pub fn loopback() -> Link {
        Link {
            name: "loopback".into(),
            rate: None,
            delay: None,
            burst: None,
        }
    }

    /// Whether the link needs network namespaces (anything but plain loopback).
    pub fn shaped(&self) -> bool {
        self.rate.is_some() || self.delay.is_some()
    }

    /// The default token bucket of a link shaped to `bits_per_second` (`tc tbf burst`): 2 ms
    /// at the rate, at least one 64 KiB segment. After an idle spell this many bytes pass at
    /// once, so a round's first bytes can cost less than the rate says ([`fit`]); a link's
    /// `burst` sets a smaller one, closer to a real link of that rate.
    pub fn bucket_bytes(bits_per_second: u64) -> u64 {
        (bits_per_second / 8 / 500).max(64 * 1024)
    }

    /// This link's token bucket at `bits_per_second`, bytes.
    pub fn bucket(&self, bits_per_second: u64) -> u64 {
        self.burst
            .unwrap_or_else(|| Self::bucket_bytes(bits_per_second))
    }

    /// The smallest `burst`: two full Ethernet frames.
    pub const MIN_BURST: u64 = 2 * 1514;

    /// The rate in bits per second, parsed from the `tc` form (`100mbit`, `1gbit`, `500kbit`).
    pub fn rate_bits(&self) -> Option<Result<u64, String>> {
        let rate = self.rate.as_ref()?;
        let r = rate.trim().to_ascii_lowercase();
        let (num, mult) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)]
            .iter()
            .find_map(|(unit, m)| r.strip_suffix(unit).map(|n| (n.to_string(), *m)))
            .unwrap_or((r.clone(), 0.0));
        Some(match num.trim().parse::<f64>() {
            Ok(n) if mult > 0.0 && n > 0.0 && (n * mult) >= 8_000.0 => Ok((n * mult) as u64),
            _ => Err(format!(
                "link {}: rate '{rate}' is not a rate like 100mbit (at least 8kbit)",
                self.name
            )),
        })
    }
}

/// One labelled value of an axis: its label and the job fields it sets.
#[derive(Clone, Debug, PartialEq)]
pub struct AxisValue {
    /// Label in cell ids and the report.
    pub label: String,
    /// `(dotted job field, value)` pairs.
    pub sets: Vec<(String, toml::Value)>,
}

/// The baseline's test loss a suite's target is relative to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetOf {
    /// Its last evaluation: the loss a run of the baseline ends at.
    #[default]
    Final,
    /// Its lowest evaluation: for curves that are noisy from one evaluation to the next or
    /// rise again (overfitting), where the final loss is an accident of where the run stopped.
    Lowest,
}

impl TargetOf {
    /// The word for it in reports.
    pub fn word(self) -> &'static str {
        match self {
            TargetOf::Final => "final",
            TargetOf::Lowest => "lowest",
        }
    }
}

/// A parsed, validated suite.
#[derive(Clone, Debug)]
pub struct Suite {
    /// The suite's name (its file stem).
    pub name: String,
    /// The base job file.
    pub job: PathBuf,
    /// Times each cell runs.
    pub repeats: usize,
    /// Relative tolerance on the baseline's test loss for time-to-target.
    pub target: f64,
    /// Which of the baseline's test losses the target is relative to.
    pub target_of: TargetOf,
    /// Process counts.
    pub processes: Vec<usize>,
    /// Worker threads per process.
    pub workers: usize,
    /// Links.
    pub links: Vec<Link>,
    /// Models (one unlabelled entry: the job's own).
    pub models: Vec<AxisValue>,
    /// Exchanges.
    pub exchanges: Vec<AxisValue>,
    /// Compressors.
    pub compressors: Vec<AxisValue>,
    /// Fields set in every cell.
    pub sets: Vec<(String, toml::Value)>,
    /// Labels of the (exchange, compressor) every other cell is compared with.
    pub baseline: (String, String),
}

/// One run of a suite: a point of every axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    /// `link/W2/model/exchange/compressor/r0`: unique in the suite, used for `--only`.
    pub id: String,
    /// The link.
    pub link: Link,
    /// Processes.
    pub processes: usize,
    /// Worker threads per process.
    pub workers: usize,
    /// Model label.
    pub model: String,
    /// Exchange label.
    pub exchange: String,
    /// Compressor label.
    pub compressor: String,
    /// Repeat index.
    pub repeat: usize,
    /// Every job field the cell sets, in order (suite-wide first).
    pub sets: Vec<(String, toml::Value)>,
}

impl Cell {
    /// Whether this cell is the baseline of its (link, processes, model, repeat) group.
    pub fn is_baseline(&self, suite: &Suite) -> bool {
        (self.exchange.as_str(), self.compressor.as_str())
            == (suite.baseline.0.as_str(), suite.baseline.1.as_str())
    }

    /// A name usable as a directory: the id with `/` as `__` and anything unusual as `_`.
    pub fn slug(&self) -> String {
        self.id
            .chars()
            .map(|c| match c {
                '/' => '~',
                c if c.is_ascii_alphanumeric() || "-_.=,".contains(c) => c,
                _ => '_',
            })
            .collect::<String>()
            .replace('~', "__")
    }

    /// The cell's job: the base job's table with the cell's fields set, as TOML text, checked by
    /// loading it as a job (so a bad field is an error before anything runs).
    pub fn job_text(&self, base: &Path, extra: &[(String, toml::Value)]) -> Result<String, String> {
        let text = crate::data::source::read_input_text(base)
            .map_err(|e| format!("{}: {e}", base.display()))?;
        let mut table: toml::Table =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", base.display()))?;
        for (key, value) in self.sets.iter().chain(extra) {
            set_path(&mut table, key, value.clone())
                .map_err(|e| format!("cell {}: {e}", self.id))?;
        }
        let out = toml::to_string(&table).map_err(|e| format!("cell {}: {e}", self.id))?;
        // The job's errors name the cell (its id is the job's path).
        Job::parse(&out, Path::new(&format!("cell {}", self.id)), &[])
            .map_err(|e| e.to_string())?;
        Ok(out)
    }
}

/// Sets `a.b.c = value` in `table`, creating tables on the way.
fn set_path(table: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), String> {
    let path: Vec<&str> = key.split('.').collect();
    if path.iter().any(|p| p.is_empty()) {
        return Err(format!("'{key}' is not a dotted field name"));
    }
    let mut cur = table;
    for part in &path[..path.len() - 1] {
        cur = cur
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or_else(|| format!("{key}: {part} is not a table"))?;
    }
    cur.insert(path[path.len() - 1].to_string(), value);
    Ok(())
}

/// A compact label for a table: `name` then `k=v` pairs (`topk,ratio=0.01`).
fn table_label(t: &toml::Table, first: &str) -> String {
    let mut parts: Vec<String> = t.get(first).map(|v| vec![plain(v)]).unwrap_or_default();
    parts.extend(
        t.iter()
            .filter(|(k, _)| k.as_str() != first)
            .map(|(k, v)| format!("{k}={}", plain(v))),
    );
    parts.join(",")
}

/// A value without TOML quoting for labels.
fn plain(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Table(t) => format!("{{{}}}", table_label(t, "name")),
        other => other.to_string(),
    }
}

impl Suite {
    /// The first link without shaping: what the free-link bound of shaped links is measured on.
    pub fn unshaped_link(&self) -> Option<&Link> {
        self.links.iter().find(|l| !l.shaped())
    }

    /// Loads and validates a suite file.
    pub fn load(path: &Path) -> Result<Suite, String> {
        let text = crate::data::source::read_input_text(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let f: SuiteFile = toml::from_str(&text)
            .map_err(|e| format!("{}: {}", path.display(), e.to_string().trim_end()))?;
        let at = |what: String| format!("{}: {what}", path.display());
        let dir = path.parent().unwrap_or(Path::new("."));
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "suite".into());
        if f.repeats == 0 || f.workers == 0 {
            return Err(at("repeats and workers must be at least 1".into()));
        }
        if f.processes.is_empty() || f.processes.contains(&0) {
            return Err(at(
                "processes: give at least one count, each at least 1".into()
            ));
        }
        // Every cell starts its processes, of `workers` threads each, on this machine.
        let counts = f
            .processes
            .iter()
            .map(|&p| ("processes", p, MAX_CELL_PROCESSES));
        let mut counts = counts.chain([
            ("workers", f.workers, MAX_CELL_PROCESSES),
            ("repeats", f.repeats, MAX_REPEATS),
        ]);
        if let Some((field, n, max)) = counts.find(|&(_, n, max)| n > max) {
            return Err(at(format!("{field}: {n} is above the limit, {max}")));
        }
        if !(f.target.is_finite() && f.target >= 0.0) {
            return Err(at(format!("target: must be >= 0, got {}", f.target)));
        }
        let links = if f.links.is_empty() {
            vec![Link::loopback()]
        } else {
            f.links
                .into_iter()
                .map(|l| match l {
                    LinkEntry::Name(n) if n == "loopback" => Ok(Link::loopback()),
                    LinkEntry::Name(n) => Err(at(format!(
                        "links: '{n}' is not \"loopback\"; a shaped link is a table like \
                         {{ name = \"{n}\", rate = \"100mbit\" }}"
                    ))),
                    LinkEntry::Table(l) => match (l.rate_bits(), l.burst) {
                        (Some(Err(e)), _) => Err(at(e)),
                        (None, Some(_)) => Err(at(format!(
                            "link {}: burst without a rate (burst sizes a rate's token bucket)",
                            l.name
                        ))),
                        (_, Some(b)) if b < Link::MIN_BURST => Err(at(format!(
                            "link {}: burst {b} bytes, at least {} (two full frames)",
                            l.name,
                            Link::MIN_BURST
                        ))),
                        _ => Ok(l),
                    },
                })
                .collect::<Result<_, _>>()?
        };
        let exchanges = axis(&f.exchange, |e| match e.parse::<ExchangeKind>() {
            Err(m) if e != "auto" => Err(format!("exchange: {m}, or auto")),
            _ => Ok(AxisValue {
                label: e.clone(),
                sets: vec![("train.exchange".into(), toml::Value::String(e.clone()))],
            }),
        })
        .map_err(&at)?;
        let compressors = axis(&f.compressor, compressor_value).map_err(&at)?;
        let models = axis(&f.model, model_value).map_err(&at)?;
        for (axis, values) in [
            ("exchange", &exchanges),
            ("compressor", &compressors),
            ("model", &models),
        ] {
            let mut labels: Vec<&str> = values.iter().map(|v| v.label.as_str()).collect();
            labels.sort_unstable();
            if let Some(w) = labels.windows(2).find(|w| w[0] == w[1]) {
                return Err(at(format!(
                    "{axis}: two entries are labelled '{}'; give one a `label`",
                    w[0]
                )));
            }
        }
        let mut link_names: Vec<&str> = links.iter().map(|l| l.name.as_str()).collect();
        link_names.sort_unstable();
        if let Some(w) = link_names.windows(2).find(|w| w[0] == w[1]) {
            return Err(at(format!("links: two links are named '{}'", w[0])));
        }
        let axes = [
            links.len(),
            f.processes.len(),
            models.len(),
            exchanges.len(),
            compressors.len(),
            f.repeats,
        ];
        let cells = axes.iter().try_fold(1usize, |n, &a| n.checked_mul(a));
        if cells.is_none_or(|n| n > MAX_CELLS) {
            return Err(at(format!(
                "the axes ({} links, {} process counts, {} models, {} exchanges, {} \
                 compressors, {} repeats) make more than {MAX_CELLS} cells; split the suite",
                axes[0], axes[1], axes[2], axes[3], axes[4], axes[5]
            )));
        }
        let baseline = match f.baseline {
            Some(b) => (b.exchange, b.compressor),
            None => ("sharded".into(), "none".into()),
        };
        Ok(Suite {
            name,
            job: dir.join(&f.job),
            repeats: f.repeats,
            target: f.target,
            target_of: f.target_of,
            processes: f.processes,
            workers: f.workers,
            links,
            models,
            exchanges,
            compressors,
            sets: f.set.into_iter().collect(),
            baseline,
        })
    }

    /// Every cell, links outermost, then repeats. A compressor entry with a `downlink` or
    /// `pull` applies only to `sharded` (the other exchanges have no downlink), and one with a
    /// codec other than `none` does not apply to `sketch` (which sends count sketches): such
    /// cells are left out and listed by [`Suite::left_out`].
    pub fn cells(&self) -> Vec<Cell> {
        self.expand().0
    }

    /// The (exchange, compressor) pairs [`Suite::cells`] leaves out, with the reason.
    pub fn left_out(&self) -> Vec<String> {
        self.expand().1
    }

    fn expand(&self) -> (Vec<Cell>, Vec<String>) {
        let sharded_only = |c: &AxisValue| {
            c.sets
                .iter()
                .any(|(k, _)| matches!(k.as_str(), "train.downlink" | "train.pull" | "train.state"))
        };
        let pipelined = |c: &AxisValue| {
            (c.sets.iter()).any(|(k, v)| k == "train.staleness" && v.as_integer() != Some(0))
        };
        let memoryless = |c: &AxisValue| {
            (c.sets.iter()).any(|(k, v)| k == "train.memory" && v.as_str() == Some("none"))
        };
        let coded = |c: &AxisValue| {
            c.sets.iter().any(|(k, v)| {
                k == "train.compressor" && v.get("name").and_then(|n| n.as_str()) != Some("none")
            })
        };
        // Why `exchange` and `compressor` make no cell, if they do not.
        let excluded = |e: &AxisValue, c: &AxisValue| {
            if sharded_only(c) && !matches!(e.label.as_str(), "sharded" | "job") {
                Some("a downlink, pull or sharded state needs the sharded exchange")
            } else if coded(c) && e.label == "sketch" {
                Some("the sketch exchange sends count sketches, not codec messages")
            } else if pipelined(c) && !memoryless(c) && e.label == "sketch" {
                Some("the sketch exchange pipelines only with memory = \"none\"")
            } else {
                None
            }
        };
        let mut left_out = Vec::new();
        for e in &self.exchanges {
            for c in &self.compressors {
                if let Some(why) = excluded(e, c) {
                    left_out.push(format!("{} / {}: {why}", e.label, c.label));
                }
            }
        }
        let mut cells = Vec::new();
        for link in &self.links {
            // Repeats outside the other axes: a slow spell of the machine falls on one repeat of
            // many cells rather than on every repeat of one.
            for repeat in 0..self.repeats {
                for &processes in &self.processes {
                    for model in &self.models {
                        for exchange in &self.exchanges {
                            for compressor in &self.compressors {
                                if excluded(exchange, compressor).is_some() {
                                    continue;
                                }
                                let sets = self
                                    .sets
                                    .iter()
                                    .chain(&model.sets)
                                    .chain(&exchange.sets)
                                    .chain(&compressor.sets)
                                    .cloned()
                                    .collect();
                                cells.push(Cell {
                                    id: format!(
                                        "{}/W{processes}/{}/{}/{}/r{repeat}",
                                        link.name, model.label, exchange.label, compressor.label
                                    ),
                                    link: link.clone(),
                                    processes,
                                    workers: self.workers,
                                    model: model.label.clone(),
                                    exchange: exchange.label.clone(),
                                    compressor: compressor.label.clone(),
                                    repeat,
                                    sets,
                                });
                            }
                        }
                    }
                }
            }
        }
        (cells, left_out)
    }
}

/// The values of an axis from its entries; an axis the suite does not give is the job's own
/// setting, one value labelled `job`.
fn axis<T>(
    entries: &[T],
    value: impl Fn(&T) -> Result<AxisValue, String>,
) -> Result<Vec<AxisValue>, String> {
    if entries.is_empty() {
        return Ok(vec![AxisValue {
            label: "job".into(),
            sets: vec![],
        }]);
    }
    entries.iter().map(value).collect()
}

/// A `[[compressor]]` entry: `label`, `memory`, `downlink`, `pull`, `state` and `staleness` (the
/// exchange's settings beside the codec) come out; the rest is the codec table, checked by
/// parsing it as one.
fn compressor_value(t: &toml::Table) -> Result<AxisValue, String> {
    let mut codec = t.clone();
    let label = codec.remove("label");
    let mut sets = Vec::new();
    let extra: Vec<(&str, Option<toml::Value>)> =
        ["memory", "downlink", "pull", "state", "staleness"]
            .iter()
            .map(|k| (*k, codec.remove(*k)))
            .collect();
    let what = table_label(t, "name");
    let auto = codec.len() == 1 && codec.get("name").and_then(|n| n.as_str()) == Some("auto");
    if !auto {
        CodecSpec::deserialize(toml::Value::Table(codec.clone()))
            .map_err(|e| format!("compressor {what}: {}", e.to_string().trim_end()))?;
    }
    sets.push((
        "train.compressor".to_string(),
        toml::Value::Table(codec.clone()),
    ));
    for (k, v) in extra {
        if let Some(v) = v {
            if k == "memory" {
                MemorySpec::deserialize(v.clone())
                    .map_err(|e| format!("compressor {what}: memory: {e}"))?;
            }
            if k == "downlink" {
                CodecSpec::deserialize(v.clone())
                    .map_err(|e| format!("compressor {what}: downlink: {e}"))?;
            }
            if k == "state" {
                crate::exchange::StateMode::deserialize(v.clone())
                    .map_err(|e| format!("compressor {what}: state: {e}"))?;
            }
            sets.push((format!("train.{k}"), v));
        }
    }
    let label = match label {
        Some(toml::Value::String(s)) => s,
        Some(other) => return Err(format!("compressor {what}: label {other} is not a string")),
        None => {
            // The codec, then what else the entry sets: `topk,ratio=0.05+residual+down=topk`.
            let mut l = table_label(&codec, "name");
            for (k, v) in &sets[1..] {
                l += &match (k.as_str(), v) {
                    ("train.memory", v) => format!("+{}", plain(v)),
                    ("train.downlink", toml::Value::Table(d)) => {
                        format!("+down={}", table_label(d, "name"))
                    }
                    ("train.pull", toml::Value::Boolean(true)) => "+pull".into(),
                    ("train.state", v) => format!("+state={}", plain(v)),
                    ("train.staleness", v) => format!("+s{}", plain(v)),
                    (_, v) => format!("+{}", plain(v)),
                };
            }
            l
        }
    };
    Ok(AxisValue { label, sets })
}

/// A `[[model]]` entry: `label` and `optimizer` come out; the rest are `[model]` fields.
fn model_value(t: &toml::Table) -> Result<AxisValue, String> {
    let mut fields = t.clone();
    let label = fields.remove("label");
    let optimizer = fields.remove("optimizer");
    let mut sets: Vec<(String, toml::Value)> = fields
        .iter()
        .map(|(k, v)| (format!("model.{k}"), v.clone()))
        .collect();
    if let Some(o) = optimizer {
        sets.push(("optimizer".into(), o));
    }
    let label = match label {
        Some(toml::Value::String(s)) => s,
        Some(other) => return Err(format!("model: label {other} is not a string")),
        None => table_label(t, "loss"),
    };
    Ok(AxisValue { label, sets })
}

/// Whether `id` matches `pattern`: `*` matches anything, other characters themselves; a pattern
/// without `*` matches ids that contain it.
pub fn matches(pattern: &str, id: &str) -> bool {
    if !pattern.contains('*') {
        return id.contains(pattern);
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !id.starts_with(first) || id.len() < first.len() + last.len() || !id.ends_with(last) {
        return false;
    }
    let mut rest = &id[first.len()..id.len() - last.len()];
    for p in &parts[1..parts.len() - 1] {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The suite and the directory holding it and its base job (alive as long as it is).
    pub(crate) fn suite(text: &str) -> Result<(Suite, tempfile::TempDir), String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("base.toml"), "[train]\nepochs = 1\n").unwrap();
        let p = dir.path().join("s.toml");
        std::fs::write(&p, text).unwrap();
        let s = Suite::load(&p)?;
        // The cells' jobs load (the base file must still exist).
        for c in s.cells() {
            c.job_text(&s.job, &[])?;
        }
        Ok((s, dir))
    }

    #[test]
    fn axes_expand_into_labelled_cells_whose_jobs_set_their_fields() {
        let (s, _dir) = suite(
            r#"
job = "base.toml"
processes = [2, 4]
exchange = ["sharded", "allgather"]
repeats = 2
[set]
"train.eval_every" = 5
[[compressor]]
name = "none"
[[compressor]]
name = "topk"
ratio = 0.05
memory = "residual"
downlink = { name = "topk", ratio = 0.03 }
"#,
        )
        .unwrap();
        let cells = s.cells();
        // 2 W x (sharded x 2 compressors + allgather x none) x 2 repeats: topk has a downlink.
        assert_eq!(cells.len(), 2 * 3 * 2);
        assert_eq!(s.left_out().len(), 1);
        // Repeats outside processes, model, exchange and compressor.
        assert_eq!(cells[0].id, "loopback/W2/job/sharded/none/r0");
        assert_eq!(cells[3].id, "loopback/W4/job/sharded/none/r0");
        assert_eq!(
            cells[7].id,
            "loopback/W2/job/sharded/topk,ratio=0.05+residual+down=topk,ratio=0.03/r1"
        );
        assert!(cells[0].is_baseline(&s) && !cells[7].is_baseline(&s));
        let job: Job = toml::from_str(&cells[7].job_text(&s.job, &[]).unwrap()).unwrap();
        assert_eq!(job.train.eval_every, 5);
        assert_eq!(job.train.epochs, 1, "the base job's fields stay");
        assert_eq!(
            job.train.memory,
            Some(MemorySpec::deserialize(toml::Value::String("residual".into())).unwrap())
        );
        assert!(matches!(job.train.compressor, CodecSpec::Topk(_)));
        assert!(matches!(job.train.downlink, CodecSpec::Topk(_)));
        assert_eq!(
            cells.iter().filter(|c| matches("*W4*topk*", &c.id)).count(),
            2
        );
        assert_eq!(
            cells.iter().filter(|c| matches("allgather", &c.id)).count(),
            4
        );
        assert!(cells[7]
            .slug()
            .starts_with("loopback__W2__job__sharded__topk,ratio=0.05"));
    }

    /// A codec under the `sketch` exchange is left out and listed, not an error (the sketch
    /// exchange sends no codec messages), as a downlink is under `allgather`; so is a
    /// pipelined entry with the sketch's memory, and one without memory is kept.
    #[test]
    fn codecs_under_the_sketch_exchange_are_left_out_and_listed() {
        let (s, _dir) = suite(
            r#"
job = "base.toml"
exchange = ["sharded", "sketch"]
[[compressor]]
name = "none"
[[compressor]]
name = "topk"
ratio = 0.05
[[compressor]]
name = "none"
staleness = 1
[[compressor]]
name = "none"
memory = "none"
staleness = 1
"#,
        )
        .unwrap();
        let ids: Vec<String> = s.cells().iter().map(|c| c.id.clone()).collect();
        assert_eq!(
            ids,
            [
                "loopback/W2/job/sharded/none/r0",
                "loopback/W2/job/sharded/topk,ratio=0.05/r0",
                "loopback/W2/job/sharded/none+s1/r0",
                "loopback/W2/job/sharded/none+none+s1/r0",
                "loopback/W2/job/sketch/none/r0",
                "loopback/W2/job/sketch/none+none+s1/r0",
            ]
        );
        let left = s.left_out();
        assert_eq!(left.len(), 2);
        assert!(
            left[0].starts_with("sketch / topk,ratio=0.05: the sketch exchange"),
            "{left:?}"
        );
        assert_eq!(
            left[1],
            "sketch / none+s1: the sketch exchange pipelines only with memory = \"none\""
        );
        for cell in s.cells() {
            cell.job_text(&s.job, &[]).unwrap();
        }
    }

    /// A `state` entry sets `train.state`, is labelled by it, applies to `sharded` only, and
    /// an unknown state is an error naming the entry.
    #[test]
    fn a_state_entry_runs_under_sharded_only() {
        let text = r#"
job = "base.toml"
exchange = ["sharded", "allgather"]
[[compressor]]
name = "none"
state = "sharded"
"#;
        let (s, _dir) = suite(text).unwrap();
        let ids: Vec<String> = s.cells().iter().map(|c| c.id.clone()).collect();
        assert_eq!(ids, ["loopback/W2/job/sharded/none+state=sharded/r0"]);
        assert!(s.left_out()[0].contains("sharded state needs the sharded exchange"));
        let job = s.cells()[0].job_text(&s.job, &[]).unwrap();
        assert!(job.contains("state = \"sharded\""), "{job}");
        let bad = suite(&text.replace("state = \"sharded\"", "state = \"mirrored\""));
        let e = bad.unwrap_err();
        assert!(e.contains("state") && e.contains("mirrored"), "{e}");
    }

    #[test]
    fn a_model_entry_sets_model_fields_and_replaces_the_optimizer() {
        let (s, _dir) = suite(
            r#"
job = "base.toml"
[[model]]
loss = "hinge"
lambda = 0.001
optimizer = { kind = "sgd", lr = 0.5 }
[[model]]
label = "lin"
loss = "squared"
"#,
        )
        .unwrap();
        let cells = s.cells();
        assert_eq!(
            cells.iter().map(|c| c.model.as_str()).collect::<Vec<_>>(),
            // The optimizer is part of the label: entries that differ only there stay apart.
            ["hinge,lambda=0.001,optimizer={kind=sgd,lr=0.5}", "lin"]
        );
        let job: Job = toml::from_str(&cells[0].job_text(&s.job, &[]).unwrap()).unwrap();
        assert_eq!(job.model.loss, crate::model::LossName::Hinge);
        assert_eq!(job.model.lambda, 0.001);
        let sgd: Job = toml::from_str("[optimizer]\nkind = \"sgd\"\nlr = 0.5\n").unwrap();
        assert_eq!(job.optimizer, sgd.optimizer);
        let lin: Job = toml::from_str(&cells[1].job_text(&s.job, &[]).unwrap()).unwrap();
        assert_eq!(
            lin.optimizer,
            Job::default().optimizer,
            "no optimizer: the job's"
        );
    }

    #[test]
    fn mistakes_in_a_suite_name_the_entry() {
        let cases = [
            ("job = \"base.toml\"\n[[compressor]]\nname = \"topq\"\n", "topq"),
            (
                "job = \"base.toml\"\n[[compressor]]\nname = \"topk\"\nratio = 2.0\nmemory = \"resid\"\n",
                "memory",
            ),
            ("job = \"base.toml\"\nexchange = [\"gossip\"]\n", "gossip"),
            ("job = \"base.toml\"\nlinks = [\"fast\"]\n", "fast"),
            (
                "job = \"base.toml\"\nlinks = [{ name = \"x\", rate = \"fast\" }]\n",
                "rate 'fast'",
            ),
            (
                "job = \"base.toml\"\nlinks = [{ name = \"x\", rate = \"1gbit\", burst = 1500 }]\n",
                "link x: burst 1500 bytes, at least 3028",
            ),
            (
                "job = \"base.toml\"\nlinks = [{ name = \"x\", burst = 10000 }]\n",
                "link x: burst without a rate",
            ),
            ("job = \"base.toml\"\nprocesses = []\n", "processes"),
            (
                "job = \"base.toml\"\n[[compressor]]\nname = \"none\"\n[[compressor]]\nname = \"none\"\n",
                "labelled 'none'",
            ),
            ("job = \"base.toml\"\n[set]\n\"train.epochz\" = 2\n", "epochz"),
            ("job = \"base.toml\"\nrepeat = 2\n", "repeat"),
            ("job = \"base.toml\"\ntarget_of = \"best\"\n", "target_of"),
            (
                "job = \"base.toml\"\nprocesses = [2, 65]\n",
                "processes: 65 is above the limit, 64",
            ),
            ("job = \"base.toml\"\nworkers = 65\n", "workers: 65 is above"),
            (
                "job = \"base.toml\"\nrepeats = 1000000000\n",
                "repeats: 1000000000 is above the limit, 1000",
            ),
            (
                "job = \"base.toml\"\nrepeats = 1000\nexchange = [\"sharded\", \"allgather\"]\nprocesses = [2, 3, 4, 5, 6, 7]\n",
                "make more than 10000 cells",
            ),
        ];
        for (text, want) in cases {
            let e = suite(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
        // The limits themselves are allowed.
        let at_limits = "job = \"base.toml\"\nprocesses = [64]\nworkers = 64\nrepeats = 1000\n";
        assert_eq!(suite(at_limits).unwrap().0.cells().len(), 1000);
        let small =
            "job = \"base.toml\"\nlinks = [{ name = \"x\", rate = \"1gbit\", burst = 3028 }]\n";
        let link = &suite(small).unwrap().0.links[0];
        assert_eq!(link.bucket(1_000_000_000), 3028);
        assert_eq!(Link::loopback().bucket(1_000_000_000), 250_000);
        let lowest = suite("job = \"base.toml\"\ntarget_of = \"lowest\"\n").unwrap();
        assert_eq!(lowest.0.target_of, TargetOf::Lowest);
    }

    #[test]
    fn link_rates_parse_in_tc_units() {
        let l = |r: &str| Link {
            burst: None,
            name: "l".into(),
            rate: Some(r.into()),
            delay: None,
        };
        assert_eq!(l("100mbit").rate_bits(), Some(Ok(100_000_000)));
        assert_eq!(l("1gbit").rate_bits(), Some(Ok(1_000_000_000)));
        assert_eq!(l("2.5Mbit").rate_bits(), Some(Ok(2_500_000)));
        assert!(l("100").rate_bits().unwrap().is_err());
        assert!(l("1bit").rate_bits().unwrap().is_err());
        assert_eq!(Link::loopback().rate_bits(), None);
        assert!(!Link::loopback().shaped() && l("1gbit").shaped());
    }

    #[test]
    fn patterns_match_like_globs() {
        assert!(matches("a*c", "abc") && matches("a*c", "ac") && !matches("a*c", "acb"));
        assert!(matches("*b*", "abc") && matches("b", "abc") && !matches("x", "abc"));
        assert!(matches("*", "") && !matches("ab*ba", "aba"));
    }
}
