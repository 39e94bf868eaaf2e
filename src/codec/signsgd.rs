//! `signsgd`: one bit per value, the sign, scaled by the mean magnitude (scaled signSGD /
//! 1-bit SGD, Bernstein et al. 2018; Seide et al. 2014). Biased; meant to be paired with error
//! feedback. Body: scale (f32), keys, one sign bit per key.

use super::keys::KeyCoding;
use super::{
    check_finite, check_scale, read_message, write_message, Codec, CodecError, EncodeContext,
    FromParams, KeysOnly, Selection,
};
use crate::model::SparseGrad;

const ID: u8 = 11;
const VERSION: u8 = 1;

/// Writes `scale`, the keys of `kept` and their signs (`kept` indexes `keys`/`values`).
pub(crate) fn write_signs(
    out: &mut Vec<u8>,
    id: u8,
    dim: u32,
    coder: KeyCoding,
    sel: &Selection,
    scale: f32,
) {
    let kept_keys = sel.kept_keys();
    write_message(out, id, VERSION, dim, kept_keys.len(), |w| {
        w.write_f32(scale);
        coder.write_id(w);
        coder.encode(&kept_keys, w);
        for v in sel.kept_values() {
            w.write(v.is_sign_negative() as u64, 1);
        }
    });
}

/// Reads a message written by [`write_signs`]: every value is `±scale`.
pub(crate) fn read_signs(bytes: &[u8], id: u8, out: &mut SparseGrad) -> Result<u32, CodecError> {
    read_message(bytes, id, VERSION, out, |h, r, out| {
        let scale = check_scale("scale", r.read_f32()?)?;
        let coder = KeyCoding::read_id(r)?;
        coder.decode(h.count as usize, h.dim, r, &mut out.keys)?;
        for _ in 0..h.count {
            out.values
                .push(if r.read(1)? == 1 { -scale } else { scale });
        }
        Ok(())
    })
}

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
        write_signs(
            out,
            ID,
            dim,
            self.p.keys,
            &Selection {
                keys,
                values,
                kept: &all,
            },
            mean as f32,
        );
        Ok(())
    }

    fn key_coding(&self) -> Option<super::keys::KeyCoding> {
        Some(self.p.keys)
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        read_signs(bytes, ID, out)
    }
}
