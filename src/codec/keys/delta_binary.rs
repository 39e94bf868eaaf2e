//! SketchML §3.4 delta-binary keys: each delta (first key against 0) is written in the fewest of
//! 1, 2, 3 or 4 bytes, preceded by a 2-bit flag holding that byte count minus one. The paper
//! expects about 1.3-1.5 bytes per key on its workloads.

use super::{BitReader, BitWriter, CodecError, KeyBuilder};

/// Writes the flag and bytes of every delta.
pub fn encode(keys: &[u32], w: &mut BitWriter) {
    let mut prev = 0u32;
    for (i, &k) in keys.iter().enumerate() {
        let d = if i == 0 { k } else { k - prev };
        let bytes = (super::bit_len(d as u64).max(1)).div_ceil(8);
        w.write((bytes - 1) as u64, 2);
        w.write(d as u64, 8 * bytes);
        prev = k;
    }
}

/// Reads `n` flagged deltas.
pub fn decode(n: usize, dim: u32, r: &mut BitReader, out: &mut Vec<u32>) -> Result<(), CodecError> {
    let mut b = KeyBuilder::new(dim);
    let mut prev = None;
    for _ in 0..n {
        let bytes = r.read(2)? as u32 + 1;
        let d = r.read(8 * bytes)?;
        b.push_delta(prev, d, out)?;
        prev = out.last().copied();
    }
    Ok(())
}
