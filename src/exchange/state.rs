//! A worker's model state as its exchange parts see it ([`ModelState`]).

use super::Replica;
use crate::memory::residual::Residual;
use crate::memory::Memory;
use crate::metrics::Traffic;
use crate::optim::UpdateRule;

/// What a worker's exchange parts update and count: its replica of the weights, its uplink
/// memory, the update rule of the keys it updates, the residual of its downlink, the traffic
/// of its messages and the time of its last round's steps. The endpoint and the steps of one
/// worker run in different operators of one thread and share it; the gradient operator reads
/// the replica, the counters and the times, and a checkpoint saves the state.
pub struct ModelState {
    /// Full replica of the model: this worker's own, or shared by the workers of its process.
    pub weights: Replica,
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
            memory,
            optimizer,
            downlink: Residual::new(dim),
            traffic: Traffic::default(),
            traffic_total: Traffic::default(),
            aggregate_ms: 0.0,
            update_ms: 0.0,
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
