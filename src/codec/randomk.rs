//! `randomk`: keep `k = ceil(ratio · n)` of the gradient's keys chosen uniformly at random
//! without replacement, scaled by `n / k` so that the decoded gradient is unbiased.

use rand::seq::index::sample;

use super::topk::KeepRatio;
use super::{
    check_finite, read_selection, Codec, CodecError, EncodeContext, FromParams, Kept, KeptValues,
};
use crate::sparse::SparseGrad;

const ID: u8 = 6;

/// Uniform random sparsification with unbiased scaling.
pub struct RandomK {
    p: KeepRatio,
    kept: Kept,
}

impl FromParams for RandomK {
    type Params = KeepRatio;
    fn from_params(p: &KeepRatio) -> Result<Self, String> {
        p.validate("randomk")?;
        Ok(RandomK {
            p: p.clone(),
            kept: Kept::default(),
        })
    }
}

impl Codec for RandomK {
    fn name(&self) -> &'static str {
        "randomk"
    }

    fn encode(
        &mut self,
        keys: &[u32],
        values: &[f32],
        dim: u32,
        ctx: EncodeContext,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        check_finite(keys, values)?;
        let n = values.len();
        let k = self.p.count(n);
        let kept = &mut self.kept.positions;
        kept.clear();
        kept.extend(sample(&mut ctx.rng(), n, k).into_iter().map(|i| i as u32));
        kept.sort_unstable();
        let scale = if k == 0 {
            1.0
        } else {
            (n as f64 / k as f64) as f32
        };
        self.kept.write(
            out,
            (ID, dim, self.p.keys),
            (keys, values),
            KeptValues::Exact(scale),
        );
        Ok(())
    }

    fn key_coding(&self) -> Option<super::keys::KeyCoding> {
        Some(self.p.keys)
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        read_selection(bytes, ID, false, out)
    }
}
