//! Delay compensation for pipelined rounds (DC-ASGD, Zheng et al., ICML 2017, §4, the
//! constant-λ variant DC-ASGD-c).
//!
//! With `train.staleness = s` round `r`'s gradient `g` was computed on the model after round
//! `r - 1 - s`, `w_bak`, while the update goes onto the model after round `r - 1`, `w`. The
//! first-order Taylor expansion of the gradient around `w_bak`, with the Hessian approximated by
//! the outer product of the gradient and only its diagonal kept, gives
//! `g(w) ≈ g + λ · g ⊙ g ⊙ (w − w_bak)`. Here `w − w_bak` is the sum of the changes of the last
//! `s` rounds, which the worker that runs the optimizer step on a key made itself (the owner,
//! or every worker under `allgather`), so it needs no message.

use std::collections::VecDeque;

use crate::sparse::SparseGrad;

/// The changes of the last `s` rounds of one worker's keys, and the compensation they imply.
pub struct DelayCompensation {
    lambda: f32,
    staleness: usize,
    /// The changes still in flight (not yet in the model the next gradient is computed on),
    /// oldest first.
    in_flight: VecDeque<SparseGrad>,
    /// Per key, the sum of `in_flight` (dense: the model's dimension).
    pending: Vec<f32>,
}

impl DelayCompensation {
    /// Compensation of strength `lambda` for `staleness` rounds in flight, over `dim` keys.
    pub fn new(lambda: f32, staleness: u64, dim: u32) -> Self {
        DelayCompensation {
            lambda,
            staleness: staleness as usize,
            in_flight: VecDeque::new(),
            pending: vec![0.0; dim as usize],
        }
    }

    /// Writes into `out` the compensated gradient of `(keys, grads)`:
    /// `g + λ · g² · (w − w_bak)`.
    pub fn compensate(&self, keys: &[u32], grads: &[f32], out: &mut Vec<f32>) {
        out.clear();
        out.extend(keys.iter().zip(grads).map(|(&k, &g)| {
            let drift = self.pending[k as usize];
            g + self.lambda * g * g * drift
        }));
    }

    /// Records the change this round's step made (what every replica adds); the oldest of the
    /// ones in flight leaves once more than `s` are.
    pub fn record(&mut self, change: &SparseGrad) {
        for (&k, &v) in change.keys.iter().zip(&change.values) {
            self.pending[k as usize] += v;
        }
        // The change that leaves lends its buffers to the one that enters.
        let mut slot = SparseGrad::default();
        if self.in_flight.len() == self.staleness {
            slot = self.in_flight.pop_front().expect("s > 0 in flight");
            for (&k, &v) in slot.keys.iter().zip(&slot.values) {
                self.pending[k as usize] -= v;
            }
        }
        slot.keys.clone_from(&change.keys);
        slot.values.clone_from(&change.values);
        self.in_flight.push_back(slot);
    }

    /// Forgets the changes in flight: the round's gradient was computed on the whole model (a
    /// checkpoint's round). The keys they touched go back to exactly zero.
    pub fn clear(&mut self) {
        for change in self.in_flight.drain(..) {
            for &k in &change.keys {
                self.pending[k as usize] = 0.0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(keys: &[u32], values: &[f32]) -> SparseGrad {
        SparseGrad {
            keys: keys.to_vec(),
            values: values.to_vec(),
        }
    }

    /// The drift is the sum of exactly the last `s` changes: a change enters when recorded and
    /// leaves `s` recordings later; the compensation is `λ g² drift` per key.
    #[test]
    fn the_drift_is_the_sum_of_the_last_s_changes() {
        let mut dc = DelayCompensation::new(0.5, 2, 4);
        let mut out = Vec::new();
        dc.compensate(&[1, 2], &[2.0, -1.0], &mut out);
        assert_eq!(out, [2.0, -1.0], "nothing in flight: no compensation");
        dc.record(&change(&[1], &[0.25]));
        dc.record(&change(&[1, 2], &[0.5, 1.0]));
        dc.compensate(&[1, 2], &[2.0, -1.0], &mut out);
        // key 1: 2 + 0.5·4·0.75 = 3.5; key 2: −1 + 0.5·1·1 = −0.5
        assert_eq!(out, [3.5, -0.5]);
        dc.record(&change(&[2], &[2.0]));
        dc.compensate(&[1, 2], &[2.0, -1.0], &mut out);
        // the first change left: key 1 drifted 0.5, key 2 3.0
        assert_eq!(out, [2.0 + 0.5 * 4.0 * 0.5, -1.0 + 0.5 * 3.0]);
        dc.clear();
        dc.compensate(&[1, 2], &[2.0, -1.0], &mut out);
        assert_eq!(out, [2.0, -1.0], "cleared");
        dc.record(&change(&[3], &[1.0]));
        dc.compensate(&[3], &[1.0], &mut out);
        assert_eq!(out, [1.5], "what is recorded after a clear counts");
    }
}
