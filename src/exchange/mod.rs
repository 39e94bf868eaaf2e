//! Exchange strategies: how messages move between workers and how the receiving side turns
//! them into one update. Knows the codec and memory layers (messages are opaque codec bytes
//! inside an [`Envelope`]) but not the dataflow that carries them.
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
pub mod downlink;
pub mod ownership;
pub mod pull;
pub mod router;
pub mod sketch;

pub use aggregate::Aggregator;
pub use downlink::Downlink;
pub use ownership::{Owners, Ownership};
pub use router::Router;

use serde::{Deserialize, Serialize};

/// Which exchange pattern a job uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ExchangeKind {
    /// Key-range shards, one per worker; owners update and broadcast their range.
    #[default]
    Sharded,
    /// Every worker receives every gradient and updates a full replica.
    Allgather,
    /// Sketched-SGD: summed count sketches, then exact values of the candidates.
    Sketch,
}

impl std::str::FromStr for ExchangeKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sharded" => Ok(ExchangeKind::Sharded),
            "allgather" => Ok(ExchangeKind::Allgather),
            "sketch" => Ok(ExchangeKind::Sketch),
            _ => Err(format!(
                "unknown exchange '{s}' (expected sharded, allgather or sketch)"
            )),
        }
    }
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
}

/// Bytes an envelope adds around its payload in bincode: three u32, the kind byte and the u64
/// length.
pub const ENVELOPE_OVERHEAD: usize = 3 * 4 + 1 + 8;

/// [`Envelope::kind`] of every message but pull requests.
pub const DATA: u8 = 0;
/// [`Envelope::kind`] of a [`pull::Request`].
pub const PULL_REQUEST: u8 = 1;
/// [`Envelope::kind`] of the empty envelope a worker's exchange sends to its own gradient step
/// once the round's update is in its replica (and, when the workers of a process share one
/// replica, to theirs instead of its change): with the other owners' changes, it completes
/// the next round's input by count (see [`applied`]).
pub const APPLIED: u8 = 2;

/// The envelope that tells worker `dest`'s gradient step that worker `src`'s update of the
/// round is in `dest`'s replica.
pub fn applied(src: u32, dest: u32) -> Envelope {
    Envelope {
        dest,
        src,
        rows: 0,
        kind: APPLIED,
        payload: Vec::new(),
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
        });
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
            let owners = Owners::new(Ownership::Hashed, dim, 2, 1);
            Router::new(ExchangeKind::Sharded, owners)
                .route(&mut codec, g, rows, ctx, None, |e| {
                    per_dest[e.dest as usize].push(e)
                })
                .unwrap();
            Router::new(ExchangeKind::Allgather, owners)
                .route(&mut codec, g, rows, ctx, None, |e| {
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
