//! `fastsgd`: FastSGD (Algorithm 1 and 2 of the paper in `shared/papers/fastsgd.txt`).
//!
//! Values (§3.2, reciprocal mapper + log quantization + threshold filter): with `sum = Σ|v|`,
//! only values with `|v| >= sum / b^τ` are kept; a kept value has `R = sum / |v| >= 1` and code
//! `L = ceil(log_b R)`, decoded as `sum / b^L`. The ceiling makes every decoded magnitude at most
//! the true one; the encoder checks this with the decoder's own arithmetic and bumps `L` where
//! rounding would break it. One byte per value: the sign bit and `max(L, 1) - 1` in 7 bits (so
//! `τ <= 128`; `L = 0` happens only for a lone value and is sent as 1, still an underestimate).
//!
//! Keys (§3.3): adaptive bit-level deltas with `l`-bit length flags ([`super::keys::adaptive`]).
//!
//! Body: sum (f32), b (f32), τ (8 bits), l (3 bits), keys, values.

use serde::{Deserialize, Serialize};

use super::keys::adaptive;
use super::{
    check_finite, check_scale, read_message, reduce, write_message, Codec, CodecError,
    EncodeContext, FromParams,
};
use crate::sparse::SparseGrad;

const ID: u8 = 3;
const VERSION: u8 = 1;

/// Parameters of `fastsgd` (defaults from the paper).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FastSgdParams {
    /// Logarithm base `b > 1`.
    pub b: f32,
    /// Threshold exponent `τ` (values below `sum / b^τ` are dropped), at most 128.
    pub tau: u32,
    /// Length-flag bits of the key coder.
    pub l: u32,
}

impl Default for FastSgdParams {
    fn default() -> Self {
        FastSgdParams {
            b: 1.1,
            tau: 128,
            l: 2,
        }
    }
}

/// FastSGD compression.
pub struct FastSgd {
    p: FastSgdParams,
}

impl FromParams for FastSgd {
    type Params = FastSgdParams;
    fn from_params(p: &FastSgdParams) -> Result<Self, String> {
        if !(p.b.is_finite() && p.b > 1.0) {
            return Err(format!("fastsgd.b: must be a number > 1, got {}", p.b));
        }
        if !(1..=128).contains(&p.tau) {
            return Err(format!("fastsgd.tau: must be in 1..=128, got {}", p.tau));
        }
        if !(1..=4).contains(&p.l) {
            return Err(format!("fastsgd.l: must be in 1..=4, got {}", p.l));
        }
        Ok(FastSgd { p: p.clone() })
    }
}

/// The decoder's magnitude for code `level`: shared by both sides so that the bound is exact.
#[inline]
fn magnitude(sum: f32, b: f32, level: u32) -> f32 {
    (sum as f64 / (b as f64).powi(level as i32)) as f32
}

/// [`magnitude`] of every level `0..=tau`, once per message (a `powi` per value was most of
/// the cost of a message whose values all pass the threshold).
fn magnitudes(sum: f32, b: f32, tau: u32) -> Vec<f32> {
    (0..=tau).map(|level| magnitude(sum, b, level)).collect()
}

/// The code of magnitude `a` (`magnitudes[tau] <= a <= magnitudes[0]`, the sum): the smallest
/// level `L >= 1` whose decoded magnitude is at most `a`, `ceil(log_b(sum / a))` by the
/// decoder's own arithmetic. A base-2 logarithm guesses it (a natural logarithm in `f64` and a
/// division per value were about a third of a 10k-pair encode) and the table corrects the guess, so
/// that no decoded magnitude exceeds the true one whatever the guess's rounding.
#[inline]
fn level_of(a: f32, log2_sum: f32, per_level: f32, magnitudes: &[f32]) -> u32 {
    let tau = magnitudes.len() as u32 - 1;
    let guess = ((log2_sum - a.log2()) * per_level).ceil();
    let mut level = (guess as i64).clamp(1, tau as i64) as u32;
    while level > 1 && magnitudes[level as usize - 1] <= a {
        level -= 1;
    }
    while magnitudes[level as usize] > a {
        level += 1;
    }
    level
}

impl Codec for FastSgd {
    fn name(&self) -> &'static str {
        "fastsgd"
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
        let (b, tau) = (self.p.b, self.p.tau);
        let sum = reduce::sum_abs(values) as f32;
        let magnitudes = magnitudes(sum, b, tau);
        let (log2_sum, per_level) = (sum.log2(), 1.0 / b.log2());
        let mut kept_keys = Vec::with_capacity(keys.len());
        let mut codes = Vec::with_capacity(keys.len());
        for (&k, &v) in keys.iter().zip(values) {
            let a = v.abs();
            if a == 0.0 || a < magnitudes[tau as usize] {
                continue;
            }
            let level = level_of(a, log2_sum, per_level, &magnitudes);
            kept_keys.push(k);
            codes.push(((v < 0.0) as u64) << 7 | (level - 1) as u64);
        }
        write_message(out, ID, VERSION, dim, kept_keys.len(), |w| {
            w.write_f32(sum);
            w.write_f32(b);
            w.write(tau as u64, 8);
            w.write(self.p.l as u64, 3);
            adaptive::encode(&kept_keys, self.p.l, w);
            w.write_packed(codes.iter().copied(), 8);
        });
        Ok(())
    }

    fn key_coding(&self) -> Option<super::keys::KeyCoding> {
        Some(super::keys::KeyCoding::Adaptive)
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        read_message(bytes, ID, VERSION, out, |h, r, out| {
            let sum = check_scale("sum", r.read_f32()?)?;
            let b = r.read_f32()?;
            if !(b.is_finite() && b > 1.0) {
                return Err(CodecError::Corrupt(format!("base {b}")));
            }
            let tau = r.read(8)? as u32;
            let l = r.read(3)? as u32;
            if !(1..=128).contains(&tau) || !(1..=4).contains(&l) {
                return Err(CodecError::Corrupt(format!("tau {tau}, l {l}")));
            }
            adaptive::decode(h.count as usize, h.dim, l, r, &mut out.keys)?;
            let n = h.count as usize;
            if n.saturating_mul(8) > r.remaining_bits() {
                return Err(CodecError::Corrupt(format!(
                    "{n} value codes do not fit in the message"
                )));
            }
            let mut codes = vec![0u8; n];
            r.read_packed(&mut codes, 8, u8::MAX as u64)?;
            if let Some(&c) = codes.iter().find(|&&c| (c & 127) as u32 + 1 > tau) {
                return Err(CodecError::Corrupt(format!(
                    "level {} above tau {tau}",
                    (c & 127) + 1
                )));
            }
            // Every valid code's value: the sign bit, then the level minus one.
            let magnitudes = magnitudes(sum, b, tau);
            let value = |c: usize| {
                let m = magnitudes.get((c & 127) + 1).copied().unwrap_or(0.0);
                if c >> 7 == 1 {
                    -m
                } else {
                    m
                }
            };
            let table: Vec<f32> = (0..256).map(value).collect();
            out.values.extend(codes.iter().map(|&c| table[c as usize]));
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::measure::synth_gradient;
    use crate::codec::HEADER_LEN;

    /// A message whose codes name a level above the `τ` it declares is refused, naming both;
    /// the same message with its own `τ` decodes.
    #[test]
    fn a_level_above_tau_is_an_error() {
        let p = FastSgdParams {
            tau: 100,
            ..FastSgdParams::default()
        };
        let mut c = FastSgd::from_params(&p).unwrap();
        let g = synth_gradient(100_000, 2000, 0.01, 3);
        let mut msg = Vec::new();
        let ctx = EncodeContext::default();
        c.encode(&g.keys, &g.values, 100_000, ctx, &mut msg)
            .unwrap();
        let mut out = SparseGrad::default();
        c.decode(&msg, &mut out).unwrap();
        // τ: the byte after the sum and the base (two f32) at the start of the body.
        assert_eq!(msg[HEADER_LEN + 8], 100);
        msg[HEADER_LEN + 8] = 10;
        let e = c.decode(&msg, &mut out).unwrap_err().to_string();
        assert!(e.contains("above tau 10"), "{e}");
    }
}
