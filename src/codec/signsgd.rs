//! `signsgd`: one bit per value, the sign, scaled by the mean magnitude (scaled signSGD /
//! 1-bit SGD, Bernstein et al. 2018; Seide et al. 2014). Biased; meant to be paired with error
//! feedback. Exact zeros carry no sign and are not sent (a sign bit would decode them as
//! `±scale`); the scale is the mean magnitude of the values sent. Body: scale (f32), keys, one
//! sign bit per key. With `vote = true` the receiver combines workers by majority vote of the
//! signs (signSGD with majority vote, Bernstein et al. ICLR'19) instead of a weighted sum.

use serde::{Deserialize, Serialize};

use super::keys::KeyCoding;
use super::{
    check_finite, read_selection, reduce, Codec, CodecError, Combine, EncodeContext, FromParams,
    Kept, KeptValues,
};
use crate::sparse::SparseGrad;

const ID: u8 = 11;

/// Parameters of `signsgd`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SignSgdParams {
    /// Combine workers' messages by majority vote of the signs instead of summing them.
    pub vote: bool,
    /// Key coder.
    pub keys: KeyCoding,
}

/// Scaled sign compression.
pub struct SignSgd {
    p: SignSgdParams,
    kept: Kept,
}

impl FromParams for SignSgd {
    type Params = SignSgdParams;
    fn from_params(p: &SignSgdParams) -> Result<Self, String> {
        Ok(SignSgd {
            p: p.clone(),
            kept: Kept::default(),
        })
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
        let sent = self
            .kept
            .select_where(values.len(), |i| values[i] != 0.0)
            .len();
        let mean = reduce::sum_abs(values) / sent.max(1) as f64;
        self.kept.write(
            out,
            (ID, dim, self.p.keys),
            (keys, values),
            KeptValues::Signs(mean as f32),
        );
        Ok(())
    }

    fn combine(&self) -> Combine {
        if self.p.vote {
            Combine::MajorityVote
        } else {
            Combine::Sum
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_zeros_are_not_sent_and_the_scale_is_their_mean() {
        let keys = [1u32, 4, 6, 9];
        let values = [0.5f32, 0.0, -1.5, 0.0];
        let mut c = SignSgd::from_params(&SignSgdParams::default()).unwrap();
        let mut msg = Vec::new();
        c.encode(&keys, &values, 10, EncodeContext::default(), &mut msg)
            .unwrap();
        let mut out = SparseGrad::default();
        c.decode(&msg, &mut out).unwrap();
        assert_eq!(out.keys, vec![1, 6]);
        assert_eq!(out.values, vec![1.0, -1.0]);
    }
}
