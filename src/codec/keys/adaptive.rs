//! FastSGD §3.3 (Algorithm 2) adaptive bit-level delta keys. `M` is the bit length of the largest
//! delta; with an `l`-bit length flag the `2^l` allowed lengths are `ceil(M (i+1) / 2^l)`
//! (for l = 2: M/4, M/2, 3M/4, M, rounded up). Each delta is its flag followed by the delta in
//! the smallest allowed length that holds it. Header: `M` in 6 bits.

use super::{bit_len, BitReader, BitWriter, CodecError, KeyBuilder};

/// The paper's default flag width.
pub const DEFAULT_FLAG_BITS: u32 = 2;

fn lengths(max_bits: u32, flag_bits: u32) -> Vec<u32> {
    let classes = 1u32 << flag_bits;
    (1..=classes)
        .map(|i| (max_bits * i).div_ceil(classes))
        .collect()
}

/// Writes `M`, then flag + delta for every key.
pub fn encode(keys: &[u32], flag_bits: u32, w: &mut BitWriter) {
    let mut prev = 0u32;
    let mut max = 0u32;
    for (i, &k) in keys.iter().enumerate() {
        max = max.max(if i == 0 { k } else { k - prev });
        prev = k;
    }
    let m = bit_len(max as u64);
    w.write(m as u64, 6);
    let lens = lengths(m, flag_bits);
    prev = 0;
    for (i, &k) in keys.iter().enumerate() {
        let d = if i == 0 { k } else { k - prev };
        let need = bit_len(d as u64);
        let class = lens
            .iter()
            .position(|&l| l >= need)
            .expect("M bounds every delta");
        w.write(class as u64, flag_bits);
        w.write(d as u64, lens[class]);
        prev = k;
    }
}

/// Reads `M` and `n` flagged deltas.
pub fn decode(
    n: usize,
    dim: u32,
    flag_bits: u32,
    r: &mut BitReader,
    out: &mut Vec<u32>,
) -> Result<(), CodecError> {
    let m = r.read(6)? as u32;
    if m > 32 {
        return Err(CodecError::Corrupt(format!("delta length {m} > 32 bits")));
    }
    let lens = lengths(m, flag_bits);
    let mut b = KeyBuilder::new(dim);
    let mut prev = None;
    for _ in 0..n {
        let class = r.read(flag_bits)? as usize;
        let d = r.read(lens[class])?;
        b.push_delta(prev, d, out)?;
        prev = out.last().copied();
    }
    Ok(())
}
