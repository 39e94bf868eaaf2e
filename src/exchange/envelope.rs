//! The message between workers' exchange parts ([`Envelope`]), its kinds, and the small
//! helpers that build and read envelopes.

use serde::{Deserialize, Serialize};

use crate::codec::{Codec, CodecError};
use crate::sparse::SparseGrad;

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
/// [`Envelope::kind`] of a [`super::pull::Request`].
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
