//! Where an exchange's parts run ([`Place`]) and what of the job they are built from
//! ([`ExchangePlan`]): the exchange's own view of the training plan, so that it depends on
//! no layer above it.

use std::ops::Range;

use super::sketch::SketchParams;
use super::Ownership;
use crate::codec::CodecSpec;
use crate::memory::MemorySpec;

/// The fields of the job that an exchange's parts read; the dataflow layer builds it from its
/// plan (`TrainPlan::exchange_plan`).
#[derive(Clone, Debug, PartialEq)]
pub struct ExchangePlan {
    /// Number of weights.
    pub dim: u32,
    /// Seed of every random choice.
    pub seed: u64,
    /// Gradient (uplink) codec.
    pub codec: CodecSpec,
    /// Error-feedback memory of the uplink.
    pub memory: MemorySpec,
    /// Codec of the `sharded` downlink (model changes).
    pub downlink: CodecSpec,
    /// Key ownership under `sharded`.
    pub ownership: Ownership,
    /// `sharded`: workers pull the weights of their next batch.
    pub pull: bool,
    /// Where the model's state lives (`train.state`; [`StateMode::Sharded`] pulls).
    pub state: super::StateMode,
    /// Parameters of the `sketch` exchange.
    pub sketch: SketchParams,
    /// Rounds in flight (`train.staleness`).
    pub staleness: u64,
    /// λ of the delay compensation of pipelined rounds (0: none).
    pub delay_compensation: f32,
    /// Worker threads per process (to tell which receivers are in another process).
    pub threads_per_process: usize,
    /// Weights per feature of the model (its width: classes, or 1 + factors).
    pub model_width: u32,
    /// The keys of the model's dense weights, which every batch touches.
    pub dense_keys: Range<u32>,
    /// The rounds at which the job writes a checkpoint (their update is computed on the
    /// whole model).
    pub checkpoints: CheckpointRounds,
}

impl ExchangePlan {
    /// The process of worker `w`.
    pub fn process_of(&self, w: u32) -> usize {
        w as usize / self.threads_per_process
    }
}

/// The rounds at which a job writes a checkpoint: every `every` rounds (0: never), except its
/// first round `start` and from its end `end` on.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CheckpointRounds {
    /// Rounds between checkpoints (0: none).
    pub every: u64,
    /// The round the run starts at.
    pub start: u64,
    /// The run's number of rounds.
    pub end: u64,
}

impl CheckpointRounds {
    /// Whether a checkpoint is written at the start of round `r`.
    pub fn due(&self, r: u64) -> bool {
        self.every > 0 && r > 0 && r != self.start && r < self.end && r.is_multiple_of(self.every)
    }
}

/// Where an exchange's parts run: the worker, the number of workers, the job's plan.
#[derive(Clone, Copy)]
pub struct Place<'a> {
    /// This worker.
    pub me: u32,
    /// Workers in the job.
    pub peers: u32,
    /// What the exchange reads of the job.
    pub plan: &'a ExchangePlan,
}

impl Place<'_> {
    /// Whether worker `w` is in another process than this one (its messages cross a socket).
    pub fn remote(&self, w: u32) -> bool {
        self.plan.process_of(w) != self.plan.process_of(self.me)
    }
}
