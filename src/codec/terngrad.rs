//! `terngrad`: ternary gradients (Wen et al. NeurIPS'17). Values are first clipped to
//! `[−c·σ, c·σ]` (TernGrad's gradient clipping, `c = 2.5`, σ the standard deviation of the
//! message's values; `clip = 0` turns it off); then with `s = max |v|` each value becomes
//! `s · sign(v)` with probability `|v| / s` and 0 otherwise: unbiased for the clipped values.
//! Clipping makes `s` smaller, so more values are kept and the variance falls, at the price of
//! a bias on the few values beyond `c·σ`. Zeros are not sent: the message is the kept keys and
//! their signs plus `s`.

use rand::RngExt;

use serde::{Deserialize, Serialize};

use super::keys::KeyCoding;
use super::{
    check_finite, read_selection, reduce, Codec, CodecError, EncodeContext, FromParams, Kept,
    KeptValues,
};
use crate::sparse::SparseGrad;

const ID: u8 = 10;

/// Parameters of `terngrad`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TernGradParams {
    /// Clip at `clip · σ` before ternarising (0: no clipping).
    pub clip: f64,
    /// Key coder.
    pub keys: KeyCoding,
}

impl Default for TernGradParams {
    fn default() -> Self {
        TernGradParams {
            clip: 2.5,
            keys: KeyCoding::Rice,
        }
    }
}

/// Stochastic ternarisation.
pub struct TernGrad {
    p: TernGradParams,
    kept: Kept,
}

impl FromParams for TernGrad {
    type Params = TernGradParams;
    fn from_params(p: &TernGradParams) -> Result<Self, String> {
        if !(p.clip.is_finite() && p.clip >= 0.0) {
            return Err(format!("terngrad.clip: must be >= 0, got {}", p.clip));
        }
        Ok(TernGrad {
            p: p.clone(),
            kept: Kept::default(),
        })
    }
}

/// The clipping bound `c·σ` of `values` (infinite when clipping is off or nothing varies).
fn clip_bound(values: &[f32], c: f64) -> f32 {
    if c == 0.0 || values.len() < 2 {
        return f32::INFINITY;
    }
    let (_, var) = reduce::mean_and_variance(values);
    let bound = (c * var.sqrt()) as f32;
    if bound > 0.0 {
        bound
    } else {
        f32::INFINITY
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
        let bound = clip_bound(values, self.p.clip);
        // max over v of min(|v|, bound) = min(max |v|, bound).
        let s = reduce::max_abs(values).min(bound);
        let mut rng = ctx.rng();
        self.kept.select_where(values.len(), |i| {
            let v = values[i].abs().min(bound);
            s > 0.0 && rng.random::<f64>() < (v / s) as f64
        });
        self.kept.write(
            out,
            (ID, dim, self.p.keys),
            (keys, values),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping_caps_the_scale_at_c_sigma() {
        // One outlier among small values: without clipping s is the outlier and almost nothing
        // else survives; with clipping s = 2.5σ.
        let mut values: Vec<f32> = (0..1000).map(|i| ((i % 21) as f32 - 10.0) * 1e-3).collect();
        values[500] = 1.0;
        let keys: Vec<u32> = (0..1000).collect();
        let mut out = SparseGrad::default();
        let sigma = {
            let m = values.iter().map(|&v| v as f64).sum::<f64>() / 1000.0;
            (values.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / 1000.0).sqrt()
        };
        let mut kept = [0usize; 2];
        for (j, clip) in [0.0, 2.5].into_iter().enumerate() {
            let mut c = TernGrad::from_params(&TernGradParams {
                clip,
                ..Default::default()
            })
            .unwrap();
            let mut msg = Vec::new();
            c.encode(&keys, &values, 1000, EncodeContext::default(), &mut msg)
                .unwrap();
            c.decode(&msg, &mut out).unwrap();
            let s = out.values.iter().fold(0f32, |m, v| m.max(v.abs()));
            if clip == 0.0 {
                assert_eq!(s, 1.0);
            } else {
                assert!(
                    (s as f64 - 2.5 * sigma).abs() < 1e-6,
                    "s {s}, 2.5σ {}",
                    2.5 * sigma
                );
            }
            kept[j] = out.len();
        }
        assert!(kept[1] > 5 * kept[0], "clipping keeps more: {kept:?}");
        assert!(TernGrad::from_params(&TernGradParams {
            clip: -1.0,
            ..Default::default()
        })
        .is_err());
    }
}
