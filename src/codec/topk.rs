//! `topk`: keep the `k = ceil(ratio · n)` values of largest magnitude (ties by key), send them
//! exactly. Biased; usually paired with error feedback.

use serde::{Deserialize, Serialize};

use super::keys::KeyCoding;
use super::{
    check_finite, largest, read_selection, Codec, CodecError, EncodeContext, FromParams, Kept,
    KeptValues,
};
use crate::sparse::SparseGrad;

const ID: u8 = 5;

/// Parameters of `topk` and `randomk`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeepRatio {
    /// Fraction of the gradient's keys to send, in (0, 1].
    pub ratio: f64,
    /// Key coder.
    pub keys: KeyCoding,
}

impl Default for KeepRatio {
    fn default() -> Self {
        KeepRatio {
            ratio: 0.1,
            keys: KeyCoding::Rice,
        }
    }
}

impl KeepRatio {
    /// Validates `ratio` for codec `name`.
    pub fn validate(&self, name: &str) -> Result<(), String> {
        if self.ratio > 0.0 && self.ratio <= 1.0 {
            Ok(())
        } else {
            Err(format!(
                "{name}.ratio: must be in (0, 1], got {}",
                self.ratio
            ))
        }
    }
    /// How many of `n` keys to keep.
    pub fn count(&self, n: usize) -> usize {
        ((self.ratio * n as f64).ceil() as usize).min(n)
    }
}

/// Largest-magnitude sparsification.
pub struct TopK {
    p: KeepRatio,
    kept: Kept,
}

impl FromParams for TopK {
    type Params = KeepRatio;
    fn from_params(p: &KeepRatio) -> Result<Self, String> {
        p.validate("topk")?;
        Ok(TopK {
            p: p.clone(),
            kept: Kept::default(),
        })
    }
}

impl Codec for TopK {
    fn name(&self) -> &'static str {
        "topk"
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
        self.kept.positions = largest(values, self.p.count(values.len()));
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
