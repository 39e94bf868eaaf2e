//! The receiving side of a gradient exchange: decode and sum one round's envelopes
//! ([`Aggregator`]), and the update step that `sharded` and `allgather` share ([`Update`]).

use std::time::Instant;

use super::{one_from_each, Envelope, Owners, Place};
use super::{ExchangePlan, ModelState};
use crate::codec::{build_codec, Codec, CodecError, Combine};
use crate::optim::delay::DelayCompensation;
use crate::sparse::{DenseSum, SparseGrad};

/// Decodes and combines the gradient envelopes one worker received for one round.
#[derive(Default)]
pub struct Aggregator {
    /// Each message's pairs, decoded (local messages' are not copied here).
    pieces: Vec<SparseGrad>,
    scratch: SparseGrad,
    votes: SparseGrad,
    /// The dense sum, made the first time it pays ([`dense_pays`]).
    dense: Option<DenseSum>,
    /// The aggregated gradient of the last call.
    pub sum: SparseGrad,
}

/// Largest dimension summed densely: its array costs 4 bytes a key.
const DENSE_MAX_DIM: u32 = 1 << 26;

/// Whether a [`DenseSum`] sums `messages` messages of `pairs` pairs in all, of dimension
/// `dim`, faster than sorted merges: each merge passes over the sum so far (the `k`-th about
/// `k/W` of the pairs, `(W − 1)/2` passes over all of them beyond the first), the dense sum
/// adds each pair once and reads `dim / 64` words of its bitmap (measured in
/// `cargo bench --bench codecs -- sum/`).
fn dense_pays(messages: usize, pairs: usize, dim: u32) -> bool {
    dim <= DENSE_MAX_DIM && messages.saturating_sub(1) * pairs / 2 > pairs + dim as usize / 64
}

impl Aggregator {
    /// `sum = Σ_w (rows_w / Σ rows) · decode(payload_w)`, in increasing source order (so the
    /// result does not depend on arrival order); for a codec that combines by
    /// [`Combine::MajorityVote`], each key gets the majority sign with the weighted mean
    /// magnitude, and ties are dropped. Checks that each message's dimension is `dim`.
    pub fn aggregate(
        &mut self,
        codec: &mut dyn Codec,
        msgs: &mut [Envelope],
        dim: u32,
    ) -> Result<&SparseGrad, CodecError> {
        msgs.sort_by_key(|m| m.src);
        let total: u64 = msgs.iter().map(|m| m.rows as u64).sum();
        let weight = |m: &Envelope| {
            if total == 0 {
                0.0
            } else {
                (m.rows as f64 / total as f64) as f32
            }
        };
        self.sum.clear();
        self.votes.clear();
        // Every message decoded first, so that the sum can be chosen by the pairs in all.
        self.pieces.resize_with(msgs.len(), SparseGrad::default);
        let mut pieces = Vec::with_capacity(msgs.len());
        for (m, piece) in msgs.iter().zip(&mut self.pieces) {
            pieces.push(m.pairs(codec, dim, piece)?);
        }
        let pairs = pieces.iter().map(|p| p.len()).sum();
        if codec.combine() == Combine::Sum && dense_pays(msgs.len(), pairs, dim) {
            let dense = self.dense.get_or_insert_with(|| DenseSum::new(dim));
            if dense.dim() != dim {
                *dense = DenseSum::new(dim);
            }
            for (m, piece) in msgs.iter().zip(&pieces) {
                dense.add(&piece.keys, &piece.values, weight(m));
            }
            dense.take(&mut self.sum);
            return Ok(&self.sum);
        }
        for (m, piece) in msgs.iter().zip(pieces) {
            let weight = weight(m);
            match codec.combine() {
                Combine::Sum => self.sum.add_scaled(piece, weight, &mut self.scratch),
                Combine::MajorityVote => {
                    // `sum` gathers weighted magnitudes, `votes` the signs.
                    let signs = SparseGrad {
                        keys: piece.keys.clone(),
                        values: piece.values.iter().map(|&v| sign(v)).collect(),
                    };
                    self.votes.add_scaled(&signs, 1.0, &mut self.scratch);
                    let magnitudes = SparseGrad {
                        keys: signs.keys,
                        values: piece.values.iter().map(|v| v.abs()).collect(),
                    };
                    self.sum.add_scaled(&magnitudes, weight, &mut self.scratch);
                }
            }
        }
        if codec.combine() == Combine::MajorityVote {
            let (mut i, votes) = (0, std::mem::take(&mut self.votes));
            for (j, (&k, &vote)) in votes.keys.iter().zip(&votes.values).enumerate() {
                debug_assert_eq!(self.sum.keys[j], k);
                if vote != 0.0 {
                    self.sum.keys[i] = k;
                    self.sum.values[i] = vote.signum() * self.sum.values[j];
                    i += 1;
                }
            }
            self.sum.keys.truncate(i);
            self.sum.values.truncate(i);
            self.votes = votes;
            self.votes.clear();
        }
        Ok(&self.sum)
    }
}

/// One round's update from the gradients a worker received: checked (one from each worker),
/// decoded and summed in worker order, corrected for the rounds in flight
/// (`train.delay_compensation`), and passed through the optimizer into [`Self::change`].
pub struct Update {
    me: u32,
    peers: usize,
    plan: ExchangePlan,
    codec: Box<dyn Codec>,
    aggregator: Aggregator,
    /// `train.delay_compensation`: records the change this worker's replica adds each round
    /// (after the downlink), which it corrects the next rounds' gradients for.
    pub delay: Option<DelayCompensation>,
    compensated: Vec<f32>,
    /// The summed keys' slots in this worker's shard (`train.state = "sharded"`).
    slots: Vec<u32>,
    /// The optimizer's change of the last round, on the summed keys.
    pub change: SparseGrad,
}

impl Update {
    /// The update step of the worker at `at`, decoding with the job's `train.compressor`.
    pub fn new(at: &Place<'_>) -> Result<Self, String> {
        let plan = at.plan;
        let delay = (plan.staleness > 0 && plan.delay_compensation > 0.0)
            .then(|| DelayCompensation::new(plan.delay_compensation, plan.staleness, plan.dim));
        Ok(Update {
            me: at.me,
            peers: at.peers as usize,
            plan: plan.clone(),
            codec: build_codec(&plan.codec).map_err(|e| format!("train.compressor: {e}"))?,
            aggregator: Aggregator::default(),
            delay,
            compensated: Vec::new(),
            slots: Vec::new(),
            change: SparseGrad::default(),
        })
    }

    /// Round `r`'s change from its `gradients` into [`Self::change`]; with `owners`, every
    /// summed key must be this worker's. Times the decoding in `st`, and returns when the
    /// optimizer step started (the caller's update time runs from there).
    pub fn run(
        &mut self,
        r: u64,
        gradients: &mut [Envelope],
        owners: Option<&Owners>,
        st: &mut ModelState,
    ) -> Result<Instant, String> {
        let me = self.me;
        one_from_each(gradients, self.peers)
            .map_err(|e| format!("worker {me}, round {r}: gradients: {e}"))?;
        // Decode and sum, in worker order.
        let t_agg = Instant::now();
        let sum = (self.aggregator)
            .aggregate(self.codec.as_mut(), gradients, self.plan.dim)
            .map_err(|e| format!("worker {me}, round {r}: bad gradient message: {e}"))?;
        if let Some(owners) = owners {
            if let Some(&k) = sum.keys.iter().find(|&&k| owners.owner(k) != me) {
                return Err(format!(
                    "worker {me}, round {r}: received key {k}, which worker {} owns",
                    owners.owner(k)
                ));
            }
        }
        st.aggregate_ms = crate::metrics::ms(t_agg);
        // Optimizer step on the summed keys.
        let t_update = Instant::now();
        self.change.keys.clone_from(&sum.keys);
        let grads = match self.delay.as_mut() {
            Some(dc) => {
                if self.plan.checkpoints.due(r) {
                    // A checkpoint's round is computed on the whole model.
                    dc.clear();
                }
                dc.compensate(&sum.keys, &sum.values, &mut self.compensated);
                &self.compensated
            }
            None => &sum.values,
        };
        // The update rule's state is by slot when the worker keeps a shard.
        let keys = match st.shard {
            Some(shard) => {
                self.slots.clear();
                (self.slots).extend(sum.keys.iter().map(|&k| shard.owners.slot(k)));
                &self.slots
            }
            None => &sum.keys,
        };
        st.optimizer.step(r, keys, grads, &mut self.change.values);
        Ok(t_update)
    }
}

/// −1, 0 or 1.
fn sign(v: f32) -> f32 {
    if v > 0.0 {
        1.0
    } else if v < 0.0 {
        -1.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{build_codec, CodecSpec, EncodeContext};
    use crate::exchange::Envelope;

    #[test]
    fn majority_vote_takes_the_sign_most_workers_sent() {
        let spec: CodecSpec =
            toml::from_str::<toml::Table>("c = { name = \"signsgd\", vote = true }").unwrap()["c"]
                .clone()
                .try_into()
                .unwrap();
        let mut codec = build_codec(&spec).unwrap();
        // Key 1: +, +, − → +. Key 2: −, −, + → −. Key 3: +, − (one abstains) → tie, dropped.
        let grads: [(&[u32], &[f32]); 3] = [
            (&[1, 2, 3], &[1.0, -1.0, 2.0]),
            (&[1, 2, 3], &[3.0, -3.0, -2.0]),
            (&[1, 2], &[-2.0, 2.0]),
        ];
        let mut msgs: Vec<Envelope> = grads
            .iter()
            .enumerate()
            .map(|(w, (k, v))| {
                let mut payload = Vec::new();
                codec
                    .encode(k, v, 10, EncodeContext::default(), &mut payload)
                    .unwrap();
                Envelope {
                    dest: 0,
                    src: w as u32,
                    rows: 1,
                    kind: 0,
                    payload,
                    local: None,
                }
            })
            .collect();
        let sum = Aggregator::default()
            .aggregate(codec.as_mut(), &mut msgs, 10)
            .unwrap()
            .clone();
        assert_eq!(sum.keys, vec![1, 2]);
        // Each worker sends ± its mean magnitude (4/3, 8/3, 2); the result's magnitude is their
        // rows-weighted mean: (4/3 + 8/3 + 2) / 3 = 2.
        assert!(
            (sum.values[0] - 2.0).abs() < 1e-6 && (sum.values[1] + 2.0).abs() < 1e-6,
            "{sum:?}"
        );
        // Without `vote` the same messages are summed: key 3 survives.
        let mut plain = build_codec(&CodecSpec::with_defaults("signsgd").unwrap()).unwrap();
        let mut aggregator = Aggregator::default();
        let summed = aggregator.aggregate(plain.as_mut(), &mut msgs, 10).unwrap();
        assert_eq!(summed.keys, vec![1, 2, 3]);
    }

    /// Many messages over a small dimension take the dense sum, a few the merges; either way
    /// the sum is that of the decoded messages merged in source order, bit for bit, whatever
    /// order they arrive in, with each message weighted by its rows.
    #[test]
    fn the_dense_sum_and_the_merges_agree_bit_for_bit() {
        let mut codec = build_codec(&CodecSpec::with_defaults("logquant").unwrap()).unwrap();
        let dim = 2000;
        for workers in [2u32, 8] {
            assert_eq!(dense_pays(workers as usize, 8 * 700, dim), workers == 8);
            let mut msgs: Vec<Envelope> = (0..workers)
                .rev()
                .map(|w| {
                    let g = crate::codec::measure::synth_gradient(dim, 700, 0.01, w as u64);
                    let mut payload = Vec::new();
                    let ctx = EncodeContext::default();
                    (codec.encode(&g.keys, &g.values, dim, ctx, &mut payload)).unwrap();
                    Envelope {
                        dest: 0,
                        src: w,
                        rows: 1 + w,
                        kind: 0,
                        payload,
                        local: None,
                    }
                })
                .collect();
            let (mut want, mut scratch) = (SparseGrad::default(), SparseGrad::default());
            let rows: u32 = (1..=workers).sum();
            for w in 0..workers {
                let m = msgs.iter().find(|m| m.src == w).unwrap();
                let mut piece = SparseGrad::default();
                codec.decode(&m.payload, &mut piece).unwrap();
                let weight = ((1 + w) as f64 / rows as f64) as f32;
                want.add_scaled(&piece, weight, &mut scratch);
            }
            let mut aggregator = Aggregator::default();
            for _ in 0..2 {
                let sum = aggregator
                    .aggregate(codec.as_mut(), &mut msgs, dim)
                    .unwrap();
                assert_eq!(sum.keys, want.keys, "{workers} workers");
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&sum.values), bits(&want.values), "{workers} workers");
                msgs.reverse();
            }
            assert_eq!(aggregator.dense.is_some(), workers == 8);
        }
    }
}
