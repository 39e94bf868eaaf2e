//! Entropy coding of small-alphabet symbols (sketch cells, key-length classes) with an ANS coder
//! from the `constriction` crate, over a categorical model quantised from the symbols' own
//! histogram. The model travels with the message as fixed-point probabilities (24 bits each,
//! all nonzero, summing to 2^24), so both sides build exactly the same model.

use constriction::stream::model::DefaultContiguousCategoricalEntropyModel;
use constriction::stream::stack::DefaultAnsCoder;
use constriction::stream::Decode;

use super::bits::{BitReader, BitWriter};
use super::CodecError;

const PRECISION: u32 = 24;

/// Fixed-point probabilities for `alphabet` symbols from a histogram: every symbol gets at
/// least 1, the rest in proportion to its count, the remainder to the most frequent symbol.
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
    if p.contains(&0) || p.iter().map(|&x| x as u64).sum::<u64>() != 1 << PRECISION {
        return Err(CodecError::Corrupt("entropy model probabilities".into()));
    }
    let m = model(&p)?;
    let count = r.read(32)? as usize;
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
    }
}
