//! Entropy coding of small-alphabet symbols (sketch cells, key-length classes): rANS (Duda,
//! "Asymmetric numeral systems", arXiv:1311.2540; the construction of Giesen's `ryg_rans`) over a
//! categorical model quantised from the symbols' own histogram. The model travels with the
//! message as fixed-point probabilities (12 bits each, all nonzero, summing to 2^12), so both
//! sides build exactly the same model, and the receiver decodes through a 4096-entry table.
//!
//! Four coder states take the symbols in turn (symbol `i` goes to state `i mod 4`) and share
//! one stream of 16-bit words, so that a symbol's decoding does not wait for the one before it.
//! Before this coder, `skcompress` used the `constriction` crate's ANS coder (one state, 32-bit
//! words, the same lookup table for decoding), which has no interleaved variant: 9.3 ms to
//! encode and 9.3 ms to decode the 1.6M symbols of a message at D = 29M, d = 1M (5.8 ns per
//! symbol each way); see the README for this coder's numbers.
//!
//! No probability exceeds 1 − 2⁻⁸, which bounds the symbols a stream can hold: the model
//! has one more symbol than the alphabet, a reserved symbol 0 holding 2⁻⁸ of the mass, never
//! coded (symbol `s` is coded as `s + 1`; a stream that decodes to it is corrupt). Decoding a
//! symbol of frequency `f <= 4080` (of 4096) turns a state `x >= 2^16` into
//! `f·⌊x/4096⌋ + (x mod 4096) − c <= x − 16·⌊x/4096⌋`, so every symbol takes at least
//! −log₂(1 − 0.9375/256) ≈ 0.0053 bits of the stream (words and the four final states): a
//! receiver bounds the number of symbols by the stream's length and refuses a larger claim
//! before decoding anything (an uncapped model let a 157-byte message claim 10⁸ symbols and
//! keep the decoder busy for seconds).
//!
//! Stream: the model, the word count (32 bits), the four final states (32 bits each), then the
//! words in the order the decoder reads them. The decoder checks that every word is used and
//! that every state ends where the encoder started.

use super::bits::{BitReader, BitWriter};
use super::CodecError;

const PRECISION: u32 = 12;
const TOTAL: u32 = 1 << PRECISION;

/// Interleaved coder states.
const STATES: usize = 4;
/// A state lies in `[LOWER, 2^32)` between symbols; words are 16 bits.
const LOWER: u32 = 1 << 16;

/// Symbols per coded bit at most, with margin: 1 / −log₂(1 − 0.9375/256) ≈ 188.9.
const SYMBOLS_PER_BIT: usize = 189;
/// Fixed-point probability of the reserved, never coded, symbol 0: 2⁻⁸ of the mass.
const RESERVED: u32 = 1 << (PRECISION - 8);

/// Total of the alphabet's fixed-point probabilities: all but the reserved symbol's.
const ALPHABET_TOTAL: u32 = TOTAL - RESERVED;

/// Fixed-point probabilities for `alphabet` (≥ 2) symbols from a histogram, summing to
/// [`ALPHABET_TOTAL`] (so none exceeds 1 − 2⁻⁸): every symbol gets at least 1, the rest in
/// proportion to its count, the remainder to the most frequent symbol.
pub fn quantize(counts: &[u64]) -> Vec<u32> {
    let total: u64 = counts.iter().sum();
    let budget = ALPHABET_TOTAL as u64 - counts.len() as u64;
    let mut p: Vec<u32> = counts
        .iter()
        .map(|&c| 1 + (c * budget).checked_div(total).unwrap_or(0) as u32)
        .collect();
    let rest = ALPHABET_TOTAL - p.iter().sum::<u32>();
    let top = (0..counts.len())
        .max_by_key(|&i| (counts[i], std::cmp::Reverse(i)))
        .unwrap_or(0);
    p[top] += rest;
    p
}

/// Per coded symbol (the reserved one first): frequency and cumulative frequency.
fn frequencies(p: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let freq: Vec<u32> = std::iter::once(RESERVED).chain(p.iter().copied()).collect();
    let cum = freq
        .iter()
        .scan(0, |c, &f| {
            let at = *c;
            *c += f;
            Some(at)
        })
        .collect();
    (freq, cum)
}

/// How the encoder pushes one symbol onto a state: `x ↦ ⌊x/f⌋·2^12 + (x mod f) + c`, with the
/// division by the symbol's frequency `f` done as a multiplication by a reciprocal (Granlund
/// and Montgomery, "Division by invariant integers using multiplication", 1994; the
/// reciprocal encoder of Giesen's `ryg_rans`): a 32-bit division on every symbol was most of
/// the encoder's time.
#[derive(Clone, Copy)]
struct SymbolCoder {
    /// `m = ⌈2^44 / f⌉`: for every `x < 2^32`, `⌊x · m / 2^44⌋ = ⌊x / f⌋`. The product
    /// overshoots `x / f` by `x·(m·f − 2^44) / (f·2^44) < 2^32·f / (f·2^44) = 2^−12 ≤ 1/f`,
    /// less than the distance from `x / f` up to the next integer.
    reciprocal: u64,
    freq: u32,
    start: u32,
    /// A state at or above this sheds a word before the symbol is pushed.
    shed_from: u32,
}

impl SymbolCoder {
    fn new(freq: u32, start: u32) -> Self {
        SymbolCoder {
            reciprocal: (1u64 << 44).div_ceil(freq as u64),
            freq,
            start,
            shed_from: (LOWER >> PRECISION << 16) * freq,
        }
    }

    /// The state after pushing this symbol onto `x` (`x < shed_from`).
    #[inline]
    fn push(&self, x: u32) -> u32 {
        let q = ((x as u128 * self.reciprocal as u128) >> 44) as u32;
        (q << PRECISION) + (x - q * self.freq) + self.start
    }
}

/// Each symbol's count. Four partial histograms take the symbols in turn: with one, a run of
/// one symbol (most cells of a sketch) makes every increment wait for the one before it.
fn histogram(symbols: &[u8], alphabet: usize) -> Result<Vec<u64>, CodecError> {
    let mut partial = [[0u64; 256]; 4];
    let mut rounds = symbols.chunks_exact(4);
    for round in &mut rounds {
        for (h, &s) in partial.iter_mut().zip(round) {
            h[s as usize] += 1;
        }
    }
    for &s in rounds.remainder() {
        partial[0][s as usize] += 1;
    }
    let mut counts: Vec<u64> = (0..256)
        .map(|s| partial.iter().map(|h| h[s]).sum())
        .collect();
    if let Some(s) = (alphabet..256).find(|&s| counts[s] > 0) {
        return Err(CodecError::Corrupt(format!(
            "symbol {s} of an alphabet of {alphabet}"
        )));
    }
    counts.resize(alphabet, 0);
    Ok(counts)
}

/// Writes the model for `symbols` (each `< alphabet`) and the rANS-coded symbols.
pub fn write_symbols(w: &mut BitWriter, symbols: &[u8], alphabet: usize) -> Result<(), CodecError> {
    let p = quantize(&histogram(symbols, alphabet)?);
    p.iter().for_each(|&x| w.write(x as u64, PRECISION));
    let (freq, cum) = frequencies(&p);
    let coders: Vec<SymbolCoder> = freq
        .iter()
        .zip(&cum)
        .map(|(&f, &c)| SymbolCoder::new(f, c))
        .collect();
    // Encoding runs backwards, so that decoding runs forwards; a state about to grow past
    // 2^32 first sheds its low 16 bits as a word. Words are written where the cursor is and
    // the cursor advances only for a shed word (no branch: whether a state sheds is close to
    // a coin flip).
    let mut x = [LOWER; STATES];
    let mut words = vec![0u16; symbols.len() + 1];
    let mut n = 0;
    let mut put = |state: u32, s: u8| {
        let coder = &coders[s as usize + 1];
        let shed = state >= coder.shed_from;
        words[n] = state as u16;
        n += shed as usize;
        coder.push(if shed { state >> 16 } else { state })
    };
    // The last symbols that do not fill a round of the states, then whole rounds, with the
    // states in registers.
    let whole = symbols.len() / STATES * STATES;
    for (i, &s) in symbols.iter().enumerate().skip(whole).rev() {
        x[i % STATES] = put(x[i % STATES], s);
    }
    let [mut x0, mut x1, mut x2, mut x3] = x;
    for round in symbols[..whole].chunks_exact(STATES).rev() {
        x3 = put(x3, round[3]);
        x2 = put(x2, round[2]);
        x1 = put(x1, round[1]);
        x0 = put(x0, round[0]);
    }
    let x = [x0, x1, x2, x3];
    w.write(n as u64, 32);
    x.iter().for_each(|&s| w.write(s as u64, 32));
    words[..n].iter().rev().for_each(|&x| w.write(x as u64, 16));
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
    if p.contains(&0) || p.iter().map(|&x| x as u64).sum::<u64>() != ALPHABET_TOTAL as u64 {
        return Err(CodecError::Corrupt("entropy model probabilities".into()));
    }
    let (freq, cum) = frequencies(&p);
    let count = r.read(32)? as usize;
    let mut x = [0u32; STATES];
    for state in &mut x {
        *state = r.read(32)? as u32;
    }
    if x.iter().any(|&s| s < LOWER) {
        return Err(CodecError::Corrupt("entropy coder state".into()));
    }
    // The words and the final states bound the symbol count.
    let words_present = r.remaining_bits() / 16;
    if count > words_present {
        return Err(CodecError::Corrupt(format!(
            "{count} coded words claimed; {words_present} present"
        )));
    }
    let capacity = SYMBOLS_PER_BIT * (16 * count + 32 * STATES);
    if n > capacity {
        return Err(CodecError::Corrupt(format!(
            "{n} entropy-coded symbols claimed; {count} coded words hold at most {capacity}"
        )));
    }
    let mut words = Vec::with_capacity(count + 1);
    for _ in 0..count {
        words.push(r.read(16)? as u16);
    }
    words.push(0); // read, and counted as overrun, by a stream that runs out
                   // Per slot of the 4096: the symbol, its frequency and the slot's offset in the symbol.
    let mut table = vec![0u64; TOTAL as usize];
    for (s, (&f, &c)) in freq.iter().zip(&cum).enumerate() {
        for slot in c..c + f {
            table[slot as usize] = s as u64 | (f as u64) << 16 | ((slot - c) as u64) << 32;
        }
    }
    out.clear();
    out.resize(n, 0);
    // Corruption is checked once at the end: a reserved symbol, a stream that runs out (the
    // cursor passes the last word) or one that is not used up, or a state that does not end
    // where the encoder started.
    let (mut at, mut reserved) = (0usize, false);
    let mut take = |state: u32, o: &mut u8| {
        let e = table[(state & (TOTAL - 1)) as usize];
        let (s, f, offset) = (e as u16, (e >> 16) as u32 & 0xFFFF, (e >> 32) as u32);
        reserved |= s == 0;
        *o = s.wrapping_sub(1) as u8;
        let state = f * (state >> PRECISION) + offset;
        let refill = state < LOWER;
        let word = words[at.min(count)] as u32;
        at += refill as usize;
        if refill {
            state << 16 | word
        } else {
            state
        }
    };
    // Whole rounds of the states, in registers, then the last symbols.
    let [mut x0, mut x1, mut x2, mut x3] = x;
    let mut rounds = out.chunks_exact_mut(STATES);
    for round in &mut rounds {
        x0 = take(x0, &mut round[0]);
        x1 = take(x1, &mut round[1]);
        x2 = take(x2, &mut round[2]);
        x3 = take(x3, &mut round[3]);
    }
    let mut x = [x0, x1, x2, x3];
    for (state, o) in x.iter_mut().zip(rounds.into_remainder()) {
        *state = take(*state, o);
    }
    if reserved || at > count {
        return Err(CodecError::Corrupt("entropy-coded stream".into()));
    }
    if at < count || x.iter().any(|&s| s != LOWER) {
        return Err(CodecError::Corrupt(
            "entropy-coded stream has data left over".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any symbols of any alphabet round-trip, whatever their count modulo the four states
        /// and however skewed, and a stream one word short or one word long is refused.
        #[test]
        fn any_symbols_round_trip_and_damaged_streams_are_refused(
            alphabet in 2usize..=256,
            raw in proptest::collection::vec((0u32..1000, any::<u8>()), 0..3000),
            skew in 0u32..4,
        ) {
            // With skew > 0 most symbols are one value, so that states shed words rarely.
            let symbols: Vec<u8> = raw
                .iter()
                .map(|&(r, s)| if r % 4 < skew { 1 } else { s as usize % alphabet } as u8)
                .collect();
            let mut buf = Vec::new();
            let mut w = BitWriter::new(&mut buf);
            write_symbols(&mut w, &symbols, alphabet).unwrap();
            let bits = w.finish();
            let mut out = Vec::new();
            let mut r = BitReader::new(&buf);
            read_symbols(&mut r, symbols.len(), alphabet, &mut out).unwrap();
            prop_assert_eq!(&out, &symbols);
            prop_assert!(r.remaining_bits() < 8, "{} bits left of {bits} bytes", r.remaining_bits());
            // The same stream with its word count one lower (a word left over) or one higher
            // (a word missing, then the stream runs into the padding).
            for delta in [-1i64, 1] {
                let mut damaged = Vec::new();
                let mut w = BitWriter::new(&mut damaged);
                let mut r = BitReader::new(&buf);
                for _ in 0..alphabet {
                    w.write(r.read(PRECISION).unwrap(), PRECISION);
                }
                let count = r.read(32).unwrap() as i64 + delta;
                if count < 0 {
                    continue;
                }
                w.write(count as u64, 32);
                while r.remaining_bits() >= 16 {
                    w.write(r.read(16).unwrap(), 16);
                }
                w.finish();
                let got = read_symbols(&mut BitReader::new(&damaged), symbols.len(), alphabet, &mut out);
                prop_assert!(got.is_err(), "word count {delta:+} decoded");
            }
        }
    }

    #[test]
    fn the_reciprocal_divides_exactly() {
        // Every frequency a model can hold, at the states most likely to round wrongly: next
        // to multiples of the frequency, and at the top of the range.
        for f in 1..=ALPHABET_TOTAL {
            let coder = SymbolCoder::new(f, 7);
            let near_multiples = (0..64u64).flat_map(|k| {
                let m = (u32::MAX as u64 / f as u64) * k / 63 * f as u64;
                [m.saturating_sub(1), m, m + 1]
            });
            for x in near_multiples.chain([u32::MAX as u64 - 1]) {
                let x = x.min(coder.shed_from as u64 - 1) as u32;
                let want = ((x / f) << PRECISION) + x % f + 7;
                assert_eq!(coder.push(x), want, "x {x}, f {f}");
            }
        }
    }

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
        assert_eq!(q.iter().sum::<u32>(), ALPHABET_TOTAL);
        assert!(q.iter().all(|&x| x >= 1));
        let skewed = quantize(&[1_000_000, 0, 1]);
        assert_eq!(skewed.iter().sum::<u32>(), ALPHABET_TOTAL);
        assert_eq!((skewed[1], skewed[2]), (1, 1), "{skewed:?}");
        // A long run of one symbol costs bits (it did not when that symbol had cumulative
        // probability 0: the coder's zero state swallowed it), so it fits the receiver's bound.
        for first in [0u8, 5] {
            let run = vec![first; 100_000];
            let mut buf = Vec::new();
            let mut w = BitWriter::new(&mut buf);
            write_symbols(&mut w, &run, 32).unwrap();
            w.finish();
            read_symbols(&mut BitReader::new(&buf), run.len(), 32, &mut out).unwrap();
            assert_eq!(out, run, "a run of {first}");
        }
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
        // A model that takes the reserved symbol's mass (as the format without the reserve
        // did), or gives a symbol nothing, is corrupt; the most skewed valid one is not.
        for (top, other, ok) in [
            ((1 << PRECISION) - 1, 1, false),
            (ALPHABET_TOTAL, 0, false),
            (ALPHABET_TOTAL - 1, 1, true),
        ] {
            let mut model = Vec::new();
            let mut w = BitWriter::new(&mut model);
            [top, other]
                .iter()
                .for_each(|&x| w.write(x as u64, PRECISION));
            w.write(0, 32); // no coded words
            (0..STATES).for_each(|_| w.write(LOWER as u64, 32)); // the states as they start
            w.finish();
            let got = read_symbols(&mut BitReader::new(&model), 0, 2, &mut out);
            assert_eq!(got.is_ok(), ok, "top {top}: {got:?}");
        }
    }
}
