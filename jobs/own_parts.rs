//! A job program with a codec and an optimizer of its own, plugged into the standard loop
//! through the `Codec` and `UpdateRule` traits (no operator copied):
//!
//! * `int8`: every value scaled by the message's largest magnitude and rounded stochastically
//!   to a signed byte (unbiased: `E[decoded] = value`), keys as 32-bit integers; 5 bytes a pair
//!   against `none`'s 8. The decoder checks everything it reads (sizes, key order, dimension,
//!   the scale) and never trusts a count it cannot hold.
//! * AdaGrad (Duchi, Hazan & Singer 2011): `G ← G + g²; w ← w − lr·g / (√G + ε)`.
//!
//!   cargo run --release --example own_parts -- cluster jobs/quickstart.toml -n 2 --lr 0.05
//!
//! `OWN_CODEC=0` or `OWN_OPTIMIZER=0` keeps the job's codec or optimizer instead.

use std::sync::Arc;

use gradflow::codec::{check_keys, read_header, write_header, Codec, CodecError, EncodeContext};
use gradflow::dataflow::{build_training, Training};
use gradflow::optim::UpdateRule;
use gradflow::sparse::SparseGrad;
use rand::RngExt;

/// Signed bytes scaled by the largest magnitude, stochastic rounding.
struct Int8;

const ID: u8 = 200;

impl Codec for Int8 {
    fn name(&self) -> &'static str {
        "int8"
    }

    fn encode(
        &mut self,
        keys: &[u32],
        values: &[f32],
        dim: u32,
        ctx: EncodeContext,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        gradflow::codec::check_finite(keys, values)?;
        let scale = values.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
        write_header(out, ID, 1, dim, keys.len() as u32);
        out.extend_from_slice(&scale.to_le_bytes());
        keys.iter()
            .for_each(|k| out.extend_from_slice(&k.to_le_bytes()));
        let mut rng = ctx.rng();
        for &v in values {
            let x = if scale > 0.0 { v / scale } else { 0.0 };
            let low = x.floor();
            let q = low + (rng.random::<f32>() < x - low) as u8 as f32;
            out.push(q.clamp(-127.0, 127.0) as i8 as u8);
        }
        Ok(())
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        let (h, body) = read_header(bytes, ID, 1)?;
        let n = h.count as usize;
        let needed = 4 + 5 * n;
        if body.len() != needed {
            return Err(CodecError::Corrupt(format!(
                "{n} pairs need {needed} body bytes, the message has {}",
                body.len()
            )));
        }
        let scale = f32::from_le_bytes(body[..4].try_into().unwrap());
        if !(scale.is_finite() && scale >= 0.0) {
            return Err(CodecError::Corrupt(format!("scale {scale}")));
        }
        out.clear();
        let (keys, values) = body[4..].split_at(4 * n);
        out.keys.extend(
            keys.chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap())),
        );
        check_keys(&out.keys, h.dim)?;
        out.values
            .extend(values.iter().map(|&b| b as i8 as f32 * scale));
        Ok(h.dim)
    }
}

/// AdaGrad over the keys `lo..hi`.
struct AdaGrad {
    lr: f32,
    lo: u32,
    sum_sq: Vec<f32>,
}

impl UpdateRule for AdaGrad {
    fn step(&mut self, _step: u64, keys: &[u32], grads: &[f32], changes: &mut Vec<f32>) {
        changes.clear();
        for (&k, &g) in keys.iter().zip(grads) {
            let s = &mut self.sum_sq[(k - self.lo) as usize];
            *s += g * g;
            changes.push(-self.lr * g / (s.sqrt() + 1e-8));
        }
    }
}

fn main() -> std::process::ExitCode {
    let on = |name: &str| std::env::var(name).map_or(true, |v| v != "0");
    let (own_codec, own_optimizer) = (on("OWN_CODEC"), on("OWN_OPTIMIZER"));
    gradflow::cli::main_with(Arc::new(move |scope, mut training: Training| {
        if own_codec {
            training.set_codec("int8", || Box::new(Int8));
        }
        if own_optimizer {
            let lr = training.plan().optimizer.lr;
            training.set_optimizer("adagrad", move |lo, hi| {
                Box::new(AdaGrad {
                    lr,
                    lo,
                    sum_sq: vec![0.0; (hi - lo) as usize],
                })
            });
        }
        build_training(scope, training)
    }))
}
