//! A worker's model state as its exchange parts see it ([`ModelState`]), and where the
//! model's state lives ([`StateMode`]).

use serde::{Deserialize, Serialize};

use super::{Owners, Replica};
use crate::memory::residual::Residual;
use crate::memory::Memory;
use crate::metrics::Traffic;
use crate::optim::UpdateRule;

/// Where the weights and optimizer state live (`train.state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum StateMode {
    /// Every worker (or process, `train.replica`) keeps a replica of the whole model; each
    /// owner keeps its keys' optimizer state.
    #[default]
    Replicated,
    /// Each key's weight and optimizer state live only with its owner (`sharded` exchange,
    /// pulling): a worker's memory holds its shard, not the model.
    Sharded,
}

/// The keys a worker's state holds under [`StateMode::Sharded`]: its own, each at its slot
/// ([`Owners::slot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// The owner map (`ranges` or `strided`).
    pub owners: Owners,
    /// This worker.
    pub me: u32,
}

impl Shard {
    /// How many keys the shard holds.
    pub fn len(&self) -> u32 {
        self.owners.shard_len(self.me)
    }

    /// Whether the shard holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` is this shard's.
    #[inline]
    pub fn holds(&self, key: u32) -> bool {
        self.owners.owner(key) == self.me
    }
}

/// What a worker's exchange parts update and count: its replica of the weights, its uplink
/// memory, the update rule of the keys it updates, the residual of its downlink, the traffic
/// of its messages and the time of its last round's steps. The endpoint and the steps of one
/// worker run in different operators of one thread and share it; the gradient operator reads
/// the replica, the counters and the times, and a checkpoint saves the state.
pub struct ModelState {
    /// Full replica of the model: this worker's own, or shared by the workers of its process;
    /// with [`Self::shard`], the shard's weights by slot.
    pub weights: Replica,
    /// Under [`StateMode::Sharded`]: the keys `weights` and `optimizer` hold.
    pub shard: Option<Shard>,
    /// Under [`StateMode::Sharded`]: the weights pulled from the other owners for this round
    /// (its batch, and the test rows when it evaluates), by key, increasing.
    pub pulled: Vec<(u32, f32)>,
    /// The uplink memory.
    pub memory: Box<dyn Memory>,
    /// The update rule of the keys this worker updates (`sharded`: those it owns; `allgather`
    /// and `sketch`: every key of its replica).
    pub optimizer: Box<dyn UpdateRule>,
    /// The residual of this worker's `sharded` downlink (what its lossy downlink codec has not
    /// sent yet of its keys' changes).
    pub downlink: Residual,
    /// Traffic since the last statistics report.
    pub traffic: Traffic,
    /// Traffic of the whole run.
    pub traffic_total: Traffic,
    /// The last round's decoding and summing, ms.
    pub aggregate_ms: f64,
    /// The last round's optimizer step and application of changes, ms.
    pub update_ms: f64,
}

impl ModelState {
    /// The state of a worker starting from `weights`, with `memory` and `optimizer` fresh.
    pub fn new(weights: Replica, memory: Box<dyn Memory>, optimizer: Box<dyn UpdateRule>) -> Self {
        let dim = weights.len() as u32;
        ModelState {
            weights,
            shard: None,
            pulled: Vec::new(),
            memory,
            optimizer,
            downlink: Residual::new(dim),
            traffic: Traffic::default(),
            traffic_total: Traffic::default(),
            aggregate_ms: 0.0,
            update_ms: 0.0,
        }
    }

    /// The index into [`Self::weights`] of `key`: its slot in a shard, or the key itself.
    #[inline]
    pub fn index(&self, key: u32) -> usize {
        match &self.shard {
            Some(s) => s.owners.slot(key) as usize,
            None => key as usize,
        }
    }

    /// Records a message sent by this worker.
    pub fn sent(&mut self, uplink: bool, bytes: usize, remote: bool) {
        self.traffic.sent(uplink, bytes, remote);
        self.traffic_total.sent(uplink, bytes, remote);
    }

    /// Records a message received by this worker.
    pub fn received(&mut self, uplink: bool, bytes: usize, remote: bool) {
        self.traffic.received(uplink, bytes, remote);
        self.traffic_total.received(uplink, bytes, remote);
    }
}
