//! 32 bits per key: the baselines' uncompressed keys.

use super::{BitReader, BitWriter, CodecError, KeyBuilder};

/// Writes each key in 32 bits.
pub fn encode(keys: &[u32], w: &mut BitWriter) {
    for &k in keys {
        w.write(k as u64, 32);
    }
}

/// Reads `n` 32-bit keys.
pub fn decode(n: usize, dim: u32, r: &mut BitReader, out: &mut Vec<u32>) -> Result<(), CodecError> {
    let mut b = KeyBuilder::new(dim);
    for _ in 0..n {
        let k = r.read(32)?;
        b.push_delta(None, k, out)?;
    }
    Ok(())
}
