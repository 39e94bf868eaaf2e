//! The model file format (text):
//!
//! ```text
//! # gradflow model v3
//! loss logistic
//! dim 100001
//! intercept 100000      (the intercept's first key, or `none`)
//! classes 10            (optional: softmax's classes; the weights are features × classes)
//! features 42           (optional: the number of lines of the feature map that follow, TOML)
//! ...
//! weights
//! <key> <weight>        (0-based key, increasing; shortest round-trip decimal; zeros omitted)
//! ...
//! end 12345 0123456789abcdef   (the number of weight lines and the xxh3-64 of every byte before)
//! ```
//!
//! A file is written whole or not at all ([`crate::atomic`]), and read only whole: a file without
//! its `end` line (cut short), with another count or checksum (damaged), a repeated key or a
//! weight that is not a finite `f32` is an error naming the line. Version 2 files (no `end`
//! line) and version 1 files (no intercept, no feature map, weights right after `dim`) are still
//! read, with a note that a cut cannot be detected in them.

use std::fmt::Write as _;
use std::io::BufRead as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::{Fm, Linear, LossFn, LossName, Mlp, Model, ModelFn};
use super::{MAX_CLASSES, MAX_FACTORS, MAX_HIDDEN};

/// A trained linear model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelFile {
    /// The name of the loss it was trained with (decides how predictions are read): one of
    /// [`Loss`]'s, or a program's own ([`crate::model::MarginLoss::name`]).
    pub loss: String,
    /// Dense weights.
    pub weights: Vec<f32>,
    /// The intercept's first key: its feature is 1 in every row, and raw data read for this
    /// model gets it added.
    pub intercept: Option<u32>,
    /// Softmax's number of classes (the model has `classes` weights per feature).
    pub classes: Option<u32>,
    /// The model when it is not the linear one ([`crate::model::Model::spec`]: `fm:8`, or a
    /// program's own): a `model SPEC` line.
    pub model: Option<String>,
    /// How raw rows become features (TOML text of the data layer's feature map), when the
    /// model was trained on a table.
    pub features: Option<String>,
}

/// A loss name: 1-64 ASCII letters, digits, `_` or `-`.
fn is_loss_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl ModelFile {
    /// The built-in loss the model was trained with; an error for a program's own loss, whose
    /// predictions only that program can compute.
    pub fn builtin_loss(&self) -> Result<LossFn, String> {
        let name = LossName::from_name(&self.loss).ok_or_else(|| {
            format!(
                "the model was trained with the loss '{}', which is not one of gradflow's \
                 (logistic, hinge, squared, softmax): score it with the program that trained it",
                self.loss
            )
        })?;
        match (name, self.classes) {
            (LossName::Softmax, Some(k)) => Ok(name.build(k)),
            (LossName::Softmax, None) => Err("a softmax model without 'classes'".into()),
            (_, None) => Ok(name.build(1)),
            (_, Some(_)) => Err(format!("a {} model with 'classes'", self.loss)),
        }
    }

    /// The model the weights belong to: built in (linear, `fm:K`, `mlp:H[,H]`) or added by this
    /// program ([`super::register`]); an error for another program's own model, whose outputs
    /// only that program can compute.
    pub fn builtin_model(&self) -> Result<ModelFn, String> {
        let spec = self.model.as_deref().unwrap_or("linear");
        let (name, params) = spec.split_once(':').unwrap_or((spec, ""));
        match (name, params.parse::<u32>()) {
            ("linear", _) => {
                let (k, dim) = (self.outputs(), self.weights.len() as u32);
                if !dim.is_multiple_of(k) || self.intercept.is_some_and(|i| i % k != 0) {
                    return Err(format!(
                        "model {spec}: {dim} weights and intercept key {:?} are not features of \
                         {k} weights (classes {k})",
                        self.intercept
                    ));
                }
                Ok(ModelFn::new(Linear::new(k)))
            }
            ("fm", Ok(k)) if (1..=MAX_FACTORS).contains(&k) => {
                let width = 1 + k;
                let dim = self.weights.len() as u32;
                if !dim.is_multiple_of(width) || self.intercept.is_some_and(|i| i % width != 0) {
                    return Err(format!(
                        "model {spec}: {dim} weights and intercept key {:?} are not features \
                         of {width} weights",
                        self.intercept
                    ));
                }
                // The factors' initial spread does not matter to scoring.
                let intercept = self.intercept.map(|i| i / width);
                Ok(ModelFn::new(Fm::new(k, 1.0, intercept)))
            }
            ("mlp", _) => {
                let hidden: Vec<u32> = params
                    .split(',')
                    .map(|h| {
                        h.parse::<u32>()
                            .ok()
                            .filter(|h| (1..=MAX_HIDDEN).contains(h))
                    })
                    .collect::<Option<_>>()
                    .filter(|h: &Vec<u32>| (1..=2).contains(&h.len()))
                    .ok_or_else(|| {
                        format!(
                            "model {spec}: an mlp has one or two layers of 1 to {MAX_HIDDEN} units"
                        )
                    })?;
                // The initial spread does not matter to scoring.
                let mlp = Mlp::new(&hidden, self.outputs(), 1.0);
                let (dim, width, dense) = (self.weights.len() as u32, mlp.width(), mlp.dense());
                let features = dim.checked_sub(dense).filter(|f| f.is_multiple_of(width));
                if features.is_none() || self.intercept.is_some_and(|i| i % width != 0) {
                    return Err(format!(
                        "model {spec}: {dim} weights and intercept key {:?} are not features of \
                         {width} weights and {dense} dense ones",
                        self.intercept
                    ));
                }
                Ok(ModelFn::new(mlp))
            }
            (name, _) if super::MODELS.added(name).is_some() => {
                let (_, make) = super::MODELS.added(name).expect("just found");
                let model = make(&super::ModelArgs {
                    outputs: self.outputs(),
                    init_std: 1.0,
                });
                let (dim, width, dense) = (self.weights.len() as u32, model.width(), model.dense());
                let features = dim.checked_sub(dense).filter(|f| f.is_multiple_of(width));
                if width == 0
                    || features.is_none()
                    || self.intercept.is_some_and(|i| i % width != 0)
                {
                    return Err(format!(
                        "model {spec}: {dim} weights and intercept key {:?} are not features of \
                         {width} weights and {dense} dense ones",
                        self.intercept
                    ));
                }
                Ok(model)
            }
            _ => Err(format!(
                "the model is '{spec}', which is not one of gradflow's (linear, fm:K, \
                 mlp:H[,H]): score it with the program that trained it"
            )),
        }
    }

    /// Outputs per feature (`classes`, or 1).
    pub fn outputs(&self) -> u32 {
        self.classes.unwrap_or(1)
    }
}

/// Where worker `w` writes its shard of the model bound for `model`, beside it.
pub fn shard_path(model: &Path, w: u32) -> PathBuf {
    let name = model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    model.with_file_name(format!(".{name}.shard-{w:05}"))
}

/// The first bytes of a shard file.
const SHARD_MAGIC: &[u8; 16] = b"gradflow shard1\n";

/// Writes a shard of a model to `path`: the magic, the nonzero weights of `weights` (`(key,
/// weight)`, keys increasing) as pairs (u32, f32), then their count (u64), little-endian;
/// streamed, in memory independent of the shard's size.
pub fn write_shard(path: &Path, weights: impl Iterator<Item = (u32, f32)>) -> std::io::Result<()> {
    let mut out = crate::atomic::AtomicFile::create(path)?;
    out.write_all(SHARD_MAGIC)?;
    let mut count = 0u64;
    for (k, w) in weights.filter(|&(_, w)| w != 0.0) {
        out.write_all(&k.to_le_bytes())?;
        out.write_all(&w.to_le_bytes())?;
        count += 1;
    }
    out.write_all(&count.to_le_bytes())?;
    out.commit()
}

/// The pairs of the shard files `shards`, merged in key order; each file is checked (its
/// magic, its length against its count, finite weights) and named in errors.
fn merge_shards(
    shards: &[PathBuf],
) -> Result<impl Iterator<Item = Result<(u32, f32), String>>, String> {
    use std::cmp::Reverse;
    use std::io::Read;
    struct Shard {
        name: String,
        file: std::io::BufReader<std::fs::File>,
        left: u64,
    }
    impl Shard {
        fn next(&mut self) -> Result<Option<(u32, f32)>, String> {
            if self.left == 0 {
                return Ok(None);
            }
            let mut pair = [0u8; 8];
            self.file
                .read_exact(&mut pair)
                .map_err(|e| format!("{}: {e} ({} pairs short)", self.name, self.left))?;
            self.left -= 1;
            let k = u32::from_le_bytes(pair[..4].try_into().unwrap());
            let w = f32::from_le_bytes(pair[4..].try_into().unwrap());
            if !w.is_finite() {
                return Err(format!("{}: the weight of key {k} is {w}", self.name));
            }
            Ok(Some((k, w)))
        }
    }
    let mut open = Vec::new();
    for path in shards {
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|e| format!("{name}: {e}"))?;
        let len = file.metadata().map_err(|e| format!("{name}: {e}"))?.len();
        let (mut head, mut tail) = ([0u8; 16], [0u8; 8]);
        use std::os::unix::fs::FileExt;
        let read = file
            .read_exact_at(&mut head, 0)
            .and_then(|()| file.read_exact_at(&mut tail, len.saturating_sub(8)));
        read.map_err(|e| format!("{name}: not a model shard ({e})"))?;
        let left = u64::from_le_bytes(tail);
        let mut file = std::io::BufReader::new(file);
        file.read_exact(&mut head)
            .map_err(|e| format!("{name}: not a model shard ({e})"))?;
        if &head[..] != SHARD_MAGIC
            || Some(len) != left.checked_mul(8).and_then(|b| b.checked_add(24))
        {
            return Err(format!(
                "{name}: not a whole model shard ({len} bytes, {left} pairs)"
            ));
        }
        open.push(Shard { name, file, left });
    }
    let mut heads = std::collections::BinaryHeap::new();
    for (i, s) in open.iter_mut().enumerate() {
        if let Some((k, w)) = s.next()? {
            heads.push(Reverse((k, i, w.to_bits())));
        }
    }
    Ok(std::iter::from_fn(move || {
        let Reverse((k, i, w)) = heads.pop()?;
        match open[i].next() {
            Ok(Some((k2, w2))) => heads.push(Reverse((k2, i, w2.to_bits()))),
            Ok(None) => {}
            Err(e) => return Some(Err(e)),
        }
        Some(Ok((k, f32::from_bits(w))))
    }))
}

const MAGIC_V1: &str = "# gradflow model v1";
const MAGIC_V2: &str = "# gradflow model v2";
const MAGIC: &str = "# gradflow model v3";

/// The checksum of a model file's text before its `end` line.
fn checksum(text: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

impl ModelFile {
    /// The model file's text.
    pub fn to_text(&self) -> String {
        let mut s = self.header(self.weights.len());
        let mut count = 0u64;
        for (k, w) in self.weights.iter().enumerate().filter(|(_, w)| **w != 0.0) {
            let _ = writeln!(s, "{k} {w}");
            count += 1;
        }
        let sum = checksum(&s);
        let _ = writeln!(s, "end {count} {sum:016x}");
        s
    }

    /// The text before the weights' lines, of a model of `dim` weights.
    fn header(&self, dim: usize) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{MAGIC}\nloss {}\ndim {dim}", self.loss);
        match self.intercept {
            Some(k) => writeln!(s, "intercept {k}"),
            None => writeln!(s, "intercept none"),
        }
        .ok();
        if let Some(k) = self.classes {
            let _ = writeln!(s, "classes {k}");
        }
        if let Some(m) = &self.model {
            let _ = writeln!(s, "model {m}");
        }
        if let Some(f) = &self.features {
            let _ = writeln!(s, "features {}\n{}", f.lines().count(), f.trim_end());
        }
        s.push_str("weights\n");
        s
    }

    /// Writes to `path` (whole or not at all, creating its directory) the model of `dim`
    /// weights that the shard files `shards` hold between them ([`write_shard`]): the same
    /// text [`Self::to_text`] makes of the whole model (`self.weights` is not read), merged
    /// key by key as it is written, in memory independent of the model's size. The shards are
    /// removed once the model is in place.
    pub fn save_from_shards(
        &self,
        path: &Path,
        dim: u32,
        shards: &[PathBuf],
    ) -> Result<(), String> {
        let io = |e: std::io::Error| format!("{}: {e}", path.display());
        crate::atomic::create_parent(path).map_err(io)?;
        let mut out = crate::atomic::AtomicFile::create(path).map_err(io)?;
        let mut hash = xxhash_rust::xxh3::Xxh3::new();
        let header = self.header(dim as usize);
        hash.update(header.as_bytes());
        out.write_all(header.as_bytes()).map_err(io)?;
        let (mut count, mut line, mut last) = (0u64, String::new(), None);
        for pair in merge_shards(shards)? {
            let (k, w) = pair?;
            if k >= dim || last.is_some_and(|l| l >= k) {
                return Err(format!(
                    "model shards: key {k} after key {last:?} (of {dim} weights)"
                ));
            }
            last = Some(k);
            line.clear();
            let _ = writeln!(line, "{k} {w}");
            hash.update(line.as_bytes());
            out.write_all(line.as_bytes()).map_err(io)?;
            count += 1;
        }
        let end = format!("end {count} {:016x}\n", hash.digest());
        out.write_all(end.as_bytes()).map_err(io)?;
        out.commit().map_err(io)?;
        for shard in shards {
            let _ = std::fs::remove_file(shard);
        }
        Ok(())
    }

    /// Writes the model to `path` (whole or not at all), creating its directory.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        crate::atomic::create_parent(path)?;
        crate::atomic::write(path, self.to_text())
    }

    /// Reads a model file of at most [`crate::data::MAX_DIM`] features plus an intercept;
    /// errors name the file and line.
    pub fn load(path: &Path) -> Result<ModelFile, String> {
        Self::load_limited(path, crate::data::MAX_DIM)
    }

    /// As [`ModelFile::load`], for a model of at most `max_dim` features plus an intercept
    /// (the `data.max_dim` of the job that trained it).
    pub fn load_limited(path: &Path, max_dim: u32) -> Result<ModelFile, String> {
        Self::load_noted(path, max_dim).map(|(m, _)| m)
    }

    /// As [`ModelFile::load_limited`], with a note for a file of an older format (one whose cut
    /// or damage cannot be detected).
    pub fn load_noted(path: &Path, max_dim: u32) -> Result<(ModelFile, Option<String>), String> {
        let text = crate::data::source::read_input_text(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let model = Self::parse_limited(&text, max_dim)
            .map_err(|(line, m)| format!("{}:{line}: {m}", path.display()))?;
        let old = !text.starts_with(MAGIC);
        let note = old.then(|| {
            format!(
                "{}: a model file of an older format, without a checksum: a file cut short at a \
                 line's end cannot be told from a whole one (saving it again with this version \
                 adds one)",
                path.display()
            )
        });
        Ok((model, note))
    }

    /// Parses model text of at most [`crate::data::MAX_DIM`] features plus an intercept; an
    /// error is `(1-based line, message)`.
    pub fn parse(text: &str) -> Result<ModelFile, (usize, String)> {
        Self::parse_limited(text, crate::data::MAX_DIM)
    }

    /// As [`ModelFile::parse`] with a cap of `max_dim` features plus an intercept: the header
    /// is checked before the weights are allocated.
    pub fn parse_limited(text: &str, max_dim: u32) -> Result<ModelFile, LineError> {
        let err = |line: usize, m: &str| (line, m.to_string());
        let first = text.lines().next().map(str::trim);
        let (v2, body, end) = match first {
            Some(MAGIC) => {
                let (body, end) = split_end(text)?;
                (true, body, Some(end))
            }
            Some(MAGIC_V2) => (true, text, None),
            Some(MAGIC_V1) => (false, text, None),
            _ => {
                return Err(err(
                    1,
                    "not a gradflow model file (expected '# gradflow model v3', v2 or v1)",
                ))
            }
        };
        let mut lines = body.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
        lines.next();
        let (mut model, dim) = parse_header(&mut lines, v2, max_dim)?;
        // (A header's dim is checked against the reader's limit, but the limit may be raised
        // past what this process can hold: an error, not an abort.)
        let mut weights = crate::mem::try_zeroed_vec::<f32>(dim as usize).ok_or_else(|| {
            let m = format!(
                "a model of {dim} features needs {} MiB of weights, more than this process \
                 can allocate",
                (dim as u64 * 4) >> 20
            );
            err(1, &m)
        })?;
        let mut previous = None;
        let mut count = 0u64;
        for (i, line) in lines {
            if let Some((k, w)) = parse_weight(i, line, dim, &mut previous)? {
                weights[k as usize] = w;
                count += 1;
            }
        }
        if let Some((line, expected)) = end {
            if count != expected {
                let m = format!("{count} weights where the 'end' line counts {expected}");
                return Err(err(line, &m));
            }
        }
        model.weights = weights;
        Ok(model)
    }
}

/// Reads a model file's header from `lines` (after its first line; `v2`: a version 2 or 3
/// header, else version 1's `loss` and `dim`): the model without its weights, and its number
/// of weights, at most `max_dim` plus an intercept.
fn parse_header<'a>(
    lines: &mut impl Iterator<Item = (usize, &'a str)>,
    v2: bool,
    max_dim: u32,
) -> Result<(ModelFile, u32), LineError> {
    let err = |line: usize, m: &str| (line, m.to_string());
    let mut next = |what: &str| {
        lines
            .next()
            .ok_or_else(|| err(0, &format!("ends before '{what}'")))
    };
    let (i, line) = next("loss")?;
    let loss = match line.strip_prefix("loss ").map(str::trim) {
        Some(name) if is_loss_name(name) => name.to_string(),
        _ => {
            let expected = "expected 'loss NAME' (e.g. logistic, hinge, squared)";
            return Err(err(i, expected));
        }
    };
    let (i, line) = next("dim")?;
    let dim: u32 = line
        .strip_prefix("dim ")
        .and_then(|d| d.trim().parse().ok())
        .ok_or_else(|| err(i, "expected 'dim N' (N below 2^32)"))?;
    if dim as u64 > max_dim as u64 + 1 {
        let m = format!(
            "dim {dim} is more than the limit of {max_dim} features plus an intercept; a \
             model trained with a larger data.max_dim needs predict --max-dim"
        );
        return Err(err(i, &m));
    }
    let (mut intercept, mut features, mut classes, mut model) = (None, None, None, None);
    if v2 {
        let (i, line) = next("intercept")?;
        intercept = match line.strip_prefix("intercept ").map(str::trim) {
            Some("none") => None,
            Some(k) => match k.parse::<u32>() {
                Ok(k) if k < dim => Some(k),
                _ => return Err(err(i, &format!("bad intercept key '{k}' for dim {dim}"))),
            },
            None => return Err(err(i, "expected 'intercept KEY' or 'intercept none'")),
        };
        let (mut i, mut line) = next("weights")?;
        if let Some(k) = line.strip_prefix("classes ") {
            let k = k.trim();
            classes = match k.parse::<u32>() {
                Ok(k) if (2..=MAX_CLASSES).contains(&k) => Some(k),
                _ => {
                    let m = format!("bad classes '{k}' (2 to {})", MAX_CLASSES);
                    return Err(err(i, &m));
                }
            };
            (i, line) = next("weights")?;
        }
        if let Some(name) = line.strip_prefix("model ") {
            let name = name.trim();
            let (base, params) = name.split_once(':').unwrap_or((name, "0"));
            let numbers = params
                .split(',')
                .all(|n| (1..=10).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_digit()));
            if !is_loss_name(base) || !numbers {
                let m = "expected 'model NAME' or 'model NAME:N[,N]' (1-64 letters, \
                         digits, _ or -; numbers of 1-10 digits)";
                return Err(err(i, m));
            }
            model = Some(name.to_string());
            (i, line) = next("weights")?;
        }
        if let Some(n) = line.strip_prefix("features ") {
            let n: usize = n
                .trim()
                .parse()
                .map_err(|_| err(i, "expected 'features N' (N lines of TOML)"))?;
            let mut map = String::new();
            for _ in 0..n {
                let (_, l) = next("the feature map's lines")?;
                map.push_str(l);
                map.push('\n');
            }
            features = Some(map);
            (i, line) = next("weights")?;
        }
        if line != "weights" {
            return Err(err(i, "expected 'weights'"));
        }
    }
    let model = ModelFile {
        loss,
        weights: Vec::new(),
        intercept,
        classes,
        model,
        features,
    };
    Ok((model, dim))
}

/// One `<key> <weight>` line (line `i`, trimmed) of a model of `dim` weights: the pair, or
/// `None` for a blank line. Keys must increase (`previous`, updated) and stay below `dim`;
/// weights must be finite.
fn parse_weight(
    i: usize,
    line: &str,
    dim: u32,
    previous: &mut Option<u32>,
) -> Result<Option<(u32, f32)>, LineError> {
    let err = |m: &str| (i, m.to_string());
    if line.is_empty() {
        return Ok(None);
    }
    let (k, w) = line
        .split_once(' ')
        .ok_or_else(|| err("expected '<key> <weight>'"))?;
    let show = crate::data::clip;
    let k: u64 = k
        .parse()
        .map_err(|_| err(&format!("bad key '{}'", show(k))))?;
    let w: f32 = w
        .trim()
        .parse()
        .map_err(|_| err(&format!("bad weight '{}'", show(w))))?;
    if k >= dim as u64 {
        return Err(err(&format!("key {k} beyond dim {dim}")));
    }
    let k = k as u32;
    if let Some(p) = previous.filter(|&p| k <= p) {
        let m = match k == p {
            true => format!("key {k} repeated"),
            false => format!("key {k} after key {p} (keys increase)"),
        };
        return Err(err(&m));
    }
    if !w.is_finite() {
        return Err(err(&format!("the weight of key {k} is not a finite f32")));
    }
    *previous = Some(k);
    Ok(Some((k, w)))
}

/// A model file read as a stream: its header first, then its weights, of which the reader
/// keeps only those it asks for ([`ModelStream::weights_where`]); memory follows the header
/// and the kept weights, not the model (an owner's keys of a model larger than one process).
/// A version 3 file is checked as it streams (its `end` line's count and checksum, before
/// the weights are returned); an older one, which has no checksum, is read whole.
pub struct ModelStream {
    /// The model without its weights.
    pub header: ModelFile,
    /// Its number of weights.
    pub dim: u32,
    /// A note for a file of an older format ([`ModelFile::load_noted`]).
    pub note: Option<String>,
    body: Body,
}

/// What is left to read of a [`ModelStream`].
enum Body {
    /// A version 3 file after its `weights` line: the rest of its lines, the number of the
    /// last line read and the checksum of every byte so far.
    Lines {
        input: Box<dyn std::io::BufRead>,
        line: usize,
        hash: Box<xxhash_rust::xxh3::Xxh3>,
    },
    /// An older file's weights, read whole.
    Whole(Vec<f32>),
}

impl ModelStream {
    /// Opens the model file `path` (gzip or zstd too) of at most `max_dim` features plus an
    /// intercept, and reads its header; errors name the file and line.
    pub fn open(path: &Path, max_dim: u32) -> Result<Self, String> {
        let name = path.display();
        let mut input = crate::data::source::open_stream(path).map_err(|e| e.to_string())?;
        let (mut header, mut buf, mut line) = (String::new(), String::new(), 0);
        let mut hash = Box::new(xxhash_rust::xxh3::Xxh3::new());
        loop {
            buf.clear();
            let n = (input.read_line(&mut buf)).map_err(|e| format!("{name}:{}: {e}", line + 1))?;
            if n == 0 {
                break;
            }
            line += 1;
            if line == 1 && buf.trim() != MAGIC {
                // An older format (or none: its parse says which).
                let (mut header, note) = ModelFile::load_noted(path, max_dim)?;
                let weights = std::mem::take(&mut header.weights);
                return Ok(ModelStream {
                    dim: weights.len() as u32,
                    header,
                    note,
                    body: Body::Whole(weights),
                });
            }
            hash.update(buf.as_bytes());
            header.push_str(&buf);
            if buf.trim() == "weights" {
                break;
            }
        }
        let mut lines = header.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
        lines.next();
        let (header, dim) =
            parse_header(&mut lines, true, max_dim).map_err(|(i, m)| format!("{name}:{i}: {m}"))?;
        Ok(ModelStream {
            header,
            dim,
            note: None,
            body: Body::Lines { input, line, hash },
        })
    }

    /// The nonzero weights of the keys `keep` accepts, keys increasing. Every line is
    /// checked as [`ModelFile::load`] checks it; `path` names the file in errors.
    pub fn weights_where(
        self,
        path: &Path,
        mut keep: impl FnMut(u32) -> bool,
    ) -> Result<Vec<(u32, f32)>, String> {
        let (mut input, mut line, mut hash) = match self.body {
            Body::Whole(weights) => {
                let pairs = weights.into_iter().enumerate();
                let pairs = pairs.map(|(k, w)| (k as u32, w));
                return Ok(pairs.filter(|&(k, w)| w != 0.0 && keep(k)).collect());
            }
            Body::Lines { input, line, hash } => (input, line, hash),
        };
        let name = path.display();
        let (mut kept, mut buf, mut previous, mut count) = (Vec::new(), String::new(), None, 0u64);
        loop {
            buf.clear();
            let n = (input.read_line(&mut buf)).map_err(|e| format!("{name}:{}: {e}", line + 1))?;
            if n == 0 {
                return Err(format!("{name}:{line}: {CUT}"));
            }
            line += 1;
            if buf.starts_with("end ") {
                let last = buf
                    .strip_suffix('\n')
                    .ok_or(format!("{name}:{line}: {CUT}"))?;
                let expected =
                    end_count(last, hash.digest()).map_err(|m| format!("{name}:{line}: {m}"))?;
                buf.clear();
                let after = input
                    .read_line(&mut buf)
                    .map_err(|e| format!("{name}: {e}"))?;
                if after > 0 {
                    return Err(format!("{name}:{}: a line after the 'end' line", line + 1));
                }
                if count != expected {
                    let m = format!("{count} weights where the 'end' line counts {expected}");
                    return Err(format!("{name}:{line}: {m}"));
                }
                return Ok(kept);
            }
            hash.update(buf.as_bytes());
            let pair = parse_weight(line, buf.trim(), self.dim, &mut previous)
                .map_err(|(i, m)| format!("{name}:{i}: {m}"))?;
            if let Some((k, w)) = pair {
                count += 1;
                if w != 0.0 && keep(k) {
                    kept.push((k, w));
                }
            }
        }
    }
}

/// The message of a version 3 file without its `end` line.
const CUT: &str = "the file ends without its 'end' line: it was cut short";

/// The weight count of a version 3 file's last line (`last`, without its line break), if it
/// is an `end` line and its checksum is `sum`, that of every byte before it.
fn end_count(last: &str, sum: u64) -> Result<u64, &'static str> {
    let mut words = last.split(' ');
    let (Some("end"), Some(count), Some(hex), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(CUT);
    };
    let count: u64 = count.parse().map_err(|_| CUT)?;
    if hex.len() != 16 || u64::from_str_radix(hex, 16).ok() != Some(sum) {
        return Err("the checksum does not match the file: it was damaged or edited");
    }
    Ok(count)
}

/// A parse error: the 1-based line and the message.
type LineError = (usize, String);

/// A version 3 file's text before its `end` line, and that line's number and weight count,
/// once the checksum matches.
fn split_end(text: &str) -> Result<(&str, (usize, u64)), LineError> {
    let lines = text.lines().count();
    let Some(body) = text.strip_suffix('\n') else {
        return Err((lines, CUT.to_string()));
    };
    let start = body.rfind('\n').map_or(0, |i| i + 1);
    let (body, last) = text.split_at(start);
    let count = end_count(last.trim_end_matches('\n'), checksum(body));
    Ok((body, (lines, count.map_err(|m| (lines, m.to_string()))?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_bit_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.txt");
        let mut m = ModelFile {
            loss: "hinge".into(),
            weights: vec![0.0, 1.5e-7, -3.25, 0.0, 1.0 / 3.0],
            intercept: Some(4),
            classes: None,
            model: None,
            features: None,
        };
        m.save(&p).unwrap();
        assert_eq!(ModelFile::load(&p).unwrap(), m);
        m.features = Some("[label]\ncolumn = \"y\"\n".into());
        m.intercept = None;
        m.save(&p).unwrap();
        assert_eq!(ModelFile::load(&p).unwrap(), m);
        m.loss = "softmax".into();
        m.weights.push(0.25);
        m.classes = Some(3);
        m.intercept = Some(3);
        m.save(&p).unwrap();
        assert_eq!(ModelFile::load(&p).unwrap(), m);
        assert_eq!(m.builtin_loss().unwrap().outputs(), 3);
        assert_eq!(m.builtin_model().unwrap().width(), 3);
        // A program's own model is named, kept, and not scored as the linear one.
        m.model = Some("unit-length".into());
        m.save(&p).unwrap();
        assert_eq!(ModelFile::load(&p).unwrap(), m);
        assert!(m.builtin_model().unwrap_err().contains("'unit-length'"));
        // The linear model needs `classes` weights a feature: 7 weights are not features of 3.
        let mut seven = m.clone();
        seven.model = None;
        seven.weights.push(1.0);
        assert!(seven
            .builtin_model()
            .unwrap_err()
            .contains("not features of 3 weights"));
        // (As a version 2 file, without the checksum that would catch the change first.)
        let v2 = m.to_text().replace(MAGIC, MAGIC_V2);
        let v2 = &v2[..v2.find("end ").unwrap()];
        assert_eq!(ModelFile::parse(v2).unwrap(), m);
        let bad = v2.replace("model unit-length", "model two words");
        let e = ModelFile::parse(&bad).unwrap_err();
        assert!(e.1.contains("expected 'model NAME'"), "{e:?}");
        m.model = None;
        // The loss and its classes must agree.
        let without = ModelFile {
            classes: None,
            ..m.clone()
        };
        assert!(without
            .builtin_loss()
            .unwrap_err()
            .contains("without 'classes'"));
        let hinge = ModelFile {
            loss: "hinge".into(),
            ..m.clone()
        };
        assert!(hinge
            .builtin_loss()
            .unwrap_err()
            .contains("a hinge model with 'classes'"));
        std::fs::write(&p, "# gradflow model v1\nloss hinge\ndim 2\n5 1.0\n").unwrap();
        assert!(ModelFile::load(&p).unwrap_err().contains(":4:"));
        std::fs::write(&p, "# gradflow model v1\nloss hinge\ndim 2\n1 1.5\n").unwrap();
        let v1 = ModelFile::load(&p).unwrap();
        assert_eq!((v1.weights, v1.intercept), (vec![0.0, 1.5], None));
        for (bad, line) in [
            (
                "# gradflow model v2\nloss hinge\ndim 2\nintercept 2\nweights\n",
                ":4:",
            ),
            ("# gradflow model v2\nloss hinge\ndim 99999999999\n", ":3:"),
            ("# gradflow model v2\nloss hinge\ndim 4294967295\n", ":3:"),
            (
                "# gradflow model v2\nloss hinge\ndim 2\nintercept 1\nfeatures x\n",
                ":5:",
            ),
            (
                "# gradflow model v2\nloss hinge\ndim 2\nintercept 1\n0 1\n",
                ":5:",
            ),
            (
                "# gradflow model v2\nloss hinge\ndim 2\nintercept 1\nfeatures 9\na\n",
                ":0:",
            ),
            (
                "# gradflow model v2\nloss softmax\ndim 6\nintercept 3\nclasses 99999999\nweights\n",
                ":5:",
            ),
            (
                "# gradflow model v2\nloss softmax\ndim 6\nintercept none\nclasses 1\n",
                ":5:",
            ),
        ] {
            std::fs::write(&p, bad).unwrap();
            let e = ModelFile::load(&p).unwrap_err();
            assert!(e.contains(line), "{bad:?}: {e}");
        }
    }

    fn sample() -> ModelFile {
        ModelFile {
            loss: "logistic".into(),
            weights: vec![0.5, 0.0, -1.25e-3, 7.0, 0.0, 1.0 / 3.0],
            intercept: Some(5),
            classes: None,
            model: None,
            features: Some("[label]\ncolumn = \"y\"\n".into()),
        }
    }

    #[test]
    fn cut_repeated_or_non_finite_weights_are_errors_naming_the_line() {
        let text = sample().to_text();
        assert_eq!(ModelFile::parse(&text).unwrap(), sample());
        let lines: Vec<&str> = text.lines().collect();
        let end = lines.len() - 1;
        // Cut after a whole weight line, inside a weight (`7.` of `7`), before the last byte.
        for cut in [
            text.rfind("\nend").unwrap() + 1,
            text.find("3 7").unwrap() + 2,
        ] {
            let e = ModelFile::parse(&text[..cut]).unwrap_err();
            assert!(e.1.contains("cut short"), "{cut}: {e:?}");
        }
        let e = ModelFile::parse(&text[..text.len() - 1]).unwrap_err();
        assert!(e.1.contains("cut short"), "{e:?}");
        // The same in an older file (no checksum): what the line holds is checked.
        let v2 = |body: &str| {
            format!("# gradflow model v2\nloss hinge\ndim 4\nintercept none\nweights\n{body}")
        };
        for (body, line, why) in [
            ("1 0.5\n1 0.25\n", 7, "key 1 repeated"),
            ("2 0.5\n1 0.25\n", 7, "after key 2"),
            ("1 nan\n", 6, "not a finite"),
            ("1 -inf\n", 6, "not a finite"),
            ("1 1e39\n", 6, "not a finite"),
        ] {
            let e = ModelFile::parse(&v2(body)).unwrap_err();
            assert!(e.0 == line && e.1.contains(why), "{body:?}: {e:?}");
        }
        assert!(
            ModelFile::parse(&v2("1 0.5\n3 -2\n")).is_ok(),
            "v2 is still read"
        );
        // A weight edited in a v3 file: the checksum.
        let edited = text.replace("3 7\n", "3 8\n");
        let e = ModelFile::parse(&edited).unwrap_err();
        assert!(e.0 == end + 1 && e.1.contains("checksum"), "{e:?}");
    }

    /// The weights of `text`, streamed from a file, that `keep` accepts.
    fn streamed(text: &[u8], keep: impl FnMut(u32) -> bool) -> Result<Vec<(u32, f32)>, String> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.txt");
        std::fs::write(&p, text).unwrap();
        ModelStream::open(&p, 100)?.weights_where(&p, keep)
    }

    /// A streamed file gives the header and the kept weights that loading it whole gives
    /// (gzip too, and an older format); what it checks, it checks as loading does.
    #[test]
    fn a_stream_keeps_the_weights_asked_for_and_checks_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.txt");
        let m = sample();
        m.save(&p).unwrap();
        let pairs = |keep: fn(u32) -> bool| {
            let w = m.weights.iter().enumerate().map(|(k, &w)| (k as u32, w));
            w.filter(|&(k, w)| w != 0.0 && keep(k)).collect::<Vec<_>>()
        };
        let stream = ModelStream::open(&p, 100).unwrap();
        assert_eq!((stream.dim, stream.note.is_none()), (6, true));
        let header = ModelFile {
            weights: Vec::new(),
            ..m.clone()
        };
        assert_eq!(stream.header, header);
        let odd = stream.weights_where(&p, |k| k % 2 == 1).unwrap();
        assert_eq!(odd, pairs(|k| k % 2 == 1));
        assert_eq!(odd, vec![(3, 7.0), (5, 1.0 / 3.0)]);
        let gz = dir.path().join("m.txt.gz");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(m.to_text().as_bytes()).unwrap();
        std::fs::write(&gz, enc.finish().unwrap()).unwrap();
        let all = ModelStream::open(&gz, 100).unwrap();
        assert_eq!(all.weights_where(&gz, |_| true).unwrap(), pairs(|_| true));
        let v2 = m.to_text().replace(MAGIC, MAGIC_V2);
        let v2 = &v2[..v2.find("end ").unwrap()];
        std::fs::write(&p, v2).unwrap();
        let old = ModelStream::open(&p, 100).unwrap();
        assert!(old.note.is_some());
        assert_eq!(old.weights_where(&p, |k| k < 3).unwrap(), pairs(|k| k < 3));
        let text = m.to_text();
        let end = text.lines().count();
        for (bad, line, why) in [
            (text.replace("3 7\n", "3 8\n"), end, "checksum"),
            (text.replace("3 7\n", "3 x\n"), 11, "bad weight 'x'"),
            (format!("{text}\n"), end + 1, "after the 'end' line"),
            (text[..text.len() - 1].to_string(), end, "cut short"),
            (
                text[..text.find("\nend").unwrap() + 1].to_string(),
                end - 1,
                "cut short",
            ),
            (text.replace("dim 6", "dim 600"), 3, "more than the limit"),
        ] {
            let e = streamed(bad.as_bytes(), |_| true).unwrap_err();
            assert!(
                e.contains(&format!("m.txt:{line}: ")) && e.contains(why),
                "{e}"
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]
        /// Any truncation or single-byte change of a valid file is an error or the same model
        /// (a change in a comment-free text file can only be caught by the checksum): never a
        /// different model.
        #[test]
        fn a_cut_or_changed_file_is_an_error_never_another_model(
            cut in 0usize..400, at in 0usize..400, byte in 0u8..=255,
        ) {
            let text = sample().to_text();
            let cut = cut.min(text.len() - 1);
            if let Ok(m) = ModelFile::parse(&text[..cut]) {
                proptest::prop_assert_eq!(m, sample());
            }
            let all: Vec<(u32, f32)> = vec![(0, 0.5), (2, -1.25e-3), (3, 7.0), (5, 1.0 / 3.0)];
            if let Ok(pairs) = streamed(&text.as_bytes()[..cut], |_| true) {
                proptest::prop_assert_eq!(&pairs, &all);
            }
            let mut bytes = text.clone().into_bytes();
            let at = at % bytes.len();
            bytes[at] = byte;
            if let Ok(pairs) = streamed(&bytes, |_| true) {
                proptest::prop_assert_eq!(&pairs, &all, "byte {} to {}", at, byte);
            }
            if let Ok(changed) = std::str::from_utf8(&bytes) {
                if let Ok(m) = ModelFile::parse(changed) {
                    proptest::prop_assert_eq!(m, sample(), "byte {} to {}", at, byte);
                }
            }
        }
    }
}
