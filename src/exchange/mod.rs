//! Exchange strategies: how messages move between workers and how the receiving side turns
//! them into one update. Each strategy is one file behind the [`Exchange`] trait, built by
//! name ([`build_exchange`]); it knows the codec and memory layers (messages are opaque codec
//! bytes inside an [`Envelope`]) and the optimizer, reads the job through its own
//! [`ExchangePlan`] and updates the worker's [`ModelState`], but knows neither timely nor the
//! training plan: the dataflow layer runs its parts as operators, round by round.
//!
//! * `sharded` (parameter-server style, without a single driver): every key has an owner
//!   ([`Owners`]: a seeded hash by default, or contiguous ranges); worker `j` receives from
//!   every worker only the piece of its gradient that `j` owns (uplink), sums the pieces, holds
//!   its keys' optimizer state and sends the change of its keys to every other worker, encoded
//!   with the downlink codec and with a residual ([`Downlink`]).
//! * `allgather`: every worker receives every worker's whole gradient, sums them in worker order
//!   and applies the same update to its own full replica. Bytes grow with `W²`.
//! * `sketch`: Sketched-SGD's two-round protocol ([`sketch`]): count sketches summed sharded by
//!   column range, `P·k` candidates, their exact values, the top `k` applied everywhere. Bytes
//!   per worker do not depend on `W`.
//!
//! `sharded` (with a lossless downlink) and `allgather` sum the received pieces in source-worker
//! order with the same arithmetic, so for the same job they produce bit-identical models.

pub mod aggregate;
pub mod allgather;
pub mod cost;
pub mod downlink;
mod envelope;
pub mod ownership;
mod place;
pub mod pull;
mod registry;
pub mod replica;
pub mod router;
pub mod sharded;
pub mod sketch;
mod state;
pub mod uplink;

pub use aggregate::Aggregator;
pub use downlink::Downlink;
pub use envelope::*;
pub use ownership::{Owners, Ownership};
pub use place::{CheckpointRounds, ExchangePlan, Place};
pub use registry::{
    build_exchange, register, CustomExchange, ExchangeKind, EXCHANGES, EXCHANGE_NAMES,
};
pub use replica::{Replica, ReplicaMode, ReplicaSlot};
pub use router::Router;
pub use state::{ModelState, Shard, StateMode};

use crate::data::WorkerData;
use crate::sparse::SparseGrad;

/// An exchange strategy (GRACE's Communicator, beside its Compressor and Memory): how one
/// round's gradients become the model changes that every replica adds. It is built into
/// parts for each worker, which run in different operators of the training loop and share
/// nothing but the envelopes they pass: the [`Endpoint`] in the gradient operator, and the
/// [`Step`]s between the gradient envelopes and the feedback edge. Strategies do not know
/// timely (a step sees one round's envelopes), so each is tested by feeding it envelopes;
/// the dataflow layer runs them. Built-in ones are named by `train.exchange`
/// ([`build_exchange`]); a program plugs in its own with
/// [`crate::dataflow::Training::set_exchange`].
pub trait Exchange: Send + Sync {
    /// The strategy's name.
    fn name(&self) -> &str;
    /// The worker's side of the exchange (`data`: the worker's rows, for a strategy that
    /// needs their keys ahead, as pulling does).
    fn endpoint(&self, at: &Place<'_>, data: &WorkerData) -> Result<Box<dyn Endpoint>, String>;
    /// The steps from the gradient envelopes to the model changes, in order: the first
    /// receives what the endpoints send, each receives what the one before sends, and the
    /// last one's envelopes go around the feedback edge to the endpoints.
    fn steps(&self, at: &Place<'_>) -> Result<Vec<Box<dyn Step>>, String>;

    /// How the job's settings of this strategy read, for people (`gradflow train` prints it).
    fn describe(&self, plan: &ExchangePlan) -> String {
        let (codec, memory) = (plan.codec.name(), plan.memory.name());
        format!("{}, compressor {codec}, memory {memory}", self.name())
    }

    /// Its terms in the round model that `auto` ranks candidates with ([`cost`]); `None`, the
    /// default, keeps it out of the candidates.
    fn round_model(&self) -> Option<cost::RoundModel> {
        None
    }
}

/// A worker's side of an exchange, in its gradient operator: the uplink (the memory, the
/// codec and the addressing of the worker's gradient) and the application of the changes
/// that come back.
pub trait Endpoint {
    /// How many envelopes of changes the worker receives for each round, when every round
    /// brings the same number (its gradient step then starts once they are in, without
    /// waiting for the frontier); `None`: as many as arrive before the frontier passes.
    fn changes_per_round(&self) -> Option<usize>;

    /// Applies the changes that arrived for round `r` (those of round `r - 1 - s`, or at a
    /// checkpoint and the end every change in flight, in round order) to the replica in
    /// `st`.
    fn receive(
        &mut self,
        r: u64,
        changes: Vec<Envelope>,
        st: &mut ModelState,
    ) -> Result<(), String>;

    /// Sends round `r`'s gradient `grad` of `rows` rows (finite, checked): passes it through
    /// the memory and leaves the round's envelopes in `out`. Returns the keys offered to the
    /// codec (after the memory) and the keys the messages carry.
    fn send(
        &mut self,
        r: u64,
        grad: &mut SparseGrad,
        rows: u32,
        st: &mut ModelState,
        out: &mut Vec<Envelope>,
    ) -> Result<(u64, u64), String>;

    /// Whether [`Self::ask`] wants the next round's batch.
    fn looks_ahead(&self) -> bool {
        false
    }

    /// After [`Self::send`], when it [`Self::looks_ahead`]: messages that depend on the next
    /// round's batch (pull requests), in `out`.
    fn ask(&mut self, _next: Ahead<'_>, _st: &mut ModelState, _out: &mut Vec<Envelope>) {}
}

/// What [`Endpoint::ask`] knows of the round after the one that sent.
pub struct Ahead<'a> {
    /// Its round.
    pub round: u64,
    /// Whether it is the round after the last (the model is written then).
    pub last: bool,
    /// Whether it evaluates the model on the test rows.
    pub evaluates: bool,
    /// The keys of each row of its batch.
    pub batch: &'a mut dyn Iterator<Item = &'a [u32]>,
}

/// One step of an exchange between the gradient envelopes and the feedback edge, run as its
/// own operator: round by round, the envelopes addressed to this worker in, envelopes out.
pub trait Step {
    /// The operator's name.
    fn name(&self) -> &str;
    /// How many envelopes each round brings to this worker, when the count is known (the
    /// step then runs once they are in); `None`: as many as arrive before the frontier
    /// passes.
    fn expected(&self) -> Option<usize>;
    /// Runs round `r` on its envelopes and leaves the envelopes it sends in `out`.
    fn run(
        &mut self,
        r: u64,
        msgs: Vec<Envelope>,
        st: &mut ModelState,
        out: &mut Vec<Envelope>,
    ) -> Result<(), String>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::none::NoneCodec;
    use crate::codec::Codec;
    use crate::codec::EncodeContext;
    use crate::sparse::SparseGrad;

    #[test]
    fn broadcast_sends_the_same_bytes_to_each_destination() {
        let mut got = Vec::new();
        broadcast(2, 7, [0, 1, 3], vec![9, 8], |e| got.push(e));
        assert_eq!(got.iter().map(|e| e.dest).collect::<Vec<_>>(), [0, 1, 3]);
        assert!(got
            .iter()
            .all(|e| e.src == 2 && e.rows == 7 && e.kind == DATA && e.payload == [9, 8]));
        broadcast(0, 0, [], vec![1], |_| panic!("no destination"));
    }

    /// Sharded and allgather sum the same, whether the receivers are in the sender's process
    /// (the pairs themselves) or not (codec bytes), or some are.
    #[test]
    fn sharded_and_allgather_aggregate_identically_local_or_not() {
        let g0 = SparseGrad {
            keys: vec![1, 4, 8],
            values: vec![0.1, 0.7, -0.3],
        };
        let g1 = SparseGrad {
            keys: vec![0, 4, 9],
            values: vec![1.0, 0.3, 0.2],
        };
        let dim = 10;
        let mut codec = NoneCodec;
        let layouts: [fn(u32) -> bool; 3] = [|_| false, |_| true, |w| w == 1];
        let mut results = Vec::new();
        for local in layouts {
            let mut per_dest: Vec<Vec<Envelope>> = vec![Vec::new(), Vec::new()];
            let mut gathered: Vec<Vec<Envelope>> = vec![Vec::new(), Vec::new()];
            for (w, (g, rows)) in [(&g0, 3u32), (&g1, 1)].into_iter().enumerate() {
                let ctx = EncodeContext {
                    worker: w as u32,
                    ..Default::default()
                };
                let owners = Owners::new(Ownership::Hashed, dim, 2, 1);
                let mut sent = SparseGrad::default();
                Router::new(owners, local)
                    .by_owner(&mut codec, g, rows, ctx, Some(&mut sent), |e| {
                        per_dest[e.dest as usize].push(e)
                    })
                    .unwrap();
                assert_eq!(&sent, g, "a lossless codec sends the gradient itself");
                Router::new(owners, local)
                    .to_all(&mut codec, g, rows, ctx, None, |e| {
                        gathered[e.dest as usize].push(e)
                    })
                    .unwrap();
            }
            for e in per_dest.iter().chain(&gathered).flatten() {
                assert_eq!(e.local.is_some(), local(e.dest), "{e:?}");
                assert_eq!(e.payload.is_empty(), local(e.dest), "{e:?}");
                let n = e.local.as_ref().map_or_else(
                    || u32::from_le_bytes(e.payload[6..10].try_into().unwrap()) as usize,
                    |l| l.pairs.len(),
                );
                assert_eq!(e.len(), crate::codec::HEADER_LEN + 8 * n, "{e:?}");
            }
            let mut sharded = SparseGrad::default();
            for msgs in per_dest.iter_mut().rev() {
                // arrival order must not matter
                msgs.reverse();
                let part = Aggregator::default()
                    .aggregate(&mut codec, msgs, dim)
                    .unwrap()
                    .clone();
                let mut tmp = SparseGrad::default();
                sharded.add_scaled(&part, 1.0, &mut tmp);
            }
            let full = Aggregator::default()
                .aggregate(&mut codec, &mut gathered[1], dim)
                .unwrap()
                .clone();
            assert_eq!(sharded, full);
            assert_eq!(full.keys, vec![0, 1, 4, 8, 9]);
            assert!((full.values[2] - (0.75 * 0.7 + 0.25 * 0.3)).abs() < 1e-7);
            results.push(full);
        }
        assert!(results.iter().all(|r| r == &results[0]), "{results:?}");
    }

    /// Local pairs never cross a process boundary: serialized, an envelope keeps only its
    /// payload (empty), which the codec refuses.
    #[test]
    fn local_pairs_are_not_serialized() {
        let pairs = SparseGrad {
            keys: vec![3],
            values: vec![1.5],
        };
        let e = local_message(0, 1, 5, 10, pairs, 18);
        let bytes = bincode::serialize(&e).unwrap();
        assert_eq!(bytes.len(), ENVELOPE_OVERHEAD);
        let back: Envelope = bincode::deserialize(&bytes).unwrap();
        assert!(back.local.is_none() && back.payload.is_empty() && back.rows == 5);
        let mut scratch = SparseGrad::default();
        assert!(back.pairs(&mut NoneCodec, 10, &mut scratch).is_err());
        assert_eq!(
            e.pairs(&mut NoneCodec, 10, &mut scratch).unwrap().keys,
            vec![3]
        );
        assert!(e.pairs(&mut NoneCodec, 11, &mut scratch).is_err());
    }

    /// A step takes exactly one carry, its own worker's and never serialized: none, two, one
    /// from another worker or one that crossed a socket (no pairs) is an error.
    #[test]
    fn a_carry_is_the_workers_own_and_never_crossed_a_socket() {
        let pairs = SparseGrad {
            keys: vec![4],
            values: vec![2.0],
        };
        let data = |src| broadcast_one(src, 0);
        let mut msgs = vec![data(0), carry(0, pairs.clone()), data(1)];
        assert_eq!(take_carry(&mut msgs, 0).unwrap(), pairs);
        assert_eq!(msgs.iter().map(|m| m.src).collect::<Vec<_>>(), [0, 1]);
        let e = take_carry(&mut msgs, 0).unwrap_err();
        assert!(e.contains("nothing carried"), "{e}");
        let mut forged = vec![carry(1, pairs.clone())];
        forged[0].dest = 0;
        assert!(take_carry(&mut forged, 0).unwrap_err().contains("worker 1"));
        let bytes = bincode::serialize(&carry(0, pairs.clone())).unwrap();
        let mut crossed = vec![bincode::deserialize::<Envelope>(&bytes).unwrap()];
        assert!(take_carry(&mut crossed, 0).is_err());
        let mut two = vec![carry(0, pairs.clone()), carry(0, pairs)];
        assert!(take_carry(&mut two, 0).is_err());
    }

    fn broadcast_one(src: u32, dest: u32) -> Envelope {
        let mut got = Vec::new();
        broadcast(src, 0, [dest], vec![1, 2], |e| got.push(e));
        got.pop().unwrap()
    }

    /// A message declaring another dimension than the job's is refused before its body is
    /// read: a few bytes claiming 2^32 - 1 features cost nothing to refuse.
    #[test]
    fn a_message_of_another_dimension_is_refused_before_decoding() {
        let mut payload = Vec::new();
        let mut codec = NoneCodec;
        codec
            .encode(&[1, 5], &[0.5, -1.0], 10, Default::default(), &mut payload)
            .unwrap();
        let message = |payload: Vec<u8>| Envelope {
            dest: 0,
            src: 1,
            rows: 3,
            kind: DATA,
            payload,
            local: None,
        };
        let mut scratch = SparseGrad::default();
        let good = message(payload.clone());
        assert_eq!(
            good.pairs(&mut codec, 10, &mut scratch).unwrap().keys,
            [1, 5]
        );
        let e = good.pairs(&mut codec, 9, &mut scratch).unwrap_err();
        assert!(
            e.to_string()
                .contains("message dimension 10, job dimension 9"),
            "{e}"
        );
        // The body is never read: garbage after a header of another dimension is not decoded.
        let mut claimed = payload[..10].to_vec();
        claimed[2..6].copy_from_slice(&u32::MAX.to_le_bytes());
        claimed.extend_from_slice(&[0xff; 64]);
        let e = message(claimed)
            .pairs(&mut codec, 10, &mut scratch)
            .unwrap_err();
        assert!(
            e.to_string().contains("message dimension 4294967295"),
            "{e}"
        );
    }
}

/// Runs exchanges as the training loop does, without timely: for the strategies' unit tests.
#[cfg(test)]
pub(crate) mod harness {
    use std::cell::RefCell;
    use std::path::Path;
    use std::rc::Rc;

    use super::ModelState;
    use super::{Envelope, Place};
    use crate::data::WorkerData;
    use crate::dataflow::TrainPlan;
    use crate::sparse::SparseGrad;

    /// The plan of a job of `[train]` fields `train` (plain SGD at rate 0.5 unless it says
    /// otherwise in `rest`), dimension `dim`, `threads` workers per process.
    pub fn plan(train: &str, rest: &str, dim: u32, threads: usize) -> TrainPlan {
        let text = format!("[train]\n{train}\n[optimizer]\nkind = \"sgd\"\nlr = 0.5\n{rest}");
        let job = crate::job::Job::parse(&text, Path::new("job.toml"), &[]).unwrap();
        job.plan(dim, threads)
    }

    /// Each worker's state after a round, and what each step sent.
    pub type Round = (Vec<Rc<RefCell<ModelState>>>, Vec<Vec<Envelope>>);

    /// The sparse vector of `pairs`.
    pub fn grad(pairs: &[(u32, f32)]) -> SparseGrad {
        SparseGrad {
            keys: pairs.iter().map(|p| p.0).collect(),
            values: pairs.iter().map(|p| p.1).collect(),
        }
    }

    /// Two workers' gradients (3 rows and 1) and the weights of dimension 5 that one step of
    /// plain SGD at 0.5 on their rows-weighted mean gives: key 0 1/4 · 4, key 1 3/4 · 2, key 4
    /// 3/4 · 1 + 1/4 · (−2), all exact in f32.
    pub fn mean_step() -> ([(SparseGrad, u32); 2], [f32; 5]) {
        let g0 = grad(&[(1, 2.0), (4, 1.0)]);
        let g1 = grad(&[(0, 4.0), (4, -2.0)]);
        ([(g0, 3), (g1, 1)], [-0.5, -0.75, 0.0, 0.0, -0.125])
    }

    /// Runs round 0 of `plan`'s exchange on `peers = grads.len()` workers, each sending its
    /// gradient of `rows` rows: every envelope goes to its `dest`, where each step receives
    /// them in reverse order of sending (arrival order must not matter). Returns each worker's
    /// state after its endpoint received the changes, and what each step sent (by step, all
    /// workers' envelopes).
    pub fn round(plan: &TrainPlan, grads: &[(SparseGrad, u32)]) -> Result<Round, String> {
        let peers = grads.len() as u32;
        let strategy = plan.strategy();
        let exchange = plan.exchange_plan();
        let places: Vec<Place> = (0..peers)
            .map(|me| Place {
                me,
                peers,
                plan: &exchange,
            })
            .collect();
        let data = WorkerData::default();
        let mut endpoints = Vec::new();
        let mut steps = Vec::new();
        for at in &places {
            endpoints.push(strategy.endpoint(at, &data)?);
            steps.push(strategy.steps(at)?);
        }
        let states: Vec<_> = (0..peers)
            .map(|_| Rc::new(RefCell::new(plan.model_state())))
            .collect();
        let mut inbox: Vec<Vec<Envelope>> = vec![Vec::new(); peers as usize];
        let deliver = |out: Vec<Envelope>, inbox: &mut Vec<Vec<Envelope>>| {
            for e in out {
                inbox[e.dest as usize].push(e);
            }
        };
        for (w, (g, rows)) in grads.iter().enumerate() {
            let mut out = Vec::new();
            let mut g = g.clone();
            let st = &mut *states[w].borrow_mut();
            endpoints[w].send(0, &mut g, *rows, st, &mut out)?;
            deliver(out, &mut inbox);
        }
        let mut sent = Vec::new();
        for i in 0..steps[0].len() {
            let mut next = vec![Vec::new(); peers as usize];
            let mut all = Vec::new();
            for w in 0..peers as usize {
                let mut msgs = std::mem::take(&mut inbox[w]);
                msgs.reverse();
                let mut out = Vec::new();
                steps[w][i].run(0, msgs, &mut states[w].borrow_mut(), &mut out)?;
                all.extend(out.iter().cloned());
                deliver(out, &mut next);
            }
            sent.push(all);
            inbox = next;
        }
        for w in 0..peers as usize {
            let changes = std::mem::take(&mut inbox[w]);
            endpoints[w].receive(1, changes, &mut states[w].borrow_mut())?;
        }
        Ok((states, sent))
    }
}
