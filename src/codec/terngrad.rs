//! `terngrad`: ternary gradients (Wen et al. NeurIPS'17). With `s = max |v|`, each value becomes
//! `s · sign(v)` with probability `|v| / s` and 0 otherwise: unbiased. Zeros are not sent, so the
//! message is the kept keys and their signs plus `s`.

use rand::RngExt;

use super::{
    check_finite, read_selection, write_selection, Codec, CodecError, EncodeContext, FromParams,
    KeptValues, KeysOnly, Selection,
};
use crate::sparse::SparseGrad;

const ID: u8 = 10;

/// Stochastic ternarisation.
pub struct TernGrad {
    p: KeysOnly,
}

impl FromParams for TernGrad {
    type Params = KeysOnly;
    fn from_params(p: &KeysOnly) -> Result<Self, String> {
        Ok(TernGrad { p: p.clone() })
    }
}

impl Codec for TernGrad {
    fn name(&self) -> &'static str {
        "terngrad"
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
        let s = values.iter().fold(0f32, |m, v| m.max(v.abs()));
        let mut rng = ctx.rng();
        let kept: Vec<u32> = (0..values.len() as u32)
            .filter(|&i| s > 0.0 && rng.random::<f64>() < (values[i as usize].abs() / s) as f64)
            .collect();
        write_selection(
            out,
            ID,
            dim,
            self.p.keys,
            &Selection {
                keys,
                values,
                kept: &kept,
            },
            KeptValues::Signs(s),
        );
        Ok(())
    }

    fn key_coding(&self) -> Option<super::keys::KeyCoding> {
        Some(self.p.keys)
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        read_selection(bytes, ID, true, out)
    }
}
