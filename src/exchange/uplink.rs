//! The worker's side that `sharded` and `allgather` share: the uplink through the memory and
//! the codec ([`CodecUplink`]), and adding a decoded change to the replica ([`add_change`]).

use super::ModelState;
use super::{Envelope, Owners, Place, Router};
use crate::codec::{build_codec, Codec, EncodeContext};
use crate::sparse::SparseGrad;

/// A worker's gradient through its error-feedback memory and its codec, addressed to every
/// worker (`allgather`) or to each key's owner (`sharded`).
pub struct CodecUplink {
    me: u32,
    seed: u64,
    by_owner: bool,
    codec: Box<dyn Codec>,
    router: Router,
    sent: SparseGrad,
    scratch: SparseGrad,
}

impl CodecUplink {
    /// The uplink of the worker at `at` with the job's `train.compressor`, to each key's owner
    /// or to every worker.
    pub fn new(at: &Place<'_>, by_owner: bool) -> Result<Self, String> {
        let plan = at.plan;
        let owners = Owners::new(plan.ownership, plan.dim, at.peers, plan.seed);
        Ok(CodecUplink {
            me: at.me,
            seed: plan.seed,
            by_owner,
            codec: build_codec(&plan.codec).map_err(|e| format!("train.compressor: {e}"))?,
            router: Router::new(owners, |w| !at.remote(w)),
            sent: SparseGrad::default(),
            scratch: SparseGrad::default(),
        })
    }

    /// [`super::Endpoint::send`]: the memory's compensation, the codec's messages in `out`, and
    /// the memory told what the receivers decode. Returns the keys offered to the codec and the
    /// keys its messages carry.
    pub fn send(
        &mut self,
        r: u64,
        grad: &mut SparseGrad,
        rows: u32,
        st: &mut ModelState,
        out: &mut Vec<Envelope>,
    ) -> Result<(u64, u64), String> {
        st.memory.compensate(grad, &mut self.scratch);
        let ctx = EncodeContext {
            seed: self.seed,
            round: r,
            worker: self.me,
            piece: 0,
        };
        let needs_sent = st.memory.needs_sent();
        let sent = needs_sent.then_some(&mut self.sent);
        let codec = self.codec.as_mut();
        let emit = |env| out.push(env);
        let carried = if self.by_owner {
            self.router.by_owner(codec, grad, rows, ctx, sent, emit)
        } else {
            self.router.to_all(codec, grad, rows, ctx, sent, emit)
        };
        let carried = carried
            .map_err(|e| format!("worker {}, round {r}: cannot encode gradient: {e}", self.me))?;
        if needs_sent {
            st.memory.update(grad, &self.sent);
        }
        Ok((grad.len() as u64, carried))
    }
}

/// Adds the change `msg` carries (a local message's pairs, or its payload decoded with `codec`
/// into `scratch`) to the replica in `st`, counting it as received downlink traffic when
/// another worker sent it. With `owners`, a change that crossed a socket may only touch its
/// sender's keys.
pub fn add_change(
    at: &Place<'_>,
    r: u64,
    msg: &Envelope,
    codec: &mut dyn Codec,
    scratch: &mut SparseGrad,
    owners: Option<&Owners>,
    st: &mut ModelState,
) -> Result<(), String> {
    let me = at.me;
    let remote = at.remote(msg.src);
    if msg.src != me {
        st.received(false, msg.len(), remote);
    }
    let bad = |e: String| {
        format!(
            "worker {me}, round {r}: bad model change from worker {}: {e}",
            msg.src
        )
    };
    let change = (msg.pairs(codec, at.plan.dim, scratch)).map_err(|e| bad(e.to_string()))?;
    if let Some(owners) = owners.filter(|_| remote) {
        if let Some(&k) = change.keys.iter().find(|&&k| owners.owner(k) != msg.src) {
            return Err(bad(format!(
                "key {k} is owned by worker {}",
                owners.owner(k)
            )));
        }
    }
    st.weights
        .add(change)
        .map_err(|e| format!("worker {me}, round {r}: model diverged: {e}"))
}
