//! `threshold`: keep the values with `|v| >= threshold` (Threshold-v), sent exactly.

use serde::{Deserialize, Serialize};

use super::keys::KeyCoding;
use super::{
    check_finite, read_selection, Codec, CodecError, EncodeContext, FromParams, Kept, KeptValues,
};
use crate::sparse::SparseGrad;

const ID: u8 = 7;

/// Parameters of `threshold`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThresholdParams {
    /// Smallest magnitude sent.
    pub threshold: f32,
    /// Key coder.
    pub keys: KeyCoding,
}

impl Default for ThresholdParams {
    fn default() -> Self {
        ThresholdParams {
            threshold: 1e-3,
            keys: KeyCoding::Rice,
        }
    }
}

/// Magnitude-threshold sparsification.
pub struct Threshold {
    p: ThresholdParams,
    kept: Kept,
}

impl FromParams for Threshold {
    type Params = ThresholdParams;
    fn from_params(p: &ThresholdParams) -> Result<Self, String> {
        if !(p.threshold.is_finite() && p.threshold >= 0.0) {
            return Err(format!(
                "threshold.threshold: must be a finite number >= 0, got {}",
                p.threshold
            ));
        }
        Ok(Threshold {
            p: p.clone(),
            kept: Kept::default(),
        })
    }
}

impl Codec for Threshold {
    fn name(&self) -> &'static str {
        "threshold"
    }

    fn encode(
        &mut self,
        keys: &[u32],
        values: &[f32],
        dim: u32,
        _ctx: EncodeContext,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        check_finite(keys, values)?;
        let threshold = self.p.threshold;
        self.kept
            .select_where(values.len(), |i| values[i].abs() >= threshold);
        self.kept.write(
            out,
            (ID, dim, self.p.keys),
            (keys, values),
            KeptValues::Exact(1.0),
        );
        Ok(())
    }

    fn error_feedback(&self) -> super::ErrorFeedback {
        super::ErrorFeedback::Residual
    }

    fn key_coding(&self) -> Option<super::keys::KeyCoding> {
        Some(self.p.keys)
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        read_selection(bytes, ID, false, out)
    }
}
