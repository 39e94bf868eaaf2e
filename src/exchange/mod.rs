//! Exchange strategies: how messages move between workers and how the receiving side turns
//! them into one update. Each strategy is one file behind the [`Exchange`] trait, built by
//! name ([`build_exchange`]); it knows the codec and memory layers (messages are opaque codec
//! bytes inside an [`Envelope`]), the optimizer and the worker's state, but not timely: the
//! dataflow layer runs its parts as operators, round by round.
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
pub mod ownership;
pub mod pull;
mod registry;
pub mod router;
pub mod sharded;
pub mod sketch;
pub mod uplink;

pub use aggregate::Aggregator;
pub use downlink::Downlink;
pub use ownership::{Owners, Ownership};
pub use registry::{build_exchange, CustomExchange, ExchangeKind, EXCHANGE_NAMES};
pub use router::Router;

use serde::{Deserialize, Serialize};

use crate::codec::{Codec, CodecError};
use crate::dataflow::{TrainPlan, WorkerData, WorkerState};
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
}

/// Where an exchange's parts run: the worker, the number of workers, the job's plan.
#[derive(Clone, Copy)]
pub struct Place<'a> {
    /// This worker.
    pub me: u32,
    /// Workers in the job.
    pub peers: u32,
    /// The job's plan.
    pub plan: &'a TrainPlan,
}

impl Place<'_> {
    /// Whether worker `w` is in another process than this one (its messages cross a socket).
    pub fn remote(&self, w: u32) -> bool {
        self.plan.process_of(w) != self.plan.process_of(self.me)
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
        st: &mut WorkerState,
    ) -> Result<(), String>;

    /// Sends round `r`'s gradient `grad` of `rows` rows (finite, checked): passes it through
    /// the memory and leaves the round's envelopes in `out`. Returns the keys offered to the
    /// codec (after the memory) and the keys the messages carry.
    fn send(
        &mut self,
        r: u64,
        grad: &mut SparseGrad,
        rows: u32,
        st: &mut WorkerState,
        out: &mut Vec<Envelope>,
    ) -> Result<(u64, u64), String>;

    /// Whether [`Self::ask`] wants the next round's batch.
    fn looks_ahead(&self) -> bool {
        false
    }

    /// After [`Self::send`], when it [`Self::looks_ahead`]: messages that depend on the next
    /// round's batch (pull requests), in `out`.
    fn ask(&mut self, _next: Ahead<'_>, _st: &mut WorkerState, _out: &mut Vec<Envelope>) {}
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
        st: &mut WorkerState,
        out: &mut Vec<Envelope>,
    ) -> Result<(), String>;
}

/// A message between workers: routing fields plus an opaque payload (codec bytes).
///
/// On the wire (bincode, inside timely's own framing): `dest`, `src`, `rows` as u32 LE, `kind`
/// as one byte, then the payload as a u64 length and the raw bytes, written in one piece (`serde_bytes`, not element by
/// element as a plain `Vec<u8>` would be).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Receiving worker.
    pub dest: u32,
    /// Sending worker.
    pub src: u32,
    /// Mini-batch rows behind a gradient (0 for model updates).
    pub rows: u32,
    /// What the payload is: [`DATA`] (codec message, sketch slice, values), [`PULL_REQUEST`]
    /// or [`APPLIED`].
    pub kind: u8,
    /// Codec bytes.
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
    /// A lossless codec message for a worker of the sender's process, as the pairs themselves
    /// instead of `payload` ([`LocalPairs`]). Never serialized: across a process boundary it
    /// does not exist, and the receiver finds only `payload` (empty, which no codec decodes).
    #[serde(skip)]
    pub local: Option<Box<LocalPairs>>,
}

/// A lossless codec message between two workers of one process, unencoded: timely moves it from
/// one worker's thread to the other's as it is, and only what crosses a process boundary is
/// serialized (as timely treats all data). The receiver gets the very pairs the codec would
/// have decoded; the metrics count the message's encoded length.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LocalPairs {
    /// The dimension the message declares.
    pub dim: u32,
    /// The pairs.
    pub pairs: SparseGrad,
    /// The length of the codec's message for these pairs.
    pub encoded_len: usize,
}

impl Envelope {
    /// The message's length in bytes: its payload's, or a local message's encoded length.
    pub fn len(&self) -> usize {
        self.local
            .as_ref()
            .map_or(self.payload.len(), |l| l.encoded_len)
    }

    /// Whether the message is empty (an [`APPLIED`] mark).
    pub fn is_empty(&self) -> bool {
        self.payload.is_empty() && self.local.is_none()
    }

    /// The pairs the message carries, a gradient of dimension `dim` (the job's): a local
    /// message's own, or the payload decoded with `codec` into `scratch`. The dimension the
    /// message declares is checked before anything is decoded, so that a message from a peer
    /// costs work and memory bounded by the job's dimension, not by one it claims.
    pub fn pairs<'a>(
        &'a self,
        codec: &mut dyn Codec,
        dim: u32,
        scratch: &'a mut SparseGrad,
    ) -> Result<&'a SparseGrad, CodecError> {
        let declared = match &self.local {
            Some(l) => l.dim,
            None => crate::codec::declared_dim(&self.payload)?,
        };
        if declared != dim {
            return Err(CodecError::Corrupt(format!(
                "message dimension {declared}, job dimension {dim}"
            )));
        }
        match &self.local {
            Some(l) => Ok(&l.pairs),
            None => codec.decode(&self.payload, scratch).map(|_| &*scratch),
        }
    }
}

/// Bytes an envelope adds around its payload in bincode: three u32, the kind byte and the u64
/// length.
pub const ENVELOPE_OVERHEAD: usize = 3 * 4 + 1 + 8;

/// [`Envelope::kind`] of every message but pull requests.
pub const DATA: u8 = 0;
/// [`Envelope::kind`] of a [`pull::Request`].
pub const PULL_REQUEST: u8 = 1;
/// [`Envelope::kind`] of the empty envelope an owner sends in place of its change where it
/// added the change to the replica itself (a replica shared by the workers of a process, or
/// `train.pull`, whose answers carry the new weights): with the other owners' changes, it
/// completes the next round's input by count (see [`applied`]). Elsewhere every replica adds
/// every change in its own gradient step.
pub const APPLIED: u8 = 2;
/// [`Envelope::kind`] of what a worker's exchange step passes to its own next step (the
/// vector a sketch's candidates are read from, the candidates): [`LocalPairs`] that never
/// leave the worker's thread. One from another worker, or serialized, is refused
/// ([`take_carry`]).
pub const CARRY: u8 = 3;

/// The envelope that tells worker `dest`'s gradient step that worker `src`'s update of the
/// round is in `dest`'s replica.
pub fn applied(src: u32, dest: u32) -> Envelope {
    Envelope {
        dest,
        src,
        rows: 0,
        kind: APPLIED,
        payload: Vec::new(),
        local: None,
    }
}

/// The envelope of a lossless codec message from `src` to `dest`, a worker of the same process:
/// `pairs` of dimension `dim` themselves, whose encoded message is `encoded_len` bytes long.
pub fn local_message(
    src: u32,
    dest: u32,
    rows: u32,
    dim: u32,
    pairs: SparseGrad,
    encoded_len: usize,
) -> Envelope {
    Envelope {
        dest,
        src,
        rows,
        kind: DATA,
        payload: Vec::new(),
        local: Some(Box::new(LocalPairs {
            dim,
            pairs,
            encoded_len,
        })),
    }
}

/// Emits one envelope of `payload` from `src` to each of `dests`: the same bytes, copied for
/// all but the last destination.
pub fn broadcast(
    src: u32,
    rows: u32,
    dests: impl IntoIterator<Item = u32>,
    payload: Vec<u8>,
    mut emit: impl FnMut(Envelope),
) {
    let mut dests = dests.into_iter().peekable();
    let mut payload = Some(payload);
    while let Some(dest) = dests.next() {
        let payload = if dests.peek().is_some() {
            payload.clone().unwrap_or_default()
        } else {
            payload.take().unwrap_or_default()
        };
        emit(Envelope {
            dest,
            src,
            rows,
            kind: DATA,
            payload,
            local: None,
        });
    }
}

/// The envelope of `pairs` that worker `me`'s exchange step passes to its own next step.
pub fn carry(me: u32, pairs: SparseGrad) -> Envelope {
    Envelope {
        kind: CARRY,
        ..local_message(me, me, 0, 0, pairs, 0)
    }
}

/// Takes the one [`CARRY`] envelope out of a round's envelopes at worker `me`, and returns
/// its pairs: it must be `me`'s own, unserialized; none, two, or one from another worker is
/// an error.
pub fn take_carry(msgs: &mut Vec<Envelope>, me: u32) -> Result<SparseGrad, String> {
    let mut carried = None;
    let mut error = None;
    msgs.retain_mut(|m| {
        if m.kind != CARRY {
            return true;
        }
        match m.local.take() {
            Some(l) if m.src == me && carried.is_none() => carried = Some(l.pairs),
            _ => error = Some(format!("a carried envelope from worker {}", m.src)),
        }
        false
    });
    match (error, carried) {
        (Some(e), _) => Err(e),
        (None, Some(pairs)) => Ok(pairs),
        (None, None) => Err("nothing carried from this worker's previous step".into()),
    }
}

/// Sorts one round's messages by sender and checks there is exactly one from each of `peers`
/// workers (steps that expect one message from every worker per round, empty ones included).
pub fn one_from_each(msgs: &mut [Envelope], peers: usize) -> Result<(), String> {
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

/// Appends `values` as little-endian f32 (sketch slices, exact values, pulled weights).
pub fn write_f32s(values: impl IntoIterator<Item = f32>, out: &mut Vec<u8>) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Reads exactly `expected` little-endian f32 values, each finite, into `out` (cleared first).
pub fn read_f32s(bytes: &[u8], expected: usize, out: &mut Vec<f32>) -> Result<(), String> {
    if bytes.len() != expected * 4 {
        return Err(format!(
            "expected {expected} values ({} bytes), got {} bytes",
            expected * 4,
            bytes.len()
        ));
    }
    out.clear();
    crate::le::get_le(bytes, out, f32::from_le_bytes);
    match out.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(format!("value {i} is not finite ({})", out[i])),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::none::NoneCodec;
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

    use super::{Envelope, Place};
    use crate::dataflow::{TrainPlan, WorkerData, WorkerState};
    use crate::sparse::SparseGrad;

    /// The plan of a job of `[train]` fields `train` (plain SGD at rate 0.5 unless it says
    /// otherwise in `rest`), dimension `dim`, `threads` workers per process.
    pub fn plan(train: &str, rest: &str, dim: u32, threads: usize) -> TrainPlan {
        let text = format!("[train]\n{train}\n[optimizer]\nkind = \"sgd\"\nlr = 0.5\n{rest}");
        let job = crate::job::Job::parse(&text, Path::new("job.toml"), &[]).unwrap();
        job.plan(dim, threads)
    }

    /// Each worker's state after a round, and what each step sent.
    pub type Round = (Vec<Rc<RefCell<WorkerState>>>, Vec<Vec<Envelope>>);

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
        let places: Vec<Place> = (0..peers).map(|me| Place { me, peers, plan }).collect();
        let data = WorkerData::default();
        let mut endpoints = Vec::new();
        let mut steps = Vec::new();
        for at in &places {
            endpoints.push(strategy.endpoint(at, &data)?);
            steps.push(strategy.steps(at)?);
        }
        let states: Vec<_> = (0..peers).map(|_| WorkerState::shared(plan)).collect();
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
