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

use crate::codec::{Codec, CodecError};
use crate::sparse::SparseGrad;

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
                Router::new(ExchangeKind::Sharded, owners, local)
                    .route(&mut codec, g, rows, ctx, Some(&mut sent), |e| {
                        per_dest[e.dest as usize].push(e)
                    })
                    .unwrap();
                assert_eq!(&sent, g, "a lossless codec sends the gradient itself");
                Router::new(ExchangeKind::Allgather, owners, local)
                    .route(&mut codec, g, rows, ctx, None, |e| {
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
