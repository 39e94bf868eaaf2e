//! The training operators. See the module docs of [`crate::dataflow`] for the loop's shape.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

use rand::rngs::Xoshiro256PlusPlus;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::{Operator, OutputBuilder};
use timely::dataflow::operators::{ConnectLoop, LoopVariable};
use timely::dataflow::{Scope, Stream};
use timely::order::Product;

use super::{RoundTime, Supervisor};
use crate::codec::none::NoneCodec;
use crate::codec::{build_codec, Codec, CodecSpec, EncodeContext};
use crate::data::partition::mix64;
use crate::data::Dataset;
use crate::exchange::{Aggregator, Envelope, ExchangeKind, KeyRanges, Router};
use crate::metrics::{MetricsRow, StageTimes, WireCounters};
use crate::model::{EvalPart, GradientWorkspace, Loss, SparseGrad};
use crate::optim::{Optimizer, OptimizerConfig};

/// Everything about a training run that all workers share.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainPlan {
    /// Number of features.
    pub dim: u32,
    /// The loss.
    pub loss: Loss,
    /// L2 regularisation λ.
    pub lambda: f32,
    /// Optimizer.
    pub optimizer: OptimizerConfig,
    /// Exchange strategy.
    pub exchange: ExchangeKind,
    /// Gradient codec.
    pub codec: CodecSpec,
    /// Rounds (mini-batches) per epoch.
    pub rounds_per_epoch: u64,
    /// Epochs.
    pub epochs: u64,
    /// Seed of every random choice.
    pub seed: u64,
    /// Worker threads per process (to tell which receivers are in another process).
    pub threads_per_process: usize,
}

impl TrainPlan {
    /// Total number of rounds.
    pub fn rounds(&self) -> u64 {
        self.rounds_per_epoch * self.epochs
    }
}

/// The rows one worker trains and tests on.
#[derive(Clone, Debug, Default)]
pub struct WorkerData {
    /// Training rows.
    pub train: Dataset,
    /// Test rows.
    pub test: Dataset,
}

/// Model state a worker's operators share: its replica of the weights and the timings the
/// aggregator leaves for the next round's statistics.
#[derive(Debug, Default)]
pub struct WorkerState {
    /// Full replica of the model.
    pub weights: crate::mem::ZeroedArray<f32>,
    aggregate_ms: f64,
    update_ms: f64,
    update_payload_remote: u64,
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
    /// Gradient payload bytes addressed to workers of other processes.
    pub grad_payload_remote: u64,
    /// Gradient time.
    pub gradient_ms: f64,
    /// Encode time.
    pub encode_ms: f64,
    /// Previous round: waiting time.
    pub prev_wait_ms: f64,
    /// Previous round: decode and sum.
    pub prev_aggregate_ms: f64,
    /// Previous round: optimizer update and applying received updates.
    pub prev_update_ms: f64,
    /// Previous round: update payload bytes addressed to other processes.
    pub prev_update_payload_remote: u64,
    /// Test evaluation after the previous round, at epoch ends.
    pub eval: Option<EvalPart>,
}

impl WorkerState {
    /// A shared state holding a zero model of dimension `dim`.
    pub fn shared(dim: u32) -> Rc<RefCell<WorkerState>> {
        Rc::new(RefCell::new(WorkerState {
            weights: crate::mem::ZeroedArray::new(dim as usize),
            ..Default::default()
        }))
    }
}

/// Handles to a built training dataflow, read after it completes.
pub struct TrainHandle {
    /// This worker's model state (the final model once the dataflow is done).
    pub state: Rc<RefCell<WorkerState>>,
    /// Metrics rows (filled on worker 0 only).
    pub rows: Rc<RefCell<Vec<MetricsRow>>>,
}

/// The job's codec; a bad parameter (jobs validate them first) fails the run.
fn codec_or_fail(spec: &CodecSpec, supervisor: &Supervisor) -> Box<dyn Codec> {
    build_codec(spec).unwrap_or_else(|e| {
        supervisor.fail(format!("train.compressor: {e}"));
        Box::new(NoneCodec)
    })
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

fn round_of(t: &RoundTime) -> u64 {
    t.inner
}

fn at(round: u64) -> RoundTime {
    Product::new((), round)
}

/// Builds the standard training loop inside `scope` (a fresh iterative scope is created).
/// `observer` is called on worker 0 for every finished metrics row, in order.
pub fn build_training(
    scope: Scope<'_, ()>,
    plan: &TrainPlan,
    data: WorkerData,
    supervisor: Supervisor,
    wire: Option<WireCounters>,
    observer: Box<dyn FnMut(&MetricsRow)>,
) -> TrainHandle {
    let state = WorkerState::shared(plan.dim);
    let rows = Rc::new(RefCell::new(Vec::new()));
    scope.iterative::<u64, _, _>(|inner| {
        let (handle, updates) = inner.loop_variable::<Vec<Envelope>>(1);
        let (grads, stats) = gradient(updates, plan, data, state.clone(), supervisor.clone(), wire);
        aggregate(grads, plan, state.clone(), supervisor.clone()).connect_loop(handle);
        collect(stats, plan, rows.clone(), observer);
    });
    TrainHandle { state, rows }
}

/// The gradient operator. Input: model updates (routed to their `dest`). Outputs: gradient
/// envelopes (one per receiving worker per round) and round statistics.
///
/// Round `r` runs once the input frontier has passed `r`: apply the updates of round `r - 1`,
/// evaluate on the test rows at epoch ends, compute the mini-batch gradient of round `r`,
/// encode it and send it; then hold the capability for round `r + 1`. After the last round
/// it only applies the final updates, evaluates, and releases its capabilities.
pub fn gradient<'s>(
    updates: Stream<'s, RoundTime, Vec<Envelope>>,
    plan: &TrainPlan,
    data: WorkerData,
    state: Rc<RefCell<WorkerState>>,
    supervisor: Supervisor,
    wire: Option<WireCounters>,
) -> (
    Stream<'s, RoundTime, Vec<Envelope>>,
    Stream<'s, RoundTime, Vec<RoundStats>>,
) {
    let scope = updates.scope();
    let me = scope.index() as u32;
    let peers = scope.peers() as u32;
    let plan = plan.clone();
    let mut builder = OperatorBuilder::new("Gradient".to_owned(), scope);
    let mut input = builder.new_input(updates, Exchange::new(|e: &Envelope| e.dest as u64));
    let (grad_out, grad_stream) = builder.new_output::<Vec<Envelope>>();
    let (stats_out, stats_stream) = builder.new_output::<Vec<RoundStats>>();
    let mut grad_out: OutputBuilder<RoundTime, CapacityContainerBuilder<Vec<Envelope>>> =
        OutputBuilder::from(grad_out);
    let mut stats_out: OutputBuilder<RoundTime, CapacityContainerBuilder<Vec<RoundStats>>> =
        OutputBuilder::from(stats_out);
    let wire = wire.filter(|_| me as usize % plan.threads_per_process == 0);

    builder.build(move |mut caps| {
        let mut stats_cap = caps.pop();
        let mut grad_cap = caps.pop();
        let mut stash: BTreeMap<u64, Vec<Envelope>> = BTreeMap::new();
        let mut codec = codec_or_fail(&plan.codec, &supervisor);
        let mut update_codec = NoneCodec;
        let mut router = Router::new(plan.exchange, plan.dim, peers);
        let mut workspace = GradientWorkspace::new(plan.dim);
        let mut grad = SparseGrad::default();
        let mut update = SparseGrad::default();
        let mut order: Vec<u32> = (0..data.train.rows() as u32).collect();
        let n = order.len() as u64;
        let rounds = plan.rounds();
        let rpe = plan.rounds_per_epoch;
        let my_process = me as usize / plan.threads_per_process;
        let mut last_emit: Option<Instant> = None;
        let mut failed = false;

        move |frontiers| {
            input.for_each(|cap, batch| {
                if let Some(t) = cap.least() {
                    stash.entry(round_of(t)).or_default().append(batch);
                }
            });
            while !failed {
                let Some(cap) = grad_cap.as_ref() else { break };
                if frontiers[0].less_equal(cap.time()) {
                    break;
                }
                let r = round_of(cap.time());
                if let Some(w) = &wire {
                    w.mark_round(r);
                }
                let mut stats = RoundStats {
                    worker: me,
                    ..Default::default()
                };
                let mut st = state.borrow_mut();
                // Updates of round r - 1 from the owners of other key ranges.
                let t_update = Instant::now();
                for msg in stash.remove(&r).unwrap_or_default() {
                    match update_codec.decode(&msg.payload, &mut update) {
                        Ok(d) if d == plan.dim => {
                            for (&k, &v) in update.keys.iter().zip(&update.values) {
                                st.weights[k as usize] = v;
                            }
                        }
                        Ok(d) => {
                            supervisor.fail(format!(
                                "worker {me}: update of dimension {d}, expected {}",
                                plan.dim
                            ));
                            failed = true;
                        }
                        Err(e) => {
                            supervisor.fail(format!(
                                "worker {me}, round {r}: bad model update from worker {}: {e}",
                                msg.src
                            ));
                            failed = true;
                        }
                    }
                }
                if failed {
                    return;
                }
                if r > 0 {
                    stats.prev_update_ms = st.update_ms + ms(t_update);
                    stats.prev_aggregate_ms = st.aggregate_ms;
                    stats.prev_update_payload_remote = st.update_payload_remote;
                    if let Some(t) = last_emit {
                        let between = t.elapsed().as_secs_f64() * 1e3;
                        stats.prev_wait_ms = (between - st.aggregate_ms - st.update_ms).max(0.0);
                    }
                }
                if r > 0 && r % rpe == 0 {
                    stats.eval = Some(EvalPart::evaluate(&data.test, &st.weights, plan.loss));
                }
                if r < rounds {
                    let (epoch, b) = (r / rpe, r % rpe);
                    if b == 0 {
                        let mut rng = Xoshiro256PlusPlus::seed_from_u64(mix64(
                            plan.seed,
                            (epoch << 20) ^ me as u64,
                        ));
                        order.shuffle(&mut rng);
                        // Batches are random sets of rows; within a batch the rows are visited
                        // in storage order, so that row data streams through the cache (the
                        // gradient is a sum: the order only changes rounding).
                        for b in 0..rpe {
                            order[(b * n / rpe) as usize..((b + 1) * n / rpe) as usize]
                                .sort_unstable();
                        }
                    }
                    let batch = &order[(b * n / rpe) as usize..((b + 1) * n / rpe) as usize];
                    let t_grad = Instant::now();
                    let bs = workspace.minibatch(
                        &data.train,
                        batch,
                        &st.weights,
                        plan.loss,
                        plan.lambda,
                        &mut grad,
                    );
                    stats.gradient_ms = ms(t_grad);
                    stats.has_gradient = true;
                    stats.loss_sum = bs.loss_sum;
                    stats.rows = bs.rows as u64;
                    stats.grad_keys = grad.len() as u64;
                    drop(st);
                    let t_encode = Instant::now();
                    let ctx = EncodeContext {
                        seed: plan.seed,
                        round: r,
                        worker: me,
                    };
                    let mut out = grad_out.activate();
                    let mut session = out.session(cap);
                    let mut remote = 0u64;
                    let routed = router.route(codec.as_mut(), &grad, bs.rows as u32, ctx, |env| {
                        if env.dest as usize / plan.threads_per_process != my_process {
                            remote += env.payload.len() as u64;
                        }
                        session.give(env);
                    });
                    drop(session);
                    drop(out);
                    if let Err(e) = routed {
                        supervisor.fail(format!(
                            "worker {me}, round {r}: cannot encode gradient: {e}"
                        ));
                        failed = true;
                        return;
                    }
                    stats.grad_payload_remote = remote;
                    stats.encode_ms = ms(t_encode);
                } else {
                    drop(st);
                }
                let sc = stats_cap
                    .as_ref()
                    .expect("stats capability held with the gradient capability");
                stats_out.activate().session(sc).give(stats);
                last_emit = Some(Instant::now());
                if r < rounds {
                    grad_cap.as_mut().unwrap().downgrade(&at(r + 1));
                    stats_cap.as_mut().unwrap().downgrade(&at(r + 1));
                } else {
                    grad_cap = None;
                    stats_cap = None;
                }
            }
        }
    });
    (grad_stream, stats_stream)
}

/// The aggregation operator. Input: gradient envelopes (routed to their `dest`). Output: model
/// updates for the other workers (`sharded`), nothing (`allgather`: every worker updates its own
/// replica).
///
/// Round `r` runs once every gradient of round `r` is in (the input frontier has passed `r`):
/// decode, sum in worker order weighted by batch rows, apply the optimizer to the keys this
/// worker owns, write them into the local replica and (sharded) send their new values.
pub fn aggregate<'s>(
    grads: Stream<'s, RoundTime, Vec<Envelope>>,
    plan: &TrainPlan,
    state: Rc<RefCell<WorkerState>>,
    supervisor: Supervisor,
) -> Stream<'s, RoundTime, Vec<Envelope>> {
    let scope = grads.scope();
    let me = scope.index() as u32;
    let peers = scope.peers() as u32;
    let plan = plan.clone();
    let (lo, hi) = match plan.exchange {
        ExchangeKind::Sharded => KeyRanges {
            dim: plan.dim,
            parts: peers,
        }
        .range(me),
        ExchangeKind::Allgather => (0, plan.dim),
    };
    grads.unary_frontier::<CapacityContainerBuilder<Vec<Envelope>>, _, _, _>(
        Exchange::new(|e: &Envelope| e.dest as u64),
        "Aggregate",
        move |_cap, _info| {
            let mut stash: BTreeMap<u64, (timely::dataflow::operators::Capability<RoundTime>, Vec<Envelope>)> = BTreeMap::new();
            let mut codec: Box<dyn Codec> = codec_or_fail(&plan.codec, &supervisor);
            let mut update_codec = NoneCodec;
            let mut aggregator = Aggregator::default();
            let mut optimizer = Optimizer::new(plan.optimizer.clone(), lo, hi);
            let mut new_values: Vec<f32> = Vec::new();
            let my_process = me as usize / plan.threads_per_process;
            let mut failed = false;
            move |(input, frontier), output| {
                input.for_each(|cap, batch| {
                    if let Some(t) = cap.least() {
                        let r = round_of(t);
                        let entry = stash.entry(r).or_insert_with(|| (cap.delayed(t, 0), Vec::new()));
                        entry.1.append(batch);
                    }
                });
                while !failed {
                    let Some((&r, _)) = stash.first_key_value() else { break };
                    if frontier.less_equal(&at(r)) {
                        break;
                    }
                    let (cap, mut msgs) = stash.pop_first().unwrap().1;
                    let t_agg = Instant::now();
                    let sum = match aggregator.aggregate(codec.as_mut(), &mut msgs, plan.dim) {
                        Ok(sum) => sum,
                        Err(e) => {
                            supervisor.fail(format!("worker {me}, round {r}: bad gradient message: {e}"));
                            failed = true;
                            return;
                        }
                    };
                    if let Some(&k) = sum.keys.iter().find(|&&k| k < lo || k >= hi) {
                        supervisor.fail(format!("worker {me}, round {r}: received key {k} outside its range [{lo}, {hi})"));
                        failed = true;
                        return;
                    }
                    let aggregate_ms = ms(t_agg);
                    let t_update = Instant::now();
                    let mut st = state.borrow_mut();
                    optimizer.apply(r, &sum.keys, &sum.values, &mut st.weights);
                    let mut remote = 0;
                    if plan.exchange == ExchangeKind::Sharded && peers > 1 {
                        new_values.clear();
                        new_values.extend(sum.keys.iter().map(|&k| st.weights[k as usize]));
                        let mut payload = Vec::new();
                        let ctx = EncodeContext { seed: plan.seed, round: r, worker: me };
                        if let Err(e) = update_codec.encode(&sum.keys, &new_values, plan.dim, ctx, &mut payload) {
                            supervisor.fail(format!("worker {me}, round {r}: model diverged: {e}"));
                            failed = true;
                            return;
                        }
                        let mut session = output.session(&cap);
                        for dest in (0..peers).filter(|&d| d != me) {
                            if dest as usize / plan.threads_per_process != my_process {
                                remote += payload.len() as u64;
                            }
                            session.give(Envelope { dest, src: me, rows: 0, payload: payload.clone() });
                        }
                    } else if let Some(&k) = sum.keys.iter().find(|&&k| !st.weights[k as usize].is_finite()) {
                        supervisor.fail(format!("worker {me}, round {r}: model diverged: weight {k} is not finite"));
                        failed = true;
                        return;
                    }
                    st.aggregate_ms = aggregate_ms;
                    st.update_ms = ms(t_update);
                    st.update_payload_remote = remote;
                }
            }
        },
    )
}

/// Per-round accumulation on worker 0.
#[derive(Default)]
struct RoundAcc {
    reports: u32,
    loss_sum: f64,
    rows: u64,
    grad_keys: u64,
    grad_payload: u64,
    update_payload: u64,
    times: StageTimes,
    eval: Option<EvalPart>,
}

/// The metrics collector: round statistics from every worker go to worker 0, which turns them
/// into one row per round and per epoch and hands each to `observer`.
///
/// Round `q`'s row is complete when the frontier has passed `q + 1` (the statistics sent at
/// round `q + 1` carry round `q`'s downstream timings and, at epoch ends, its evaluation).
pub fn collect(
    stats: Stream<'_, RoundTime, Vec<RoundStats>>,
    plan: &TrainPlan,
    rows: Rc<RefCell<Vec<MetricsRow>>>,
    mut observer: Box<dyn FnMut(&MetricsRow)>,
) {
    let plan = plan.clone();
    let workers = stats.scope().peers() as f64;
    let mut pending: BTreeMap<u64, RoundAcc> = BTreeMap::new();
    let mut epoch = MetricsRow {
        kind: "epoch",
        ..Default::default()
    };
    let (mut epoch_loss, mut epoch_rows) = (0.0, 0u64);
    let mut epoch_times = StageTimes::default();
    let start = Instant::now();
    stats.sink(
        Exchange::new(|_: &RoundStats| 0u64),
        "Collect",
        move |(input, frontier)| {
            input.for_each(|cap, batch| {
                let Some(t) = cap.least() else { return };
                let r = round_of(t);
                for s in batch.drain(..) {
                    if s.has_gradient {
                        let acc = pending.entry(r).or_default();
                        acc.reports += 1;
                        acc.loss_sum += s.loss_sum;
                        acc.rows += s.rows;
                        acc.grad_keys += s.grad_keys;
                        acc.grad_payload += s.grad_payload_remote;
                        acc.times.gradient_ms += s.gradient_ms;
                        acc.times.encode_ms += s.encode_ms;
                    }
                    if r > 0 {
                        let acc = pending.entry(r - 1).or_default();
                        acc.times.wait_ms += s.prev_wait_ms;
                        acc.times.aggregate_ms += s.prev_aggregate_ms;
                        acc.times.update_ms += s.prev_update_ms;
                        acc.update_payload += s.prev_update_payload_remote;
                        if let Some(e) = &s.eval {
                            acc.eval.get_or_insert_with(EvalPart::default).merge(e);
                        }
                    }
                }
            });
            while let Some((&q, _)) = pending.first_key_value() {
                if frontier.less_equal(&at(q + 1)) {
                    break;
                }
                let acc = pending.pop_first().unwrap().1;
                if acc.reports == 0 {
                    continue;
                }
                let mut times = acc.times;
                times.scale(1.0 / workers);
                let mut row = MetricsRow {
                    kind: "round",
                    epoch: q / plan.rounds_per_epoch + 1,
                    round: q,
                    seconds: start.elapsed().as_secs_f64(),
                    train_loss: acc.loss_sum / acc.rows.max(1) as f64,
                    gradient_keys: acc.grad_keys,
                    gradient_payload_bytes: acc.grad_payload,
                    update_payload_bytes: acc.update_payload,
                    ..Default::default()
                };
                row.set_times(&times);
                epoch_loss += acc.loss_sum;
                epoch_rows += acc.rows;
                epoch.gradient_keys += row.gradient_keys;
                epoch.gradient_payload_bytes += row.gradient_payload_bytes;
                epoch.update_payload_bytes += row.update_payload_bytes;
                epoch_times.add(&times);
                observer(&row);
                rows.borrow_mut().push(row.clone());
                if let Some(eval) = acc.eval {
                    let s = eval.summary(plan.loss);
                    epoch.epoch = row.epoch;
                    epoch.round = q;
                    epoch.seconds = row.seconds;
                    epoch.train_loss = epoch_loss / epoch_rows.max(1) as f64;
                    epoch.test_loss = s.loss;
                    epoch.test_accuracy = s.accuracy;
                    epoch.test_auc = s.auc;
                    epoch.test_rmse = s.rmse;
                    epoch.set_times(&epoch_times);
                    observer(&epoch);
                    rows.borrow_mut().push(epoch.clone());
                    epoch = MetricsRow {
                        kind: "epoch",
                        ..Default::default()
                    };
                    epoch_times = StageTimes::default();
                    (epoch_loss, epoch_rows) = (0.0, 0);
                }
            }
        },
    );
}
