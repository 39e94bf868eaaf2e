//! Measuring codecs and key coders on one gradient: sizes, speed and error, as reported by
//! `gradflow codec compare` and `gradflow codec keys`.
//!
//! Gradient files: little-endian u64 count, then `count` u32 keys (strictly increasing), then
//! `count` f32 values.

use std::path::Path;
use std::time::Instant;

use rand::rngs::Xoshiro256PlusPlus;
use rand::seq::index::sample;
use rand::{RngExt, SeedableRng};
use serde::Serialize;

use super::bits::{BitReader, BitWriter};
use super::keys::KeyCoding;
use super::{build_codec, check_keys, CodecSpec, EncodeContext, HEADER_LEN};
use crate::le::{get_le, put_le};
use crate::sparse::SparseGrad;

/// Reads a gradient file; errors name the file and what is wrong.
pub fn read_gradient(path: &Path, dim: u32) -> Result<SparseGrad, String> {
    let bytes =
        crate::data::source::read_input(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let err = |m: String| format!("{}: {m}", path.display());
    if bytes.len() < 8 {
        return Err(err(format!(
            "{} bytes, expected at least the 8-byte count",
            bytes.len()
        )));
    }
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let expected = n.checked_mul(8).and_then(|b| b.checked_add(8));
    if expected != Some(bytes.len() as u64) {
        return Err(err(format!(
            "not a gradient file (a u64 count of pairs, then their keys and values, as \
             --dump-gradients writes): {} bytes hold {} pairs, but its first 8 bytes read as \
             a count of {n}",
            bytes.len(),
            (bytes.len() - 8) / 8
        )));
    }
    let n = n as usize;
    let (mut keys, mut values) = (Vec::new(), Vec::new());
    get_le(&bytes[8..8 + 4 * n], &mut keys, u32::from_le_bytes);
    get_le(&bytes[8 + 4 * n..], &mut values, f32::from_le_bytes);
    check_keys(&keys, dim).map_err(|e| err(e.to_string()))?;
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(err(format!("value of key {} is not finite", keys[i])));
    }
    Ok(SparseGrad { keys, values })
}

/// Writes a gradient file.
pub fn write_gradient(path: &Path, g: &SparseGrad) -> std::io::Result<()> {
    let mut b = Vec::with_capacity(8 + 8 * g.len());
    b.extend_from_slice(&(g.len() as u64).to_le_bytes());
    put_le(&mut b, &g.keys, u32::to_le_bytes);
    put_le(&mut b, &g.values, f32::to_le_bytes);
    crate::atomic::write(path, b)
}

/// `d` distinct keys uniform in `[0, dim)` with Laplace(0, `scale`) values.
pub fn synth_gradient(dim: u32, d: usize, scale: f64, seed: u64) -> SparseGrad {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut keys: Vec<u32> = sample(&mut rng, dim as usize, d.min(dim as usize))
        .into_iter()
        .map(|k| k as u32)
        .collect();
    keys.sort_unstable();
    let values = keys
        .iter()
        .map(|_| {
            let u: f64 = rng.random::<f64>() - 0.5;
            (-scale * u.signum() * (1.0 - 2.0 * u.abs()).max(f64::MIN_POSITIVE).ln()) as f32
        })
        .collect();
    SparseGrad { keys, values }
}

/// One row of `gradflow codec compare --csv`.
#[derive(Clone, Debug, Serialize)]
pub struct CodecRow {
    /// Codec name.
    pub codec: String,
    /// Message size.
    pub bytes: usize,
    /// Bytes per input pair.
    pub bytes_per_pair: f64,
    /// Key bits per transmitted key (absent for codecs that code keys in groups).
    pub key_bits_per_key: Option<f64>,
    /// Value bits per transmitted value: everything but header and keys (absent as above).
    pub value_bits_per_value: Option<f64>,
    /// Median encode time.
    pub encode_ms: f64,
    /// Median decode time.
    pub decode_ms: f64,
    /// Median of |decoded − true| / |true| over every input key with a nonzero value; a key the
    /// codec dropped decodes as 0 (relative error 1). The headline error: the mean is dominated
    /// by tiny values.
    pub median_rel_err: f64,
    /// Mean of the same.
    pub mean_rel_err: f64,
    /// Largest |decoded − true| over every input key (a dropped key's error is |true|).
    pub max_abs_err: f64,
    /// ‖decoded − true‖₂ / ‖true‖₂ over every input key.
    pub rel_l2_err: f64,
    /// Fraction of transmitted values whose sign flipped.
    pub sign_flips: f64,
    /// Fraction of transmitted values decoded smaller in magnitude.
    pub underestimated: f64,
    /// Fraction of keys transmitted.
    pub kept: f64,
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Measures codec `spec` on `g`: a warm-up, then `repeats` timed encode and decode runs.
pub fn measure_codec(
    spec: &CodecSpec,
    name: &str,
    g: &SparseGrad,
    dim: u32,
    repeats: usize,
) -> Result<CodecRow, String> {
    let mut codec = build_codec(spec)?;
    let ctx = EncodeContext {
        seed: 1,
        round: 0,
        worker: 0,
        ..Default::default()
    };
    let mut buf = Vec::new();
    let mut out = SparseGrad::default();
    let (mut enc, mut dec) = (Vec::new(), Vec::new());
    for i in 0..repeats.max(1) + 1 {
        buf.clear();
        let t = Instant::now();
        codec
            .encode(&g.keys, &g.values, dim, ctx, &mut buf)
            .map_err(|e| format!("{name}: {e}"))?;
        let e = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        codec
            .decode(&buf, &mut out)
            .map_err(|e| format!("{name}: {e}"))?;
        let d = t.elapsed().as_secs_f64() * 1e3;
        if i > 0 {
            enc.push(e);
            dec.push(d);
        }
    }
    let key_bits = codec.key_coding().map(|coding| {
        let mut key_buf = Vec::new();
        let mut w = BitWriter::new(&mut key_buf);
        coding.encode(&out.keys, &mut w);
        (w.finish() * 8) as f64
    });
    let n = out.len().max(1) as f64;
    // Errors over every input key (a sorted merge: a key missing from the output decoded as 0);
    // sign flips and underestimates over the transmitted keys.
    let (mut rels, mut max_abs, mut diff2, mut true2, mut flips, mut under) =
        (Vec::with_capacity(g.len()), 0f64, 0.0, 0.0, 0usize, 0usize);
    let mut j = 0;
    for (&k, &t) in g.keys.iter().zip(&g.values) {
        while j < out.len() && out.keys[j] < k {
            j += 1;
        }
        let sent = out.keys.get(j) == Some(&k);
        let d = if sent { out.values[j] } else { 0.0 };
        let err = (d as f64 - t as f64).abs();
        if t != 0.0 {
            rels.push(err / (t as f64).abs());
        }
        max_abs = max_abs.max(err);
        diff2 += err * err;
        true2 += t as f64 * t as f64;
        if sent {
            flips += (t != 0.0 && d != 0.0 && d.signum() != t.signum()) as usize;
            under += (d.abs() < t.abs()) as usize;
        }
    }
    let mean_rel = rels.iter().sum::<f64>() / rels.len().max(1) as f64;
    let median_rel = if rels.is_empty() { 0.0 } else { median(rels) };
    Ok(CodecRow {
        codec: name.to_string(),
        bytes: buf.len(),
        bytes_per_pair: buf.len() as f64 / g.len().max(1) as f64,
        key_bits_per_key: key_bits.map(|k| k / n),
        value_bits_per_value: key_bits
            .map(|k| ((buf.len() - HEADER_LEN) as f64 * 8.0 - k).max(0.0) / n),
        encode_ms: median(enc),
        decode_ms: median(dec),
        median_rel_err: median_rel,
        mean_rel_err: mean_rel,
        max_abs_err: max_abs,
        rel_l2_err: if true2 > 0.0 {
            (diff2 / true2).sqrt()
        } else {
            0.0
        },
        sign_flips: flips as f64 / n,
        underestimated: under as f64 / n,
        kept: out.len() as f64 / g.len().max(1) as f64,
    })
}

/// One row of `gradflow codec keys --csv`.
#[derive(Clone, Debug, Serialize)]
pub struct KeyRow {
    /// Key coder.
    pub coder: &'static str,
    /// Bits per key.
    pub bits_per_key: f64,
    /// `log2(C(D, d)) / d`: the least any coder can average for `d` of `D` keys.
    pub entropy_bits_per_key: f64,
    /// Median encode speed.
    pub encode_mkeys_per_s: f64,
    /// Median decode speed.
    pub decode_mkeys_per_s: f64,
}

/// `log2(C(dim, d)) / d`.
pub fn entropy_bits_per_key(dim: u32, d: usize) -> f64 {
    if d == 0 {
        return 0.0;
    }
    let (big, small) = (dim as f64, d as f64);
    let bits: f64 = (0..d)
        .map(|i| ((big - i as f64) / (small - i as f64)).log2())
        .sum();
    bits / small
}

/// Measures every key coder on `keys`.
pub fn measure_keys(keys: &[u32], dim: u32, repeats: usize) -> Result<Vec<KeyRow>, String> {
    let mut rows = Vec::new();
    for coder in KeyCoding::ALL {
        let (mut enc, mut dec) = (Vec::new(), Vec::new());
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for i in 0..repeats.max(1) + 1 {
            buf.clear();
            let t = Instant::now();
            let mut w = BitWriter::new(&mut buf);
            coder.encode(keys, &mut w);
            w.finish();
            let e = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let mut r = BitReader::new(&buf);
            coder
                .decode(keys.len(), dim, &mut r, &mut out)
                .map_err(|e| format!("{}: {e}", coder.name()))?;
            let d = t.elapsed().as_secs_f64();
            if out != keys {
                return Err(format!("{}: keys did not round-trip", coder.name()));
            }
            if i > 0 {
                enc.push(e);
                dec.push(d);
            }
        }
        let mkeys = keys.len() as f64 / 1e6;
        rows.push(KeyRow {
            coder: coder.name(),
            bits_per_key: buf.len() as f64 * 8.0 / keys.len().max(1) as f64,
            entropy_bits_per_key: entropy_bits_per_key(dim, keys.len()),
            encode_mkeys_per_s: mkeys / median(enc),
            decode_mkeys_per_s: mkeys / median(dec),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gradient_files_round_trip_and_bad_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("g.bin");
        let g = synth_gradient(1000, 100, 0.01, 1);
        assert_eq!(g.len(), 100);
        write_gradient(&p, &g).unwrap();
        assert_eq!(read_gradient(&p, 1000).unwrap(), g);
        assert!(read_gradient(&p, 10)
            .unwrap_err()
            .contains("beyond dimension"));
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.pop();
        std::fs::write(&p, &bytes).unwrap();
        assert!(read_gradient(&p, 1000)
            .unwrap_err()
            .contains("not a gradient file"));
    }

    #[test]
    fn entropy_bound_matches_a_known_value() {
        // C(4, 2) = 6 -> log2(6) / 2 bits per key.
        assert!((entropy_bits_per_key(4, 2) - 6f64.log2() / 2.0).abs() < 1e-12);
        // The setting: about 6.3 bits per key for 1M of 29M.
        let e = entropy_bits_per_key(29_000_000, 1_000_000);
        assert!((6.2..6.4).contains(&e), "{e}");
    }

    #[test]
    fn measurements_are_consistent() {
        let g = synth_gradient(100_000, 5000, 0.01, 2);
        let none = measure_codec(&CodecSpec::default(), "none", &g, 100_000, 1).unwrap();
        assert_eq!(none.bytes, HEADER_LEN + 8 * 5000);
        assert_eq!(
            (
                none.mean_rel_err,
                none.kept,
                none.key_bits_per_key,
                none.value_bits_per_value
            ),
            (0.0, 1.0, Some(32.0), Some(32.0))
        );
        // Dropped keys count: top-k at 10% leaves 90% of the keys with relative error 1.
        let spec = CodecSpec::with_defaults("topk").unwrap();
        let topk = measure_codec(&spec, "topk", &g, 100_000, 1).unwrap();
        assert_eq!((topk.kept, topk.median_rel_err), (0.1, 1.0));
        assert!((0.89..0.91).contains(&topk.mean_rel_err), "{topk:?}");
        assert!(topk.rel_l2_err > 0.3 && topk.max_abs_err > 0.0, "{topk:?}");
        let keys = measure_keys(&g.keys, 100_000, 1).unwrap();
        let rice = keys.iter().find(|r| r.coder == "rice").unwrap();
        assert!(
            rice.bits_per_key < rice.entropy_bits_per_key * 1.05,
            "{rice:?}"
        );
    }
}
