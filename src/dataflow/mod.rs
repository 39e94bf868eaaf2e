//! The training loop as a timely dataflow.
//!
//! One iterative scope whose inner timestamp is the SGD round. Per round, on every worker, for
//! `sharded` and `allgather`:
//!
//! ```text
//!            ┌──────── model changes of round r-1 (feedback edge, +1 round) ◄──────────────┐
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
//!   optimizer step, mask u and v ── (nothing; its frontier) ──► feedback edge
//! ```
//!
//! Operators decide that a round is complete from their input frontiers: the gradient operator
//! starts round `r` only when nothing for round `r` can still arrive on the feedback edge; every
//! exchange operator handles round `r` only when all of round `r`'s messages are in. There is no
//! external barrier, no driver stepping rounds and no channel outside timely. The public
//! operator functions let a program assemble its own loop; [`build_training`] assembles the
//! standard one.

mod aggregate;
mod collect;
mod gradient;
mod plan;
mod sketch;
pub mod supervisor;

pub use aggregate::aggregate;
pub use collect::collect;
pub use gradient::gradient;
pub use plan::{RoundStats, TrainHandle, TrainPlan, WorkerData, WorkerState};
pub use sketch::sketch_exchange;
pub use supervisor::Supervisor;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::{Capability, ConnectLoop, LoopVariable};
use timely::dataflow::{Scope, Stream};
use timely::order::Product;

use crate::codec::none::NoneCodec;
use crate::codec::{build_codec, Codec, CodecSpec};
use crate::exchange::{Envelope, ExchangeKind};
use crate::metrics::{MetricsRow, WireCounters};
use crate::sparse::SparseGrad;

/// The timestamp inside the training scope: `()` outside, the round inside.
pub type RoundTime = timely::order::Product<(), u64>;

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
    let state = WorkerState::shared(plan);
    let rows = Rc::new(RefCell::new(Vec::new()));
    scope.iterative::<u64, _, _>(|inner| {
        let (handle, changes) = inner.loop_variable::<Vec<Envelope>>(1);
        let (grads, stats) = gradient(changes, plan, data, state.clone(), supervisor.clone(), wire);
        let next = match plan.exchange {
            ExchangeKind::Sketch => sketch_exchange(grads, plan, state.clone(), supervisor.clone()),
            _ => aggregate(grads, plan, state.clone(), supervisor.clone()),
        };
        next.connect_loop(handle);
        collect(stats, plan, rows.clone(), observer);
    });
    TrainHandle { state, rows }
}

/// The shape every exchange operator shares: gather each round's envelopes (routed to their
/// `dest`), and once the input frontier has passed the round, run `step` on them and send the
/// envelopes it leaves in its output buffer at that round. An error stops the run.
fn per_round<'s>(
    input: Stream<'s, RoundTime, Vec<Envelope>>,
    name: &str,
    supervisor: Supervisor,
    mut step: impl FnMut(u64, Vec<Envelope>, &mut Vec<Envelope>) -> Result<(), String> + 'static,
) -> Stream<'s, RoundTime, Vec<Envelope>> {
    input.unary_frontier::<CapacityContainerBuilder<Vec<Envelope>>, _, _, _>(
        Exchange::new(|e: &Envelope| e.dest as u64),
        name,
        move |_cap, _info| {
            let mut stash: BTreeMap<u64, (Capability<RoundTime>, Vec<Envelope>)> = BTreeMap::new();
            let mut out = Vec::new();
            let mut failed = false;
            move |(input, frontier), output| {
                input.for_each(|cap, batch| {
                    if let Some(t) = cap.least() {
                        let entry = stash
                            .entry(round_of(t))
                            .or_insert_with(|| (cap.delayed(t, 0), Vec::new()));
                        entry.1.append(batch);
                    }
                });
                while !failed {
                    let Some((&r, _)) = stash.first_key_value() else {
                        break;
                    };
                    if frontier.less_equal(&at(r)) {
                        break;
                    }
                    let (cap, msgs) = stash.pop_first().unwrap().1;
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

/// A codec of the job; a bad parameter (jobs validate them first) fails the run.
fn codec_or_fail(field: &str, spec: &CodecSpec, supervisor: &Supervisor) -> Box<dyn Codec> {
    build_codec(spec).unwrap_or_else(|e| {
        supervisor.fail(format!("{field}: {e}"));
        Box::new(NoneCodec)
    })
}

/// Sorts one round's messages by sender and checks there is exactly one from each worker (every
/// exchange step expects one message from every worker per round, empty ones included).
fn one_from_each(msgs: &mut [Envelope], peers: usize) -> Result<(), String> {
    msgs.sort_by_key(|m| m.src);
    let senders: Vec<u32> = msgs.iter().map(|m| m.src).collect();
    if senders.len() == peers && senders.iter().enumerate().all(|(i, &s)| s == i as u32) {
        Ok(())
    } else {
        Err(format!(
            "expected one message from each of {peers} workers, got senders {senders:?}"
        ))
    }
}

/// Adds a decoded model change to a replica.
fn add_changes(change: &SparseGrad, weights: &mut [f32]) {
    for (&k, &c) in change.keys.iter().zip(&change.values) {
        weights[k as usize] += c;
    }
}

/// Checks that the weights a change touched are finite.
fn check_finite(change: &SparseGrad, weights: &[f32]) -> Result<(), String> {
    match change
        .keys
        .iter()
        .find(|&&k| !weights[k as usize].is_finite())
    {
        Some(k) => Err(format!("weight {k} is not finite")),
        None => Ok(()),
    }
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
