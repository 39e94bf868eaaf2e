//! The sending side of an exchange: a worker's vector becomes one envelope per receiver.

use super::{broadcast, Envelope, ExchangeKind, Owners, DATA};
use crate::codec::{Codec, CodecError, EncodeContext};
use crate::sparse::SparseGrad;

/// Encodes a worker's gradient into the envelopes of its round, one per receiving worker
/// (empty pieces are sent too: a receiver weights pieces by their `rows`).
pub struct Router {
    kind: ExchangeKind,
    owners: Owners,
    pieces: Vec<SparseGrad>,
    decoded: SparseGrad,
    scratch: SparseGrad,
}

impl Router {
    /// A router for the workers of `owners`.
    pub fn new(kind: ExchangeKind, owners: Owners) -> Self {
        Router {
            kind,
            owners,
            pieces: Vec::new(),
            decoded: SparseGrad::default(),
            scratch: SparseGrad::default(),
        }
    }

    /// Calls `emit` with the envelope for each receiver: `allgather` encodes once and copies,
    /// `sharded` encodes each owner's piece with its own random stream. When `sent` is given,
    /// it receives what the receivers will decode (for error feedback). Returns the number of
    /// keys the messages carry (each key once), as their headers state.
    pub fn route(
        &mut self,
        codec: &mut dyn Codec,
        grad: &SparseGrad,
        rows: u32,
        ctx: EncodeContext,
        mut sent: Option<&mut SparseGrad>,
        mut emit: impl FnMut(Envelope),
    ) -> Result<u64, CodecError> {
        let header_count = |p: &[u8]| {
            u32::from_le_bytes(p[6..crate::codec::HEADER_LEN].try_into().unwrap()) as u64
        };
        let mut carried = 0;
        let workers = self.owners.parts;
        let dim = self.owners.dim;
        if let Some(s) = sent.as_deref_mut() {
            s.clear();
        }
        match self.kind {
            ExchangeKind::Allgather | ExchangeKind::Sketch => {
                let mut payload = Vec::new();
                codec.encode(&grad.keys, &grad.values, dim, ctx, &mut payload)?;
                carried += header_count(&payload);
                if let Some(s) = sent {
                    codec.decode(&payload, s)?;
                }
                broadcast(ctx.worker, rows, 0..workers, payload, &mut emit);
            }
            ExchangeKind::Sharded => {
                self.owners.split(grad, &mut self.pieces);
                for (dest, piece) in self.pieces.iter().enumerate() {
                    let mut payload = Vec::new();
                    let ctx = EncodeContext {
                        piece: dest as u32,
                        ..ctx
                    };
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
                    });
                }
            }
        }
        Ok(carried)
    }
}
