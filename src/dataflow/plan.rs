//! What the operators share: the plan of a run, a worker's data and its model state.

use std::cell::RefCell;
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use super::checkpoint::{Carried, Checkpoints};
use crate::codec::CodecSpec;
use crate::data::table::PreparedRow;
use crate::data::WorkerData;
use crate::exchange::replica::{ReplicaMode, SHARE_FROM_BYTES};
use crate::exchange::sketch::SketchParams;
use crate::exchange::{
    build_exchange, CheckpointRounds, CustomExchange, Exchange, ExchangeKind, ExchangePlan,
    ModelState, Owners, Ownership, Replica, Shard, StateMode,
};
use crate::memory::MemorySpec;
use crate::metrics::{RowOutput, Traffic};
use crate::model::{EvalPart, LossFn, ModelFn, ModelLoss, Task};
use std::sync::Arc;

use crate::optim::{build_optimizer, CustomOptimizer, OptimizerConfig, UpdateRule};

/// Everything about a training run that all workers share.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainPlan {
    /// Number of weights: features (the intercept included) × the model's width.
    pub dim: u32,
    /// The model (the job's linear one, or a program's own:
    /// [`crate::dataflow::Training::set_model`]).
    pub model: ModelFn,
    /// The loss (the job's, or a program's own: [`crate::dataflow::Training::set_loss`]).
    pub loss: LossFn,
    /// L2 regularisation λ.
    pub lambda: f32,
    /// λ of a factorization machine's factors (`model.lambda_factors`), when the model has
    /// them.
    pub lambda_factors: Option<f32>,
    /// The intercept's key (its feature is 1 in every row; exempt from λ), if the model has one.
    pub intercept: Option<u32>,
    /// Optimizer.
    pub optimizer: OptimizerConfig,
    /// A program's own update rule, used instead of `optimizer` when set
    /// ([`crate::dataflow::Training::set_optimizer`]).
    pub custom_optimizer: Option<CustomOptimizer>,
    /// Exchange strategy (`train.exchange`).
    pub exchange: ExchangeKind,
    /// A program's own exchange, used instead of `exchange` when set
    /// ([`crate::dataflow::Training::set_exchange`]).
    pub custom_exchange: Option<CustomExchange>,
    /// Gradient (uplink) codec.
    pub codec: CodecSpec,
    /// Error-feedback memory of the uplink (resolved: the codec's paper default when the job
    /// names none).
    pub memory: MemorySpec,
    /// Codec of the `sharded` downlink (model changes).
    pub downlink: CodecSpec,
    /// Key ownership under `sharded`.
    pub ownership: Ownership,
    /// `sharded`: workers pull the weights of their next batch instead of receiving every
    /// owner's broadcast change.
    pub pull: bool,
    /// Where the model's state lives (`train.state`): replicas, or owners only (which pull).
    pub state: StateMode,
    /// Without a replica: the model file each worker writes its shard beside, after the last
    /// round ([`crate::model::file::shard_path`]), for process 0 to merge.
    pub shard_output: Option<std::path::PathBuf>,
    /// Parameters of the `sketch` exchange.
    pub sketch: SketchParams,
    /// Rounds in flight (`train.staleness`): round `r`'s gradient is computed on the model
    /// after round `r - 1 - staleness`; the changes go around a feedback edge of
    /// `1 + staleness` rounds ([`Self::feedback_delay`]).
    pub staleness: u64,
    /// λ of the delay compensation of pipelined rounds (`train.delay_compensation`; 0: none).
    pub delay_compensation: f32,
    /// Where to write each worker's gradient of each round (`codec compare --input` format).
    pub dump_gradients: Option<std::path::PathBuf>,
    /// Rounds (mini-batches) per epoch.
    pub rounds_per_epoch: u64,
    /// An online run's stream and how it is cut into rounds (`data.train = "-"` or
    /// `data.follow`): there are no epochs, and the stream's end is the last round.
    pub live: Option<super::live::LiveSpec>,
    /// An online run: rows of each window over which the progressive AUC is reported
    /// (`train.auc_window`).
    pub auc_window: u64,
    /// Evaluate on the test rows every this many rounds as well as at epoch ends (0: epoch ends
    /// only).
    pub eval_every: u64,
    /// Test scores go into `2^auc_bits` bins for the AUC (32: exact; `train.auc_bins`).
    pub auc_bits: u8,
    /// Epochs.
    pub epochs: u64,
    /// Seed of every random choice.
    pub seed: u64,
    /// Worker threads per process (to tell which receivers are in another process).
    pub threads_per_process: usize,
    /// Whether the workers of a process share one replica of the model (`train.replica`).
    pub replica: ReplicaMode,
    /// The round trip of a cache line between the cores of the process's two workers, in ns,
    /// when the runtime measured it ([`crate::cores::CoreDistance`]; only where it decides
    /// `replica = "auto"`: a sharded job of two workers in one process with a model below
    /// [`SHARE_FROM_BYTES`]).
    pub core_distance_ns: Option<f64>,
    /// Warm start: the weights every replica starts from (zeros when `None`).
    pub initial_weights: Option<InitialWeights>,
    /// The round the loop starts at: 0, or the checkpoint's round when resuming (the workers'
    /// states are restored from it).
    pub start_round: u64,
    /// Where and how often this process writes checkpoints (`train.checkpoint`).
    pub checkpoints: Option<Checkpoints>,
    /// What choosing the configuration cost before training (`"auto"`): the metrics' first row.
    pub choice: Option<ChoiceCost>,
}

/// What choosing a job's `"auto"` fields cost before its first round: every process together.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ChoiceCost {
    /// Seconds from the first measurement to the choice.
    pub seconds: f64,
    /// Payload bytes the probes, the agreements and the trials sent to other processes, every
    /// process together.
    pub sent_bytes: u64,
}

/// A model's weights to start training from, shared by the workers of a process, with the
/// names of the model and loss that learnt them: the training loop checks them against its
/// own once the program has chosen (`Training::set_model`, `set_loss`).
#[derive(Clone, PartialEq)]
pub struct InitialWeights {
    /// The weights.
    pub weights: Arc<WarmWeights>,
    /// Where they come from (for errors).
    pub from: String,
    /// The model's spec ([`crate::model::Model::spec`]).
    pub model: String,
    /// The loss's name.
    pub loss: String,
}

/// The weights a warm start sets (every other weight starts at zero).
#[derive(Clone, Debug, PartialEq)]
pub enum WarmWeights {
    /// Every weight of the model: a replica's start.
    All(Vec<f32>),
    /// The nonzero weights of the keys that one worker owns, and of those its first batch
    /// reaches, keys increasing, of a model of `dim` weights: the start of its shard
    /// (`train.state = "sharded"`), read without holding the model.
    Owned {
        /// The model's number of weights.
        dim: u32,
        /// `(key, weight)`.
        pairs: Vec<(u32, f32)>,
    },
}

impl WarmWeights {
    /// The model's number of weights.
    pub fn dim(&self) -> u32 {
        match self {
            WarmWeights::All(w) => w.len() as u32,
            WarmWeights::Owned { dim, .. } => *dim,
        }
    }

    /// Sets these weights in `weights` (the whole model, zeros).
    pub fn fill(&self, weights: &mut [f32]) {
        match self {
            WarmWeights::All(w) => weights.copy_from_slice(w),
            WarmWeights::Owned { pairs, .. } => {
                pairs.iter().for_each(|&(k, w)| weights[k as usize] = w)
            }
        }
    }

    /// The weight of key `k` (zero where none is held).
    pub fn get(&self, k: u32) -> f32 {
        match self {
            WarmWeights::All(w) => w.get(k as usize).copied().unwrap_or(0.0),
            WarmWeights::Owned { pairs, .. } => pairs
                .binary_search_by_key(&k, |&(p, _)| p)
                .map_or(0.0, |i| pairs[i].1),
        }
    }

    /// The nonzero weights held, keys increasing.
    pub fn nonzero(&self) -> Box<dyn Iterator<Item = (u32, f32)> + '_> {
        match self {
            WarmWeights::All(w) => Box::new(
                (w.iter().enumerate())
                    .filter(|(_, w)| **w != 0.0)
                    .map(|(k, &w)| (k as u32, w)),
            ),
            WarmWeights::Owned { pairs, .. } => Box::new(pairs.iter().copied()),
        }
    }
}

impl std::fmt::Debug for InitialWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "InitialWeights({} weights of {} {})",
            self.weights.dim(),
            self.model,
            self.loss
        )
    }
}

impl InitialWeights {
    /// Why these weights cannot start `plan`'s model and loss, if they cannot.
    pub fn misfit(&self, plan: &TrainPlan) -> Option<String> {
        let (model, loss) = (plan.model.spec(), plan.loss.name());
        let what = if self.model != model {
            format!("it is the model '{}', the job trains '{model}'", self.model)
        } else if self.loss != loss {
            format!(
                "it was trained with the loss '{}', the job uses '{loss}'",
                self.loss
            )
        } else {
            return None;
        };
        Some(format!(
            "{}: train.init_model does not fit this job: {what}",
            self.from
        ))
    }
}

impl TrainPlan {
    /// What the exchange's parts read of the plan.
    pub fn exchange_plan(&self) -> ExchangePlan {
        ExchangePlan {
            dim: self.dim,
            seed: self.seed,
            codec: self.codec.clone(),
            memory: self.memory.clone(),
            downlink: self.downlink.clone(),
            ownership: self.ownership,
            pull: self.pull,
            state: self.state,
            sketch: self.sketch.clone(),
            staleness: self.staleness,
            delay_compensation: self.delay_compensation,
            threads_per_process: self.threads_per_process,
            model_width: self.model.width(),
            dense_keys: self.dense_keys(),
            checkpoints: self.checkpoint_rounds(),
        }
    }

    /// The rounds at which this run writes checkpoints.
    pub fn checkpoint_rounds(&self) -> CheckpointRounds {
        CheckpointRounds {
            every: self.checkpoints.as_ref().map_or(0, |c| c.every()),
            start: self.start_round,
            end: self.rounds(),
        }
    }

    /// A worker's model state at the start: the plan's initial model (zeros, or a warm start),
    /// fresh memory and optimizer. Under `train.state = "sharded"` an empty one, until the
    /// worker's place is known ([`Self::shard_state`]).
    pub fn model_state(&self) -> ModelState {
        if self.state == StateMode::Sharded {
            let nothing = Replica::zeros(0);
            return ModelState::new(nothing, self.memory.build(0), self.update_rule(0, 0));
        }
        let mut weights = crate::mem::ZeroedArray::new(self.dim as usize);
        match &self.initial_weights {
            Some(init) => init.weights.fill(&mut weights),
            None => self.model.init(self.seed, &mut weights),
        }
        ModelState::new(
            Replica::own(weights),
            self.memory.build(self.dim),
            self.update_rule(0, self.dim),
        )
    }

    /// Worker `me` of `peers`'s state under `train.state = "sharded"`: the initial weights of
    /// the keys it owns (the model's, or a warm start's), by slot, its memory and the update
    /// rule of its slots.
    pub fn shard_state(&self, me: u32, peers: u32) -> ModelState {
        let owners = Owners::new(self.ownership, self.dim, peers, self.seed);
        let shard = Shard { owners, me };
        let mut weights = crate::mem::ZeroedArray::new(shard.len() as usize);
        match &self.initial_weights {
            Some(init) => {
                let mine = init
                    .weights
                    .nonzero()
                    .filter(|&(k, _)| owners.owner(k) == me);
                mine.for_each(|(k, w)| weights[owners.slot(k) as usize] = w);
            }
            None => {
                for (slot, w) in weights.iter_mut().enumerate() {
                    let v = (self.model).initial(self.seed, self.dim, owners.key(me, slot as u32));
                    if v != 0.0 {
                        *w = v;
                    }
                }
            }
        }
        let mut st = ModelState::new(
            Replica::own(weights),
            self.memory.build(self.dim),
            self.update_rule(0, shard.len()),
        );
        st.shard = Some(shard);
        st
    }

    /// The bytes of model state that `threads` workers of one process (of `peers` in all)
    /// reserve, and what they are: each worker's weights and update-rule state (the whole
    /// model's, or its shard's), its uplink memory and its gradient accumulator (a replica's:
    /// model-sized). A program's own update rule counts as SGD's (no state).
    pub fn state_bytes(&self, threads: u32, peers: u32) -> (u64, String) {
        let dim = self.dim as u64;
        let sharded = self.state == StateMode::Sharded;
        let keys = if sharded {
            dim.div_ceil(peers.max(1) as u64)
        } else {
            dim
        };
        let (rule, state) = match &self.custom_optimizer {
            None => self.optimizer.kind.state(),
            Some(_) => (0, ""),
        };
        let memory = match self.memory {
            MemorySpec::None => 0,
            MemorySpec::Dgc { .. } => 8 * dim,
            _ => 4 * dim,
        };
        let accumulator = if sharded { 0 } else { 4 * dim + dim / 8 };
        let worker = keys * (4 + rule) + memory + accumulator;
        let human = crate::metrics::human_bytes;
        let what = format!(
            "{threads} worker(s) x ({keys} {} x {} bytes (weight{}){}{})",
            if sharded { "keys of its shard" } else { "keys" },
            4 + rule,
            match rule {
                0 => String::new(),
                _ => format!(" and {state}"),
            },
            if memory > 0 {
                format!(" + {} uplink memory", human(memory))
            } else {
                String::new()
            },
            if accumulator > 0 {
                format!(" + {} gradient accumulator", human(accumulator))
            } else {
                String::new()
            },
        );
        (threads as u64 * worker, what)
    }

    /// The update rule for keys `lo..hi`: the program's own, or the job's optimizer.
    pub fn update_rule(&self, lo: u32, hi: u32) -> Box<dyn UpdateRule> {
        match &self.custom_optimizer {
            Some(c) => (c.make)(lo, hi),
            None => build_optimizer(&self.optimizer, lo, hi),
        }
    }

    /// The exchange strategy: the program's own, or the job's `train.exchange`.
    pub fn strategy(&self) -> Arc<dyn Exchange> {
        match &self.custom_exchange {
            Some(c) => c.make.clone(),
            None => build_exchange(self.exchange),
        }
    }

    /// The delay of the loop variable that carries the model changes back to the gradient
    /// step: `1 + staleness` rounds. A loop built by hand ([`crate::dataflow::Training`]) uses
    /// it; the gradient step counts on it.
    pub fn feedback_delay(&self) -> u64 {
        1 + self.staleness
    }

    /// Total number of rounds.
    pub fn rounds(&self) -> u64 {
        self.rounds_per_epoch * self.epochs
    }

    /// Whether the test rows are evaluated after `r` rounds (`r >= 1`): at every epoch end and
    /// every `eval_every` rounds.
    pub fn evaluates_after(&self, r: u64) -> bool {
        r > 0
            && (r.is_multiple_of(self.rounds_per_epoch)
                || (self.eval_every > 0 && r.is_multiple_of(self.eval_every)))
    }

    /// The process of worker `w`.
    pub fn process_of(&self, w: u32) -> usize {
        w as usize / self.threads_per_process
    }

    /// Whether the `peers` workers could keep one replica: `sharded` without pulls, every
    /// worker a thread of one process.
    fn can_share_replica(&self, peers: usize) -> bool {
        self.exchange == ExchangeKind::Sharded
            && !self.pull
            && self.staleness == 0
            && self.threads_per_process == peers
    }

    /// Whether `replica = "auto"` asks how far apart the cores of the `peers` workers are
    /// ([`Self::core_distance_ns`]): two workers in one process that could share a model
    /// smaller than [`SHARE_FROM_BYTES`]. Sharing it is faster when their cores
    /// share a cache and slower when they do not (`docs/architecture.md`, "The two CPUs'
    /// distance"); larger models are shared either way, and more workers were not measured.
    pub fn replica_depends_on_distance(&self, peers: usize) -> bool {
        self.replica == ReplicaMode::Auto
            && peers == 2
            && self.can_share_replica(peers)
            && (self.dim as usize * 4) < SHARE_FROM_BYTES
    }

    /// Whether the `peers` workers keep one replica of the model instead of one each
    /// ([`super::Training::place_model`]), an error when `train.replica = "process"` asks
    /// for what cannot be: replicas are shared under `sharded` without pulls, when every
    /// worker is a thread of one process. (In a cluster, a change from another process would
    /// have to be added once per process and the process's other workers told: one more step,
    /// not built; pulled weights differ per worker.)
    pub fn shares_replica(&self, peers: usize) -> Result<bool, String> {
        let possible = self.can_share_replica(peers);
        match self.replica {
            ReplicaMode::Worker => Ok(false),
            ReplicaMode::Auto => Ok(possible
                && peers > 1
                && (self.dim as usize * 4 >= SHARE_FROM_BYTES
                    || (self.replica_depends_on_distance(peers)
                        && crate::cores::CoreDistance::near(self.core_distance_ns)))),
            ReplicaMode::Process if possible => Ok(peers > 1),
            ReplicaMode::Process => Err(
                "train.replica = \"process\": one replica per process needs the sharded \
                 exchange without pull, and every worker in one process"
                    .into(),
            ),
        }
    }

    /// Whether worker `w` is its process's first (it speaks for the process: wire counts,
    /// checkpoints).
    pub fn leads_process(&self, w: u32) -> bool {
        (w as usize).is_multiple_of(self.threads_per_process)
    }

    /// The L2 penalty of the gradient step.
    pub fn l2(&self) -> crate::model::gradient::L2 {
        crate::model::gradient::L2 {
            lambda: self.lambda,
            intercept: self.intercept.map(|i| (i, i + self.model.width())),
            factors: (self.lambda_factors).map(|l| (l, self.model.width())),
        }
    }

    /// The keys of the model's dense weights (a network's dense layers), after the features'.
    pub fn dense_keys(&self) -> std::ops::Range<u32> {
        self.dim - self.model.dense()..self.dim
    }

    /// Features per row before the intercept (the model has [`Self::dim`] =
    /// (features + intercept) · width + dense weights).
    pub fn data_dim(&self) -> u32 {
        let features_end = self.dim - self.model.dense();
        self.intercept.unwrap_or(features_end) / self.model.width()
    }
}

/// The rows a program's dataflow prepared for this worker
/// ([`crate::dataflow::Training::gradient_on`]), in the order of their ids (so that a run
/// does not depend on the order in which they arrived), with the plan's intercept. Every
/// row is checked: a unique id, keys ascending and below the plan's number of features,
/// finite values, a label the loss reads; the first bad row is an error naming its id.
pub fn worker_data(mut rows: Vec<PreparedRow>, plan: &TrainPlan) -> Result<WorkerData, String> {
    rows.sort_unstable_by_key(|r| r.id);
    if let Some(w) = rows.windows(2).find(|w| w[0].id == w[1].id) {
        return Err(format!(
            "row id {}: two rows have it (ids must be unique)",
            w[0].id
        ));
    }
    let dim = plan.data_dim();
    let mut data = WorkerData::empty(dim);
    for row in &rows {
        check_row(row, dim, &*plan.loss).map_err(|e| format!("row id {}: {e}", row.id))?;
        let side = if row.test {
            &mut data.test
        } else {
            &mut data.train
        };
        side.push_row(&row.keys, &row.values, row.label);
    }
    if plan.intercept.is_some() {
        data.train.add_intercept();
        data.test.add_intercept();
    }
    Ok(data)
}

/// Why a program's row cannot be trained on, if it cannot.
fn check_row(row: &PreparedRow, dim: u32, loss: &dyn ModelLoss) -> Result<(), String> {
    if row.keys.len() != row.values.len() {
        return Err(format!(
            "{} keys but {} values",
            row.keys.len(),
            row.values.len()
        ));
    }
    if let Some(w) = row.keys.windows(2).find(|w| w[0] >= w[1]) {
        return Err(format!(
            "keys {} and {} out of order (keys must ascend, each once)",
            w[0], w[1]
        ));
    }
    if let Some(&k) = row.keys.last().filter(|&&k| k >= dim) {
        return Err(format!(
            "key {k} is beyond the model's {dim} features (data.dim)"
        ));
    }
    if let Some(v) = row.values.iter().find(|v| !v.is_finite()) {
        return Err(format!("value {v} is not finite"));
    }
    let binary = loss.task() == Task::Binary;
    if !row.label.is_finite() || (binary && !crate::data::is_binary_label(row.label)) {
        return Err(format!(
            "label {} is not one the loss '{}' reads{}",
            row.label,
            loss.name(),
            if binary { " (-1/+1 or 0/1)" } else { "" }
        ));
    }
    loss.check_label(row.label)
}

/// A worker's state in the training loop: its model state, which the exchange's parts update
/// ([`ModelState`]), and what the loop itself carries from round to round.
pub struct WorkerState {
    /// The replica, memory, update rule, downlink residual and counters the exchange updates.
    pub model: ModelState,
    /// An early stop ([`super::Training::gradient_until`]): the round training ended at, and
    /// the decision's reason.
    pub stopped: Option<(u64, String)>,
    /// The rows a program's dataflow handed this worker ([`super::Training::gradient_on`]):
    /// training and test rows.
    pub prepared_rows: Option<(u64, u64)>,
    /// Resuming: the statistics of the round before the checkpoint, for the first report.
    pub(crate) carried: Option<Carried>,
    /// Resuming: the update rule's saved state (a program's own rule, set after the restore,
    /// restores it too).
    pub(crate) restored_optimizer: Option<Vec<u8>>,
}

impl WorkerState {
    /// A shared state holding the plan's initial model (zeros, or a warm start) and fresh
    /// memory for `plan`.
    pub fn shared(plan: &TrainPlan) -> Rc<RefCell<WorkerState>> {
        Rc::new(RefCell::new(WorkerState {
            model: plan.model_state(),
            carried: None,
            restored_optimizer: None,
            stopped: None,
            prepared_rows: None,
        }))
    }
}

/// What a worker reports to worker 0 at each round `r`: its gradient of round `r`, the
/// downstream stages of round `r - 1`, and the test evaluation after round `r - 1` at epoch ends.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RoundStats {
    /// Reporting worker.
    pub worker: u32,
    /// Whether the gradient fields are present (false after the last round).
    pub has_gradient: bool,
    /// Sum of the batch loss.
    pub loss_sum: f64,
    /// Batch rows.
    pub rows: u64,
    /// Keys in the gradient.
    pub grad_keys: u64,
    /// Keys offered to the codec (the gradient after the memory).
    pub offered_keys: u64,
    /// Keys the codec's messages carry.
    pub sent_keys: u64,
    /// Gradient time.
    pub gradient_ms: f64,
    /// Encode time (memory included).
    pub encode_ms: f64,
    /// The gradient messages of this round.
    pub traffic: Traffic,
    /// Previous round: waiting time.
    pub prev_wait_ms: f64,
    /// Previous round: decode and sum.
    pub prev_aggregate_ms: f64,
    /// Previous round: optimizer update and applying received updates.
    pub prev_update_ms: f64,
    /// Time of the test evaluation after round `r - 1`, ms.
    pub prev_eval_ms: f64,
    /// Previous round: everything after its gradient messages (downlink, second rounds,
    /// receptions).
    pub prev_traffic: Traffic,
    /// Test evaluation after the previous round, at epoch ends.
    pub eval: Option<EvalPart>,
    /// An online run: this round's rows scored before they were trained on (progressive
    /// validation), for the AUC over a window of rows.
    pub progressive: Option<EvalPart>,
}

/// Handles to a built training dataflow, read after it completes.
pub struct TrainHandle {
    /// This worker's model state (the final model once the dataflow is done).
    pub state: Rc<RefCell<WorkerState>>,
    /// Where worker 0's metrics rows go (the runtime finishes it once the run is over).
    pub output: Rc<RefCell<RowOutput>>,
    /// The loss the loop trained with (the model file records its name).
    pub loss: LossFn,
    /// The model the loop trained.
    pub model: ModelFn,
}

#[cfg(test)]
mod shard_tests {
    use std::path::Path;

    /// Each worker's shard holds the initial weights of exactly its keys, by slot, and the
    /// shards together are the replicated model's initial weights.
    #[test]
    fn the_shards_together_are_the_initial_model() {
        let text = "[model]\nkind = \"fm\"\nfactors = 3\n[train]\nstate = \"sharded\"";
        let job = crate::job::Job::parse(text, Path::new("j.toml"), &[]).unwrap();
        let mut plan = job.plan(101, 1);
        let peers = 3;
        let mut union = vec![f32::NAN; plan.dim as usize];
        for me in 0..peers {
            let st = plan.shard_state(me, peers);
            let shard = st.shard.unwrap();
            assert_eq!(st.weights.len(), shard.len() as usize);
            for (slot, w) in st.weights.to_vec().into_iter().enumerate() {
                let k = shard.owners.key(me, slot as u32);
                assert!(union[k as usize].is_nan(), "key {k} in two shards");
                union[k as usize] = w;
            }
        }
        plan.state = crate::exchange::StateMode::Replicated;
        let whole = plan.model_state().weights.to_vec();
        assert!(whole.iter().any(|&w| w != 0.0), "the factors start random");
        assert_eq!(union, whole);
    }
}
