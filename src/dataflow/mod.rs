//! The training loop as a timely dataflow.
//!
//! One iterative scope whose inner timestamp is the SGD round. The gradient operator holds the
//! exchange's endpoint (its uplink, and the changes' application); the exchange's steps
//! ([`crate::exchange::Step`]) are the operators between. Per round, on every worker, for
//! `sharded` and `allgather`:
//!
//! ```text
//!            ┌──── model changes of round r-1-s (feedback edge, +1+s rounds) ◄────────────┐
//!            ▼                                                                            │
//!   [Gradient] apply changes, (evaluate at epoch ends), batch, gradient, memory, encode   │
//!            │ gradient envelopes ── Exchange(dest) ──► [Aggregate] decode, sum in        │
//!            │                                         worker order, optimizer step,      │
//!            │                                         (sharded) encode the change ───────┘
//!            │ round statistics ── Exchange(→ worker 0) ──► [Collect] metrics rows
//! ```
//!
//! and for `sketch` (Sketched-SGD, see [`crate::exchange::sketch`]) four exchanges at the same
//! round timestamp:
//!
//! ```text
//!   [Gradient] … memory (u, v), sketch v ── column slices ──► [SumSlices] ── summed slices ──►
//!   [Candidates] top P·k, exact v ── chunks ──► [SumExact] ── sums ──► [ApplyTopK] top k,
//!   optimizer step ── the update, to its own [Gradient] (adds it, masks u and v) ──► feedback
//!   edge; v and the candidates travel from each step to the next as a worker's own carry
//! ```
//!
//! `s` is `train.staleness` (0 by default): with `s ≥ 1` round `r`'s gradient is computed on the
//! model after round `r - 1 - s`, so the exchange of up to `s` rounds runs while the next ones
//! compute (pipelined rounds, as Pipe-SGD's width-2 pipeline for `s = 1`). The delay is the
//! feedback edge's, so the frontier alone orders the rounds and the model is the same on every
//! run and every split of the workers into processes.
//!
//! Operators decide that a round is complete from their input frontiers: the gradient operator
//! starts round `r` only when nothing for round `r` can still arrive on the feedback edge; every
//! exchange operator handles round `r` only when all of round `r`'s messages are in. There is no
//! external barrier, no driver stepping rounds and no channel outside timely. The public
//! operator functions let a program assemble its own loop; [`build_training`] assembles the
//! standard one.

pub mod checkpoint;
mod collect;
mod evaluations;
mod gradient;
pub mod heartbeat;
pub mod live;
mod plan;
pub mod supervisor;

pub use crate::data::WorkerData;
pub use crate::exchange::{Replica, ReplicaMode, ReplicaSlot};
pub use collect::collect;
pub use evaluations::{evaluations, Evaluation};
pub use gradient::{first_batch_features, gradient, Rows};
pub use plan::{
    worker_data, ChoiceCost, InitialWeights, RoundStats, TrainHandle, TrainPlan, WarmWeights,
    WorkerState,
};
pub use supervisor::Supervisor;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::{ConnectLoop, LoopVariable};
use timely::dataflow::{Scope, Stream};
use timely::order::Product;

use crate::codec::{Codec, CodecSpec};
use crate::data::table::PreparedRow;
use crate::exchange::{Envelope, Place, StateMode};
use crate::metrics::{MetricsRow, RowOutput, WireCounters};
use crate::model::{LossFn, Model, ModelFn, ModelLoss};
use crate::optim::UpdateRule;

/// The timestamp inside the training scope: `()` outside, the round inside.
pub type RoundTime = timely::order::Product<(), u64>;

/// Worker 0's callback for every finished metrics row.
pub type Observer = Box<dyn FnMut(&MetricsRow)>;

/// What one worker's training loop is built from: the plan, the worker's data, its model state,
/// the supervisor, the wire counters and worker 0's metrics observer. A program receives one per
/// worker from [`crate::runtime::run_program`] and assembles its loop with the steps below, in
/// any order it likes, with operators of its own between them; [`build_training`] is the
/// standard assembly.
pub struct Training {
    plan: TrainPlan,
    data: DataSource,
    state: Rc<RefCell<WorkerState>>,
    output: Rc<RefCell<RowOutput>>,
    supervisor: Supervisor,
    wire: Option<WireCounters>,
    observer: Option<Observer>,
}

impl Training {
    /// The context of one worker: `observer` is called (on worker 0) for every finished metrics
    /// row; `wire` counts the bytes this process's workers put on the network.
    pub fn new(
        plan: &TrainPlan,
        data: WorkerData,
        supervisor: Supervisor,
        wire: Option<WireCounters>,
        observer: Observer,
    ) -> Training {
        Training {
            plan: plan.clone(),
            data: DataSource::Loaded(Box::new(data)),
            state: WorkerState::shared(plan),
            output: Rc::default(),
            supervisor,
            wire,
            observer: Some(observer),
        }
    }

    /// The job's rows come from the program's own dataflow (`data.format = "program"`): the
    /// runtime loaded none, and the loop takes them with [`Self::gradient_on`]. `inputs` are
    /// what the job names for the program to read.
    pub fn expect_rows(&mut self, inputs: ProgramInputs) {
        self.data = DataSource::Program(inputs);
    }

    /// The file the job names as `data.files.<name>` for the program to read, or an error
    /// naming the field.
    pub fn file(&self, name: &str) -> Result<&std::path::Path, String> {
        let DataSource::Program(inputs) = &self.data else {
            return Err(format!(
                "data.files.{name}: a program reads its own files only with data.format = \"program\""
            ));
        };
        inputs.files.get(name).map(|p| p.as_path()).ok_or_else(|| {
            let named: Vec<&str> = inputs.files.keys().map(String::as_str).collect();
            format!(
                "data.files.{name}: the program reads it, but the job does not name it (it names: {})",
                if named.is_empty() { "none".to_string() } else { named.join(", ") }
            )
        })
    }

    /// The fraction of rows the job holds out for testing (`data.test_fraction`), for a program
    /// that splits its own rows.
    pub fn test_fraction(&self) -> f64 {
        match &self.data {
            DataSource::Program(inputs) => inputs.test_fraction,
            _ => 0.0,
        }
    }

    /// Where worker 0's metrics rows go (the metrics CSV, a copy in memory); by default
    /// nowhere but the observer.
    pub fn set_output(&mut self, output: RowOutput) {
        self.output = Rc::new(RefCell::new(output));
    }

    /// The plan every worker shares.
    pub fn plan(&self) -> &TrainPlan {
        &self.plan
    }

    /// The plan, for the runtime to set what a resumed run continues from.
    pub(crate) fn plan_mut(&mut self) -> &mut TrainPlan {
        &mut self.plan
    }

    /// The supervisor: an operator that fails calls [`Supervisor::fail`], and the run stops on
    /// every worker and process with its message.
    pub fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    /// This worker's model state. Within round `r`'s gradient step the weights are the model
    /// after the changes of round `r - 1 - s` (`s` = `train.staleness`; the step applies them
    /// before it computes round `r`'s batch); a replica shared by the workers of a process may, outside that step,
    /// already hold some owners' changes of round `r`.
    pub fn state(&self) -> Rc<RefCell<WorkerState>> {
        self.state.clone()
    }

    /// Places this worker's (`worker`, its index among `peers`) model state. Under
    /// `train.state = "sharded"` the worker keeps its shard ([`TrainPlan::shard_state`]).
    /// Otherwise it keeps the model in one replica with the other workers of its process that
    /// call this with the same `slot`, when the plan allows it
    /// ([`TrainPlan::shares_replica`]; otherwise it keeps its own, and this does nothing, or
    /// returns an error when the job asked for a shared one that it cannot have).
    /// Each owner then adds its keys' changes once for all of them, instead of every worker
    /// adding every change. Call it before the dataflow is built and before a checkpoint is
    /// restored (the process's first worker restores the shared weights). The runtime calls
    /// it for every job.
    pub fn place_model(
        &mut self,
        slot: &ReplicaSlot,
        worker: u32,
        peers: usize,
    ) -> Result<(), String> {
        if self.plan.state == StateMode::Sharded {
            self.state.borrow_mut().model = self.plan.shard_state(worker, peers as u32);
            return Ok(());
        }
        if !self.plan.shares_replica(peers)? {
            return Ok(());
        }
        let threads = self.plan.threads_per_process;
        let place = worker as usize % threads;
        slot.share(&mut self.state.borrow_mut().model.weights, place, threads)
    }

    /// Trains `model` instead of the job's linear model (call it before [`Self::gradient`] and
    /// [`Self::collect`], which use it: the gradient, the test metrics). The model file
    /// records its name. Its weights per feature and outputs must be the job's model's (one,
    /// or softmax's `model.classes`), which sized the weights: others are an error.
    pub fn set_model(&mut self, model: impl Model + 'static) {
        let job = &self.plan.model;
        let shape = |m: &dyn Model| (m.width(), m.outputs(), m.dense());
        if shape(&model) != shape(&**job) {
            self.supervisor.fail(format!(
                "set_model: the model '{}' has {} weights per feature, {} outputs per row and \
                 {} dense weights, the job's {}, {} and {} (model.kind, model.loss, \
                 model.classes)",
                model.name(),
                model.width(),
                model.outputs(),
                model.dense(),
                job.width(),
                job.outputs(),
                job.dense()
            ));
            return;
        }
        self.plan.model = ModelFn::new(model);
    }

    /// Trains with `loss` instead of the job's `model.loss` (call it before [`Self::gradient`]
    /// and [`Self::collect`], which use the loss: the gradient, the test metrics). The model
    /// file records its name. Its number of outputs must be the model's (one, or softmax's
    /// `model.classes`), which sized the model: another is an error.
    pub fn set_loss(&mut self, loss: impl ModelLoss + 'static) {
        let (job, own) = (self.plan.model.outputs(), loss.outputs());
        if own != job {
            self.supervisor.fail(format!(
                "set_loss: the loss '{}' has {own} outputs per row, the job's model {job} \
                 (model.loss, model.classes)",
                loss.name()
            ));
            return;
        }
        self.plan.loss = LossFn::new(loss);
    }

    /// Encodes the gradients (and decodes them at the receivers) with a codec of the program's
    /// own instead of the job's `train.compressor` (call it before [`Self::gradient`] and
    /// [`Self::exchange`]). `make` builds one per worker and direction; the job's
    /// `train.memory` (or none) stays.
    pub fn set_codec(
        &mut self,
        name: &str,
        make: impl Fn() -> Box<dyn Codec> + Send + Sync + 'static,
    ) {
        let make: std::sync::Arc<crate::codec::registry::BuildCodec> =
            std::sync::Arc::new(move |_: &toml::Table| Ok(make()));
        self.plan.codec = CodecSpec::Custom(crate::named::Named::new(name, make));
    }

    /// Updates the model with an update rule of the program's own instead of the job's
    /// `[optimizer]` (call it before [`Self::exchange`]). `make(lo, hi)` builds the rule for
    /// the keys `lo..hi`.
    pub fn set_optimizer(
        &mut self,
        name: &str,
        make: impl Fn(u32, u32) -> Box<dyn UpdateRule> + Send + Sync + 'static,
    ) {
        let make: std::sync::Arc<dyn Fn(u32, u32) -> Box<dyn UpdateRule> + Send + Sync> =
            std::sync::Arc::new(make);
        self.plan.custom_optimizer = Some(crate::named::Named::new(name, make));
        let st = &mut *self.state.borrow_mut();
        st.model.optimizer = self.plan.update_rule(0, self.plan.dim);
        if let Some(saved) = &st.restored_optimizer {
            // Resumed: the rule continues from the checkpoint's state.
            if let Err(e) = st.model.optimizer.restore(saved) {
                self.supervisor
                    .fail(format!("--resume: update rule '{name}': {e}"));
            }
        }
    }

    /// The gradient step ([`gradient`]): from the model changes on the feedback edge to this
    /// worker's encoded gradient messages and the round statistics. Takes the worker's data, so
    /// a loop has one.
    ///
    /// # Panics
    /// When called twice on the same context.
    #[allow(clippy::type_complexity)]
    pub fn gradient<'s>(
        &mut self,
        changes: Stream<'s, RoundTime, Vec<Envelope>>,
    ) -> (
        Stream<'s, RoundTime, Vec<Envelope>>,
        Stream<'s, RoundTime, Vec<RoundStats>>,
    ) {
        self.gradient_step(changes, None, None)
    }

    /// [`Self::gradient`] on rows the program's own dataflow prepares (`data.format =
    /// "program"`): each worker trains and tests on the [`PreparedRow`]s that reach it on
    /// `rows` (entered into the loop's scope; they stay on that worker), once all of them are
    /// in. Rows are ordered by id, so the model does not depend on the order in which they
    /// arrive, and checked (unique ids, ascending keys below `data.dim`, labels the loss reads):
    /// a bad row stops the run with its id. The intercept (`model.intercept`) is added here.
    /// `jobs/prepare_and_train.rs` reads, joins, hashes and splits a CSV table in the same
    /// dataflow.
    ///
    /// # Panics
    /// When called twice on the same context.
    #[allow(clippy::type_complexity)]
    pub fn gradient_on<'s>(
        &mut self,
        rows: Stream<'s, RoundTime, Vec<PreparedRow>>,
        changes: Stream<'s, RoundTime, Vec<Envelope>>,
    ) -> (
        Stream<'s, RoundTime, Vec<Envelope>>,
        Stream<'s, RoundTime, Vec<RoundStats>>,
    ) {
        self.gradient_step(changes, None, Some(rows))
    }

    /// [`Self::gradient`] with decisions to end training early: a reason arriving on `stop` at
    /// round `r` makes `r` the last round on every worker (the changes of round `r - 1` are
    /// applied and the model is evaluated, as after the last round of the job). Every worker
    /// must receive the same decisions, so a decision made on one worker is broadcast
    /// (timely's `broadcast`). Round `r` waits until no decision can still arrive at `r`: a
    /// decision made at round `d` from round `d`'s statistics and sent around a loop variable
    /// of `lag` rounds ends training at `d + lag`, and each round waits for the decisions made
    /// `lag` rounds before it. `jobs/early_stopping.rs` stops when the test loss stops
    /// improving.
    ///
    /// # Panics
    /// When called twice on the same context.
    #[allow(clippy::type_complexity)]
    pub fn gradient_until<'s>(
        &mut self,
        changes: Stream<'s, RoundTime, Vec<Envelope>>,
        stop: Stream<'s, RoundTime, Vec<String>>,
    ) -> (
        Stream<'s, RoundTime, Vec<Envelope>>,
        Stream<'s, RoundTime, Vec<RoundStats>>,
    ) {
        if self.plan.pull {
            self.supervisor.fail(
                "train.pull: a loop that can stop early (gradient_until) cannot pull the \
                 weights: worker 0 asks for the whole model the round before the last, and an \
                 early stop is known only at its round",
            );
        }
        self.gradient_step(changes, Some(stop), None)
    }

    #[allow(clippy::type_complexity)]
    fn gradient_step<'s>(
        &mut self,
        changes: Stream<'s, RoundTime, Vec<Envelope>>,
        stop: Option<Stream<'s, RoundTime, Vec<String>>>,
        rows: Option<Stream<'s, RoundTime, Vec<PreparedRow>>>,
    ) -> (
        Stream<'s, RoundTime, Vec<Envelope>>,
        Stream<'s, RoundTime, Vec<RoundStats>>,
    ) {
        if let Some(e) = (self.plan.initial_weights.as_ref()).and_then(|w| w.misfit(&self.plan)) {
            self.supervisor.fail(e);
        }
        let data = match (std::mem::replace(&mut self.data, DataSource::Taken), rows) {
            (DataSource::Taken, _) => panic!("one gradient step per training loop"),
            (DataSource::Loaded(data), None) if self.plan.live.is_some() => {
                // An online run: the first worker reads the stream, every worker trains on
                // its share of each round's rows.
                let me = changes.scope().index() as u32;
                let spec = (self.plan.live.clone()).filter(|l| l.reads(me));
                let (start, sup) = (self.plan.start_round, self.supervisor.clone());
                Rows::Live(live::live_rows(&changes, spec, start, sup), data)
            }
            (DataSource::Loaded(data), None) => Rows::Loaded(data),
            (DataSource::Program(_), Some(rows)) => Rows::Stream(rows),
            (DataSource::Loaded(data), Some(_)) => {
                self.supervisor.fail(
                    "gradient_on: the job's data is read by the runtime; for rows prepared by \
                     the program's dataflow set data.format = \"program\" (with data.dim)",
                );
                Rows::Loaded(data)
            }
            (DataSource::Program(_), None) => {
                self.supervisor.fail(
                    "data.format = \"program\": the rows come from a program's dataflow \
                     (Training::gradient_on), and this loop has none: run the job with its \
                     program",
                );
                Rows::Loaded(Box::new(WorkerData::empty(0)))
            }
        };
        let (state, sup) = (self.state.clone(), self.supervisor.clone());
        gradient(
            changes,
            stop,
            &self.plan,
            data,
            state,
            sup,
            self.wire.clone(),
        )
    }

    /// The exchange's steps ([`exchange`]) from the gradient envelopes to the model changes,
    /// which go on the feedback edge.
    pub fn exchange<'s>(
        &self,
        grads: Stream<'s, RoundTime, Vec<Envelope>>,
    ) -> Stream<'s, RoundTime, Vec<Envelope>> {
        let (state, sup) = (self.state.clone(), self.supervisor.clone());
        exchange(grads, &self.plan, state, sup)
    }

    /// Exchanges the gradients with a strategy of the program's own instead of the job's
    /// `train.exchange` (call it before [`Self::gradient`] and [`Self::exchange`], which build
    /// its parts: the endpoint in the gradient step, its steps after it). The job's codec,
    /// memory and optimizer stay, for the strategy to use.
    pub fn set_exchange(&mut self, name: &str, exchange: impl crate::exchange::Exchange + 'static) {
        let make: std::sync::Arc<dyn crate::exchange::Exchange> = std::sync::Arc::new(exchange);
        self.plan.custom_exchange = Some(crate::named::Named::new(name, make));
    }

    /// The metrics ([`collect`]): round statistics to rows, handed to the observer on worker 0
    /// and to the output (the metrics CSV).
    ///
    /// # Panics
    /// When called twice on the same context.
    pub fn collect(&mut self, stats: Stream<'_, RoundTime, Vec<RoundStats>>) {
        let observer = self.observer.take().expect("one collect per training loop");
        let sup = self.supervisor.clone();
        collect(stats, &self.plan, self.output.clone(), observer, sup);
    }

    /// The test evaluations in the round statistics, on worker 0 ([`evaluations`]): what an
    /// early-stopping rule or a custom log reads.
    pub fn evaluations<'s>(
        &self,
        stats: &Stream<'s, RoundTime, Vec<RoundStats>>,
    ) -> Stream<'s, RoundTime, Vec<Evaluation>> {
        evaluations(stats, &self.plan)
    }

    /// What the runtime reads once the dataflow is done: the model and the metrics rows.
    pub fn handle(&self) -> TrainHandle {
        TrainHandle {
            state: self.state.clone(),
            output: self.output.clone(),
            loss: self.plan.loss.clone(),
            model: self.plan.model.clone(),
        }
    }
}

/// Where a [`Training`]'s rows come from.
enum DataSource {
    /// Read by the runtime before the dataflow was built.
    Loaded(Box<WorkerData>),
    /// Prepared by the program's dataflow, from these inputs.
    Program(ProgramInputs),
    /// Taken by the gradient step.
    Taken,
}

/// What a job with `data.format = "program"` names for its program: the files it reads
/// (`data.files`) and the fraction of rows to hold out (`data.test_fraction`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProgramInputs {
    /// `data.files`: name to path.
    pub files: BTreeMap<String, std::path::PathBuf>,
    /// `data.test_fraction`.
    pub test_fraction: f64,
}

/// Builds the standard training loop inside `scope` (a fresh iterative scope whose timestamp is
/// the round): gradient, exchange, back around the feedback edge (of
/// [`TrainPlan::feedback_delay`] rounds: a loop built by hand uses the same), and the metrics.
pub fn build_training(scope: Scope<'_, ()>, mut t: Training) -> TrainHandle {
    let delay = t.plan().feedback_delay();
    scope.iterative::<u64, _, _>(|inner| {
        let (handle, changes) = inner.loop_variable::<Vec<Envelope>>(delay);
        let (grads, stats) = t.gradient(changes);
        t.exchange(grads).connect_loop(handle);
        t.collect(stats);
    });
    t.handle()
}

/// The exchange of the plan ([`TrainPlan::strategy`]) between the gradient envelopes and the
/// model changes: each of its steps ([`crate::exchange::Step`]) an operator that runs a round
/// once its envelopes are in ([`per_round`]), each feeding the next.
pub fn exchange<'s>(
    grads: Stream<'s, RoundTime, Vec<Envelope>>,
    plan: &TrainPlan,
    state: Rc<RefCell<WorkerState>>,
    supervisor: Supervisor,
) -> Stream<'s, RoundTime, Vec<Envelope>> {
    let scope = grads.scope();
    let exchange = plan.exchange_plan();
    let at = Place {
        me: scope.index() as u32,
        peers: scope.peers() as u32,
        plan: &exchange,
    };
    let steps = match plan.strategy().steps(&at) {
        Ok(steps) => steps,
        Err(e) => {
            supervisor.fail(e);
            return grads;
        }
    };
    steps.into_iter().fold(grads, |input, mut step| {
        let (state, name, expected) = (state.clone(), step.name().to_owned(), step.expected());
        per_round(
            input,
            &name,
            expected,
            supervisor.clone(),
            move |r, msgs, out| step.run(r, msgs, &mut state.borrow_mut().model, out),
        )
    })
}

/// Operators a program adds to the training loop's streams without timely's timestamps.
pub trait RoundStream<D> {
    /// Calls `f(round, batch)` for every batch that passes, and passes it on unchanged.
    fn inspect_rounds(self, f: impl FnMut(u64, &[D]) + 'static) -> Self;
}

impl<D: Clone + 'static> RoundStream<D> for Stream<'_, RoundTime, Vec<D>> {
    fn inspect_rounds(self, mut f: impl FnMut(u64, &[D]) + 'static) -> Self {
        use timely::dataflow::operators::Inspect;
        self.inspect_core(move |event| {
            if let Ok((stamp, batch)) = event {
                for t in stamp.iter() {
                    f(round_of(t), batch);
                }
            }
        })
    }
}

/// The shape every exchange operator shares: gather each round's envelopes (routed to their
/// `dest`) and run `step` on them once the round is complete, then send the envelopes it leaves
/// in its output buffer at that round. An error stops the run.
///
/// A round is complete when the input frontier has passed it, or, with `expected = Some(n)`
/// (every round brings exactly `n` envelopes), as soon as `n` are in: the round then runs
/// without waiting for timely's progress messages to say that nothing more can come
/// ([`Arrivals`]), which shortens each round's wait (figures: `docs/results.md`, "Design
/// measurements").
/// Rounds run in order either way, and an envelope for a round that has run stops the run.
fn per_round<'s>(
    input: Stream<'s, RoundTime, Vec<Envelope>>,
    name: &str,
    expected: Option<usize>,
    supervisor: Supervisor,
    mut step: impl FnMut(u64, Vec<Envelope>, &mut Vec<Envelope>) -> Result<(), String> + 'static,
) -> Stream<'s, RoundTime, Vec<Envelope>> {
    let me = input.scope().index();
    let what = name.to_owned();
    input.unary_frontier::<CapacityContainerBuilder<Vec<Envelope>>, _, _, _>(
        Exchange::new(|e: &Envelope| e.dest as u64),
        name,
        move |_cap, _info| {
            let mut arrivals = Arrivals::new(expected);
            let mut out = Vec::new();
            let mut failed = false;
            move |(input, frontier), output| {
                input.for_each(|cap, batch| {
                    if let Some(t) = cap.least() {
                        if let Err(e) = arrivals.add(round_of(t), batch, || cap.delayed(t, 0)) {
                            supervisor.fail(format!("worker {me}: {what}: {e}"));
                            failed = true;
                        }
                    }
                });
                while !failed {
                    let Some((r, (cap, msgs))) =
                        arrivals.next_complete(|r| !frontier.less_equal(&at(r)))
                    else {
                        break;
                    };
                    if let Err(e) = step(r, msgs, &mut out) {
                        supervisor.fail(e);
                        failed = true;
                    } else if !out.is_empty() {
                        output.session(&cap).give_iterator(out.drain(..));
                    }
                }
            }
        },
    )
}

/// An operator's envelopes by round, until the round runs: a round is complete once the input
/// frontier has passed it or, when every round brings a known number of envelopes, once that
/// many are in (what lets an exchange step start the moment the last message lands, rather
/// than after the progress messages that follow it). Rounds come out in order.
pub(crate) struct Arrivals<C> {
    expected: Option<usize>,
    by_round: BTreeMap<u64, (C, Vec<Envelope>)>,
    /// The last round taken out.
    ran: Option<u64>,
}

impl<C> Arrivals<C> {
    pub(crate) fn new(expected: Option<usize>) -> Self {
        Arrivals {
            expected,
            by_round: BTreeMap::new(),
            ran: None,
        }
    }

    /// From now on a round is complete once `expected` envelopes are in (or, with `None`,
    /// once the frontier has passed it).
    pub(crate) fn expect(&mut self, expected: Option<usize>) {
        self.expected = expected;
    }

    /// Adds envelopes of round `r` (`held` makes the round's entry the first time); an
    /// envelope for a round already taken out is an error naming its sender.
    pub(crate) fn add(
        &mut self,
        r: u64,
        batch: &mut Vec<Envelope>,
        held: impl FnOnce() -> C,
    ) -> Result<(), String> {
        if self.ran.is_some_and(|ran| r <= ran) {
            let from = batch
                .first()
                .map_or(String::new(), |e| format!(" from worker {}", e.src));
            return Err(format!(
                "a message{from} for round {r}, after that round ran"
            ));
        }
        let entry = self
            .by_round
            .entry(r)
            .or_insert_with(|| (held(), Vec::new()));
        entry.1.append(batch);
        Ok(())
    }

    /// The first round, if it is complete: `passed(r)` says whether the frontier has passed `r`.
    #[allow(clippy::type_complexity)]
    fn next_complete(&mut self, passed: impl Fn(u64) -> bool) -> Option<(u64, (C, Vec<Envelope>))> {
        let &r = self.by_round.keys().next()?;
        let (held, msgs) = self.take(r, passed(r))?;
        Some((r, (held?, msgs)))
    }

    /// The envelopes of rounds `first..=last` in round order, once every one of them is
    /// complete (`passed(r)`: the frontier has passed `r`), or none (nothing is taken). A
    /// pipelined loop's gradient step takes the changes still in flight this way where it
    /// must see all of them (a checkpoint, the end).
    pub(crate) fn take_through(
        &mut self,
        first: u64,
        last: u64,
        passed: impl Fn(u64) -> bool,
    ) -> Option<Vec<Envelope>> {
        let complete = |r: u64| {
            let arrived = self.by_round.get(&r).map_or(0, |(_, msgs)| msgs.len());
            passed(r) || self.expected == Some(arrived)
        };
        if !(first..=last).all(complete) {
            return None;
        }
        let mut all = Vec::new();
        for r in first..=last {
            all.append(&mut self.take(r, true).expect("complete").1);
        }
        Some(all)
    }

    /// Round `r`'s envelopes if the round is complete (`passed`: the frontier has passed it),
    /// with what was held for it (none if nothing arrived); earlier rounds must have been taken.
    pub(crate) fn take(&mut self, r: u64, passed: bool) -> Option<(Option<C>, Vec<Envelope>)> {
        let arrived = self.by_round.get(&r).map_or(0, |(_, msgs)| msgs.len());
        if !(passed || self.expected == Some(arrived)) {
            return None;
        }
        self.ran = Some(r);
        Some(match self.by_round.remove(&r) {
            Some((held, msgs)) => (Some(held), msgs),
            None => (None, Vec::new()),
        })
    }
}

fn round_of(t: &RoundTime) -> u64 {
    t.inner
}

fn at(round: u64) -> RoundTime {
    Product::new((), round)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use timely::dataflow::channels::pact::Pipeline;
    use timely::dataflow::operators::vec::ToStream;

    /// `items` as a stream inside a round scope, each at its round: explicit inputs at
    /// explicit times, as differential's tests feed theirs.
    pub(crate) fn at_rounds<'s, D: Clone + 'static>(
        inner: Scope<'s, RoundTime>,
        items: Vec<(u64, D)>,
    ) -> Stream<'s, RoundTime, Vec<D>> {
        items.to_stream(inner).unary(Pipeline, "AtRounds", |_, _| {
            move |input, output| {
                input.for_each(|cap, batch| {
                    for (r, d) in batch.drain(..) {
                        output.session(&cap.delayed(&at(r), 0)).give(d);
                    }
                });
            }
        })
    }

    /// What a [`per_round`] operator did: the rounds its step ran with the senders of their
    /// envelopes, and the rounds its output carried, with the `rows` of each envelope.
    type Ran = (Vec<(u64, Vec<u32>)>, Vec<(u64, Vec<u32>)>);

    /// Runs one `per_round` operator over `inputs` (round, sender) on one worker, with a step
    /// that records its calls, fails at `fail_at`, and sends one envelope whose `rows` is the
    /// round.
    fn run_per_round(
        inputs: Vec<(u64, u32)>,
        expected: Option<usize>,
        fail_at: Option<u64>,
    ) -> (Ran, Supervisor) {
        let sup = Supervisor::new();
        let s = sup.clone();
        let ran = timely::execute_directly(move |worker| {
            let failed = s.clone();
            let calls = Rc::new(RefCell::new(Vec::new()));
            let outs = Rc::new(RefCell::new(Vec::new()));
            let (c, o) = (calls.clone(), outs.clone());
            worker.dataflow::<(), _, _>(|scope| {
                scope.iterative::<u64, _, _>(|inner| {
                    let envelopes = inputs.into_iter().map(|(r, src)| (r, from(src).remove(0)));
                    let input = at_rounds(inner, envelopes.collect());
                    let step = move |r: u64, msgs: Vec<Envelope>, out: &mut Vec<Envelope>| {
                        let mut srcs: Vec<u32> = msgs.iter().map(|m| m.src).collect();
                        srcs.sort_unstable();
                        c.borrow_mut().push((r, srcs));
                        if fail_at == Some(r) {
                            return Err(format!("round {r} failed"));
                        }
                        out.push(Envelope {
                            rows: r as u32,
                            ..Envelope::default()
                        });
                        Ok(())
                    };
                    per_round(input, "Step", expected, failed, step).inspect_rounds(
                        move |r, batch: &[Envelope]| {
                            o.borrow_mut()
                                .push((r, batch.iter().map(|e| e.rows).collect()))
                        },
                    );
                });
            });
            // As the runtime does: a failed run's dataflows hold their rounds and are dropped.
            while worker.has_dataflows() && !s.is_failed() {
                worker.step();
            }
            for id in worker.installed_dataflows() {
                worker.drop_dataflow(id);
            }
            let ran = (calls.borrow().clone(), outs.borrow().clone());
            ran
        });
        (ran, sup)
    }

    /// Envelopes of three rounds from two senders, arriving out of order: the step runs each
    /// round once, in round order, with both of its envelopes, and its output leaves at that
    /// round; with a known count (before the frontier passes) and without (by the frontier).
    #[test]
    fn per_round_runs_each_round_once_in_order_with_all_its_envelopes() {
        let inputs = vec![(2, 1), (0, 1), (1, 0), (2, 0), (0, 0), (1, 1)];
        for expected in [Some(2), None] {
            let ((calls, outs), sup) = run_per_round(inputs.clone(), expected, None);
            assert!(!sup.is_failed(), "{:?}", sup.message());
            let both = vec![0, 1];
            let want: Vec<_> = (0..3).map(|r| (r, both.clone())).collect();
            assert_eq!(calls, want, "expected {expected:?}");
            assert_eq!(outs, vec![(0, vec![0]), (1, vec![1]), (2, vec![2])]);
        }
    }

    /// A round that brings nothing does not run (there is nothing to hold its time with), the
    /// rounds around it do; and a step's error stops the run with its message: no later round
    /// runs and nothing of the failed round is sent.
    #[test]
    fn per_round_skips_rounds_that_bring_nothing_and_stops_at_an_error() {
        let ((calls, _), sup) = run_per_round(vec![(0, 0), (2, 0)], None, None);
        assert!(!sup.is_failed());
        let rounds: Vec<u64> = calls.iter().map(|c| c.0).collect();
        assert_eq!(rounds, [0, 2]);
        let ((calls, outs), sup) = run_per_round(vec![(0, 0), (1, 0), (2, 0)], Some(1), Some(1));
        assert_eq!(sup.message().as_deref(), Some("round 1 failed"));
        assert_eq!(calls.iter().map(|c| c.0).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(outs, vec![(0, vec![0])]);
    }

    fn from(src: u32) -> Vec<Envelope> {
        vec![Envelope {
            dest: 0,
            src,
            rows: 0,
            kind: crate::exchange::DATA,
            payload: Vec::new(),
            local: None,
        }]
    }

    /// With a known count a round is complete once that many envelopes are in, before the
    /// frontier passes it; without one, only when the frontier passes it.
    #[test]
    fn a_round_completes_by_count_or_by_frontier() {
        let mut counted: Arrivals<u64> = Arrivals::new(Some(2));
        counted.add(3, &mut from(0), || 3).unwrap();
        assert!(
            counted.take(3, false).is_none(),
            "one of two is not complete"
        );
        counted.add(3, &mut from(1), || unreachable!()).unwrap();
        let (held, msgs) = counted.take(3, false).expect("two of two");
        assert_eq!((held, msgs.len()), (Some(3), 2));
        let mut by_frontier: Arrivals<u64> = Arrivals::new(None);
        by_frontier.add(3, &mut from(0), || 3).unwrap();
        by_frontier.add(3, &mut from(1), || 3).unwrap();
        assert!(by_frontier.take(3, false).is_none());
        assert_eq!(by_frontier.take(3, true).unwrap().1.len(), 2);
        // A round nothing arrived for completes with the frontier, empty.
        let (held, msgs) = by_frontier.take(4, true).unwrap();
        assert!(held.is_none() && msgs.is_empty());
    }

    /// Rounds come out in order: a complete round waits behind an incomplete earlier one.
    #[test]
    fn rounds_complete_in_order() {
        let mut a: Arrivals<u64> = Arrivals::new(Some(1));
        a.add(5, &mut from(0), || 5).unwrap();
        a.add(4, &mut Vec::new(), || 4).unwrap();
        assert!(
            a.next_complete(|_| false).is_none(),
            "round 4 has nothing yet"
        );
        assert_eq!(a.next_complete(|r| r <= 4).map(|(r, _)| r), Some(4));
        assert_eq!(a.next_complete(|_| false).map(|(r, _)| r), Some(5));
    }

    /// An envelope for a round that already ran (a duplicate, or a sender that miscounts) is
    /// an error naming the sender and the round, not a message silently dropped.
    #[test]
    fn an_envelope_after_its_round_ran_is_an_error() {
        let mut a: Arrivals<u64> = Arrivals::new(Some(1));
        a.add(7, &mut from(0), || 7).unwrap();
        assert!(a.next_complete(|_| false).is_some());
        let e = a.add(7, &mut from(1), || 7).unwrap_err();
        assert_eq!(
            e,
            "a message from worker 1 for round 7, after that round ran"
        );
        let e = a.add(6, &mut from(0), || 6).unwrap_err();
        assert!(e.contains("round 6"), "{e}");
        a.add(8, &mut from(0), || 8).unwrap();
    }
}
