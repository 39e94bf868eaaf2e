//! The receiving side of a gradient exchange: decode and sum one round's envelopes.

use super::Envelope;
use crate::codec::{Codec, CodecError};
use crate::sparse::SparseGrad;

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
