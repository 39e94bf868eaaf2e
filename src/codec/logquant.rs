//! `logquant`: base-2 logarithmic quantization (LogQuant, Miyashita et al. 2016). A value becomes
//! `sign · 2^e` with `e = round(log2 |v|)`; exponents are sent as offsets below the largest one
//! in `bits` bits, and values more than `2^bits - 1` octaves below the largest are dropped.
//! Body: largest exponent (10 bits, offset by 512), keys, per key a sign bit and the offset.

use serde::{Deserialize, Serialize};

use super::keys::KeyCoding;
use super::{
    check_finite, read_message, reduce, write_message, Codec, CodecError, EncodeContext,
    FromParams, Kept,
};
use crate::sparse::SparseGrad;

const ID: u8 = 12;
const VERSION: u8 = 1;
const EXP_BIAS: i32 = 512;

/// Parameters of `logquant`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogQuantParams {
    /// Bits per exponent offset.
    pub bits: u32,
    /// Key coder.
    pub keys: KeyCoding,
}

impl Default for LogQuantParams {
    fn default() -> Self {
        LogQuantParams {
            bits: 4,
            keys: KeyCoding::Rice,
        }
    }
}

/// Power-of-two quantization.
pub struct LogQuant {
    p: LogQuantParams,
    kept: Kept,
}

impl FromParams for LogQuant {
    type Params = LogQuantParams;
    fn from_params(p: &LogQuantParams) -> Result<Self, String> {
        if !(1..=8).contains(&p.bits) {
            return Err(format!("logquant.bits: must be 1..=8, got {}", p.bits));
        }
        Ok(LogQuant {
            p: p.clone(),
            kept: Kept::default(),
        })
    }
}

/// `round(log2 |v|)` for nonzero finite `v`: the binary exponent, plus one when the mantissa is
/// at least √2 (exact for normal floats; subnormals take the slow path).
#[inline]
fn exponent(v: f32) -> i32 {
    let bits = v.to_bits() & 0x7FFF_FFFF;
    let biased = (bits >> 23) as i32;
    if biased == 0 {
        return (v.abs() as f64).log2().round() as i32;
    }
    // The smallest mantissa above √2 (1.41421353... has mantissa 0x3504F3 and lies below it).
    const SQRT2_MANTISSA: u32 = 0x3504F4;
    biased - 127 + ((bits & 0x7F_FFFF) >= SQRT2_MANTISSA) as i32
}

/// `2^e` as an f32 (exact; built from the exponent bits in the normal range).
#[inline]
fn power_of_two(e: i32) -> f32 {
    if (-126..=127).contains(&e) {
        f32::from_bits(((e + 127) as u32) << 23)
    } else {
        2f64.powi(e) as f32
    }
}

impl Codec for LogQuant {
    fn name(&self) -> &'static str {
        "logquant"
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
        // round(log2 |v|) is monotone in |v|: the largest exponent is the largest value's.
        let largest = reduce::max_abs(values);
        let emax = if largest > 0.0 { exponent(largest) } else { 0 };
        let span = (1i32 << self.p.bits) - 1;
        let kept = &mut self.kept;
        kept.select_where(values.len(), |i| {
            values[i] != 0.0 && emax - exponent(values[i]) <= span
        });
        let (positions, kept_keys) = kept.with_keys(keys);
        write_message(out, ID, VERSION, dim, kept_keys.len(), |w| {
            w.write(self.p.bits as u64, 4);
            self.p.keys.write_id(w);
            w.write((emax + EXP_BIAS) as u64, 10);
            self.p.keys.encode(kept_keys, w);
            // Per key one field: the sign bit, then the offset below the largest exponent.
            for &i in positions {
                let v = values[i as usize];
                let offset = (emax - exponent(v)) as u64;
                w.write(v.is_sign_negative() as u64 | offset << 1, self.p.bits + 1);
            }
        });
        Ok(())
    }

    fn key_coding(&self) -> Option<super::keys::KeyCoding> {
        Some(self.p.keys)
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        read_message(bytes, ID, VERSION, out, |h, r, out| {
            let bits = r.read(4)? as u32;
            if !(1..=8).contains(&bits) {
                return Err(CodecError::Corrupt(format!("{bits} exponent bits")));
            }
            let coder = KeyCoding::read_id(r)?;
            let emax = r.read(10)? as i32 - EXP_BIAS;
            coder.decode(h.count as usize, h.dim, r, &mut out.keys)?;
            for _ in 0..h.count {
                let field = r.read(bits + 1)?;
                let v = power_of_two(emax - (field >> 1) as i32);
                out.values
                    .push(f32::from_bits(v.to_bits() | (field as u32 & 1) << 31));
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exponent_matches_rounded_log2() {
        let mut x = 1e-38f32;
        while x < 1e38 {
            let sqrt2 = std::f32::consts::SQRT_2;
            let (below, above) = (
                f32::from_bits(sqrt2.to_bits() - 1),
                f32::from_bits(sqrt2.to_bits() + 1),
            );
            for v in [x, -x, x * sqrt2, x * below, x * above] {
                assert_eq!(exponent(v), (v.abs() as f64).log2().round() as i32, "{v}");
            }
            x *= 1.37;
        }
        assert_eq!(power_of_two(-3), 0.125);
        assert_eq!(power_of_two(10), 1024.0);
        assert_eq!(power_of_two(-140), 2f64.powi(-140) as f32);
    }
}
