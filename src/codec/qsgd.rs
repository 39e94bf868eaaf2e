//! `qsgd`: QSGD (Alistarh et al. NeurIPS'17). The values are cut into buckets of `bucket`
//! consecutive nonzeros (QSGD §3, "bucketing"; 512 in the paper's experiments), each with its own
//! norm `‖v_B‖₂`; with `s` levels, `|v_i| / ‖v_B‖₂ · s` is rounded stochastically to a
//! neighbouring integer level `ℓ`, so `E[‖v_B‖₂ · sign · ℓ / s] = v_i`. A bucket's variance grows
//! by at most `min(bucket/s², √bucket/s)` (QSGD Lemma 3.1), instead of with the whole message.
//!
//! Level-0 coordinates are not sent. Body: `s − 1`, the bucket size, the key coder, the number
//! of buckets; per bucket its norm (f32) and how many of its keys are kept (Elias gamma of
//! count + 1); the kept keys; per kept key a sign bit and `ℓ` in Elias gamma code (QSGD §3.2
//! codes levels with Elias' integer codes: small levels, which dominate, take 1 or 3 bits).
use rand::RngExt;
use serde::{Deserialize, Serialize};

use super::keys::KeyCoding;
use super::{
    check_finite, check_scale, read_message, reduce, write_message, Codec, CodecError,
    EncodeContext, FromParams,
};
use crate::sparse::SparseGrad;

const ID: u8 = 9;
const VERSION: u8 = 2;

/// Parameters of `qsgd`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QsgdParams {
    /// Number of levels `s`.
    pub levels: u32,
    /// Nonzeros per bucket (one norm each).
    pub bucket: u32,
    /// Key coder.
    pub keys: KeyCoding,
}

impl Default for QsgdParams {
    fn default() -> Self {
        QsgdParams {
            levels: 16,
            bucket: 512,
            keys: KeyCoding::Rice,
        }
    }
}

/// Largest bucket size (24 bits in the message).
const MAX_BUCKET: u32 = (1 << 24) - 1;

/// Stochastic level quantization with per-bucket norms.
pub struct Qsgd {
    p: QsgdParams,
    /// Scratch, reused across messages: the kept keys, in order, and their (level, negative).
    kept_keys: Vec<u32>,
    kept: Vec<(u32, bool)>,
    /// Scratch: per bucket, its norm and kept count.
    buckets: Vec<(f32, u32)>,
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
        if !(1..=MAX_BUCKET).contains(&p.bucket) {
            return Err(format!(
                "qsgd.bucket: must be in 1..={MAX_BUCKET}, got {}",
                p.bucket
            ));
        }
        Ok(Qsgd {
            p: p.clone(),
            kept_keys: Vec::new(),
            kept: Vec::new(),
            buckets: Vec::new(),
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
        let s = self.p.levels as f64;
        let mut rng = ctx.rng();
        let (kept_keys, kept, buckets) = (&mut self.kept_keys, &mut self.kept, &mut self.buckets);
        // Every value is written to the next slot and the slot advances only for a kept one:
        // a branch on the random level would mispredict about half the time.
        kept_keys.clear();
        kept_keys.resize(keys.len(), 0);
        kept.clear();
        kept.resize(keys.len(), (0, false));
        let mut n = 0;
        buckets.clear();
        for (bucket_keys, bucket_values) in keys
            .chunks(self.p.bucket as usize)
            .zip(values.chunks(self.p.bucket as usize))
        {
            let norm = reduce::sum_f64(bucket_values, |v| v as f64 * v as f64).sqrt() as f32;
            let before = n;
            if norm > 0.0 {
                let scale = s / norm as f64;
                for (&k, &v) in bucket_keys.iter().zip(bucket_values) {
                    let x = (v.abs() as f64 * scale).min(s);
                    let floor = x as u32; // x >= 0: truncation is the floor
                    let level = floor + (rng.random::<f64>() < x - floor as f64) as u32;
                    kept_keys[n] = k;
                    kept[n] = (level, v < 0.0);
                    n += (level > 0) as usize;
                }
            }
            buckets.push((norm, (n - before) as u32));
        }
        kept_keys.truncate(n);
        kept.truncate(n);
        let p = &self.p;
        write_message(out, ID, VERSION, dim, kept.len(), |w| {
            w.write(p.levels as u64 - 1, 20);
            w.write(p.bucket as u64, 24);
            p.keys.write_id(w);
            w.write(buckets.len() as u64, 32);
            for &(norm, count) in buckets.iter() {
                w.write_f32(norm);
                w.write_gamma(count + 1);
            }
            p.keys.encode(kept_keys, w);
            for &(level, neg) in kept.iter() {
                w.write(neg as u64, 1);
                w.write_gamma(level);
            }
        });
        Ok(())
    }

    fn key_coding(&self) -> Option<super::keys::KeyCoding> {
        Some(self.p.keys)
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        let buckets = &mut self.buckets;
        read_message(bytes, ID, VERSION, out, |h, r, out| {
            let levels = r.read(20)? as u32 + 1;
            let s = levels as f64;
            let bucket = r.read(24)? as u32;
            if bucket == 0 {
                return Err(CodecError::Corrupt("bucket size 0".into()));
            }
            let coder = KeyCoding::read_id(r)?;
            let n_buckets = r.read(32)? as usize;
            // Each bucket takes at least 33 bits: refuse counts the message cannot hold before
            // reserving anything.
            if n_buckets > r.remaining_bits() / 33 {
                return Err(CodecError::Corrupt(format!(
                    "{n_buckets} buckets do not fit in the message"
                )));
            }
            buckets.clear();
            let mut total = 0u64;
            for _ in 0..n_buckets {
                let norm = check_scale("norm", r.read_f32()?)?;
                let count = r.read_gamma(bucket + 1)? - 1;
                total += count as u64;
                buckets.push((norm, count));
            }
            if total != h.count as u64 {
                return Err(CodecError::Corrupt(format!(
                    "buckets hold {total} keys, header says {}",
                    h.count
                )));
            }
            coder.decode(h.count as usize, h.dim, r, &mut out.keys)?;
            for &(norm, count) in buckets.iter() {
                for _ in 0..count {
                    let neg = r.read(1)? == 1;
                    let level = r.read_gamma(levels)? as f64;
                    let v = (norm as f64 * level / s) as f32;
                    out.values.push(if neg { -v } else { v });
                }
            }
            Ok(())
        })
    }
}
