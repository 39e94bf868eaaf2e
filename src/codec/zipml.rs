//! `zipml`: uniform fixed-point quantization with stochastic rounding (ZipML, Zhang et al.
//! ICML'17), the baseline of the SketchML and FastSGD papers. Values are mapped onto `2^bits`
//! evenly spaced levels between their minimum and maximum; a value between two levels rounds up
//! with probability equal to its distance from the lower one, so the decoded value is unbiased
//! and at most one step `(max - min) / (2^bits - 1)` away. Body: min, max (f32), keys, levels.

use rand::RngExt;
use serde::{Deserialize, Serialize};

use super::keys::KeyCoding;
use super::{
    check_finite, read_message, write_message, Codec, CodecError, EncodeContext, FromParams,
};
use crate::sparse::SparseGrad;

const ID: u8 = 2;
const VERSION: u8 = 1;

/// Parameters of `zipml`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ZipmlParams {
    /// Bits per value: 8 or 16.
    pub bits: u32,
    /// Key coder.
    pub keys: KeyCoding,
}

impl Default for ZipmlParams {
    fn default() -> Self {
        ZipmlParams {
            bits: 8,
            keys: KeyCoding::Rice,
        }
    }
}

/// Uniform stochastic quantization.
pub struct Zipml {
    p: ZipmlParams,
}

impl FromParams for Zipml {
    type Params = ZipmlParams;
    fn from_params(p: &ZipmlParams) -> Result<Self, String> {
        if !(1..=16).contains(&p.bits) {
            return Err(format!(
                "zipml.bits: must be 1..=16 (the paper uses 8 or 16), got {}",
                p.bits
            ));
        }
        Ok(Zipml { p: p.clone() })
    }
}

impl Codec for Zipml {
    fn name(&self) -> &'static str {
        "zipml"
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
        let (lo, hi) = values
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
                (a.min(v), b.max(v))
            });
        let (lo, hi) = if values.is_empty() {
            (0.0, 0.0)
        } else {
            (lo, hi)
        };
        let top = ((1u32 << self.p.bits) - 1) as f64;
        let step = (hi as f64 - lo as f64) / top;
        let mut rng = ctx.rng();
        write_message(out, ID, VERSION, dim, keys.len(), |w| {
            w.write(self.p.bits as u64, 5);
            self.p.keys.write_id(w);
            w.write_f32(lo);
            w.write_f32(hi);
            self.p.keys.encode(keys, w);
            for &v in values {
                let q = if step > 0.0 {
                    let x = (v as f64 - lo as f64) / step;
                    let f = x.floor();
                    (f + (rng.random::<f64>() < x - f) as u8 as f64).clamp(0.0, top)
                } else {
                    0.0
                };
                w.write(q as u64, self.p.bits);
            }
        });
        Ok(())
    }

    fn key_coding(&self) -> Option<super::keys::KeyCoding> {
        Some(self.p.keys)
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        read_message(bytes, ID, VERSION, out, |h, r, out| {
            let bits = r.read(5)? as u32;
            if !(1..=16).contains(&bits) {
                return Err(CodecError::Corrupt(format!("{bits} bits per value")));
            }
            let coder = KeyCoding::read_id(r)?;
            let lo = r.read_f32()?;
            let hi = r.read_f32()?;
            if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
                return Err(CodecError::Corrupt(format!("range [{lo}, {hi}]")));
            }
            coder.decode(h.count as usize, h.dim, r, &mut out.keys)?;
            let step = (hi as f64 - lo as f64) / ((1u32 << bits) - 1) as f64;
            for _ in 0..h.count {
                let q = r.read(bits)?;
                out.values.push((lo as f64 + q as f64 * step) as f32);
            }
            Ok(())
        })
    }
}
