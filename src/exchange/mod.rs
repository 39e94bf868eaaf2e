//! Exchange strategies: how gradient messages move between workers and how the receiving side
//! turns them into one aggregated gradient. Knows the codec layer (messages are opaque codec
//! bytes inside an [`Envelope`]) but not the dataflow that carries them.
//!
//! * `sharded` (parameter-server style, without a single driver): the key space is split into `W`
//!   contiguous ranges ([`KeyRanges`]); worker `j` receives from every worker only the piece of
//!   its gradient that falls in range `j`, holds range `j`'s optimizer state, applies the update
//!   and broadcasts the new values of the touched keys of its range.
//! * `allgather`: every worker receives every worker's whole gradient, sums them in worker order
//!   and applies the same update to its own full replica.
//!
//! Both sum the received pieces in source-worker order with the same arithmetic, so for the same
//! job they produce bit-identical models.

use serde::{Deserialize, Serialize};

use crate::codec::{Codec, CodecError, EncodeContext};
use crate::model::SparseGrad;

/// Which exchange pattern a job uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ExchangeKind {
    /// Key-range shards, one per worker; owners update and broadcast their range.
    #[default]
    Sharded,
    /// Every worker receives every gradient and updates a full replica.
    Allgather,
}

impl std::str::FromStr for ExchangeKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sharded" => Ok(ExchangeKind::Sharded),
            "allgather" => Ok(ExchangeKind::Allgather),
            _ => Err(format!(
                "unknown exchange '{s}' (expected sharded or allgather)"
            )),
        }
    }
}

/// A message between workers: routing fields plus an opaque payload (codec bytes).
///
/// On the wire (bincode, inside timely's own framing): `dest`, `src`, `rows` as u32 LE, then the
/// payload as a u64 length and the raw bytes, written in one piece (`serde_bytes`, not element by
/// element as a plain `Vec<u8>` would be).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Receiving worker.
    pub dest: u32,
    /// Sending worker.
    pub src: u32,
    /// Mini-batch rows behind a gradient (0 for model updates).
    pub rows: u32,
    /// Codec bytes.
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
}

/// Bytes an envelope adds around its payload in bincode: three u32 and the u64 length.
pub const ENVELOPE_OVERHEAD: usize = 3 * 4 + 8;

/// The contiguous key ranges of the `sharded` strategy: range `w` is
/// `[⌊D·w/W⌋, ⌊D·(w+1)/W⌋)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyRanges {
    /// Dimension.
    pub dim: u32,
    /// Number of ranges (workers).
    pub parts: u32,
}

impl KeyRanges {
    /// Lower bound of range `w`.
    pub fn lo(&self, w: u32) -> u32 {
        ((self.dim as u64 * w as u64) / self.parts as u64) as u32
    }
    /// The range of worker `w`.
    pub fn range(&self, w: u32) -> (u32, u32) {
        (self.lo(w), self.lo(w + 1))
    }
    /// Splits sorted `keys` into the index ranges `[cut[w], cut[w+1])` falling in each key range.
    pub fn cuts(&self, keys: &[u32], cuts: &mut Vec<usize>) {
        cuts.clear();
        cuts.push(0);
        for w in 1..self.parts {
            let bound = self.lo(w);
            let start = *cuts.last().unwrap();
            cuts.push(start + keys[start..].partition_point(|&k| k < bound));
        }
        cuts.push(keys.len());
    }
}

/// Encodes a worker's gradient into the envelopes of its round, one per receiving worker
/// (empty pieces are sent too: a receiver weights pieces by their `rows`).
pub struct Router {
    kind: ExchangeKind,
    ranges: KeyRanges,
    cuts: Vec<usize>,
}

impl Router {
    /// A router for `workers` workers over dimension `dim`.
    pub fn new(kind: ExchangeKind, dim: u32, workers: u32) -> Self {
        Router {
            kind,
            ranges: KeyRanges {
                dim,
                parts: workers,
            },
            cuts: Vec::new(),
        }
    }

    /// Calls `emit` with the envelope for each receiver. `allgather` encodes once and copies.
    pub fn route(
        &mut self,
        codec: &mut dyn Codec,
        grad: &SparseGrad,
        rows: u32,
        ctx: EncodeContext,
        mut emit: impl FnMut(Envelope),
    ) -> Result<(), CodecError> {
        let workers = self.ranges.parts;
        match self.kind {
            ExchangeKind::Allgather => {
                let mut payload = Vec::new();
                codec.encode(&grad.keys, &grad.values, self.ranges.dim, ctx, &mut payload)?;
                for dest in 0..workers {
                    emit(Envelope {
                        dest,
                        src: ctx.worker,
                        rows,
                        payload: payload.clone(),
                    });
                }
            }
            ExchangeKind::Sharded => {
                self.ranges.cuts(&grad.keys, &mut self.cuts);
                for dest in 0..workers {
                    let (a, b) = (self.cuts[dest as usize], self.cuts[dest as usize + 1]);
                    let mut payload = Vec::new();
                    codec.encode(
                        &grad.keys[a..b],
                        &grad.values[a..b],
                        self.ranges.dim,
                        ctx,
                        &mut payload,
                    )?;
                    emit(Envelope {
                        dest,
                        src: ctx.worker,
                        rows,
                        payload,
                    });
                }
            }
        }
        Ok(())
    }
}

/// Decodes and sums the gradient envelopes one worker received for one round.
#[derive(Default)]
pub struct Aggregator {
    piece: SparseGrad,
    scratch: SparseGrad,
    /// The aggregated gradient of the last call.
    pub sum: SparseGrad,
}

impl Aggregator {
    /// `sum = Σ_w (rows_w / Σ rows) · decode(payload_w)`, in increasing source order (so the
    /// result does not depend on arrival order). Checks that each message's dimension is `dim`.
    pub fn aggregate(
        &mut self,
        codec: &mut dyn Codec,
        msgs: &mut [Envelope],
        dim: u32,
    ) -> Result<&SparseGrad, CodecError> {
        msgs.sort_by_key(|m| m.src);
        let total: u64 = msgs.iter().map(|m| m.rows as u64).sum();
        self.sum.clear();
        for m in msgs.iter() {
            let d = codec.decode(&m.payload, &mut self.piece)?;
            if d != dim {
                return Err(CodecError::Corrupt(format!(
                    "message dimension {d}, job dimension {dim}"
                )));
            }
            let weight = if total == 0 {
                0.0
            } else {
                (m.rows as f64 / total as f64) as f32
            };
            self.sum.add_scaled(&self.piece, weight, &mut self.scratch);
        }
        Ok(&self.sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::none::NoneCodec;

    #[test]
    fn ranges_cover_the_key_space() {
        let r = KeyRanges { dim: 10, parts: 3 };
        assert_eq!(
            (0..3).map(|w| r.range(w)).collect::<Vec<_>>(),
            vec![(0, 3), (3, 6), (6, 10)]
        );
        let mut cuts = Vec::new();
        r.cuts(&[0, 2, 3, 9], &mut cuts);
        assert_eq!(cuts, vec![0, 2, 3, 4]);
        r.cuts(&[], &mut cuts);
        assert_eq!(cuts, vec![0, 0, 0, 0]);
    }

    #[test]
    fn sharded_and_allgather_aggregate_identically() {
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
        let mut per_dest: Vec<Vec<Envelope>> = vec![Vec::new(), Vec::new()];
        let mut gathered: Vec<Vec<Envelope>> = vec![Vec::new(), Vec::new()];
        for (w, (g, rows)) in [(&g0, 3u32), (&g1, 1)].into_iter().enumerate() {
            let ctx = EncodeContext {
                worker: w as u32,
                ..Default::default()
            };
            Router::new(ExchangeKind::Sharded, dim, 2)
                .route(&mut codec, g, rows, ctx, |e| {
                    per_dest[e.dest as usize].push(e)
                })
                .unwrap();
            Router::new(ExchangeKind::Allgather, dim, 2)
                .route(&mut codec, g, rows, ctx, |e| {
                    gathered[e.dest as usize].push(e)
                })
                .unwrap();
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
    }
}
