//! Golomb-Rice coded gaps. The first key is coded as is, later ones as `gap - 1` (gaps of a
//! strictly increasing sequence are at least 1). With Rice parameter `k`, a value `v` is
//! `v >> k` in unary and its low `k` bits. For `n` keys spread uniformly over `D`, gaps are
//! close to geometric and `k = floor(log2(mean gap))` is within a few percent of the entropy
//! bound `log2(C(D, n)) / n` (measured in `gradflow codec keys`). Header: `k` in 5 bits.
//!
//! Written here rather than taken from a crate: it is twenty lines over the shared bit writer,
//! and the succinct-structure crates (e.g. sucds' Elias-Fano) serialise their own containers,
//! which would not share this message's bit stream.

use super::{bit_len, BitReader, BitWriter, CodecError, KeyBuilder};

fn parameter(keys: &[u32]) -> u32 {
    match keys.last() {
        None => 0,
        Some(&last) => {
            let mean_gap = (last as u64 + 1) / keys.len() as u64;
            bit_len(mean_gap).saturating_sub(1).min(31)
        }
    }
}

/// Writes `k`, then every gap.
pub fn encode(keys: &[u32], w: &mut BitWriter) {
    let k = parameter(keys);
    w.write(k as u64, 5);
    let mut prev = 0u32;
    for (i, &key) in keys.iter().enumerate() {
        let v = if i == 0 { key } else { key - prev - 1 } as u64;
        w.write_unary(v >> k);
        w.write(v & ((1u64 << k) - 1), k);
        prev = key;
    }
}

/// Reads `k` and `n` gaps.
pub fn decode(n: usize, dim: u32, r: &mut BitReader, out: &mut Vec<u32>) -> Result<(), CodecError> {
    let k = r.read(5)? as u32;
    let max_q = (dim as u64) >> k;
    let mut b = KeyBuilder::new(dim);
    let mut prev = None;
    for _ in 0..n {
        let q = r.read_unary(max_q)?;
        let v = (q << k) | r.read(k)?;
        let delta = if prev.is_none() { v } else { v + 1 };
        b.push_delta(prev, delta, out)?;
        prev = out.last().copied();
    }
    Ok(())
}
