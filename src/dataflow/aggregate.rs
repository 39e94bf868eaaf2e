//! The aggregation operator of `sharded` and `allgather`.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use timely::dataflow::Stream;

use super::{codec_or_fail, ms, one_from_each, per_round};
use super::{RoundTime, Supervisor, TrainPlan, WorkerState};
use crate::codec::EncodeContext;
use crate::exchange::pull::Request;
use crate::exchange::{applied, broadcast, local_message, write_f32s};
use crate::exchange::{Aggregator, Downlink, Envelope, ExchangeKind, Owners, DATA};
use crate::optim::delay::DelayCompensation;
use crate::sparse::SparseGrad;

/// The aggregation operator. Input: gradient envelopes (routed to their `dest`). Output: model
/// changes: for this worker's own gradient step (`allgather`: the whole step; `sharded`: its
/// keys') and, `sharded`, for the other workers.
///
/// Round `r` runs once every gradient of round `r` is in: decode, sum in worker order weighted
/// by batch rows, take the optimizer step on the summed keys; `sharded` encodes it (plus the
/// downlink residual) and every replica, this one included, adds the decoded change. Each
/// worker's gradient step adds the changes to its replica (in the round `train.staleness`
/// puts them in). Workers that share a replica ([`crate::dataflow::Replica`]) add it once: the
/// owner adds it here and sends the others (and itself) an [`applied`] mark in its place; so
/// does an owner that answers pulls with its new weights.
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
    let owners = Owners::new(plan.ownership, plan.dim, peers, plan.seed);
    let mut codec = codec_or_fail("train.compressor", &plan.codec, &supervisor);
    let downlink_codec = codec_or_fail("train.downlink", &plan.downlink, &supervisor);
    let mut downlink = Downlink::new(downlink_codec);
    let mut aggregator = Aggregator::default();
    let mut change = SparseGrad::default();
    // `train.delay_compensation`: the gradient corrected for the rounds in flight.
    let mut delay = (plan.staleness > 0 && plan.delay_compensation > 0.0)
        .then(|| DelayCompensation::new(plan.delay_compensation, plan.staleness, plan.dim));
    let mut compensated = Vec::new();
    // One gradient from every worker, and pull requests (how many, nobody knows in advance).
    let expected = (!plan.pull).then_some(peers as usize);
    // Ownership is checked on what may have crossed a socket: when some worker is in another
    // process. Messages between the workers of one process never leave its memory.
    let check_owners = plan.exchange == ExchangeKind::Sharded
        && (0..peers).any(|w| plan.process_of(w) != plan.process_of(me));
    per_round(
        grads,
        "Aggregate",
        expected,
        supervisor,
        move |r, mut msgs, out| {
            let st = &mut *state.borrow_mut();
            let remote = |w: u32| plan.process_of(w) != plan.process_of(me);
            msgs.iter()
                .for_each(|m| st.received(true, m.len(), remote(m.src)));
            // Gradients first, then pull requests.
            msgs.sort_by_key(|m| (m.kind, m.src));
            let split = msgs.partition_point(|m| m.kind == DATA);
            let (gradients, requests) = msgs.split_at_mut(split);
            one_from_each(gradients, peers as usize)
                .map_err(|e| format!("worker {me}, round {r}: gradients: {e}"))?;
            // Decode and sum, in worker order.
            let t_agg = Instant::now();
            let sum = aggregator
                .aggregate(codec.as_mut(), gradients, plan.dim)
                .map_err(|e| format!("worker {me}, round {r}: bad gradient message: {e}"))?;
            if check_owners {
                if let Some(&k) = sum.keys.iter().find(|&&k| owners.owner(k) != me) {
                    return Err(format!(
                        "worker {me}, round {r}: received key {k}, which worker {} owns",
                        owners.owner(k)
                    ));
                }
            }
            st.aggregate_ms = ms(t_agg);
            // Optimizer step on the summed keys.
            let t_update = Instant::now();
            change.keys.clone_from(&sum.keys);
            let grads = match delay.as_mut() {
                Some(dc) => {
                    if plan.checkpoints.as_ref().is_some_and(|c| c.due(r, &plan)) {
                        // A checkpoint's round is computed on the whole model.
                        dc.clear();
                    }
                    dc.compensate(&sum.keys, &sum.values, &mut compensated);
                    &compensated
                }
                None => &sum.values,
            };
            st.optimizer.step(r, &sum.keys, grads, &mut change.values);
            // Send it: `sharded` to every other replica, encoded or, lossless within this
            // process, as it is (or, pulling, answers the requests with the new weights).
            // `unencoded`: the workers of this process that get it as it is, and its encoded
            // length.
            let mut unencoded = (Vec::new(), 0);
            let mine = if plan.exchange == ExchangeKind::Sharded && !plan.pull {
                let ctx = EncodeContext {
                    seed: plan.seed,
                    round: r,
                    worker: me,
                    piece: 0,
                };
                let others = (0..peers).filter(|&d| d != me);
                if st.weights.is_shared() {
                    // The other workers share this replica: they get a mark instead of the
                    // change, whose bytes still count as logical downlink (what the protocol
                    // costs between machines).
                    let (decoded, bytes) = downlink
                        .encode_unsent(&mut st.downlink, &mut change, plan.dim, ctx)
                        .map_err(|e| format!("worker {me}, round {r}: model diverged: {e}"))?;
                    for d in others {
                        st.sent(false, bytes, remote(d));
                        out.push(applied(me, d));
                    }
                    decoded
                } else {
                    // A lossless change goes to the workers of this process unencoded, after
                    // this replica has added it (below); the others get the codec's message.
                    let lossless = downlink.is_lossless();
                    let (local, distant): (Vec<u32>, Vec<u32>) =
                        others.partition(|&d| lossless && !remote(d));
                    let diverged = |e| format!("worker {me}, round {r}: model diverged: {e}");
                    let (decoded, bytes) = if distant.is_empty() {
                        (downlink.encode_unsent(&mut st.downlink, &mut change, plan.dim, ctx))
                            .map_err(diverged)?
                    } else {
                        let mut payload = Vec::new();
                        let decoded = downlink
                            .encode(
                                &mut st.downlink,
                                &mut change,
                                plan.dim,
                                ctx,
                                Some(&mut payload),
                            )
                            .map_err(diverged)?;
                        let bytes = payload.len();
                        broadcast(me, 0, distant, payload, |e| {
                            st.sent(false, e.len(), remote(e.dest));
                            out.push(e);
                        });
                        (decoded, bytes)
                    };
                    unencoded = (local, bytes);
                    decoded
                }
            } else {
                &change
            };
            // This worker's own replica adds the change in its gradient step, which takes it
            // from the feedback edge (in the round that pipelining puts it in). A replica
            // shared with other workers, or one that answers pulls with the new weights,
            // adds it here.
            if let Some(dc) = delay.as_mut() {
                dc.record(mine);
            }
            let in_place = st.weights.is_shared() || plan.pull;
            if in_place {
                st.weights
                    .add(mine)
                    .map_err(|e| format!("worker {me}, round {r}: model diverged: {e}"))?;
            } else {
                out.push(local_message(me, me, 0, plan.dim, mine.clone(), 0));
            }
            // What leaves is a copy: the change's buffer stays with this worker, written by
            // this core alone, round after round. Written into lines the other core has read
            // (a buffer that left before, handed back to this thread's arena), the optimizer
            // step's stores waited for each line's invalidation when the two cores sit on
            // different chiplets; a copy streams them (README, "What leaves is a copy").
            let (local, bytes) = unencoded;
            for &d in &local {
                st.sent(false, bytes, false);
                out.push(local_message(me, d, 0, plan.dim, change.clone(), bytes));
            }
            for m in requests.iter() {
                let answer = st.weights.read(|w| answer_pull(m, &owners, me, w));
                let answer = answer.map_err(|e| {
                    format!(
                        "worker {me}, round {r}: bad pull request from worker {}: {e}",
                        m.src
                    )
                })?;
                st.sent(false, answer.payload.len(), remote(m.src));
                out.push(answer);
            }
            if in_place {
                out.push(applied(me, me));
            }
            st.update_ms = ms(t_update);
            Ok(())
        },
    )
}

/// The answer to a pull request: the owner's current weights of the requested keys, f32 in
/// request order. Every requested key must be this owner's.
fn answer_pull(
    request: &Envelope,
    owners: &Owners,
    me: u32,
    weights: &[f32],
) -> Result<Envelope, String> {
    let keys = Request::decode(&request.payload, owners.dim)?.keys_at(owners, me);
    if let Some(&k) = keys.iter().find(|&&k| owners.owner(k) != me) {
        return Err(format!("key {k} is owned by worker {}", owners.owner(k)));
    }
    let mut payload = Vec::with_capacity(4 * keys.len());
    write_f32s(keys.iter().map(|&k| weights[k as usize]), &mut payload);
    Ok(Envelope {
        dest: request.src,
        src: me,
        rows: 0,
        kind: DATA,
        payload,
        local: None,
    })
}
