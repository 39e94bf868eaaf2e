//! The gradient operator: the start of every round.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

use rand::rngs::Xoshiro256PlusPlus;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::Capability;
use timely::dataflow::Stream;
use timely::progress::{Antichain, Timestamp};

use super::checkpoint::{Carried, StreamPosition};
use super::live::LiveBatch;
use super::{at, round_of, RoundStats, RoundTime, Supervisor, TrainPlan};
use super::{Arrivals, WorkerData, WorkerState};
use crate::data::partition::mix64;
use crate::data::table::PreparedRow;
use crate::exchange::StateMode;
use crate::exchange::{Ahead, Endpoint, Envelope, ModelState, Place};
use crate::metrics::ms;
use crate::metrics::WireCounters;
use crate::model::{Compact, EvalPart, GradientWorkspace, ModelFn, PartialEval};
use crate::sparse::SparseGrad;

/// The gradient operator. Input: model changes (routed to their `dest`). Outputs: gradient
/// envelopes (one per receiving worker per round) and round statistics.
///
/// The operator gathers what arrives, and runs round `r` once its input is complete: its input
/// frontiers have passed `r` or the exchange's endpoint has the changes it expects each round
/// ([`Endpoint::changes_per_round`]; and the other inputs have passed `r`), in named steps
/// ([`GradientStep::round`]): apply the changes of round `r - 1 - s` (`s` =
/// `train.staleness`, the feedback edge's delay less one; at a checkpoint and after the last
/// round, every change still in flight), report the previous round's exchange, checkpoint,
/// copy the model to evaluate (at epoch ends and every `eval_every` rounds), take the next
/// mini-batch, compute
/// its gradient and send it (the exchange's endpoint: memory, codec, addressing); then it holds its capabilities for
/// round `r + 1`. While no round can run it evaluates the copy, some rows at a time, and sends
/// the statistics of the round that evaluates once that is done, at that round (the round's
/// capability is held until then). After the last round it only applies the final changes,
/// evaluates, and releases its capabilities.
///
/// With rows from a stream ([`Rows::Stream`], a program's own data preparation in the same
/// dataflow), the operator gathers the worker's rows until that input is complete, orders and
/// checks them ([`super::plan::worker_data`]), and only then starts round 0.
///
/// With rows from a stream as they arrive ([`Rows::Live`], an online run), round `r` also
/// waits until its rows are in ([`super::live`]): they are the round's mini-batch, scored on
/// the model before it trains on them (the round's loss is their progressive loss), and the
/// round at which the stream's end arrives is the last.
///
/// With a `stop` input (decisions to end training, each with its reason; see
/// [`super::Training::gradient_until`]), round `r` also waits until every decision that can
/// arrive at round `r` is in, and a round at which one arrives is the last: the worker applies
/// the changes, evaluates and releases its capabilities there. Every worker receives the same
/// decisions at the same rounds (a program broadcasts them), so all of them stop together.
pub fn gradient<'s>(
    changes: Stream<'s, RoundTime, Vec<Envelope>>,
    stop: Option<Stream<'s, RoundTime, Vec<String>>>,
    plan: &TrainPlan,
    data: Rows<'s>,
    state: Rc<RefCell<WorkerState>>,
    supervisor: Supervisor,
    wire: Option<WireCounters>,
) -> (
    Stream<'s, RoundTime, Vec<Envelope>>,
    Stream<'s, RoundTime, Vec<RoundStats>>,
) {
    let scope = changes.scope();
    let (me, peers) = (scope.index() as u32, scope.peers() as u32);
    let mut builder = OperatorBuilder::new("Gradient".to_owned(), scope);
    let mut input = builder.new_input(changes, Exchange::new(|e: &Envelope| e.dest as u64));
    let mut stop_input = stop.map(|s| builder.new_input(s, Pipeline));
    let (data, rows, live) = data.split();
    // The rows stay on the worker the program's dataflow put them on.
    let rows_at = 1 + stop_input.is_some() as usize;
    let mut rows_input = rows.map(|s| builder.new_input(s, Pipeline));
    let mut live_input =
        live.map(|s| builder.new_input(s, Exchange::new(|b: &LiveBatch| b.dest as u64)));
    // Every input but the live rows reaches the outputs: a round's rows are used at the
    // round's own capabilities, and a reader whose stream has ended waits for the loop's end.
    let reaching = all_but_last(builder.shape().inputs(), live_input.is_some());
    let (grad_out, grad_stream) =
        builder.new_output_connection::<Vec<Envelope>, _>(reaching.clone());
    let (stats_out, stats_stream) = builder.new_output_connection::<Vec<RoundStats>, _>(reaching);
    let (mut grad_out, mut stats_out) = (Output::from(grad_out), Output::from(stats_out));
    let mut step =
        data.map(|data| GradientStep::new(me, peers, plan, data, &supervisor, wire.clone()));
    let mut arrived: Vec<PreparedRow> = Vec::new();
    let plan = plan.clone();
    let activator = scope.activator_for(builder.operator_info().address);

    let start = at(plan.start_round);
    builder.build(move |mut caps| {
        // A resumed run starts at the checkpoint's round.
        caps.iter_mut().for_each(|c| c.downgrade(&start));
        let mut stats_cap = caps.pop();
        let mut grad_cap = caps.pop();
        // Round r's input is complete when the frontiers have passed r or, when the endpoint
        // knows how many changes a round brings, when they are in and the other inputs (stop
        // decisions, a program's rows) have passed r.
        let expected = step.as_ref().map(|w| w.endpoint.changes_per_round());
        let mut arrivals: Arrivals<()> = Arrivals::new(expected.flatten());
        // The last round whose changes were applied ahead of their round.
        let mut applied_through = 0;
        let mut stops: BTreeMap<u64, String> = BTreeMap::new();
        let mut envelopes = Vec::new();
        // The statistics of a round whose evaluation is still running, at that round.
        let mut held: Held = None;
        move |frontiers| {
            // 1. What arrived: model changes and stop decisions by round, a program's rows.
            input.for_each(|cap, batch| {
                if let Some(t) = cap.least() {
                    if let Err(e) = arrivals.add(round_of(t), batch, || ()) {
                        supervisor.fail(format!("worker {me}: model changes: {e}"));
                    }
                }
            });
            if let Some(stop_input) = stop_input.as_mut() {
                stop_input.for_each(|cap, reasons| {
                    if let (Some(t), Some(reason)) = (cap.least(), reasons.first()) {
                        stops.entry(round_of(t)).or_insert_with(|| reason.clone());
                    }
                });
            }
            if let Some(rows) = rows_input.as_mut() {
                rows.for_each(|_, batch| arrived.append(batch));
            }
            if let (Some(live), Some(w)) = (live_input.as_mut(), step.as_mut()) {
                live.for_each(|cap, batch| cap.least().map_or((), |t| w.arrive(t, batch)));
            }
            if supervisor.is_failed() {
                return;
            }
            // 2. A program's rows make the worker's data once all of them are in.
            if step.is_none() {
                if !frontiers[rows_at].is_empty() {
                    return;
                }
                let rows = std::mem::take(&mut arrived);
                let at = (me, peers);
                match GradientStep::on_rows(rows, at, &plan, &state, &supervisor, wire.clone()) {
                    Ok(w) => step = Some(w),
                    Err(e) => return supervisor.fail(e),
                }
                arrivals.expect(step.as_ref().and_then(|w| w.endpoint.changes_per_round()));
            }
            let worker = step.as_mut().expect("built above");
            // 3. Every round whose input is complete: run it, send its messages and statistics,
            // and hold the capabilities for the next round (none after the last).
            while let Some(cap) = grad_cap.as_mut() {
                if frontiers[1..].iter().any(|f| f.less_equal(cap.time())) {
                    break;
                }
                let r = round_of(cap.time());
                worker.end_if_stream_ends(r);
                let passed = |q: u64| !frontiers[0].less_equal(&at(q));
                let whole = worker.sees_whole_model(r, &stops);
                let Some(changes) =
                    round_changes(&mut arrivals, &mut applied_through, r, whole, &plan, passed)
                else {
                    break;
                };
                let st = &mut *state.borrow_mut();
                let run = worker.begin(r, &stops, st);
                worker.take_live_rows(r);
                // The evaluation in progress ends before a round that evaluates again.
                if let Some((c, s)) = worker.finish_held(r, &mut held, st) {
                    stats_out.activate().session(&c).give(s);
                }
                let stats = match run.and_then(|_| worker.round(r, changes, st, &mut envelopes)) {
                    Ok(stats) => stats,
                    Err(e) => {
                        supervisor.fail(e);
                        return;
                    }
                };
                grad_out
                    .activate()
                    .session(&*cap)
                    .give_iterator(envelopes.drain(..));
                let sc = stats_cap
                    .as_mut()
                    .expect("held with the gradient capability");
                if let Some(s) = worker.report_or_hold(r, stats, st, sc, &mut held) {
                    stats_out.activate().session(&*sc).give(s);
                }
                if r < worker.rounds {
                    cap.downgrade(&at(r + 1));
                    sc.downgrade(&at(r + 1));
                } else {
                    grad_cap = None;
                    stats_cap = None;
                }
            }
            // 4. While the next round's input is not in: the evaluation in progress, some
            // rows at a time, its statistics sent once it is done.
            if let Some((c, s)) = worker.evaluate_held(&mut held, &mut state.borrow_mut()) {
                stats_out.activate().session(&c).give(s);
            } else if held.is_some() {
                activator.activate();
            }
        }
    });
    (grad_stream, stats_stream)
}

/// An output's connection to `inputs` inputs (the unit summary), without the last one when
/// `skip_last`.
fn all_but_last(
    inputs: usize,
    skip_last: bool,
) -> Vec<(usize, Antichain<<RoundTime as Timestamp>::Summary>)> {
    let connected = inputs - skip_last as usize;
    (0..connected)
        .map(|i| (i, Antichain::from_elem(Default::default())))
        .collect()
}

/// The changes round `r` applies, once they are in: those of round `r - 1 - staleness`, or,
/// where it must see the whole model (`whole`: a checkpoint, the end), all those in flight
/// (`applied_through` then records the last round applied ahead); `None` while some can still
/// arrive.
fn round_changes(
    arrivals: &mut Arrivals<()>,
    applied_through: &mut u64,
    r: u64,
    whole: bool,
    plan: &TrainPlan,
    passed: impl Fn(u64) -> bool,
) -> Option<Vec<Envelope>> {
    if r <= *applied_through {
        return Some(Vec::new());
    }
    if whole {
        let through = r + plan.staleness;
        let changes = arrivals.take_through(r, through, passed)?;
        *applied_through = through;
        return Some(changes);
    }
    arrivals.take(r, passed(r)).map(|(_, changes)| changes)
}

/// The positions of batch `b` of `rows` rows in `batches` batches an epoch.
fn batch_range(rows: usize, batches: u64, b: u64) -> std::ops::Range<usize> {
    let n = rows as u64;
    (b * n / batches) as usize..((b + 1) * n / batches) as usize
}

/// Worker `me`'s order of its rows for epoch `epoch`, from the previous epoch's: shuffled by a
/// generator seeded by (job seed, epoch, worker), then sorted within each batch.
fn shuffle_epoch(order: &mut [u32], plan: &TrainPlan, me: u32, epoch: u64) {
    let (rpe, n) = (plan.rounds_per_epoch, order.len());
    let seed = mix64(plan.seed, (epoch << 20) ^ me as u64);
    order.shuffle(&mut Xoshiro256PlusPlus::seed_from_u64(seed));
    sort_within_batches(order, rpe, |b| batch_range(n, rpe, b));
}

/// The distinct features (sorted) of worker `me`'s first mini-batch of `train`: besides its
/// own keys, the weights a warm start of its shard must hold, since nobody pulls for round 0.
pub fn first_batch_features(train: &crate::data::Dataset, plan: &TrainPlan, me: u32) -> Vec<u32> {
    let mut order: Vec<u32> = (0..train.rows() as u32).collect();
    shuffle_epoch(&mut order, plan, me, 0);
    let rows = &order[batch_range(order.len(), plan.rounds_per_epoch, 0)];
    let mut features: Vec<u32> = rows
        .iter()
        .flat_map(|&i| train.row(i as usize).0.iter().copied())
        .collect();
    radsort::sort(&mut features);
    features.dedup();
    features
}

/// Sorts each batch's positions of `order` (a permutation of `0..n`; batch `b` holds
/// `range(b)`, `b < batches`), as sorting every range would, in two linear passes instead: each
/// row notes its batch, then the rows, read in increasing order, go to their batch's next slot
/// (a counting sort by batch, stable, so each batch comes out ascending).
fn sort_within_batches(
    order: &mut [u32],
    batches: u64,
    range: impl Fn(u64) -> std::ops::Range<usize>,
) {
    let mut batch_of = vec![0u32; order.len()];
    let mut next = Vec::with_capacity(batches as usize);
    for b in 0..batches {
        let positions = range(b);
        next.push(positions.start);
        for &row in &order[positions] {
            batch_of[row as usize] = b as u32;
        }
    }
    for (row, &b) in batch_of.iter().enumerate() {
        order[next[b as usize]] = row as u32;
        next[b as usize] += 1;
    }
}

/// Where a worker's rows come from.
pub enum Rows<'s> {
    /// Read before the dataflow was built (the job's data).
    Loaded(Box<WorkerData>),
    /// Prepared by the program's own operators in the same dataflow: every row this worker
    /// trains or tests on arrives on the stream (at round 0) before training starts.
    Stream(Stream<'s, RoundTime, Vec<PreparedRow>>),
    /// An online run's: each round's rows arrive at that round ([`super::live`]); the loaded
    /// data holds only test rows.
    Live(Stream<'s, RoundTime, Vec<LiveBatch>>, Box<WorkerData>),
}

/// A worker's rows, split by where they come from.
type SplitRows<'s> = (
    Option<WorkerData>,
    Option<Stream<'s, RoundTime, Vec<PreparedRow>>>,
    Option<Stream<'s, RoundTime, Vec<LiveBatch>>>,
);

impl<'s> Rows<'s> {
    /// The loaded rows, the program's stream, or the live rows.
    fn split(self) -> SplitRows<'s> {
        match self {
            Rows::Loaded(data) => (Some(*data), None, None),
            Rows::Stream(rows) => (None, Some(rows), None),
            Rows::Live(rows, data) => (Some(*data), None, Some(rows)),
        }
    }
}

/// The gradient operator's state and its named steps.
struct GradientStep {
    me: u32,
    plan: TrainPlan,
    data: WorkerData,
    rounds: u64,
    /// The exchange's side of this worker: the uplink and the changes' application.
    endpoint: Box<dyn Endpoint>,
    workspace: GradientWorkspace,
    grad: SparseGrad,
    order: Vec<u32>,
    shuffled_epoch: Option<u64>,
    /// An online run: each round's batch is the rows that arrived for it.
    live: bool,
    /// An online run: its number of readers, and the reader of this worker's rows.
    readers: (usize, u32),
    /// An online run: the rows that have arrived for rounds not yet run.
    live_rows: BTreeMap<u64, Vec<LiveBatch>>,
    /// An online run: where the stream stood after the rows of the rounds before this one,
    /// and after this round's.
    stream: (StreamPosition, StreamPosition),
    /// An online run: the rows trained on at the last live snapshot, and when it was written.
    last_snapshot: (u64, Instant),
    last_emit: Option<Instant>,
    /// The process's wire counters, on its first worker (which marks each round's start).
    wire: Option<WireCounters>,
    /// The test evaluation in progress, on a copy of the model it evaluates.
    evaluation: Option<Evaluating>,
    /// The copy's buffer between evaluations.
    eval_weights: Vec<f32>,
    /// Without a replica (`train.state = "sharded"`): the test rows' view of the model, on
    /// which they are scored ([`Compact`]).
    test_view: Option<Compact>,
    /// Without a replica: the next round's batch view, built when its weights were asked for.
    next_view: Option<(u64, Compact)>,
    /// Evaluation time since the last round's messages went out (spent while waiting).
    overlapped_eval_ms: f64,
}

/// Test rows evaluated per step of an evaluation in progress: a step costs about as much as
/// a round of a small batch, so a round whose input arrives waits for at most one step.
const EVAL_STEP_ROWS: usize = 4096;

/// An evaluation of the model after some round, on a copy of it, while later rounds run.
struct Evaluating {
    weights: Vec<f32>,
    /// The model (renumbered for the test rows' view).
    model: ModelFn,
    next_row: usize,
    eval: PartialEval,
    ms: f64,
}

/// An output of the gradient operator.
type Output<D> = OutputBuilder<RoundTime, CapacityContainerBuilder<Vec<D>>>;

/// The statistics of a round whose evaluation is still running, at that round.
type Held = Option<(Capability<RoundTime>, RoundStats)>;

impl GradientStep {
    /// Before round `r`, when it evaluates again: the evaluation in progress finished, and
    /// its round's statistics.
    fn finish_held(
        &mut self,
        r: u64,
        held: &mut Held,
        st: &mut WorkerState,
    ) -> Option<(Capability<RoundTime>, RoundStats)> {
        let (c, mut s) = held.take_if(|_| self.evaluates_at(r))?;
        self.finish_evaluation(&mut s);
        let s = self.count_report(round_of(c.time()), s, st);
        Some((c, s))
    }

    /// Round `r`'s statistics to send now, or none: an evaluation in progress with nothing held
    /// is this round's own, and its statistics wait for it (held, at `cap`).
    fn report_or_hold(
        &self,
        r: u64,
        stats: RoundStats,
        st: &mut WorkerState,
        cap: &Capability<RoundTime>,
        held: &mut Held,
    ) -> Option<RoundStats> {
        if self.evaluating() && held.is_none() {
            *held = Some((cap.clone(), stats));
            return None;
        }
        Some(self.count_report(r, stats, st))
    }

    /// Some rows of the evaluation in progress; its round's statistics once it is done.
    fn evaluate_held(
        &mut self,
        held: &mut Held,
        st: &mut WorkerState,
    ) -> Option<(Capability<RoundTime>, RoundStats)> {
        let (_, s) = held.as_mut()?;
        if !self.evaluate_some(s) {
            return None;
        }
        let (c, s) = held.take()?;
        let s = self.count_report(round_of(c.time()), s, st);
        Some((c, s))
    }

    /// The step of worker `at = (me, peers)` on the rows a program's dataflow handed it,
    /// ordered and checked ([`super::plan::worker_data`]); their count is noted in `state`.
    fn on_rows(
        rows: Vec<PreparedRow>,
        (me, peers): (u32, u32),
        plan: &TrainPlan,
        state: &RefCell<WorkerState>,
        sup: &Supervisor,
        wire: Option<WireCounters>,
    ) -> Result<Self, String> {
        let data = super::plan::worker_data(rows, plan)
            .map_err(|e| format!("worker {me}: the program's rows: {e}"))?;
        let rows = (data.train.rows() as u64, data.test.rows() as u64);
        state.borrow_mut().prepared_rows = Some(rows);
        Ok(GradientStep::new(me, peers, plan, data, sup, wire))
    }

    fn new(
        me: u32,
        peers: u32,
        plan: &TrainPlan,
        data: WorkerData,
        sup: &Supervisor,
        wire: Option<WireCounters>,
    ) -> Self {
        let exchange = plan.exchange_plan();
        let at = Place {
            me,
            peers,
            plan: &exchange,
        };
        let endpoint = plan.strategy().endpoint(&at, &data).unwrap_or_else(|e| {
            sup.fail(e);
            Box::new(Inert)
        });
        let sharded = plan.state == StateMode::Sharded;
        let test_view = sharded.then(|| {
            let test: Vec<u32> = (0..data.test.rows() as u32).collect();
            Compact::of(&data.test, &test, plan.model.width(), plan.dense_keys())
        });
        GradientStep {
            me,
            rounds: plan.rounds(),
            endpoint,
            workspace: GradientWorkspace::new(if sharded { 0 } else { plan.dim }),
            grad: SparseGrad::default(),
            order: (0..data.train.rows() as u32).collect(),
            data,
            plan: plan.clone(),
            shuffled_epoch: None,
            live: plan.live.is_some(),
            readers: (plan.live.as_ref())
                .map_or((0, 0), |l| (l.readers(peers) as usize, l.reader_of(me))),
            live_rows: BTreeMap::new(),
            stream: plan
                .live
                .as_ref()
                .map_or_else(Default::default, |l| (l.start, l.start)),
            last_snapshot: (
                plan.live.as_ref().map_or(0, |l| l.start.rows),
                Instant::now(),
            ),
            last_emit: None,
            wire: wire.filter(|_| plan.leads_process(me)),
            evaluation: None,
            eval_weights: Vec::new(),
            overlapped_eval_ms: 0.0,
            test_view,
            next_view: None,
        }
    }

    /// Before round `r`: a stop decision that has arrived by `r` makes `r` the last round
    /// (every worker has the same decisions, so it is everyone's last); the process's first
    /// worker tells the wire counters and the checkpoints that round `r` started.
    fn begin(
        &mut self,
        r: u64,
        stops: &BTreeMap<u64, String>,
        st: &mut WorkerState,
    ) -> Result<(), String> {
        if let Some((&at_round, reason)) = stops.first_key_value() {
            if at_round <= r && self.rounds > r {
                st.stopped = Some((r, reason.clone()));
                self.rounds = r;
            }
        }
        // The round after the last trains nothing and has no metrics row: bytes sent from
        // there on (the last changes, on a slow send thread; the final statistics) count for
        // the last round, whose row then waits for the end of the run, instead of for a round
        // no row takes.
        if let Some(w) = self.wire.as_ref().filter(|_| r < self.rounds) {
            w.mark_round(r);
        }
        match &self.plan.checkpoints {
            Some(c) if self.plan.leads_process(self.me) => c.started(r, &self.plan),
            _ => Ok(()),
        }
    }

    /// Whether round `r` must start from the whole model, every change in flight applied: when
    /// rounds are pipelined (`train.staleness`), at a checkpoint (it saves a model that no
    /// change is missing from) and after the last round (the model written; `stops` are the
    /// decisions to end early). A round that runs anyway does nothing different.
    fn sees_whole_model(&self, r: u64, stops: &BTreeMap<u64, String>) -> bool {
        let last = r >= self.rounds || stops.first_key_value().is_some_and(|(&at, _)| at <= r);
        let checkpoint = (self.plan.checkpoints.as_ref()).is_some_and(|c| c.due(r, &self.plan));
        self.plan.staleness > 0 && (last || checkpoint)
    }

    /// Round `r`, in its named steps: leaves this round's gradient envelopes in `out` and
    /// returns its statistics. After the last round only the first steps run (the final
    /// changes are applied and the model evaluated).
    fn round(
        &mut self,
        r: u64,
        changes: Vec<Envelope>,
        st: &mut WorkerState,
        out: &mut Vec<Envelope>,
    ) -> Result<RoundStats, String> {
        let mut stats = RoundStats {
            worker: self.me,
            ..Default::default()
        };
        let started = Instant::now();
        self.apply_changes(r, changes, st)?;
        self.previous_round(r, started, st, &mut stats);
        self.checkpoint(r, st, &stats)?;
        self.snapshot(r, st)?;
        self.evaluate(r, st, &mut stats)?;
        if r == self.rounds {
            self.write_shard(st)?;
            return Ok(stats);
        }
        let batch = self.next_batch(r);
        self.gradient(r, batch, st, &mut stats)?;
        let encoding = Instant::now();
        (stats.offered_keys, stats.sent_keys) = self.send(r, stats.rows as u32, st, out)?;
        self.ask(r, st, out);
        stats.encode_ms = ms(encoding);
        stats.traffic = std::mem::take(&mut st.model.traffic);
        self.last_emit = Some(Instant::now());
        Ok(stats)
    }

    /// Counts the bytes of round `r`'s `stats` (and the evaluation part they carry) as they
    /// cross to worker 0, when this worker is in another process. They count for round
    /// `r - 1`, whose evaluation and downstream stages they report (round 0's for itself; the
    /// round after the last has no row of its own).
    fn count_report(&self, r: u64, mut stats: RoundStats, st: &mut WorkerState) -> RoundStats {
        if self.plan.process_of(self.me) != self.plan.process_of(0) {
            // Fixed-width integers: setting the count does not change the size.
            let bytes = bincode::serialized_size(&stats).unwrap_or(0);
            match r {
                0 => stats.traffic.eval_sent = bytes,
                _ => stats.prev_traffic.eval_sent = bytes,
            }
            st.model.traffic_total.eval_sent += bytes;
        }
        stats
    }

    /// The times and traffic of round `r - 1`'s exchange (its update ended with this round's
    /// [`Self::apply_changes`], which started at `started`), reported with round `r`; a resumed
    /// run reports those the checkpoint carried.
    fn previous_round(
        &mut self,
        r: u64,
        started: Instant,
        st: &mut WorkerState,
        stats: &mut RoundStats,
    ) {
        if let Some(c) = st.carried.take() {
            // Resumed: round r - 1 ran before the checkpoint.
            stats.prev_update_ms = c.update_ms;
            stats.prev_aggregate_ms = c.aggregate_ms;
            stats.prev_wait_ms = c.wait_ms;
            st.model.traffic = c.traffic;
            st.model.traffic_total = c.traffic_total;
        } else if r > 0 {
            stats.prev_update_ms = st.model.update_ms + ms(started);
            stats.prev_aggregate_ms = st.model.aggregate_ms;
            if let Some(t) = self.last_emit {
                let between = ms(t) - std::mem::take(&mut self.overlapped_eval_ms);
                stats.prev_wait_ms =
                    (between - st.model.aggregate_ms - st.model.update_ms).max(0.0);
            }
        }
        stats.prev_traffic = std::mem::take(&mut st.model.traffic);
        (st.model.aggregate_ms, st.model.update_ms) = (0.0, 0.0);
    }

    /// Saves this worker's state when a checkpoint is due at round `r` (the model after round
    /// `r - 1`, with what round `r` reports of it).
    fn checkpoint(&self, r: u64, st: &mut WorkerState, stats: &RoundStats) -> Result<(), String> {
        let Some(c) = self
            .plan
            .checkpoints
            .as_ref()
            .filter(|c| c.due(r, &self.plan))
        else {
            return Ok(());
        };
        let carried = Carried {
            wait_ms: stats.prev_wait_ms,
            aggregate_ms: stats.prev_aggregate_ms,
            update_ms: stats.prev_update_ms,
            traffic: stats.prev_traffic,
            traffic_total: st.model.traffic_total,
            stream: self.stream.0,
        };
        c.save_worker(r, self.me, st, carried)
    }

    /// An online run's live snapshot, when one is due at round `r` ([`super::live::Snapshots`]):
    /// the first worker writes the model it trains round `r` on (the process's replica holds
    /// all of it) as a model file. The last round's model is written by the run's end.
    fn snapshot(&mut self, r: u64, st: &WorkerState) -> Result<(), String> {
        let plan = &self.plan;
        let Some(s) = plan.live.as_ref().and_then(|l| l.snapshots.as_ref()) else {
            return Ok(());
        };
        let rows = self.stream.0.rows;
        if self.me != 0 || r >= self.rounds || !s.due(rows, self.last_snapshot) {
            return Ok(());
        }
        self.last_snapshot = (rows, Instant::now());
        // SAFETY: the gradient step's window (see `Replica::in_round`).
        let weights = unsafe { st.model.weights.in_round() };
        let outputs = plan.loss.outputs();
        let file = crate::model::file::ModelFile {
            loss: plan.loss.name().to_string(),
            weights: weights.to_vec(),
            intercept: plan.intercept,
            classes: (outputs > 1).then_some(outputs),
            model: (plan.model.name() != "linear").then(|| plan.model.spec()),
            features: s.features.clone(),
        };
        file.save(&s.path)
            .map_err(|e| format!("live snapshot after {rows} rows: {}: {e}", s.path.display()))
    }

    /// Whether round `r` evaluates the model after round `r - 1`: at epoch ends, every
    /// `eval_every` rounds and after the last round.
    fn evaluates_at(&self, r: u64) -> bool {
        self.plan.evaluates_after(r) || (r == self.rounds && r > 0)
    }

    /// The test metrics of the model after round `r - 1`, when round `r` evaluates. After the
    /// last round they are computed here; otherwise on a copy of the model, some rows at a
    /// time while the worker waits for the next round ([`Self::evaluate_some`]), so that the
    /// evaluation does not delay the rounds after it. The metrics are the same either way.
    fn evaluate(&mut self, r: u64, st: &WorkerState, stats: &mut RoundStats) -> Result<(), String> {
        if !self.evaluates_at(r) {
            return Ok(());
        }
        let started = Instant::now();
        let loss = &*self.plan.loss;
        let (test, weights, model) = match self.test_view.as_mut() {
            Some(view) => {
                // Without a replica: the test rows' view, from the shard and pulled weights.
                fill_view(view, &st.model, &self.plan, r)
                    .map_err(|e| format!("worker {}, round {r}: evaluation: {e}", self.me))?;
                let model = view.model(&self.plan.model, self.plan.intercept);
                (&view.rows, &view.weights[..], model)
            }
            // SAFETY: the gradient step's window (see `Replica::in_round`).
            None => (
                &self.data.test,
                unsafe { st.model.weights.in_round() },
                self.plan.model.clone(),
            ),
        };
        if r == self.rounds {
            let bits = self.plan.auc_bits;
            stats.eval = Some(EvalPart::evaluate(test, weights, &*model, loss, bits));
            stats.prev_eval_ms = ms(started);
            return Ok(());
        }
        let mut copy = std::mem::take(&mut self.eval_weights);
        copy.clear();
        copy.extend_from_slice(weights);
        self.evaluation = Some(Evaluating {
            weights: copy,
            model,
            next_row: 0,
            eval: PartialEval::default(),
            ms: ms(started),
        });
        Ok(())
    }

    /// Without a replica, after the last round: writes this worker's shard for the model file
    /// (process 0 merges the shards once every worker's dataflow, this one's last round
    /// included, is done).
    fn write_shard(&self, st: &WorkerState) -> Result<(), String> {
        let (Some(model), Some(shard)) = (&self.plan.shard_output, st.model.shard) else {
            return Ok(());
        };
        let path = crate::model::file::shard_path(model, self.me);
        // SAFETY: the gradient step's window (see `Replica::in_round`).
        let weights = unsafe { st.model.weights.in_round() };
        let pairs = (0..)
            .zip(weights)
            .map(|(slot, &w)| (shard.owners.key(self.me, slot), w));
        crate::model::file::write_shard(&path, pairs)
            .map_err(|e| format!("worker {}: {}: {e}", self.me, path.display()))
    }

    /// Whether an evaluation is in progress.
    fn evaluating(&self) -> bool {
        self.evaluation.is_some()
    }

    /// Evaluates the next rows of the evaluation in progress; once it is done, puts its part
    /// and time into `stats` (those of the round that evaluates) and returns true.
    fn evaluate_some(&mut self, stats: &mut RoundStats) -> bool {
        let Some(e) = self.evaluation.as_mut() else {
            return true;
        };
        let started = Instant::now();
        let test = match &self.test_view {
            Some(view) => &view.rows,
            None => &self.data.test,
        };
        let end = (e.next_row + EVAL_STEP_ROWS).min(test.rows());
        let (model, loss) = (&*e.model, &*self.plan.loss);
        e.eval.rows(test, e.next_row..end, &e.weights, model, loss);
        e.next_row = end;
        let spent = ms(started);
        e.ms += spent;
        self.overlapped_eval_ms += spent;
        if end < test.rows() {
            return false;
        }
        let e = self.evaluation.take().expect("in progress");
        stats.eval = Some(e.eval.finish(self.plan.auc_bits));
        stats.prev_eval_ms = e.ms;
        self.eval_weights = e.weights;
        true
    }

    /// Ends the evaluation in progress (see [`Self::evaluate_some`]).
    fn finish_evaluation(&mut self, stats: &mut RoundStats) {
        while !self.evaluate_some(stats) {}
    }

    /// The mini-batch gradient of the rows at `batch` (positions in `order`) into `self.grad`,
    /// with L2 (the intercept exempt); `output.gradients` writes it to a file.
    fn gradient(
        &mut self,
        r: u64,
        batch: std::ops::Range<usize>,
        st: &WorkerState,
        stats: &mut RoundStats,
    ) -> Result<(), String> {
        let started = Instant::now();
        let l2 = self.plan.l2();
        let rows = &self.order[batch];
        let (model, loss) = (&*self.plan.model, &*self.plan.loss);
        let sums = if st.model.shard.is_some() {
            // Without a replica: the batch's view of the model, its gradient renumbered back.
            let (width, dense) = (model.width(), self.plan.dense_keys());
            let mut view = match self.next_view.take() {
                Some((round, view)) if round == r => view,
                _ => Compact::of(&self.data.train, rows, width, dense),
            };
            fill_view(&mut view, &st.model, &self.plan, r)
                .map_err(|e| format!("worker {}, round {r}: {e}", self.me))?;
            let local_model = view.model(&self.plan.model, self.plan.intercept);
            let all: Vec<u32> = (0..rows.len() as u32).collect();
            self.workspace.fit(view.weights.len() as u32);
            let (l2, data) = (view.l2(l2), &view.rows);
            let sums = (self.workspace).minibatch(
                data,
                &all,
                &view.weights,
                &*local_model,
                loss,
                l2,
                &mut self.grad,
            );
            view.to_model_keys(&mut self.grad);
            sums
        } else {
            // SAFETY: the gradient step's window: every owner's change of the last round is
            // in, and no owner writes this round's before this worker's gradient reaches it.
            let weights = unsafe { st.model.weights.in_round() };
            let data = &self.data.train;
            (self.workspace).minibatch(data, rows, weights, model, loss, l2, &mut self.grad)
        };
        if self.live {
            // Progressive validation: the round's rows scored on the weights their gradient
            // was taken at, before any of them is trained on.
            // SAFETY: the gradient step's window (see `Replica::in_round`).
            let weights = unsafe { st.model.weights.in_round() };
            let data = &self.data.train;
            stats.progressive = Some(EvalPart::evaluate(
                data,
                weights,
                model,
                loss,
                self.plan.auc_bits,
            ));
        }
        stats.gradient_ms = ms(started);
        stats.has_gradient = true;
        stats.loss_sum = sums.loss_sum;
        stats.rows = rows.len() as u64;
        stats.grad_keys = self.grad.len() as u64;
        if let Some(dir) = &self.plan.dump_gradients {
            let path = dir.join(format!("round{r:05}-worker{}.bin", self.me));
            std::fs::create_dir_all(dir)
                .and_then(|_| crate::codec::measure::write_gradient(&path, &self.grad))
                .map_err(|e| format!("output.gradients: {}: {e}", path.display()))?;
        }
        Ok(())
    }

    /// Adds the model changes that arrived for round `r` (those of round `r - 1 - s`): the
    /// exchange's endpoint applies them.
    fn apply_changes(
        &mut self,
        r: u64,
        changes: Vec<Envelope>,
        st: &mut WorkerState,
    ) -> Result<(), String> {
        if changes.is_empty() && r == self.plan.start_round {
            // Nothing precedes a run's first round; a resumed one has its pulled weights.
            return Ok(());
        }
        self.endpoint.receive(r, changes, &mut st.model)
    }

    /// The positions in `order` of round `r`'s mini-batch. Each epoch shuffles the worker's
    /// rows with a generator seeded by (job seed, epoch, worker); within a batch the rows are visited in
    /// storage order, so that row data streams through the cache (the gradient is a sum: the
    /// order only changes rounding).
    fn next_batch(&mut self, r: u64) -> std::ops::Range<usize> {
        if self.live {
            return 0..self.order.len();
        }
        let rpe = self.plan.rounds_per_epoch;
        let (epoch, b) = (r / rpe, r % rpe);
        // Each epoch's shuffle starts from the previous epoch's order: a run resumed in epoch
        // `e` replays the shuffles of epochs 0..=e.
        if self.shuffled_epoch.is_none_or(|s| s < epoch) {
            let first = self.shuffled_epoch.map_or(0, |s| s + 1);
            for e in first..=epoch {
                shuffle_epoch(&mut self.order, &self.plan, self.me, e);
            }
            self.shuffled_epoch = Some(epoch);
        }
        batch_range(self.order.len(), rpe, b)
    }

    /// An online run: rows that arrived for the round of time `t`.
    fn arrive(&mut self, t: &RoundTime, batch: &mut Vec<LiveBatch>) {
        self.live_rows.entry(round_of(t)).or_default().append(batch);
    }

    /// An online run: the first round in which every reader's stream has ended (each reader's
    /// batch arrives at every worker, marked when its stream has) is the last round.
    fn end_if_stream_ends(&mut self, r: u64) {
        let readers = self.readers.0;
        let ended = |b: &Vec<LiveBatch>| b.iter().filter(|b| b.end).count() == readers;
        if self.live_rows.get(&r).is_some_and(ended) {
            self.rounds = self.rounds.min(r);
        }
    }

    /// An online run's round `r`: its rows (this worker's of those that arrived for it)
    /// become the training rows, all of them the round's batch. Nothing without a stream.
    fn take_live_rows(&mut self, r: u64) {
        if !self.live {
            return;
        }
        let batches = self.live_rows.remove(&r).unwrap_or_default();
        if let Some(b) = batches.iter().find(|b| b.reader == self.readers.1) {
            self.stream = (self.stream.1, b.at); // its reader's, which its checkpoint resumes
        }
        let train = &mut self.data.train;
        train.clear();
        for b in &batches {
            b.append_to(train);
        }
        self.order.clear();
        self.order.extend(0..train.rows() as u32);
    }

    /// After the round's gradient: what the endpoint sends that depends on the next round's
    /// batch (`train.pull`'s requests).
    fn ask(&mut self, r: u64, st: &mut WorkerState, out: &mut Vec<Envelope>) {
        if !self.endpoint.looks_ahead() {
            return;
        }
        let next = r + 1;
        let rows = if next < self.rounds {
            self.next_batch(next)
        } else {
            0..0
        };
        let (order, train) = (&self.order, &self.data.train);
        // Without a replica: the next batch's view, whose features (sorted, distinct) are
        // what to ask for, and which the next round's gradient takes.
        let view = self.test_view.is_some().then(|| {
            let (width, dense) = (self.plan.model.width(), self.plan.dense_keys());
            Compact::of(train, &order[rows.clone()], width, dense)
        });
        let (mut features, mut batch);
        let keys: &mut dyn Iterator<Item = &[u32]> = match &view {
            Some(view) => {
                features = std::iter::once(&view.features[..]);
                &mut features
            }
            None => {
                batch = order[rows].iter().map(|&i| train.row(i as usize).0);
                &mut batch
            }
        };
        let ahead = Ahead {
            round: next,
            last: next == self.rounds,
            evaluates: self.plan.evaluates_after(next),
            batch: keys,
        };
        self.endpoint.ask(ahead, &mut st.model, out);
        self.next_view = view.map(|view| (next, view));
    }

    /// Checks the gradient, gives it to the exchange's endpoint (memory, codec, addressing:
    /// the round's envelopes in `out`) and counts the envelopes as this worker's uplink
    /// traffic. Returns the keys offered to the codec (after the memory) and the keys its
    /// messages carry.
    fn send(
        &mut self,
        r: u64,
        rows: u32,
        st: &mut WorkerState,
        out: &mut Vec<Envelope>,
    ) -> Result<(u64, u64), String> {
        crate::codec::check_finite(&self.grad.keys, &self.grad.values)
            .map_err(|e| format!("worker {}, round {r}: {e}", self.me))?;
        let keys = self
            .endpoint
            .send(r, &mut self.grad, rows, &mut st.model, out)?;
        for env in out.iter() {
            let remote = self.plan.process_of(env.dest) != self.plan.process_of(self.me);
            st.model.sent(true, env.len(), remote);
        }
        Ok(keys)
    }
}

/// Sets `view`'s weights for round `r` without a replica: this worker's own keys from its
/// shard, the others' from the weights pulled for the round (a resumed run's first round:
/// those its checkpoint saved), or, in round 0, which nobody pulled for, the model's initial
/// ones ([`crate::model::Model::initial`], or a warm start's, which holds them).
fn fill_view(view: &mut Compact, st: &ModelState, plan: &TrainPlan, r: u64) -> Result<(), String> {
    let shard = st
        .shard
        .ok_or("the model state has no shard (Training::place_model)")?;
    // SAFETY: the gradient step's window (see `Replica::in_round`).
    let own = unsafe { st.weights.in_round() };
    let (pulled, first) = (&st.pulled, r == 0);
    let mut at = 0;
    view.fill(|k| {
        if shard.holds(k) {
            return Ok(own[shard.owners.slot(k) as usize]);
        }
        while pulled.get(at).is_some_and(|&(p, _)| p < k) {
            at += 1;
        }
        match pulled.get(at) {
            Some(&(p, w)) if p == k => Ok(w),
            _ if first => Ok(match &plan.initial_weights {
                Some(warm) => warm.weights.get(k),
                None => plan.model.initial(plan.seed, plan.dim, k),
            }),
            _ => Err(format!("the weight of key {k} was not pulled")),
        }
    })
}

/// The endpoint of an exchange that could not be built (the run has failed already).
struct Inert;

impl Endpoint for Inert {
    fn changes_per_round(&self) -> Option<usize> {
        None
    }

    fn receive(&mut self, _: u64, _: Vec<Envelope>, _: &mut ModelState) -> Result<(), String> {
        Ok(())
    }

    fn send(
        &mut self,
        _: u64,
        _: &mut SparseGrad,
        _: u32,
        _: &mut ModelState,
        _: &mut Vec<Envelope>,
    ) -> Result<(u64, u64), String> {
        Ok((0, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counting sort equals sorting every batch's range, for batch sizes that do not divide
    /// the rows, batches of one row, and more batches than rows (empty ones).
    #[test]
    fn batches_sorted_by_counting_equal_batches_sorted_one_by_one() {
        for (n, batches) in [(1000u64, 7u64), (100, 100), (10, 30), (1, 1), (997, 13)] {
            let range = |b: u64| (b * n / batches) as usize..((b + 1) * n / batches) as usize;
            let mut order: Vec<u32> = (0..n as u32).collect();
            order.shuffle(&mut Xoshiro256PlusPlus::seed_from_u64(n ^ batches));
            let mut want = order.clone();
            for b in 0..batches {
                want[range(b)].sort_unstable();
            }
            sort_within_batches(&mut order, batches, range);
            assert_eq!(order, want, "{n} rows, {batches} batches");
        }
    }
}
