//! The sending side of an exchange: a worker's vector becomes one envelope per receiver.

use super::{broadcast, local_message, Envelope, Owners, DATA};
use crate::codec::{Codec, CodecError, EncodeContext};
use crate::sparse::SparseGrad;

/// Encodes a worker's gradient into the envelopes of its round, one per receiving worker
/// (empty pieces are sent too: a receiver weights pieces by their `rows`).
pub struct Router {
    owners: Owners,
    /// Per receiving worker: whether it is in this worker's process.
    local: Vec<bool>,
    pieces: Vec<SparseGrad>,
    decoded: SparseGrad,
    scratch: SparseGrad,
}

impl Router {
    /// A router for the workers of `owners`; `local(w)` says whether worker `w` is in the
    /// sending worker's process (a lossless codec's messages to it are [`LocalPairs`]).
    pub fn new(owners: Owners, local: impl Fn(u32) -> bool) -> Self {
        Router {
            owners,
            local: (0..owners.parts).map(local).collect(),
            pieces: Vec::new(),
            decoded: SparseGrad::default(),
            scratch: SparseGrad::default(),
        }
    }

    /// `allgather`: calls `emit` with the envelope of `grad` for every worker, encoded once and
    /// copied. A lossless codec's message to a worker of this process is the pairs themselves
    /// ([`LocalPairs`](super::LocalPairs)), not encoded. When `sent` is given, it receives what
    /// the receivers will decode (for error feedback). Returns the number of keys the messages
    /// carry (each key once), as their headers state.
    pub fn to_all(
        &mut self,
        codec: &mut dyn Codec,
        grad: &SparseGrad,
        rows: u32,
        ctx: EncodeContext,
        mut sent: Option<&mut SparseGrad>,
        mut emit: impl FnMut(Envelope),
    ) -> Result<u64, CodecError> {
        let mut carried = 0;
        let workers = self.owners.parts;
        let dim = self.owners.dim;
        if let Some(s) = sent.as_deref_mut() {
            s.clear();
        }
        let unencoded = |w: u32| codec.is_lossless() && self.local[w as usize];
        let (local, remote): (Vec<u32>, Vec<u32>) = (0..workers).partition(|&w| unencoded(w));
        if !local.is_empty() {
            let encoded_len = codec.encoded_len(&grad.keys, &grad.values, dim, ctx)?;
            carried += grad.len() as u64;
            if let Some(s) = sent.as_deref_mut() {
                s.clone_from(grad);
            }
            for &dest in &local {
                emit(local_message(
                    ctx.worker,
                    dest,
                    rows,
                    dim,
                    grad.clone(),
                    encoded_len,
                ));
            }
        }
        if !remote.is_empty() {
            let mut payload = Vec::new();
            codec.encode(&grad.keys, &grad.values, dim, ctx, &mut payload)?;
            if local.is_empty() {
                carried += header_count(&payload);
                if let Some(s) = sent {
                    codec.decode(&payload, s)?;
                }
            }
            broadcast(ctx.worker, rows, remote, payload, &mut emit);
        }
        Ok(carried)
    }

    /// `sharded`: calls `emit` with the envelope of each owner's piece of `grad`, each encoded
    /// with its own random stream (empty pieces are sent too). Local messages, `sent` and the
    /// count as in [`Self::to_all`].
    pub fn by_owner(
        &mut self,
        codec: &mut dyn Codec,
        grad: &SparseGrad,
        rows: u32,
        ctx: EncodeContext,
        mut sent: Option<&mut SparseGrad>,
        mut emit: impl FnMut(Envelope),
    ) -> Result<u64, CodecError> {
        let mut carried = 0;
        let dim = self.owners.dim;
        if let Some(s) = sent.as_deref_mut() {
            s.clear();
        }
        self.owners.split(grad, &mut self.pieces);
        for (dest, piece) in self.pieces.iter_mut().enumerate() {
            let ctx = EncodeContext {
                piece: dest as u32,
                ..ctx
            };
            if codec.is_lossless() && self.local[dest] {
                let encoded_len = codec.encoded_len(&piece.keys, &piece.values, dim, ctx)?;
                carried += piece.len() as u64;
                if let Some(s) = sent.as_deref_mut() {
                    s.add_scaled(piece, 1.0, &mut self.scratch);
                }
                // Another worker's piece leaves as a copy, so that the router's
                // buffers are written only by this core: the split's scattered
                // stores into lines the other core has read wait, on cores of
                // different chiplets, for each line's invalidation, where a copy
                // streams them (`docs/architecture.md`, "What leaves is a copy").
                let pairs = if dest as u32 == ctx.worker {
                    std::mem::take(piece)
                } else {
                    piece.clone()
                };
                emit(local_message(
                    ctx.worker,
                    dest as u32,
                    rows,
                    dim,
                    pairs,
                    encoded_len,
                ));
                continue;
            }
            let mut payload = Vec::new();
            codec.encode(&piece.keys, &piece.values, dim, ctx, &mut payload)?;
            carried += header_count(&payload);
            if let Some(s) = sent.as_deref_mut() {
                codec.decode(&payload, &mut self.decoded)?;
                s.add_scaled(&self.decoded, 1.0, &mut self.scratch);
            }
            emit(Envelope {
                dest: dest as u32,
                src: ctx.worker,
                rows,
                kind: DATA,
                payload,
                local: None,
            });
        }
        Ok(carried)
    }
}

/// The number of keys a codec message's header states.
fn header_count(payload: &[u8]) -> u64 {
    u32::from_le_bytes(payload[6..crate::codec::HEADER_LEN].try_into().unwrap()) as u64
}
