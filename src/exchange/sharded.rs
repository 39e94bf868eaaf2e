//! `sharded`: a parameter server without a driver. Every key has an owner ([`Owners`]: a
//! seeded hash by default, or contiguous ranges). Each worker sends each owner the piece of its
//! gradient that the owner owns (uplink); the owner sums the pieces in worker order, takes the
//! optimizer step on its keys and sends the change to every other replica, encoded with the
//! downlink codec and its residual ([`Downlink`]); every replica, the owner's included, adds
//! every owner's change in its gradient step.
//!
//! Two options change what comes back. With `train.pull` a worker asks each owner for the
//! current weights of the keys its next batch (and, before an evaluation, its test rows)
//! needs ([`super::pull`]) instead of receiving every change; the owner adds its change in
//! place and answers with the weights. With `train.state = "sharded"` (which pulls) there is
//! no replica: an owner keeps its keys' weights in its shard, by slot, and a worker keeps
//! the weights it pulled for the round ([`ModelState::pulled`]), which the gradient step
//! reads with its own keys' from its shard. Workers that share one replica
//! ([`super::Replica`]) add each change once: its owner adds it in place and sends
//! the others (and itself) an [`APPLIED`] mark instead.

use super::cost::{CodecCost, RoundInputs, RoundModel};
use super::pull::{decode_weights, keys_by_owner, reply_is_compressed, ReplyScratch, Request};
use super::uplink::{add_change, CodecUplink};
use super::{aggregate::Update, applied, broadcast, local_message, read_f32s, write_f32s};
use super::{Ahead, Downlink, Endpoint, Envelope, Exchange, Owners, Place, Step};
use super::{ExchangePlan, ModelState, StateMode};
use super::{APPLIED, DATA, PULL_REQUEST};
use crate::codec::{build_codec, Codec, EncodeContext};
use crate::data::WorkerData;
use crate::sparse::SparseGrad;

/// The `sharded` strategy.
pub struct Sharded;

impl Exchange for Sharded {
    fn name(&self) -> &str {
        "sharded"
    }

    fn endpoint(&self, at: &Place<'_>, data: &WorkerData) -> Result<Box<dyn Endpoint>, String> {
        let plan = at.plan;
        let owners = Owners::new(plan.ownership, plan.dim, at.peers, plan.seed);
        let pull = plan.pull.then(|| {
            let (mut features, mut test_keys) = (Vec::new(), Vec::new());
            let test = &data.test;
            let rows = (0..test.rows()).map(|i| test.row(i).0);
            let (width, dense) = (plan.model_width, plan.dense_keys.clone());
            keys_by_owner(
                rows,
                width,
                dense,
                &owners,
                at.me,
                &mut features,
                &mut test_keys,
            );
            Pull {
                asked: vec![None; at.peers as usize],
                test_keys,
                features,
                next: Vec::new(),
                values: Vec::new(),
            }
        });
        let downlink = build_codec(&plan.downlink).map_err(|e| format!("train.downlink: {e}"))?;
        Ok(Box::new(ShardedEndpoint {
            me: at.me,
            peers: at.peers,
            plan: plan.clone(),
            uplink: CodecUplink::new(at, true)?,
            sharded: plan.state == StateMode::Sharded,
            downlink,
            owners,
            scratch: SparseGrad::default(),
            pull,
        }))
    }

    fn steps(&self, at: &Place<'_>) -> Result<Vec<Box<dyn Step>>, String> {
        let plan = at.plan;
        let downlink = build_codec(&plan.downlink).map_err(|e| format!("train.downlink: {e}"))?;
        Ok(vec![Box::new(Aggregate {
            me: at.me,
            peers: at.peers,
            plan: plan.clone(),
            owners: Owners::new(plan.ownership, plan.dim, at.peers, plan.seed),
            update: Update::new(at)?,
            downlink: Downlink::new(downlink),
            // Ownership is checked on what may have crossed a socket: when some worker is in
            // another process. Messages between the workers of one process never leave it.
            check_owners: (0..at.peers).any(|w| at.remote(w)),
            slotted: SparseGrad::default(),
            reply: ReplyScratch::default(),
        })])
    }

    fn describe(&self, plan: &ExchangePlan) -> String {
        let ownership = plan.ownership.name();
        let sharded = plan.state == StateMode::Sharded;
        let back = match plan.pull {
            true if sharded && plan.downlink != Default::default() => {
                format!("pull, reply {}", plan.downlink.name())
            }
            true => "pull".to_string(),
            false => format!("downlink {}", plan.downlink.name()),
        };
        format!(
            "sharded ({ownership} ownership), compressor {}, memory {}, {back}",
            plan.codec.name(),
            plan.memory.name()
        )
    }

    /// Encode one piece per owner, send the remote pieces, decode and sum the pieces of the
    /// keys it owns, update them, send that change to every remote worker (two hops: up and
    /// down), decode the other owners' changes and apply every key.
    fn round_model(&self) -> Option<RoundModel> {
        Some(RoundModel {
            hops: 2,
            cost: |r: &RoundInputs, codec: &CodecCost| {
                let (w, remote) = (r.workers.max(1) as f64, r.remote());
                let cpu = codec.encode_pieces_ms
                    + remote * codec.decode_piece_ms
                    + r.sum_ms()
                    + r.union_keys / w * r.update_ns * 1e-6
                    + r.change_encode_ms
                    + remote * r.change_decode_ms
                    + r.apply_ms();
                (
                    cpu,
                    codec.pieces_bytes * remote / w + r.change_bytes * remote,
                )
            },
            downlink: true,
        })
    }
}

/// A worker's side of `sharded`.
struct ShardedEndpoint {
    me: u32,
    peers: u32,
    plan: ExchangePlan,
    uplink: CodecUplink,
    downlink: Box<dyn Codec>,
    owners: Owners,
    scratch: SparseGrad,
    pull: Option<Pull>,
    /// `train.state = "sharded"`: owners in other processes may answer pulls encoded with
    /// `downlink` ([`reply_is_compressed`]).
    sharded: bool,
}

/// A worker's side of `train.pull`: what it asked each owner for last round, the keys of its
/// test rows by owner, and reusable buffers.
struct Pull {
    asked: Vec<Option<Request>>,
    test_keys: Vec<Vec<u32>>,
    features: Vec<u32>,
    next: Vec<Vec<u32>>,
    values: Vec<f32>,
}

impl Endpoint for ShardedEndpoint {
    /// Every owner's change (or its [`APPLIED`] mark); pulling, every other owner's answer
    /// (each is asked every round, if for no key) and this worker's own mark.
    fn changes_per_round(&self) -> Option<usize> {
        Some(self.peers as usize)
    }

    /// Adds every owner's change, except where an [`APPLIED`] mark says it is in the replica
    /// already; or sets the weights asked for (`train.pull`).
    fn receive(
        &mut self,
        r: u64,
        changes: Vec<Envelope>,
        st: &mut ModelState,
    ) -> Result<(), String> {
        let me = self.me;
        let at = Place {
            me,
            peers: self.peers,
            plan: &self.plan,
        };
        let shared = st.weights.is_shared();
        st.pulled.clear();
        for msg in changes {
            let same_process = !at.remote(msg.src);
            if msg.kind == APPLIED {
                // This worker's own update is in its replica, and so is that of a worker it
                // shares the replica with; from anyone else a mark is a forgery.
                let sharer = shared && same_process;
                if !(msg.src == me || sharer) || !msg.is_empty() {
                    return Err(format!(
                        "worker {me}, round {r}: an `applied` mark from worker {}",
                        msg.src
                    ));
                }
                continue;
            }
            if shared && same_process {
                // Its owner has added it to the replica both share: a second time would be wrong.
                return Err(format!(
                    "worker {me}, round {r}: a model change from worker {}, which shares this \
                     worker's replica",
                    msg.src
                ));
            }
            let Some(p) = &mut self.pull else {
                let downlink = self.downlink.as_mut();
                let owners = Some(&self.owners);
                add_change(&at, r, &msg, downlink, &mut self.scratch, owners, st)?;
                continue;
            };
            // The weights of the keys this worker asked the sender for, in request order.
            st.received(false, msg.len(), at.remote(msg.src));
            let bad = |e: String| {
                format!(
                    "worker {me}, round {r}: bad model change from worker {}: {e}",
                    msg.src
                )
            };
            let asked = p.asked.get_mut(msg.src as usize).and_then(Option::take);
            let asked = asked.ok_or_else(|| bad("weights nobody asked for".into()))?;
            let keys = asked.keys_at(&self.owners, msg.src);
            let lossy = !self.downlink.is_lossless();
            if reply_is_compressed(self.sharded, lossy, at.remote(msg.src), &asked) {
                let codec = self.downlink.as_mut();
                decode_weights(
                    codec,
                    &msg.payload,
                    keys.len(),
                    &mut self.scratch,
                    &mut p.values,
                )
                .map_err(bad)?;
            } else {
                read_f32s(&msg.payload, keys.len(), &mut p.values).map_err(bad)?;
            }
            if st.shard.is_some() {
                st.pulled
                    .extend(keys.iter().copied().zip(p.values.iter().copied()));
                continue;
            }
            for (&k, &v) in keys.iter().zip(&p.values) {
                st.weights.set(k as usize, v);
            }
        }
        // Each owner's keys are increasing: a stable sort merges those runs.
        st.pulled.sort_by_key(|&(k, _)| k);
        Ok(())
    }

    fn send(
        &mut self,
        r: u64,
        grad: &mut SparseGrad,
        rows: u32,
        st: &mut ModelState,
        out: &mut Vec<Envelope>,
    ) -> Result<(u64, u64), String> {
        self.uplink.send(r, grad, rows, st, out)
    }

    fn looks_ahead(&self) -> bool {
        self.pull.is_some()
    }

    /// `train.pull`: asks each owner for the weights this worker needs next round: the keys of
    /// its next batch, those of its test rows before an evaluation, and (worker 0, after the
    /// last round, with a replica) every key, for the model it writes. Without a replica
    /// (`train.state = "sharded"`) each owner writes its own keys; every worker asks for its
    /// test rows' keys after the last round, whatever ends it.
    fn ask(&mut self, next: Ahead<'_>, st: &mut ModelState, out: &mut Vec<Envelope>) {
        let (me, peers) = (self.me, self.peers);
        let Some(p) = self.pull.as_mut() else {
            return;
        };
        let (width, dense) = (self.plan.model_width, self.plan.dense_keys.clone());
        let batch = next.batch;
        let sharded = self.plan.state == StateMode::Sharded;
        keys_by_owner(
            batch,
            width,
            dense,
            &self.owners,
            me,
            &mut p.features,
            &mut p.next,
        );
        for owner in (0..peers).filter(|&o| o != me) {
            let o = owner as usize;
            let request = if next.last && me == 0 && !sharded {
                Request::All
            } else if next.evaluates || (next.last && sharded) {
                let keys = merge_sorted(&p.next[o], &p.test_keys[o]);
                match sharded {
                    true => Request::Exact(keys),
                    false => Request::Keys(keys),
                }
            } else {
                Request::Keys(std::mem::take(&mut p.next[o]))
            };
            // Asked even for no key, so that every round brings one answer from each owner
            // and the round starts as soon as they are in (not when progress says so).
            let mut payload = Vec::new();
            request.encode(&mut payload);
            let remote = self.plan.process_of(owner) != self.plan.process_of(me);
            st.sent(true, payload.len(), remote);
            out.push(Envelope {
                dest: owner,
                src: me,
                rows: 0,
                kind: PULL_REQUEST,
                payload,
                local: None,
            });
            p.asked[o] = Some(request);
        }
    }
}

/// The sorted union of two sorted key lists.
fn merge_sorted(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    crate::sparse::merge_keys(a, b, |k, _, _| out.push(k));
    out
}

/// The owner's step. Input: the pieces of every worker's gradient that this worker owns, and
/// pull requests. Output: its keys' change, to every replica (its own as a local envelope), or
/// marks and pulled weights.
struct Aggregate {
    me: u32,
    peers: u32,
    plan: ExchangePlan,
    owners: Owners,
    update: Update,
    downlink: Downlink,
    check_owners: bool,
    /// The change by slot (`train.state = "sharded"`).
    slotted: SparseGrad,
    /// Room to encode compressed pull replies.
    reply: ReplyScratch,
}

impl Step for Aggregate {
    fn name(&self) -> &str {
        "Aggregate"
    }

    /// One piece from every worker, and, pulling, one request from every other worker.
    fn expected(&self) -> Option<usize> {
        let peers = self.peers as usize;
        Some(if self.plan.pull { 2 * peers - 1 } else { peers })
    }

    /// Sums the pieces, takes the optimizer step and sends the change: encoded (plus the
    /// downlink residual) to other processes, lossless within this one as it is; or, pulling,
    /// answers the requests with the new weights.
    fn run(
        &mut self,
        r: u64,
        mut msgs: Vec<Envelope>,
        st: &mut ModelState,
        out: &mut Vec<Envelope>,
    ) -> Result<(), String> {
        let (me, peers, plan) = (self.me, self.peers, &self.plan);
        let remote = |w: u32| plan.process_of(w) != plan.process_of(me);
        msgs.iter()
            .for_each(|m| st.received(true, m.len(), remote(m.src)));
        // Gradients first, then pull requests.
        msgs.sort_by_key(|m| (m.kind, m.src));
        let split = msgs.partition_point(|m| m.kind == DATA);
        let (gradients, requests) = msgs.split_at_mut(split);
        let owners = self.check_owners.then_some(&self.owners);
        let t_update = self.update.run(r, gradients, owners, st)?;
        let change = &mut self.update.change;
        let diverged = |e| format!("worker {me}, round {r}: model diverged: {e}");
        // `unencoded`: the workers of this process that get the change as it is, and its
        // encoded length.
        let mut unencoded = (Vec::new(), 0);
        let mine = if plan.pull {
            &*change
        } else {
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
                let (decoded, bytes) = (self.downlink)
                    .encode_unsent(&mut st.downlink, change, plan.dim, ctx)
                    .map_err(diverged)?;
                for d in others {
                    st.sent(false, bytes, remote(d));
                    out.push(applied(me, d));
                }
                decoded
            } else {
                // A lossless change goes to the workers of this process unencoded, after
                // this replica has added it (below); the others get the codec's message.
                let lossless = self.downlink.is_lossless();
                let (local, distant): (Vec<u32>, Vec<u32>) =
                    others.partition(|&d| lossless && !remote(d));
                let (decoded, bytes) = if distant.is_empty() {
                    (self
                        .downlink
                        .encode_unsent(&mut st.downlink, change, plan.dim, ctx))
                    .map_err(diverged)?
                } else {
                    let mut payload = Vec::new();
                    let decoded = (self.downlink)
                        .encode(&mut st.downlink, change, plan.dim, ctx, Some(&mut payload))
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
        };
        // This worker's own replica adds the change in its gradient step, which takes it
        // from the feedback edge (in the round that pipelining puts it in). A replica
        // shared with other workers, or one that answers pulls with the new weights,
        // adds it here.
        if let Some(dc) = self.update.delay.as_mut() {
            dc.record(mine);
        }
        let in_place = st.weights.is_shared() || plan.pull;
        if in_place {
            let by_index = match st.shard {
                Some(shard) => {
                    let slotted = &mut self.slotted;
                    slotted.clone_from(mine);
                    slotted
                        .keys
                        .iter_mut()
                        .for_each(|k| *k = shard.owners.slot(*k));
                    &*slotted
                }
                None => mine,
            };
            (st.weights.add(by_index))
                .map_err(|e| format!("worker {me}, round {r}: model diverged: {e}"))?;
        } else {
            out.push(local_message(me, me, 0, plan.dim, mine.clone(), 0));
        }
        // What leaves is a copy: the change's buffer stays with this worker, written by
        // this core alone, round after round. Written into lines the other core has read
        // (a buffer that left before, handed back to this thread's arena), the optimizer
        // step's stores waited for each line's invalidation when the two cores sit on
        // different chiplets; a copy streams them (`docs/architecture.md`, "What leaves is a copy").
        let (local, bytes) = unencoded;
        for &d in &local {
            st.sent(false, bytes, false);
            out.push(local_message(
                me,
                d,
                0,
                plan.dim,
                self.update.change.clone(),
                bytes,
            ));
        }
        for m in requests.iter() {
            let ctx = EncodeContext {
                seed: plan.seed,
                round: r,
                worker: me,
                piece: m.src,
            };
            let to = Reply {
                sharded: plan.state == StateMode::Sharded,
                remote: remote(m.src),
                codec: self.downlink.codec_mut(),
                ctx,
                scratch: &mut self.reply,
            };
            let index = |k| st.index(k);
            let answer = (st.weights).read(|w| answer_pull(m, &self.owners, me, w, index, to));
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
        st.update_ms = crate::metrics::ms(t_update);
        Ok(())
    }
}

/// How an owner may answer one pull request: the state, whether the asker is in another
/// process, the downlink codec and the encoding's context ([`reply_is_compressed`]).
struct Reply<'a> {
    sharded: bool,
    remote: bool,
    codec: &'a mut dyn Codec,
    ctx: EncodeContext,
    scratch: &'a mut ReplyScratch,
}

/// The answer to a pull request: the owner's current weights of the requested keys, in
/// request order: f32, or encoded by the downlink codec as the values of keys `0..n` where
/// the reply is compressed ([`reply_is_compressed`]). Every requested key must be this
/// owner's.
fn answer_pull(
    request: &Envelope,
    owners: &Owners,
    me: u32,
    weights: &[f32],
    index: impl Fn(u32) -> usize,
    to: Reply<'_>,
) -> Result<Envelope, String> {
    let asked = Request::decode(&request.payload, owners.dim)?;
    let keys = asked.keys_at(owners, me);
    if let Some(&k) = keys.iter().find(|&&k| owners.owner(k) != me) {
        return Err(format!("key {k} is owned by worker {}", owners.owner(k)));
    }
    let mut payload = Vec::with_capacity(4 * keys.len());
    let values = keys.iter().map(|&k| weights[index(k)]);
    let lossy = !to.codec.is_lossless();
    match reply_is_compressed(to.sharded, lossy, to.remote, &asked) {
        true => (to.scratch).encode(to.codec, values, to.ctx, &mut payload)?,
        false => write_f32s(values, &mut payload),
    }
    Ok(Envelope {
        dest: request.src,
        src: me,
        rows: 0,
        kind: DATA,
        payload,
        local: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::none::NoneCodec;
    use crate::exchange::harness::{mean_step, plan, round};

    /// Each owner sums only its keys' pieces and sends its change to every replica (encoded
    /// to another process, the pairs within one); every replica ends with the step of the
    /// rows-weighted mean, the same as allgather's.
    #[test]
    fn owners_send_their_keys_change_and_every_replica_adds_all_of_them() {
        for threads in [1, 2] {
            let plan = plan("exchange = \"sharded\"", "", 10, threads);
            let owners = Owners::new(plan.ownership, plan.dim, 2, plan.seed);
            let (grads, want) = mean_step();
            let (states, sent) = round(&plan, &grads).unwrap();
            assert_eq!(sent.len(), 1, "one step");
            assert_eq!(sent[0].len(), 4, "each owner to each replica");
            let mut scratch = SparseGrad::default();
            for e in &sent[0] {
                assert_eq!(e.local.is_some(), threads == 2 || e.dest == e.src, "{e:?}");
                let change = e.pairs(&mut NoneCodec, 10, &mut scratch).unwrap();
                assert!(
                    change.keys.iter().all(|&k| owners.owner(k) == e.src),
                    "{e:?}"
                );
            }
            for st in &states {
                let w = st.borrow().weights.to_vec();
                assert_eq!(w[..5], want, "{threads} threads");
            }
        }
    }

    /// With a lossy downlink (top-k, one pair of two), every replica adds the same decoded
    /// changes, and what each owner's codec left out waits in its downlink residual: a
    /// replica plus the owners' residuals is the lossless step, key by key, within one
    /// process and across two.
    #[test]
    fn a_lossy_downlink_sends_every_replica_the_same_and_keeps_the_rest() {
        for threads in [1, 2] {
            let train = "exchange = \"sharded\"\ndownlink = { name = \"topk\", ratio = 0.5 }";
            let plan = plan(train, "", 10, threads);
            let (grads, want) = mean_step();
            let (states, _) = round(&plan, &grads).unwrap();
            let replica = states[0].borrow().weights.to_vec();
            assert_eq!(
                replica,
                states[1].borrow().weights.to_vec(),
                "{threads} threads"
            );
            assert_ne!(replica[..5], want, "the downlink dropped nothing");
            let mut with_residuals = replica.clone();
            for st in &states {
                let (mut residual, mut scratch) = (SparseGrad::default(), SparseGrad::default());
                crate::memory::Memory::compensate(
                    &mut st.borrow_mut().downlink,
                    &mut residual,
                    &mut scratch,
                );
                for (&k, &v) in residual.keys.iter().zip(&residual.values) {
                    with_residuals[k as usize] += v;
                }
            }
            assert_eq!(with_residuals[..5], want, "{threads} threads");
        }
    }

    /// A change that crossed a socket may only touch its sender's keys.
    #[test]
    fn a_remote_change_to_another_owners_key_is_an_error() {
        let plan = plan("exchange = \"sharded\"", "", 10, 1);
        let owners = Owners::new(plan.ownership, plan.dim, 2, plan.seed);
        let k = (0..10).find(|&k| owners.owner(k) == 0).unwrap();
        let exchange = plan.exchange_plan();
        let at = Place {
            me: 0,
            peers: 2,
            plan: &exchange,
        };
        let mut endpoint = Sharded.endpoint(&at, &WorkerData::default()).unwrap();
        let mut payload = Vec::new();
        NoneCodec
            .encode(&[k], &[1.0], 10, Default::default(), &mut payload)
            .unwrap();
        let forged = Envelope {
            dest: 0,
            src: 1,
            rows: 0,
            kind: DATA,
            payload,
            local: None,
        };
        let st = std::cell::RefCell::new(plan.model_state());
        let e = endpoint
            .receive(1, vec![forged], &mut st.borrow_mut())
            .unwrap_err();
        assert!(e.contains(&format!("key {k} is owned by worker 0")), "{e}");
        assert_eq!(st.borrow().weights.get(k as usize), 0.0);
    }
}
