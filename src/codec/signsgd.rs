//! `signsgd`: one bit per value, the sign, scaled by the mean magnitude (scaled signSGD /
//! 1-bit SGD, Bernstein et al. 2018; Seide et al. 2014). Biased; meant to be paired with error
//! feedback. Body: scale (f32), keys, one sign bit per key.

use super::{
    check_finite, read_selection, write_selection, Codec, CodecError, EncodeContext, FromParams,
    KeptValues, KeysOnly, Selection,
};
use crate::sparse::SparseGrad;

const ID: u8 = 11;

/// Scaled sign compression.
pub struct SignSgd {
    p: KeysOnly,
}

impl FromParams for SignSgd {
    type Params = KeysOnly;
    fn from_params(p: &KeysOnly) -> Result<Self, String> {
        Ok(SignSgd { p: p.clone() })
    }
}

impl Codec for SignSgd {
    fn name(&self) -> &'static str {
        "signsgd"
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
        let mean = values.iter().map(|v| v.abs() as f64).sum::<f64>() / values.len().max(1) as f64;
        let all: Vec<u32> = (0..values.len() as u32).collect();
        write_selection(
            out,
            ID,
            dim,
            self.p.keys,
            &Selection {
                keys,
                values,
                kept: &all,
            },
            KeptValues::Signs(mean as f32),
        );
        Ok(())
    }

    fn error_feedback(&self) -> super::ErrorFeedback {
        super::ErrorFeedback::ResidualUnlessAdam
    }

    fn key_coding(&self) -> Option<super::keys::KeyCoding> {
        Some(self.p.keys)
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        read_selection(bytes, ID, true, out)
    }
}
