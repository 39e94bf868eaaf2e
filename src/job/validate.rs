//! The checks of a job's values: each error names its field.

use super::*;
use crate::codec::CodecSpec;
use crate::data::table::FeatureSpec;
use crate::dataflow::ReplicaMode;
use crate::exchange::{ExchangeKind, StateMode};
use crate::memory::MemorySpec;
use crate::model::LossName;

/// The most rows an online round may hold (`train.batch_rows`).
const MAX_BATCH_ROWS: u64 = 1 << 24;

impl Job {
    /// What `"auto"` cannot be combined with.
    pub(super) fn validate_auto(&self) -> Result<(), String> {
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

    /// An online run's fields: only with a stream, and a stream only where it can be read.
    fn check_stream(&self) -> Result<(), String> {
        let (d, t) = (&self.data, &self.train);
        let Some(origin) = self.stream() else {
            let online = [
                ("data.follow", d.follow),
                ("output.snapshot_rows", self.output.snapshot_rows.is_some()),
                (
                    "output.snapshot_seconds",
                    self.output.snapshot_seconds.is_some(),
                ),
                ("data.on_bad_row", d.on_bad_row != OnBadRow::Stop),
                ("data.each_process_reads", d.each_process_reads),
                ("train.max_rows", t.max_rows.is_some()),
                ("train.max_seconds", t.max_seconds.is_some()),
            ];
            return match online.iter().find(|f| f.1) {
                Some((field, _)) if *field == "data.follow" => Err(
                    "data.follow: follows the training file or directory (data.train), and the job \
                     names none"
                        .into(),
                ),
                Some((field, _)) => Err(format!(
                    "{field}: applies to an online run (data.train = \"-\" for standard input, \
                     or data.follow = true)"
                )),
                None => Ok(()),
            };
        };
        let what = match origin {
            crate::data::stream::Origin::Stdin => "data.train = \"-\" (standard input)",
            _ => "data.follow",
        };
        if d.format == Format::Parquet && origin == crate::data::stream::Origin::Stdin {
            return Err(format!(
                "data.format = \"parquet\": {what} is read line by line; a Parquet stream is a \
                 directory its part files appear in, followed (data.follow)"
            ));
        }
        if d.format.is_table() {
            crate::data::table::stream_map(&d.table())?;
        } else if d.format != Format::Libsvm {
            return Err(format!(
                "data.format: {what} reads LibSVM or CSV lines, or Parquet parts; a {:?} stream \
                 is not supported (convert it, or train on the file in epochs)",
                d.format
            ));
        } else if d.dim.is_none() {
            return Err(format!(
                "data.dim: {what} needs the number of features up front (the model is sized \
                 before the first row arrives)"
            ));
        }
        if !(1..=MAX_BATCH_ROWS).contains(&t.batch_rows) {
            return Err(format!(
                "train.batch_rows: must be 1 to {MAX_BATCH_ROWS}, got {}",
                t.batch_rows
            ));
        }
        if let Some(s) = t.max_seconds.filter(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(format!("train.max_seconds: must be above 0, got {s}"));
        }
        let o = &self.output;
        if (o.snapshot_rows.is_some() || o.snapshot_seconds.is_some()) && o.model.is_none() {
            return Err(
                "output.snapshot_rows, output.snapshot_seconds: rewrite the model file \
                        (output.model, --model-out), and the job names none"
                    .into(),
            );
        }
        if o.snapshot_rows == Some(0) {
            return Err("output.snapshot_rows: must be at least 1".into());
        }
        if let Some(s) = o.snapshot_seconds.filter(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(format!("output.snapshot_seconds: must be above 0, got {s}"));
        }
        if t.auc_window == 0 {
            return Err("train.auc_window: must be at least 1 row".into());
        }
        if !(t.stall_seconds.is_finite() && t.stall_seconds > 0.0) {
            let s = t.stall_seconds;
            return Err(format!("train.stall_seconds: must be above 0, got {s}"));
        }
        let refused = [
            (
                "train.pull",
                t.pull,
                "pull the next batch's weights ahead of it",
            ),
            (
                "train.state",
                t.state == StateMode::Sharded,
                "keep the model sharded (it pulls the next batch's weights ahead of it)",
            ),
            (
                "data.cache",
                d.cache.is_some(),
                "cache rows that arrive once",
            ),
            (
                "train.checkpoint",
                t.checkpoint.is_some() && origin == crate::data::stream::Origin::Stdin,
                "be resumed from standard input (the rows read before a checkpoint are gone); \
                 follow a file (data.follow) to checkpoint a stream",
            ),
            ("\"auto\"", t.auto.any(), "measure its rows before training"),
        ];
        if let Some((field, _, why)) = refused.iter().find(|r| r.1) {
            return Err(format!("{field}: an online run ({what}) cannot {why}"));
        }
        Ok(())
    }

    /// Checks value ranges, section by section; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        self.check_stream()?;
        self.check_schedule()?;
        self.check_data_sizes()?;
        self.check_data_format()?;
        self.check_model()?;
        self.check_exchange()?;
        self.check_state()?;
        self.optimizer.validate()
    }

    /// `train.state = "sharded"`: what owners that keep the only copy of their keys can serve.
    fn check_state(&self) -> Result<(), String> {
        let t = &self.train;
        if t.state != StateMode::Sharded {
            return Ok(());
        }
        let refuse =
            |field: &str, why: &str| Err(format!("{field}: {why} with train.state = \"sharded\""));
        if t.auto.any() {
            return refuse(
                "train.exchange/compressor = \"auto\"",
                "auto is not available",
            );
        }
        if t.exchange != ExchangeKind::Sharded {
            return refuse(
                &format!("train.exchange = \"{}\"", t.exchange.name()),
                "only the sharded exchange has owners to keep each key's state; the others \
                 keep a replica on every worker (set train.state = \"replicated\")",
            );
        }
        let mut downlink =
            crate::codec::build_codec(&t.downlink).map_err(|e| format!("train.downlink: {e}"))?;
        if let Err(why) = crate::exchange::pull::check_reply_codec(downlink.as_mut()) {
            return refuse(&format!("train.downlink = \"{}\"", t.downlink.name()), &why);
        }
        if t.staleness > 0 {
            return refuse(
                "train.staleness",
                "pulled weights answer the next round's batch; it must be 0",
            );
        }
        if t.replica == ReplicaMode::Process {
            return refuse(
                "train.replica = \"process\"",
                "there is no replica to share",
            );
        }
        Ok(())
    }

    /// `train`: epochs, checkpoints, the batch fraction and the number of rounds; `"auto"`.
    fn check_schedule(&self) -> Result<(), String> {
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
        if self.stream().is_some() {
            return Ok(()); // its stream's end ends it
        }
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
        Ok(())
    }

    /// `data`: the test fraction and the dimensions against `data.max_dim`.
    fn check_data_sizes(&self) -> Result<(), String> {
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
        if let Some(dim) = d.dim.filter(|&n| n > d.max_dim) {
            return Err(self.above_cap(format!("data.dim = {dim}"), dim as u64));
        }
        if d.train.is_none() && d.synth.dim > d.max_dim {
            return Err(self.above_cap(
                format!("data.synth.dim = {}", d.synth.dim),
                d.synth.dim as u64,
            ));
        }
        Ok(())
    }

    /// Whether a model over `features` features (the intercept included) has keys a `u32`
    /// can number: `features × weights per feature + dense weights` at most 2^32 - 1, the
    /// most any model may have; an error naming the fields that size it otherwise.
    pub fn check_model_keys(&self, features: u32) -> Result<(), String> {
        let model = self.model_fn(features);
        let keys = features as u64 * model.width() as u64 + model.dense() as u64;
        if keys <= u32::MAX as u64 {
            return Ok(());
        }
        Err(format!(
            "the data's {features} features make a {} model of {keys} weights ({} per feature \
             + {} dense; model.kind, model.factors, model.hidden, model.classes): a model's \
             keys are 32-bit, at most {} weights; hash into fewer features",
            model.name(),
            model.width(),
            model.dense(),
            u32::MAX
        ))
    }

    /// The error of `what`, which makes a model of `dim` features, above `data.max_dim`.
    fn above_cap(&self, what: String, dim: u64) -> String {
        format!(
            "{what} makes a model of {dim} features, more than data.max_dim = {}: raise \
             data.max_dim in [data] if every worker has the memory (4-16 bytes per feature; \
             with train.state = \"sharded\", each process holds 1/W of it)",
            self.data.max_dim
        )
    }

    /// `data`: the fields each format uses, and only those.
    fn check_data_format(&self) -> Result<(), String> {
        let d = &self.data;
        let table_fields =
            d.label.is_some() || d.features != FeatureSpec::default() || !d.join.is_empty();
        if d.format.is_table() {
            if d.train.is_none() {
                return Err(
                    "data.train: a table (csv or parquet) job needs a training file".into(),
                );
            }
            if d.dim.is_some() || d.zero_based {
                return Err(
                    "data.dim, data.zero_based: LibSVM settings, not used with a table".into(),
                );
            }
            d.table().validate()?;
        } else if table_fields {
            return Err(
                "data.label, data.features, data.join: set data.format = \"csv\" or \"parquet\" \
                 to use them"
                    .into(),
            );
        }
        let hashed = d.features.hashed_width();
        if hashed > d.max_dim as u64 {
            let what = match (d.features.hash_bits, d.features.text.is_empty()) {
                (Some(b), true) => format!("data.features.hash_bits = {b}"),
                _ => "data.features' hash_bits (the table's and its text columns')".into(),
            };
            return Err(self.above_cap(what, hashed));
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
        Ok(())
    }

    /// `model`: classes, λ, and the factorization machine's and network's shapes.
    fn check_model(&self) -> Result<(), String> {
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
        Ok(())
    }

    /// `train`: the codecs, the exchange's options, staleness and the shared replica.
    fn check_exchange(&self) -> Result<(), String> {
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
            let replicated = self.train.state == StateMode::Replicated;
            if replicated && self.train.downlink != CodecSpec::default() {
                return Err(
                    "train.pull: pulled weights travel exact (a compressed reply needs \
                     train.state = \"sharded\"); train.downlink must be none"
                        .into(),
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
        Ok(())
    }
}
