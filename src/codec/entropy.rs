//! Entropy coding of small-alphabet symbols (sketch cells, key-length classes): rANS (Duda,
//! "Asymmetric numeral systems", arXiv:1311.2540; the construction of Giesen's `ryg_rans`) over a
//! categorical model quantised from the symbols' own histogram. The model travels with the
//! message as fixed-point probabilities (12 bits each, all nonzero, summing to 2^12), so both
//! sides build exactly the same model, and the receiver decodes through a 4096-entry table.
//!
//! Several coder states take the symbols in turn (symbol `i` goes to state `i mod S`) and share
//! one stream of 16-bit words, so that a symbol's decoding does not wait for the one before it:
//! four in a stream of fewer than 2^16 symbols, 32 (two AVX-512 registers) from there. With
//! AVX-512 (`super::cpu::avx512`) a long stream's whole rounds are coded in vector registers
//! (the encoder's columns for an alphabet of up to 64 symbols held in registers and looked up
//! by permutes, else gathered; the decoder's slot table gathered, one word per slot where the
//! symbols fit a byte; shed words compressed, refill words expanded, the encoder's division
//! through `f64` reciprocals), otherwise one state at a time, to the same stream.
//! Each round's words are read in the order of their states; the encoder, running backwards,
//! writes them in reverse.
//! Before this coder, `skcompress` used the `constriction` crate's ANS coder (one state, 32-bit
//! words, the same lookup table for decoding), which has no interleaved variant and was
//! the slower of the two (figures: `docs/results.md`, "Design measurements"); `docs/codecs.md` has this coder's numbers.
//!
//! No probability exceeds 1 − 2⁻⁸, which bounds the symbols a stream can hold: the model
//! has one more symbol than the alphabet, a reserved symbol 0 holding 2⁻⁸ of the mass, never
//! coded (symbol `s` is coded as `s + 1`; a stream that decodes to it is corrupt). Decoding a
//! symbol of frequency `f <= 4080` (of 4096) turns a state `x >= 2^16` into
//! `f·⌊x/4096⌋ + (x mod 4096) − c <= x − 16·⌊x/4096⌋`, so every symbol takes at least
//! −log₂(1 − 0.9375/256) ≈ 0.0053 bits of the stream (words and the final states): a
//! receiver bounds the number of symbols by the stream's length and refuses a larger claim
//! before decoding anything (an uncapped model let a 157-byte message claim 10⁸ symbols and
//! keep the decoder busy for seconds).
//!
//! Stream: the model, one bit for 32 states (else 4), the word count (32 bits), the final
//! states (32 bits each), then the words in the order the decoder reads them. The decoder checks that every word is used and
//! that every state ends where the encoder started.

use super::bits::{BitReader, BitWriter};
use super::CodecError;

const PRECISION: u32 = 12;
const TOTAL: u32 = 1 << PRECISION;

/// Interleaved coder states of a long stream: two AVX-512 registers of 32-bit states, so that
/// one register's gathers overlap the other's arithmetic (with one, each round waited for
/// the round before).
const STATES: usize = 32;
/// Interleaved coder states of a short stream, where 28 more final states (112 bytes) would
/// show in the message's size.
const NARROW: usize = 4;
/// Symbols from which a stream has [`STATES`] states. The extra states cost 112 bytes: about
/// 1% of a stream of 2^16 symbols at 1.3 bits each, less for longer ones (0.01% of a message
/// at D = 29M, d = 1M).
const WIDE_FROM: usize = 1 << 16;
/// AVX-512 registers of states.
#[cfg(target_arch = "x86_64")]
const VECTORS: usize = STATES / 16;
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

    /// Pushes this symbol onto `state`, first shedding the state's low word at `words[*n]`
    /// when it must (the word is always written; the cursor advances only for a shed one:
    /// whether a state sheds is close to a coin flip, so no branch).
    #[inline]
    fn put(&self, state: u32, words: &mut [u32], n: &mut usize) -> u32 {
        let shed = state >= self.shed_from;
        words[*n] = state & 0xFFFF;
        *n += shed as usize;
        self.push(if shed { state >> 16 } else { state })
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

/// Writes the model for `symbols` (each `< alphabet`) and the rANS-coded symbols (a
/// [`SymbolWriter`] of its own: a coder of many streams keeps one).
pub fn write_symbols(w: &mut BitWriter, symbols: &[u8], alphabet: usize) -> Result<(), CodecError> {
    SymbolWriter::default().write(w, symbols, alphabet)
}

/// Writes symbol streams ([`write_symbols`]), keeping its buffer of coded words from one
/// stream to the next: a fresh buffer of a word per symbol was zeroed and faulted in for every
/// stream (at D = 29M, d = 1M, 6 MB and a tenth of the encoder's rANS time).
#[derive(Default)]
pub struct SymbolWriter {
    words: Vec<u32>,
}

impl SymbolWriter {
    /// Writes the model for `symbols` (each `< alphabet`) and the rANS-coded symbols.
    pub fn write(
        &mut self,
        w: &mut BitWriter,
        symbols: &[u8],
        alphabet: usize,
    ) -> Result<(), CodecError> {
        self.write_on(w, symbols, alphabet, super::cpu::avx512())
    }

    /// [`Self::write`], with whole rounds in AVX-512 registers if `vector` (the tests run
    /// both).
    fn write_on(
        &mut self,
        w: &mut BitWriter,
        symbols: &[u8],
        alphabet: usize,
        vector: bool,
    ) -> Result<(), CodecError> {
        let p = quantize(&histogram(symbols, alphabet)?);
        p.iter().for_each(|&x| w.write(x as u64, PRECISION));
        let (freq, cum) = frequencies(&p);
        // Per symbol (not per coded symbol: the reserved one is never pushed).
        let coders: Vec<SymbolCoder> = (1..freq.len())
            .map(|s| SymbolCoder::new(freq[s], cum[s]))
            .collect();
        // One bit: whether the stream has the wide or the narrow set of states.
        let wide = symbols.len() >= WIDE_FROM;
        w.write(wide as u64, 1);
        if wide {
            write_stream::<STATES>(w, symbols, &coders, vector, &mut self.words);
        } else {
            write_stream::<NARROW>(w, symbols, &coders, false, &mut self.words);
        }
        Ok(())
    }
}

/// Codes `symbols` with `S` interleaved states: the word count, the final states, then the
/// words in the order the decoder reads them. Encoding runs backwards, so that decoding runs
/// forwards; a state about to grow past 2^32 first sheds its low 16 bits as a word (into
/// `words`, grown to a word per symbol and `S` more, never shrunk).
fn write_stream<const S: usize>(
    w: &mut BitWriter,
    symbols: &[u8],
    coders: &[SymbolCoder],
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))] vector: bool,
    words: &mut Vec<u32>,
) {
    let mut x = [LOWER; S];
    if words.len() < symbols.len() + S {
        words.resize(symbols.len() + S, 0);
    }
    let mut n = 0;
    // The last symbols that do not fill a round of the states, then whole rounds (each
    // round's states from the last to the first).
    let whole = symbols.len() / S * S;
    for (i, &s) in symbols.iter().enumerate().skip(whole).rev() {
        x[i % S] = coders[s as usize].put(x[i % S], words, &mut n);
    }
    // Whole rounds: all in AVX-512 registers if `vector` and the CPU has it, else (or on
    // the narrow states) one state at a time.
    let mut rounds = &symbols[..whole];
    #[cfg(target_arch = "x86_64")]
    if let Some(wide) = vector_states(&mut x, vector) {
        let tables = VectorCoders::new(coders);
        // SAFETY: AVX-512F and POPCNT are available; every symbol has a coder (`histogram`
        // checked it against the alphabet), so is below the tables' 256 entries; `words` has
        // a word per symbol and STATES more, so each register's 16 words fit after the `n`
        // already shed.
        unsafe { encode_rounds_avx512(rounds, &tables, wide, words, &mut n) };
        rounds = &[];
    }
    encode_rounds(rounds, coders, &mut x, words, &mut n);
    w.write(n as u64, 32);
    x.iter().for_each(|&s| w.write(s as u64, 32));
    w.write_grouped(words[..n].iter().rev().map(|&x| (x as u64, 16)), 3);
}

/// A stream's states as the vector coders take them: when `vector` is asked for, the CPU has
/// AVX-512 and the stream is a wide one (`S == STATES`); `None` otherwise.
#[cfg(target_arch = "x86_64")]
fn vector_states<const S: usize>(x: &mut [u32; S], vector: bool) -> Option<&mut [u32; STATES]> {
    if vector && super::cpu::avx512_available() {
        (&mut x[..]).try_into().ok()
    } else {
        None
    }
}

/// The scalar encoder over whole rounds, last round first, each round's states from the last.
fn encode_rounds<const S: usize>(
    rounds: &[u8],
    coders: &[SymbolCoder],
    x: &mut [u32; S],
    words: &mut [u32],
    n: &mut usize,
) {
    for round in rounds.chunks_exact(S).rev() {
        for j in (0..S).rev() {
            x[j] = coders[round[j] as usize].put(x[j], words, n);
        }
    }
}

/// [`SymbolCoder`]s as columns for gathers, 256 entries each (any `u8` symbol is inside), and
/// the reciprocals as `f64`: `⌊x · (1/f)⌋` for `x < 2^20·f` is `⌊x/f⌋` or, when `f` divides
/// `x` and the product rounds below the integer, one less (the relative error is below
/// 2^−51, so the absolute error below 2^−31 < 1/f): one comparison corrects it.
#[cfg(target_arch = "x86_64")]
struct VectorCoders {
    /// Symbols with a coder: those of the stream are below it.
    alphabet: usize,
    freq: [u32; 256],
    start: [u32; 256],
    shed_from: [u32; 256],
    inverse: [f64; 256],
}

/// The first [`SmallColumn::ENTRIES`] entries of a coder column in four AVX-512 registers:
/// a symbol's entry is two two-register permutes and a blend, where a gather from memory
/// took several times as long (the encoder's three columns were half its time).
#[cfg(target_arch = "x86_64")]
struct SmallColumn([std::arch::x86_64::__m512i; 4]);

#[cfg(target_arch = "x86_64")]
impl SmallColumn {
    const ENTRIES: usize = 64;

    #[target_feature(enable = "avx512f")]
    fn new(column: &[u32; 256]) -> SmallColumn {
        use std::arch::x86_64::*;
        // SAFETY: 64 bytes at entries 0, 16, 32 and 48 of a 256-entry column.
        SmallColumn(std::array::from_fn(|i| unsafe {
            _mm512_loadu_si512(column[16 * i..].as_ptr().cast())
        }))
    }

    /// The entries of sixteen symbols, each below [`Self::ENTRIES`].
    #[target_feature(enable = "avx512f")]
    fn lookup(&self, s: std::arch::x86_64::__m512i) -> std::arch::x86_64::__m512i {
        use std::arch::x86_64::*;
        let [a, b, c, d] = self.0;
        let low = _mm512_permutex2var_epi32(a, s, b);
        let high = _mm512_permutex2var_epi32(c, s, d);
        _mm512_mask_blend_epi32(_mm512_test_epi32_mask(s, _mm512_set1_epi32(32)), low, high)
    }
}

#[cfg(target_arch = "x86_64")]
impl VectorCoders {
    fn new(coders: &[SymbolCoder]) -> Self {
        let mut t = VectorCoders {
            alphabet: coders.len(),
            freq: [1; 256],
            start: [0; 256],
            shed_from: [u32::MAX; 256],
            inverse: [1.0; 256],
        };
        for (s, c) in coders.iter().enumerate().take(256) {
            (t.freq[s], t.start[s], t.shed_from[s]) = (c.freq, c.start, c.shed_from);
            t.inverse[s] = 1.0 / c.freq as f64;
        }
        t
    }
}

/// The AVX-512 encoder over whole rounds, last round first: the same states and words as
/// [`SymbolCoder::put`] state by state, from the last state to the first.
///
/// # Safety
/// AVX-512F and POPCNT are available; `rounds.len()` is a multiple of [`STATES`], every symbol has
/// its coder in `t`, and `words` has room for `rounds.len() + STATES` words after `*n`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,popcnt")]
unsafe fn encode_rounds_avx512(
    rounds: &[u8],
    t: &VectorCoders,
    x: &mut [u32; STATES],
    words: &mut [u32],
    n: &mut usize,
) {
    use std::arch::x86_64::*;
    debug_assert!(words.len() >= *n + rounds.len() + STATES);
    let reverse = _mm512_set_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let (low_word, one) = (_mm512_set1_epi32(0xFFFF), _mm512_set1_epi32(1));
    // SAFETY (the block): loads and stores stay inside `x`, the round and `words` (the
    // caller's room); gathers index 256-entry tables by bytes.
    unsafe {
        let mut states: [__m512i; VECTORS] =
            std::array::from_fn(|g| _mm512_loadu_si512(x[16 * g..].as_ptr().cast()));
        // A small alphabet's columns in registers, looked up by permutes instead of gathers.
        let small = (t.alphabet <= SmallColumn::ENTRIES)
            .then(|| [&t.freq, &t.start, &t.shed_from].map(|column| SmallColumn::new(column)));
        for round in rounds.chunks_exact(STATES).rev() {
            for g in (0..VECTORS).rev() {
                let state = states[g];
                let s = _mm512_cvtepu8_epi32(_mm_loadu_si128(round[16 * g..].as_ptr().cast()));
                let (freq, start, shed_from) = match &small {
                    Some([freq, start, shed_from]) => {
                        (freq.lookup(s), start.lookup(s), shed_from.lookup(s))
                    }
                    None => (
                        _mm512_i32gather_epi32::<4>(s, t.freq.as_ptr().cast()),
                        _mm512_i32gather_epi32::<4>(s, t.start.as_ptr().cast()),
                        _mm512_i32gather_epi32::<4>(s, t.shed_from.as_ptr().cast()),
                    ),
                };
                // Shed words, the last state's first (the scalar order), then the states shifted.
                // A compress in registers and a whole store (room for it is the caller's
                // promise): the compress-store to memory is microcoded on AMD's cores.
                let shed = _mm512_cmpge_epu32_mask(state, shed_from);
                let low = _mm512_and_si512(state, low_word);
                let backwards = _mm512_permutexvar_epi32(reverse, low);
                let packed = _mm512_maskz_compress_epi32(shed.reverse_bits(), backwards);
                _mm512_storeu_si512(words.as_mut_ptr().add(*n).cast(), packed);
                *n += shed.count_ones() as usize;
                let state = _mm512_mask_srli_epi32(state, shed, state, 16);
                // q = ⌊state / f⌋ through f64 reciprocals (see `VectorCoders`), then the
                // remainder.
                let quotient = |half: __m256i, index: __m256i| {
                    let inverse = _mm512_i32gather_pd::<8>(index, t.inverse.as_ptr());
                    _mm512_cvttpd_epu32(_mm512_mul_pd(_mm512_cvtepu32_pd(half), inverse))
                };
                let q_low = quotient(_mm512_castsi512_si256(state), _mm512_castsi512_si256(s));
                let q_high = quotient(
                    _mm512_extracti64x4_epi64::<1>(state),
                    _mm512_extracti64x4_epi64::<1>(s),
                );
                let mut q = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q_low), q_high);
                let mut r = _mm512_sub_epi32(state, _mm512_mullo_epi32(q, freq));
                let under = _mm512_cmpge_epu32_mask(r, freq);
                q = _mm512_mask_add_epi32(q, under, q, one);
                r = _mm512_mask_sub_epi32(r, under, r, freq);
                states[g] =
                    _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32::<12>(q), r), start);
            }
        }
        for (g, state) in states.iter().enumerate() {
            _mm512_storeu_si512(x[16 * g..].as_mut_ptr().cast(), *state);
        }
    }
}

/// Per slot of the 4096, the decoder's columns: the coded symbol (0 the reserved one), and
/// its frequency with the slot's offset in the symbol (`f | offset << 16`).
struct DecodeTable {
    symbol: Vec<u32>,
    freq_offset: Vec<u32>,
}

impl DecodeTable {
    fn new(freq: &[u32], cum: &[u32]) -> Self {
        let mut t = DecodeTable {
            symbol: vec![0; TOTAL as usize],
            freq_offset: vec![0; TOTAL as usize],
        };
        for (s, (&f, &c)) in freq.iter().zip(cum).enumerate() {
            for slot in c..c + f {
                t.symbol[slot as usize] = s as u32;
                t.freq_offset[slot as usize] = f | (slot - c) << 16;
            }
        }
        t
    }

    /// For the vector decoder, where the coded symbols fit a byte, both columns in one
    /// (`f | offset << 12 | symbol << 24`: frequencies and offsets are below 4096), so that a
    /// round takes one gather per register instead of two; `None` where a symbol needs more.
    #[cfg(target_arch = "x86_64")]
    fn packed(&self) -> Option<Vec<u32>> {
        // Slots follow the symbols in order: the last slot holds the largest.
        (self.symbol[TOTAL as usize - 1] <= u8::MAX as u32).then(|| {
            let entries = self.symbol.iter().zip(&self.freq_offset);
            entries
                .map(|(&s, &e)| (e & 0xFFFF) | (e >> 16) << 12 | s << 24)
                .collect()
        })
    }
}

/// Reads `n` symbols written by [`write_symbols`] into `out`, checking the model and that the
/// coded stream is used up exactly.
pub fn read_symbols(
    r: &mut BitReader,
    n: usize,
    alphabet: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    read_symbols_on(r, n, alphabet, out, super::cpu::avx512())
}

/// [`read_symbols`], with whole rounds in AVX-512 registers if `vector` (the tests run both).
fn read_symbols_on(
    r: &mut BitReader,
    n: usize,
    alphabet: usize,
    out: &mut Vec<u8>,
    vector: bool,
) -> Result<(), CodecError> {
    let p = (0..alphabet)
        .map(|_| r.read(PRECISION).map(|x| x as u32))
        .collect::<Result<Vec<u32>, _>>()?;
    if p.contains(&0) || p.iter().map(|&x| x as u64).sum::<u64>() != ALPHABET_TOTAL as u64 {
        return Err(CodecError::Corrupt("entropy model probabilities".into()));
    }
    let (freq, cum) = frequencies(&p);
    let table = DecodeTable::new(&freq, &cum);
    if r.read(1)? == 1 {
        read_stream::<STATES>(r, n, &table, out, vector)
    } else {
        read_stream::<NARROW>(r, n, &table, out, false)
    }
}

/// Reads `n` symbols coded with `S` interleaved states.
fn read_stream<const S: usize>(
    r: &mut BitReader,
    n: usize,
    table: &DecodeTable,
    out: &mut Vec<u8>,
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))] vector: bool,
) -> Result<(), CodecError> {
    let count = r.read(32)? as usize;
    let mut x = [0u32; S];
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
    let capacity = SYMBOLS_PER_BIT * (16 * count + 32 * S);
    if n > capacity {
        return Err(CodecError::Corrupt(format!(
            "{n} entropy-coded symbols claimed; {count} coded words hold at most {capacity}"
        )));
    }
    // The words, then zeros: read, and counted as overrun, by a stream that runs out (a
    // vector round reads up to S words past the cursor).
    let mut words = Vec::with_capacity(count + S + 1);
    r.read_fields(0..count, |_| 16, |_, w| words.push(w as u32))?;
    words.resize(count + S + 1, 0);
    out.clear();
    out.resize(n, 0);
    // Corruption is checked once at the end: a reserved symbol, a stream that runs out (the
    // cursor passes the last word) or one that is not used up, or a state that does not end
    // where the encoder started.
    let (mut at, mut reserved) = (0usize, false);
    let whole = n / S * S;
    let mut decoded = 0;
    #[cfg(target_arch = "x86_64")]
    if let Some(wide) = vector_states(&mut x, vector) {
        let packed = table.packed();
        // SAFETY: AVX-512F and POPCNT are available; the table has 4096 slots and `packed` is
        // its packed column; `words` has STATES + 1 words after `count`, and the loop stops
        // once the cursor passes `count`.
        decoded = unsafe {
            let (out, packed) = (&mut out[..whole], packed.as_deref());
            decode_rounds_avx512(out, table, packed, wide, &words, count, &mut at)
        };
    }
    let mut take = |state: u32, o: &mut u8| {
        let slot = (state & (TOTAL - 1)) as usize;
        let (s, e) = (table.symbol[slot], table.freq_offset[slot]);
        reserved |= s == 0;
        *o = s.wrapping_sub(1) as u8;
        let state = (e & 0xFFFF) * (state >> PRECISION) + (e >> 16);
        let refill = state < LOWER;
        let word = words[at.min(count)];
        at += refill as usize;
        if refill {
            state << 16 | word
        } else {
            state
        }
    };
    // Whole rounds of the states (those the vector loop left: all, none, or from where it
    // met corruption), then the last symbols.
    for round in out[decoded..whole].chunks_exact_mut(S) {
        for j in 0..S {
            x[j] = take(x[j], &mut round[j]);
        }
    }
    for (state, o) in x.iter_mut().zip(&mut out[whole..]) {
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

/// The AVX-512 decoder over whole rounds: the same states, symbols and cursor as the scalar
/// loop, state by state from the first. Returns how many symbols it decoded: all of `out`,
/// or fewer when a reserved symbol turns up or the cursor passes `count` (the stream is
/// corrupt; the caller reports it).
///
/// # Safety
/// AVX-512F and POPCNT are available; `out.len()` is a multiple of [`STATES`]; `words` has at least
/// `count + STATES + 1` words; `packed`, if given, is [`DecodeTable::packed`] of `table`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,popcnt")]
unsafe fn decode_rounds_avx512(
    out: &mut [u8],
    table: &DecodeTable,
    packed: Option<&[u32]>,
    x: &mut [u32; STATES],
    words: &[u32],
    count: usize,
    at: &mut usize,
) -> usize {
    use std::arch::x86_64::*;
    debug_assert!(words.len() > count + STATES && table.symbol.len() == TOTAL as usize);
    let (slot_mask, low16, lower) = (
        _mm512_set1_epi32(TOTAL as i32 - 1),
        _mm512_set1_epi32(0xFFFF),
        _mm512_set1_epi32(LOWER as i32),
    );
    let one = _mm512_set1_epi32(1);
    let mut done = 0;
    // SAFETY (the block): gathers index 4096-slot tables by `state & 4095`; a round starts
    // with the cursor at or below `count` and its loads read at most STATES words past it;
    // stores stay in `out` and `x`.
    unsafe {
        let mut states: [__m512i; VECTORS] =
            std::array::from_fn(|g| _mm512_loadu_si512(x[16 * g..].as_ptr().cast()));
        for round in out.chunks_exact_mut(STATES) {
            if *at > count {
                break;
            }
            // Every register's symbols first: a round with a reserved one is left whole to
            // the scalar loop.
            let slots: [__m512i; VECTORS] =
                std::array::from_fn(|g| _mm512_and_si512(states[g], slot_mask));
            // Each state's symbol, frequency and offset (see `DecodeTable`).
            let entries: [(__m512i, __m512i, __m512i); VECTORS] = std::array::from_fn(|g| {
                if let Some(packed) = packed {
                    let e = _mm512_i32gather_epi32::<4>(slots[g], packed.as_ptr().cast());
                    let twelve = _mm512_set1_epi32(0xFFF);
                    let offset = _mm512_and_si512(_mm512_srli_epi32::<12>(e), twelve);
                    (
                        _mm512_srli_epi32::<24>(e),
                        _mm512_and_si512(e, twelve),
                        offset,
                    )
                } else {
                    let e =
                        _mm512_i32gather_epi32::<4>(slots[g], table.freq_offset.as_ptr().cast());
                    let symbol =
                        _mm512_i32gather_epi32::<4>(slots[g], table.symbol.as_ptr().cast());
                    (
                        symbol,
                        _mm512_and_si512(e, low16),
                        _mm512_srli_epi32::<16>(e),
                    )
                }
            });
            let symbols = entries.map(|(symbol, _, _)| symbol);
            if symbols
                .iter()
                .any(|&s| _mm512_cmplt_epu32_mask(s, one) != 0)
            {
                break;
            }
            for g in 0..VECTORS {
                let (_, f, offset) = entries[g];
                let state = _mm512_add_epi32(
                    _mm512_mullo_epi32(f, _mm512_srli_epi32::<12>(states[g])),
                    offset,
                );
                // A whole load and an expand in registers (the expand-load from memory is
                // microcoded on AMD's cores).
                let refill = _mm512_cmplt_epu32_mask(state, lower);
                let next = _mm512_loadu_si512(words.as_ptr().add(*at).cast());
                let word = _mm512_maskz_expand_epi32(refill, next);
                states[g] =
                    _mm512_mask_or_epi32(state, refill, _mm512_slli_epi32::<16>(state), word);
                *at += refill.count_ones() as usize;
                let bytes = _mm512_cvtepi32_epi8(_mm512_sub_epi32(symbols[g], one));
                _mm_storeu_si128(round[16 * g..].as_mut_ptr().cast(), bytes);
            }
            done += STATES;
        }
        for (g, state) in states.iter().enumerate() {
            _mm512_storeu_si512(x[16 * g..].as_mut_ptr().cast(), *state);
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any symbols of any alphabet round-trip, whatever their count modulo the sixteen
        /// states and however skewed, the vector and scalar coders write the same bytes and
        /// read the same symbols, and a stream one word short or one word long is refused by
        /// both.
        #[test]
        fn any_symbols_round_trip_and_damaged_streams_are_refused(
            alphabet in 2usize..=256,
            raw in proptest::collection::vec((0u32..1000, any::<u8>()), 1..3000),
            skew in 0u32..4,
            wide in any::<bool>(),
        ) {
            // With skew > 0 most symbols are one value, so that states shed words rarely. A
            // wide stream repeats the symbols past WIDE_FROM, ending anywhere in a round.
            let len = if wide { WIDE_FROM + raw.len() } else { raw.len() };
            let symbols: Vec<u8> = raw
                .iter()
                .cycle()
                .take(len)
                .map(|&(r, s)| if r % 4 < skew { 1 } else { s as usize % alphabet } as u8)
                .collect();
            let paths = [false, true];
            let encoded: Vec<Vec<u8>> = paths
                .iter()
                .map(|&vector| {
                    let mut buf = Vec::new();
                    let mut w = BitWriter::new(&mut buf);
                    SymbolWriter::default()
                        .write_on(&mut w, &symbols, alphabet, vector)
                        .unwrap();
                    w.finish();
                    buf
                })
                .collect();
            prop_assert_eq!(&encoded[0], &encoded[1], "the vector encoder's stream differs");
            let buf = &encoded[0];
            for vector in paths {
                let mut out = Vec::new();
                let mut r = BitReader::new(buf);
                read_symbols_on(&mut r, symbols.len(), alphabet, &mut out, vector).unwrap();
                prop_assert_eq!(&out, &symbols, "vector {}", vector);
                prop_assert!(r.remaining_bits() < 8, "{} bits left", r.remaining_bits());
            }
            // The same stream with its word count one lower (a word left over) or one higher
            // (a word missing, then the stream runs into the padding).
            for delta in [-1i64, 1] {
                let mut damaged = Vec::new();
                let mut w = BitWriter::new(&mut damaged);
                let mut r = BitReader::new(buf);
                for _ in 0..alphabet {
                    w.write(r.read(PRECISION).unwrap(), PRECISION);
                }
                w.write(r.read(1).unwrap(), 1);
                let count = r.read(32).unwrap() as i64 + delta;
                if count < 0 {
                    continue;
                }
                w.write(count as u64, 32);
                while r.remaining_bits() >= 16 {
                    w.write(r.read(16).unwrap(), 16);
                }
                w.finish();
                for vector in paths {
                    let mut out = Vec::new();
                    let got = read_symbols_on(
                        &mut BitReader::new(&damaged), symbols.len(), alphabet, &mut out, vector,
                    );
                    prop_assert!(got.is_err(), "word count {delta:+} decoded (vector {vector})");
                }
            }
        }

        /// Corrupt streams (any bytes after a valid model) give the same answer on both paths:
        /// the same error or the same symbols.
        #[test]
        fn both_decoders_agree_on_corrupt_streams(
            tail in proptest::collection::vec(any::<u8>(), 0..1200),
            n in 0usize..800,
            wide in any::<bool>(),
        ) {
            let mut buf = Vec::new();
            let mut w = BitWriter::new(&mut buf);
            // A valid model of 5 symbols, the count of the words the bytes hold after the
            // states (so that decoding starts), then arbitrary bytes for the states and words.
            [4000u32, 20, 20, 20, 20].iter().for_each(|&p| w.write(p as u64, PRECISION));
            w.write(wide as u64, 1);
            let states = if wide { STATES } else { NARROW };
            let bits_after_states = (3 + 8 * tail.len()).saturating_sub(32 * states);
            w.write(bits_after_states as u64 / 16, 32);
            w.finish();
            buf.extend(&tail);
            let mut outs = [Vec::new(), Vec::new()];
            let got: Vec<_> = [false, true]
                .iter()
                .zip(&mut outs)
                .map(|(&vector, out)| {
                    read_symbols_on(&mut BitReader::new(&buf), n, 5, out, vector)
                        .map_err(|e| e.to_string())
                })
                .collect();
            prop_assert_eq!(&got[0], &got[1]);
            if got[0].is_ok() {
                prop_assert_eq!(&outs[0], &outs[1]);
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
            w.write(0, 1); // narrow
            w.write(0, 32); // no coded words
            (0..NARROW).for_each(|_| w.write(LOWER as u64, 32)); // the states as they start
            w.finish();
            let got = read_symbols(&mut BitReader::new(&model), 0, 2, &mut out);
            assert_eq!(got.is_ok(), ok, "top {top}: {got:?}");
        }
    }
}
