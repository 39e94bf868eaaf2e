//! `gspar`: gradient sparsification with unbiased probabilities (Wangni et al., NeurIPS'18,
//! `shared/papers/gspar-neurips18.txt`).
//!
//! Coordinate `i` is kept with probability `p_i` and sent as `g_i / p_i`, so `E[Q(g)] = g`. The
//! probabilities are `p_i = 1` on a top set `T` and `p_i = C |g_i|` elsewhere:
//!
//! * `greedy` (Algorithm 3), target density κ: start from `p_i = min(κ d |g_i| / Σ|g|, 1)`; then
//!   repeatedly `c = (κ d - d + |I|) / Σ_{i∈I} p_i` over the unsaturated set `I` and
//!   `p_i ← min(c p_i, 1)` while `c > 1`, at most `iterations` times (2 in the paper);
//! * `closed_form` (Algorithm 2), variance budget ε: with `|g|` sorted descending, the smallest
//!   `k` with `|g_(k+1)| Σ_{i>k}|g_(i)| <= ε Σ g² + Σ_{i>k} g_(i)²` gives `T` = the top `k` and
//!   `C = Σ_{i>k}|g_(i)| / (ε Σ g² + Σ_{i>k} g_(i)²)`; the variance grows by at most `1 + ε`.
//!
//! Hybrid coding (§2.3): the top set is sent as (key, f32 value); every other kept coordinate is
//! `sign(g_i) / C`, so it is sent as (key, sign bit) plus one f32 `1/C` for the message.
//! Body: `1/C` (f32), `|T|` (32 bits), top keys, top values, other keys, their signs.

use rand::RngExt;
use serde::{Deserialize, Serialize};

use super::keys::KeyCoding;
use super::{
    check_finite, check_scale, read_message, write_message, Codec, CodecError, EncodeContext,
    FromParams,
};
use crate::sparse::SparseGrad;

const ID: u8 = 4;
const VERSION: u8 = 1;

/// How the probabilities are chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GsparVariant {
    /// Algorithm 3, target density `density`.
    #[default]
    Greedy,
    /// Algorithm 2, variance budget `eps`.
    ClosedForm,
}

/// Parameters of `gspar`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GsparParams {
    /// Which algorithm.
    pub variant: GsparVariant,
    /// Target density κ in (0, 1] (greedy).
    pub density: f64,
    /// Greedy iterations.
    pub iterations: u32,
    /// Variance budget ε > 0 (closed form).
    pub eps: f64,
    /// Key coder.
    pub keys: KeyCoding,
}

impl Default for GsparParams {
    fn default() -> Self {
        GsparParams {
            variant: GsparVariant::Greedy,
            density: 0.1,
            iterations: 2,
            eps: 1.0,
            keys: KeyCoding::Rice,
        }
    }
}

/// Unbiased sparsification.
pub struct Gspar {
    p: GsparParams,
}

impl FromParams for Gspar {
    type Params = GsparParams;
    fn from_params(p: &GsparParams) -> Result<Self, String> {
        if !(p.density > 0.0 && p.density <= 1.0) {
            return Err(format!(
                "gspar.density: must be in (0, 1], got {}",
                p.density
            ));
        }
        if !(p.eps.is_finite() && p.eps > 0.0) {
            return Err(format!(
                "gspar.eps: must be a positive number, got {}",
                p.eps
            ));
        }
        Ok(Gspar { p: p.clone() })
    }
}

/// The probabilities as (top-set flags, C): `p_i = 1` where flagged, else `C |g_i|` (< 1).
pub fn probabilities(values: &[f32], p: &GsparParams) -> (Vec<bool>, f64) {
    let a: Vec<f64> = values.iter().map(|v| v.abs() as f64).collect();
    let d = a.len() as f64;
    let s1: f64 = a.iter().sum();
    if s1 == 0.0 {
        return (vec![false; a.len()], 0.0);
    }
    match p.variant {
        GsparVariant::Greedy => {
            let kd = p.density * d;
            let mut c_total = kd / s1;
            for _ in 0..p.iterations {
                let (mut unsat, mut mass) = (0.0, 0.0);
                for &x in &a {
                    let pi = c_total * x;
                    if pi < 1.0 {
                        unsat += 1.0;
                        mass += pi;
                    }
                }
                if mass == 0.0 {
                    break;
                }
                let c = (kd - d + unsat) / mass;
                if c <= 1.0 {
                    break;
                }
                c_total *= c;
            }
            (a.iter().map(|&x| c_total * x >= 1.0).collect(), c_total)
        }
        GsparVariant::ClosedForm => {
            let mut order: Vec<usize> = (0..a.len()).collect();
            order.sort_unstable_by(|&i, &j| a[j].total_cmp(&a[i]).then(i.cmp(&j)));
            let total_sq: f64 = a.iter().map(|x| x * x).sum();
            // Suffix sums over the sorted magnitudes.
            let mut tail = vec![(0.0, 0.0); a.len() + 1];
            for r in (0..a.len()).rev() {
                let x = a[order[r]];
                tail[r] = (tail[r + 1].0 + x, tail[r + 1].1 + x * x);
            }
            let k = (0..a.len())
                .find(|&k| a[order[k]] * tail[k].0 <= p.eps * total_sq + tail[k].1)
                .unwrap_or(a.len());
            let c = if k < a.len() {
                tail[k].0 / (p.eps * total_sq + tail[k].1)
            } else {
                0.0
            };
            let mut top = vec![false; a.len()];
            order[..k].iter().for_each(|&i| top[i] = true);
            (top, c)
        }
    }
}

impl Codec for Gspar {
    fn name(&self) -> &'static str {
        "gspar"
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
        let (top, c) = probabilities(values, &self.p);
        let mut rng = ctx.rng();
        let (mut top_keys, mut top_vals, mut rest_keys, mut rest_neg) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for i in 0..values.len() {
            if top[i] {
                top_keys.push(keys[i]);
                top_vals.push(values[i]);
            } else if c > 0.0 && rng.random::<f64>() < c * values[i].abs() as f64 {
                rest_keys.push(keys[i]);
                rest_neg.push(values[i] < 0.0);
            }
        }
        let scale = if c > 0.0 { (1.0 / c) as f32 } else { 0.0 };
        write_message(
            out,
            ID,
            VERSION,
            dim,
            top_keys.len() + rest_keys.len(),
            |w| {
                self.p.keys.write_id(w);
                w.write_f32(scale);
                w.write(top_keys.len() as u64, 32);
                self.p.keys.encode(&top_keys, w);
                top_vals.iter().for_each(|&v| w.write_f32(v));
                self.p.keys.encode(&rest_keys, w);
                rest_neg.iter().for_each(|&n| w.write(n as u64, 1));
            },
        );
        Ok(())
    }

    fn key_coding(&self) -> Option<super::keys::KeyCoding> {
        Some(self.p.keys)
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        read_message(bytes, ID, VERSION, out, |h, r, out| {
            let coder = KeyCoding::read_id(r)?;
            let scale = check_scale("scale", r.read_f32()?)?;
            let n_top = r.read(32)? as usize;
            if n_top > h.count as usize {
                return Err(CodecError::Corrupt(format!(
                    "{n_top} top keys of {}",
                    h.count
                )));
            }
            let mut top_keys = Vec::new();
            coder.decode(n_top, h.dim, r, &mut top_keys)?;
            let top_vals = (0..n_top)
                .map(|_| r.read_f32())
                .collect::<Result<Vec<f32>, _>>()?;
            let mut rest_keys = Vec::new();
            coder.decode(h.count as usize - n_top, h.dim, r, &mut rest_keys)?;
            let rest = rest_keys
                .iter()
                .map(|_| Ok(if r.read(1)? == 1 { -scale } else { scale }))
                .collect::<Result<Vec<f32>, CodecError>>()?;
            // Merge the two sorted key lists.
            let (mut i, mut j) = (0, 0);
            while i < top_keys.len() || j < rest_keys.len() {
                let take_top =
                    j == rest_keys.len() || (i < top_keys.len() && top_keys[i] < rest_keys[j]);
                if take_top {
                    out.keys.push(top_keys[i]);
                    out.values.push(top_vals[i]);
                    i += 1;
                } else {
                    if i < top_keys.len() && top_keys[i] == rest_keys[j] {
                        return Err(CodecError::BadKeys(format!(
                            "key {} in both sets",
                            rest_keys[j]
                        )));
                    }
                    out.keys.push(rest_keys[j]);
                    out.values.push(rest[j]);
                    j += 1;
                }
            }
            Ok(())
        })
    }
}
