//! `qsgd`: QSGD (Alistarh et al. NeurIPS'17). With `‖v‖₂` and `s` levels, `|v_i| / ‖v‖₂ · s` is
//! rounded stochastically to a neighbouring integer level `ℓ`, so `E[‖v‖₂ · sign · ℓ / s] = v_i`.
//! Level-0 coordinates are not sent. Body: norm (f32), keys, per key a sign bit and `ℓ - 1` in
//! `bits(s - 1)` bits.

use rand::RngExt;
use serde::{Deserialize, Serialize};

use super::keys::{bit_len, KeyCoding};
use super::{
    check_finite, check_scale, read_message, write_message, Codec, CodecError, EncodeContext,
    FromParams,
};
use crate::sparse::SparseGrad;

const ID: u8 = 9;
const VERSION: u8 = 1;

/// Parameters of `qsgd`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QsgdParams {
    /// Number of levels `s`.
    pub levels: u32,
    /// Key coder.
    pub keys: KeyCoding,
}

impl Default for QsgdParams {
    fn default() -> Self {
        QsgdParams {
            levels: 16,
            keys: KeyCoding::Rice,
        }
    }
}

/// Stochastic level quantization.
pub struct Qsgd {
    p: QsgdParams,
    bits: u32,
}

impl FromParams for Qsgd {
    type Params = QsgdParams;
    fn from_params(p: &QsgdParams) -> Result<Self, String> {
        if !(1..=(1 << 20)).contains(&p.levels) {
            return Err(format!(
                "qsgd.levels: must be in 1..=2^20, got {}",
                p.levels
            ));
        }
        Ok(Qsgd {
            p: p.clone(),
            bits: bit_len(p.levels as u64 - 1),
        })
    }
}

impl Codec for Qsgd {
    fn name(&self) -> &'static str {
        "qsgd"
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
        let norm = values
            .iter()
            .map(|&v| v as f64 * v as f64)
            .sum::<f64>()
            .sqrt();
        let s = self.p.levels as f64;
        let mut rng = ctx.rng();
        let mut kept: Vec<(u32, u32, bool)> = Vec::new(); // (key, level, negative)
        if norm > 0.0 {
            for (&k, &v) in keys.iter().zip(values) {
                let x = (v.abs() as f64 / norm * s).min(s);
                let f = x.floor();
                let level = (f + (rng.random::<f64>() < x - f) as u8 as f64) as u32;
                if level > 0 {
                    kept.push((k, level, v < 0.0));
                }
            }
        }
        let kept_keys: Vec<u32> = kept.iter().map(|t| t.0).collect();
        write_message(out, ID, VERSION, dim, kept.len(), |w| {
            w.write(self.p.levels as u64 - 1, 20);
            self.p.keys.write_id(w);
            w.write_f32(norm as f32);
            self.p.keys.encode(&kept_keys, w);
            for &(_, level, neg) in &kept {
                w.write(neg as u64, 1);
                w.write((level - 1) as u64, self.bits);
            }
        });
        Ok(())
    }

    fn key_coding(&self) -> Option<super::keys::KeyCoding> {
        Some(self.p.keys)
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        read_message(bytes, ID, VERSION, out, |h, r, out| {
            let levels = r.read(20)? + 1;
            let (bits, s) = (bit_len(levels - 1), levels as f64);
            let coder = KeyCoding::read_id(r)?;
            let norm = check_scale("norm", r.read_f32()?)? as f64;
            coder.decode(h.count as usize, h.dim, r, &mut out.keys)?;
            for _ in 0..h.count {
                let neg = r.read(1)? == 1;
                let level = r.read(bits)? as f64 + 1.0;
                if level > s {
                    return Err(CodecError::Corrupt(format!("level {level} above {s}")));
                }
                let v = (norm * level / s) as f32;
                out.values.push(if neg { -v } else { v });
            }
            Ok(())
        })
    }
}
