//! What a job makes of its fields: the model, the loss, the exchange's description and
//! the training plan.

use super::*;
use crate::codec::ErrorFeedback;
use crate::data::libsvm::LibsvmOptions;
use crate::data::stream::{LineFormat, Origin, RowFormat};
use crate::data::table::stream_map;
use crate::dataflow::live::{LiveSpec, Snapshots};
use crate::dataflow::TrainPlan;
use crate::exchange::{ExchangeKind, Ownership, StateMode};
use crate::memory::MemorySpec;
use crate::model::{Fm, Linear, LossFn, LossName, Mlp, ModelArgs, ModelFn, MODELS};
use std::time::Duration;

/// An online run's rounds per epoch: it has one epoch, which its stream's end ends.
pub const LIVE_ROUNDS: u64 = 1 << 40;

impl Job {
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
        let plan = self.plan(1, 1);
        plan.strategy().describe(&plan.exchange_plan())
    }

    /// Key ownership: the job's, but `hashed` is served as `strided` when owners keep the
    /// only copy of their keys (`train.state = "sharded"`): a hashed owner would need a table
    /// of its keys as large as the model to find them in its shard.
    pub fn ownership(&self) -> Ownership {
        match (self.train.state, self.train.ownership) {
            (StateMode::Sharded, Ownership::Hashed) => Ownership::Strided,
            (_, o) => o,
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

    /// Rounds per epoch: `ceil(1 / batch_fraction)` (at most 2^53 for a valid fraction). An
    /// online run has one endless epoch ([`LIVE_ROUNDS`]).
    pub fn rounds_per_epoch(&self) -> u64 {
        if self.stream().is_some() {
            return LIVE_ROUNDS;
        }
        (1.0 / self.train.batch_fraction - 1e-9).ceil().max(1.0) as u64
    }

    /// An online run's stream: standard input (`data.train = "-"`) or the training file
    /// followed as it grows (`data.follow`).
    pub fn stream(&self) -> Option<Origin> {
        let train = self.data.train.as_ref()?;
        if train.as_os_str() == "-" {
            return Some(Origin::Stdin);
        }
        self.data.follow.then(|| Origin::Follow {
            path: train.clone(),
            from: 0,
        })
    }

    /// An online run's live snapshots (`output.snapshot_rows`, `output.snapshot_seconds`).
    fn snapshots(&self) -> Option<Snapshots> {
        let o = &self.output;
        let wanted = o.snapshot_rows.is_some() || o.snapshot_seconds.is_some();
        Some(Snapshots {
            path: o.model.clone().filter(|_| wanted)?,
            every_rows: o.snapshot_rows,
            every: o.snapshot_seconds.map(Duration::from_secs_f64),
            features: None, // the runtime's, once the feature map is made
        })
    }

    /// The format of an online run's lines: LibSVM of the declared dimension, or CSV by the
    /// feature map of a stream ([`crate::data::table::stream_map`], which validation has
    /// checked).
    fn line_format(&self) -> LineFormat {
        let binary = self.loss().task() == crate::model::Task::Binary;
        if self.data.format.is_table() {
            let map = Box::new(stream_map(&self.data.table()).expect("validated: a stream's map"));
            return match self.data.format {
                Format::Parquet => LineFormat::Parquet {
                    map,
                    classification: binary,
                },
                _ => LineFormat::Csv {
                    map,
                    classification: binary,
                },
            };
        }
        LineFormat::Libsvm(LibsvmOptions {
            zero_based: self.data.zero_based,
            dim: self.data.dim,
            ignore_beyond_dim: false,
            max_dim: self.data.max_dim,
            classes: self.classes(),
            binary,
        })
    }

    /// How an online run reads its stream, for data of `features` features (the intercept,
    /// the last, included).
    fn live_spec(&self, features: u32, threads: usize) -> Option<LiveSpec> {
        let t = &self.train;
        Some(LiveSpec {
            origin: self.stream()?,
            format: RowFormat {
                lines: self.line_format(),
                on_bad_row: self.data.on_bad_row,
            },
            batch_rows: t.batch_rows,
            batch_wait: Duration::from_millis(t.batch_ms),
            max_rows: t.max_rows,
            max_time: t.max_seconds.map(Duration::from_secs_f64),
            stall_after: Duration::from_secs_f64(t.stall_seconds),
            intercept: self.model.intercept.then(|| features - 1),
            per_process: self.data.each_process_reads.then_some(threads as u32),
            start: Default::default(),
            snapshots: self.snapshots(),
        })
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
            ModelKind::Added(name) => {
                let (_, make) = MODELS.added(name).expect("added models stay");
                make(&ModelArgs {
                    outputs: self.outputs(),
                    init_std: m.init_std,
                })
            }
        }
    }

    /// Weights per feature of the job's model.
    pub fn width(&self) -> u32 {
        match self.model.kind {
            ModelKind::Linear => self.outputs(),
            ModelKind::Fm => 1 + self.model.factors,
            ModelKind::Mlp => self.model.hidden[0],
            ModelKind::Added(_) => self.model_fn(1).width(),
        }
    }

    /// The job's loss.
    pub fn loss(&self) -> LossFn {
        self.model.loss.build(self.outputs())
    }

    /// The number of classes labels must name, for softmax.
    pub(super) fn classes(&self) -> Option<u32> {
        (self.model.loss == LossName::Softmax).then(|| self.outputs())
    }

    /// Outputs per row of the job's model: `model.classes` for softmax, 1 otherwise.
    pub fn outputs(&self) -> u32 {
        match self.model.loss {
            LossName::Softmax => self.model.classes.unwrap_or(2),
            _ => 1,
        }
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
            ownership: self.ownership(),
            pull: self.train.pull || self.train.state == StateMode::Sharded,
            state: self.train.state,
            shard_output: (self.output.model.clone())
                .filter(|_| self.train.state == StateMode::Sharded),
            staleness: self.train.staleness,
            delay_compensation: self.train.delay_compensation,
            replica: self.train.replica,
            core_distance_ns: None,
            dump_gradients: self.output.gradients.clone(),
            sketch: self.train.sketch.clone(),
            rounds_per_epoch: self.rounds_per_epoch(),
            live: self.live_spec(dim, threads_per_process),
            auc_window: self.train.auc_window,
            eval_every: self.train.eval_every,
            auc_bits: self.train.auc_bins.bits(),
            epochs: if self.stream().is_some() {
                1
            } else {
                self.train.epochs
            },
            seed: self.train.seed,
            threads_per_process,
            initial_weights: None,
            start_round: 0,
            checkpoints: None,
            choice: None,
        }
    }
}
