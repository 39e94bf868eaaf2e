//! Entropy coding of small-alphabet symbols (sketch cells, key-length classes) with an ANS coder
//! from the `constriction` crate, over a categorical model quantised from the symbols' own
//! histogram. The model travels with the message as fixed-point probabilities (24 bits each,
//! all nonzero, summing to 2^24), so both sides build exactly the same model.
//!
//! No probability exceeds [`MAX_PROBABILITY`] (1 − 2⁻⁸), so every symbol costs at least
//! −log₂(1 − 2⁻⁸) ≈ 0.0056 bits: a receiver bounds the number of symbols a stream can hold by
//! its length and refuses a larger claim before decoding anything (an uncapped 24-bit model lets
//! a 157-byte message claim 10⁸ symbols and keep the decoder busy for seconds).

use constriction::stream::model::DefaultContiguousCategoricalEntropyModel;
use constriction::stream::stack::DefaultAnsCoder;
use constriction::stream::Decode;

use super::bits::{BitReader, BitWriter};
use super::CodecError;

const PRECISION: u32 = 24;

/// The largest fixed-point probability a model may give one symbol: 1 − 2⁻⁸.
pub const MAX_PROBABILITY: u32 = (1 << PRECISION) - (1 << (PRECISION - 8));

/// Symbols per coded bit at most, with margin: 1 / −log₂(1 − 2⁻⁸) ≈ 177.1.
const SYMBOLS_PER_BIT: usize = 178;
/// Fixed-point probabilities for `alphabet` (≥ 2) symbols from a histogram: every symbol gets
/// at least 1, the rest in proportion to its count, the remainder to the most frequent symbol,
/// whose share is capped at [`MAX_PROBABILITY`] (the excess goes to the next symbol).
pub fn quantize(counts: &[u64]) -> Vec<u32> {
    let total: u64 = counts.iter().sum();
    let budget = (1u64 << PRECISION) - counts.len() as u64;
    let mut p: Vec<u32> = counts
        .iter()
        .map(|&c| 1 + (c * budget).checked_div(total).unwrap_or(0) as u32)
        .collect();
    let rest = (1u32 << PRECISION) - p.iter().sum::<u32>();
    let top = (0..counts.len())
        .max_by_key(|&i| (counts[i], std::cmp::Reverse(i)))
        .unwrap_or(0);
    p[top] += rest;
    if p[top] > MAX_PROBABILITY && p.len() > 1 {
        let excess = p[top] - MAX_PROBABILITY;
        p[top] = MAX_PROBABILITY;
        p[(top + 1) % counts.len()] += excess;
    }
    p
}

fn model(p: &[u32]) -> Result<DefaultContiguousCategoricalEntropyModel, CodecError> {
    DefaultContiguousCategoricalEntropyModel::from_nonzero_fixed_point_probabilities(p, false)
        .map_err(|_| CodecError::Corrupt("invalid entropy model".into()))
}

/// Writes the model for `symbols` (each `< alphabet`) and the ANS-coded symbols.
pub fn write_symbols(w: &mut BitWriter, symbols: &[u8], alphabet: usize) -> Result<(), CodecError> {
    let mut counts = vec![0u64; alphabet];
    symbols.iter().for_each(|&s| counts[s as usize] += 1);
    let p = quantize(&counts);
    p.iter().for_each(|&x| w.write(x as u64, PRECISION));
    let m = model(&p)?;
    let mut ans = DefaultAnsCoder::new();
    ans.encode_iid_symbols_reverse(symbols.iter().map(|&s| s as usize), &m)
        .map_err(|e| CodecError::Corrupt(format!("entropy coder: {e:?}")))?;
    let words = ans
        .into_compressed()
        .map_err(|e| CodecError::Corrupt(format!("entropy coder: {e:?}")))?;
    w.write(words.len() as u64, 32);
    words.iter().for_each(|&x| w.write(x as u64, 32));
    Ok(())
}

/// Reads `n` symbols written by [`write_symbols`] into `out`, checking the model and that the
/// coded stream is used up exactly.
pub fn read_symbols(
    r: &mut BitReader,
    n: usize,
    alphabet: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let p = (0..alphabet)
        .map(|_| r.read(PRECISION).map(|x| x as u32))
        .collect::<Result<Vec<u32>, _>>()?;
    if p.contains(&0)
        || p.iter().any(|&x| x > MAX_PROBABILITY)
        || p.iter().map(|&x| x as u64).sum::<u64>() != 1 << PRECISION
    {
        return Err(CodecError::Corrupt("entropy model probabilities".into()));
    }
    let m = model(&p)?;
    let count = r.read(32)? as usize;
    // The coded words (and the coder's final state, at most 64 bits) bound the symbol count.
    let words_present = r.remaining_bits() / 32;
    let capacity = SYMBOLS_PER_BIT * 32 * (count.min(words_present) + 2);
    if n > capacity {
        return Err(CodecError::Corrupt(format!(
            "{n} entropy-coded symbols claimed; {count} coded words hold at most {capacity}"
        )));
    }
    let mut words = Vec::new();
    for _ in 0..count {
        words.push(r.read(32)? as u32);
    }
    let mut ans = DefaultAnsCoder::from_compressed(words)
        .map_err(|_| CodecError::Corrupt("entropy-coded stream".into()))?;
    out.clear();
    for s in ans.decode_iid_symbols(n, &m) {
        let s = s.map_err(|_| CodecError::Corrupt("entropy-coded stream".into()))?;
        out.push(s as u8);
    }
    if !ans.is_empty() {
        return Err(CodecError::Corrupt(
            "entropy-coded stream has data left over".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_round_trip_near_their_entropy() {
        let symbols: Vec<u8> = (0..20_000u32)
            .map(|i| if i % 10 == 0 { (i % 31) as u8 } else { 3 })
            .collect();
        let mut buf = Vec::new();
        let mut w = BitWriter::new(&mut buf);
        write_symbols(&mut w, &symbols, 32).unwrap();
        w.finish();
        let mut out = Vec::new();
        let mut r = BitReader::new(&buf);
        read_symbols(&mut r, symbols.len(), 32, &mut out).unwrap();
        r.finish().unwrap();
        assert_eq!(out, symbols);
        // 90% one symbol: entropy ~0.9 bits; 5 bits raw.
        let bits = (buf.len() * 8) as f64 / symbols.len() as f64;
        assert!(bits < 1.2, "{bits} bits per symbol");
        let q = quantize(&[0, 5, 0, 100]);
        assert_eq!(q.iter().map(|&x| x as u64).sum::<u64>(), 1 << 24);
        assert!(q.iter().all(|&x| x >= 1));
        let skewed = quantize(&[1_000_000, 0, 1]);
        assert_eq!(skewed[0], MAX_PROBABILITY, "{skewed:?}");
        assert_eq!(skewed.iter().map(|&x| x as u64).sum::<u64>(), 1 << 24);
    }

    #[test]
    fn a_symbol_count_the_stream_cannot_hold_is_refused_before_decoding() {
        // 1,000 copies of one symbol: the most compressible stream there is.
        let symbols = vec![0u8; 1_000];
        let mut buf = Vec::new();
        let mut w = BitWriter::new(&mut buf);
        write_symbols(&mut w, &symbols, 32).unwrap();
        w.finish();
        let mut out = Vec::new();
        read_symbols(&mut BitReader::new(&buf), 1_000, 32, &mut out).unwrap();
        assert_eq!(out, symbols);
        let e = read_symbols(&mut BitReader::new(&buf), 100_000_000, 32, &mut out).unwrap_err();
        assert!(e.to_string().contains("hold at most"), "{e}");
        // A model above the cap is corrupt; the same model at the cap is not.
        for (top, ok) in [((1 << 24) - 1, false), (MAX_PROBABILITY, true)] {
            let mut model = Vec::new();
            let mut w = BitWriter::new(&mut model);
            [top, (1 << 24) - top]
                .iter()
                .for_each(|&x| w.write(x as u64, PRECISION));
            w.write(0, 32); // no coded words
            w.finish();
            let got = read_symbols(&mut BitReader::new(&model), 0, 2, &mut out);
            assert_eq!(got.is_ok(), ok, "top {top}: {got:?}");
        }
    }
}
