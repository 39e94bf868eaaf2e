//! `skcompress`: SKCompress (Jiang et al., VLDB Journal 2020; abstract in
//! `shared/papers/skcompress-vldbj20-abstract.txt`): SketchML's pipeline with two changes to
//! how it is written down:
//!
//! * the MinMaxSketch cells are entropy-coded: after the min/max merge, bucket indexes are far
//!   from uniform (ANS over their histogram, [`super::entropy`]);
//! * keys use an adaptive prefix: each delta's bit length is an entropy-coded class chosen from
//!   the histogram of gap lengths, followed by the delta's bits below its leading one.
//!
//! Keys are delta-coded once in key order, each with its group's label, as in `sketchml`. The
//! labels are packed in log2(groups) bits, not entropy-coded: groups are equal-count buckets of
//! each sign, so labels are close to uniform unless the signs are far from half and half, and
//! a third ANS stream would cost more decoding time than its bits save (figures: `docs/results.md`, "Design measurements"). Values decode exactly as in SketchML (its `decode` table: the
//! per-class mean by default; never a larger bucket index, never a flipped sign).
//!
//! Body: shape and bucket table, each group's key count, the length-class model and stream, the
//! cell model and stream, the packed labels, then the raw delta bits of the keys.

use serde::{Deserialize, Serialize};

use super::bits::{BitReader, BitWriter};
use super::entropy::{read_symbols, SymbolWriter};
use super::keys::KeyCoding;
use super::sketchml::{
    label_bits, read_shape_and_table, sketch_gradient, write_group_counts, write_shape_and_table,
    Decode, Shape, SketchMlParams, Sketched, Unsketch,
};
use super::{
    check_finite, read_message, write_message, Codec, CodecError, EncodeContext, FromParams,
};
use crate::sparse::SparseGrad;

const ID: u8 = 14;
const VERSION: u8 = 7;
/// Delta bit lengths 0..=32.
const LENGTH_CLASSES: usize = 33;

/// Parameters of `skcompress` (SketchML's sketch parameters; keys are always adaptive-prefix).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SkCompressParams {
    /// Quantile buckets (both signs together).
    pub bins: u32,
    /// Sketch groups (both signs together).
    pub groups: u32,
    /// Rows per sketch.
    pub rows: u32,
    /// Columns per sketch as a fraction of the group's keys.
    pub column_ratio: f32,
    /// What a decoded bucket stands for (as in `sketchml`).
    pub decode: Decode,
}

impl Default for SkCompressParams {
    fn default() -> Self {
        let s = SketchMlParams::default();
        SkCompressParams {
            bins: s.bins,
            groups: s.groups,
            rows: s.rows,
            column_ratio: s.column_ratio,
            decode: s.decode,
        }
    }
}

impl SkCompressParams {
    fn sketch_params(&self) -> SketchMlParams {
        SketchMlParams {
            bins: self.bins,
            groups: self.groups,
            rows: self.rows,
            column_ratio: self.column_ratio,
            keys: KeyCoding::Raw,
            decode: self.decode,
        }
    }
}

/// SKCompress compression.
pub struct SkCompress {
    p: SketchMlParams,
    shape: Shape,
    /// Encode scratch, reused across messages: the pipeline's, the key deltas' low bits and
    /// length classes, the entropy coder's words.
    sketched: Sketched,
    lows: Vec<u32>,
    classes: Vec<u8>,
    coder: SymbolWriter,
    /// Decode scratch, reused across messages: the pipeline's, the length classes, the cells.
    decoding: Unsketch,
    lengths: Vec<u8>,
    cells: Vec<u8>,
}

impl FromParams for SkCompress {
    type Params = SkCompressParams;
    fn from_params(p: &SkCompressParams) -> Result<Self, String> {
        let shape = Shape::new(p.bins, p.groups, p.rows, p.column_ratio)
            .map_err(|e| format!("skcompress.{e}"))?;
        Ok(SkCompress {
            p: p.sketch_params(),
            shape,
            sketched: Sketched::default(),
            lows: Vec::new(),
            classes: Vec::new(),
            coder: SymbolWriter::default(),
            decoding: Unsketch::default(),
            lengths: Vec::new(),
            cells: Vec::new(),
        })
    }
}

/// Fills `lengths` with each key's delta against the previous (the first against 0, later
/// ones minus one: keys strictly increase) as its bit length (its length class), and `lows`
/// with the delta's bits below its leading one; returns the largest length.
fn split_deltas(keys: &[u32], lows: &mut Vec<u32>, lengths: &mut Vec<u8>) -> u8 {
    lows.clear();
    lows.extend(keys.first());
    lows.extend(keys.windows(2).map(|k| k[1] - k[0] - 1));
    lengths.clear();
    lengths.resize(lows.len(), 0);
    #[cfg(target_arch = "x86_64")]
    if super::cpu::avx512() && vector_split_available() {
        // SAFETY: the CPU has the features (`avx512` checks AVX-512F).
        return unsafe { split_avx512(lows, lengths) };
    }
    split(lows, lengths)
}

/// Whether the CPU has what [`split_avx512`] needs beyond AVX-512F.
#[cfg(target_arch = "x86_64")]
fn vector_split_available() -> bool {
    std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512cd")
}

/// Splits each delta in `deltas` into its bit length (into `lengths`) and its bits below the
/// leading one (in place); returns the largest length.
#[inline(always)]
fn split(deltas: &mut [u32], lengths: &mut [u8]) -> u8 {
    lengths.iter_mut().zip(deltas).fold(0, |top, (len, delta)| {
        *len = (u32::BITS - delta.leading_zeros()) as u8;
        *delta -= ((1u64 << *len) >> 1) as u32;
        top.max(*len)
    })
}

/// [`split`] compiled with AVX-512's leading-zero count (`vplzcntd`): the baseline build has
/// no such instruction, and computed each length in a dozen.
///
/// # Safety
/// The CPU has AVX-512F, -BW and -CD.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512cd")]
unsafe fn split_avx512(deltas: &mut [u32], lengths: &mut [u8]) -> u8 {
    split(deltas, lengths)
}

/// Writes each delta's bits below its leading one (`lows`, of `lengths[i] - 1` bits: none for
/// 0 and 1), as many to a field as always fit in 56 bits (`top` is the largest length; see
/// [`BitWriter::write_grouped`]).
fn write_low_bits(w: &mut BitWriter, lows: &[u32], lengths: &[u8], top: u8) {
    let per = (56 / (top as usize).saturating_sub(1).max(1)).min(8);
    let fields = lows.iter().zip(lengths);
    w.write_grouped(
        fields.map(|(&low, &len)| (low as u64, (len as u32).saturating_sub(1))),
        per,
    );
}

/// Reads one key per length class into `keys`: each key is the one after the previous key
/// plus its delta (the first: 0 plus it), and a delta of bit length `len` is its leading one
/// (none for 0) and the `len - 1` bits read below it. Returns the key after the last (in 64
/// bits: a key at 2^32 or more wraps in `keys` but not here).
fn read_keys(r: &mut BitReader, lengths: &[u8], keys: &mut [u32]) -> Result<u64, CodecError> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("bmi2") {
        // SAFETY: the CPU has BMI2 (checked just above).
        return unsafe { read_keys_bmi2(r, lengths, keys) };
    }
    read_keys_in(r, lengths, keys)
}

/// [`read_keys`] compiled with BMI2, whose shifts take their count from any register and whose
/// `bzhi` masks a field in one instruction: a third fewer instructions per key.
///
/// # Safety
/// The CPU has BMI2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
unsafe fn read_keys_bmi2(
    r: &mut BitReader,
    lengths: &[u8],
    keys: &mut [u32],
) -> Result<u64, CodecError> {
    read_keys_in(r, lengths, keys)
}

/// [`read_keys`]' loop, for both builds of it.
#[inline(always)]
fn read_keys_in(r: &mut BitReader, lengths: &[u8], keys: &mut [u32]) -> Result<u64, CodecError> {
    let mut next = 0u64;
    r.read_fields(
        lengths.iter().zip(keys),
        |(&len, _)| (len as u32).saturating_sub(1),
        |(&len, key), low| {
            let k = next + ((1u64 << len) >> 1 | low);
            *key = k as u32;
            next = k + 1;
        },
    )?;
    Ok(next)
}

impl Codec for SkCompress {
    fn name(&self) -> &'static str {
        "skcompress"
    }

    fn key_coding(&self) -> Option<KeyCoding> {
        None
    }

    fn error_feedback(&self) -> super::ErrorFeedback {
        super::ErrorFeedback::LazyResidualUnlessAdam
    }

    fn encode(
        &mut self,
        keys: &[u32],
        values: &[f32],
        dim: u32,
        _ctx: EncodeContext,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        check_finite(keys, values)?;
        let sh = self.shape;
        let s = &mut self.sketched;
        sketch_gradient(&sh, self.p.decode, keys, values, s);
        let sent = s.sent_keys(keys);
        let (lows, lengths, coder) = (&mut self.lows, &mut self.classes, &mut self.coder);
        let top = split_deltas(sent, lows, lengths);
        let mut result = Ok(());
        write_message(out, ID, VERSION, dim, sent.len(), |w| {
            write_shape_and_table(w, &self.p, &s.table);
            write_group_counts(w, &s.counts);
            result = coder
                .write(w, lengths, LENGTH_CLASSES)
                .and_then(|_| coder.write(w, s.sketches.cells(), sh.per_group));
            w.write_packed(s.labels.iter().map(|&g| g as u64), label_bits(&sh));
            write_low_bits(w, lows, lengths, top);
        });
        result
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        let (u, lengths, cells) = (&mut self.decoding, &mut self.lengths, &mut self.cells);
        read_message(bytes, ID, VERSION, out, |h, r, out| {
            let (sh, table) = read_shape_and_table(r)?;
            let total_cells = u.read_counts(&sh, r, h.count)?;
            let n = h.count as usize;
            read_symbols(r, n, LENGTH_CLASSES, lengths)?;
            // The coded stream bounds the cell count before the sketches are sized for it.
            read_symbols(r, total_cells, sh.per_group, cells)?;
            u.size_sketches(&sh);
            u.sketches.cells_mut().copy_from_slice(cells);
            if n.saturating_mul(label_bits(&sh) as usize) > r.remaining_bits() {
                return Err(CodecError::Corrupt(format!(
                    "{n} group labels do not fit in the message"
                )));
            }
            u.labels.resize(n, 0);
            r.read_packed(&mut u.labels, label_bits(&sh), u8::MAX as u64)?;
            // Keys only increase, so the last is the largest: it alone is checked against
            // the dimension.
            let first = out.keys.len();
            out.keys.resize(first + n, 0);
            let next = read_keys(r, lengths, &mut out.keys[first..])?;
            if n > 0 && next > h.dim as u64 {
                return Err(CodecError::BadKeys(format!(
                    "decoded keys reach {} (dimension {})",
                    next - 1,
                    h.dim
                )));
            }
            u.values(&sh, &table, &out.keys, &mut out.values)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deltas of every largest length, 0 to 32 bits: each splits into its bit length and its
    /// bits below the leading one (the vector split the same), and the grouped low bits are
    /// the bits of one write per delta (a group wider than the writer's 56 bits, or one that
    /// drops a delta, fails).
    #[test]
    fn deltas_split_and_their_grouped_low_bits_are_one_write_each() {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        // Random lengths up to the largest, or every delta of the largest length (the widest
        // groups).
        for (top, all_longest) in (0..=32u32).flat_map(|top| [(top, false), (top, true)]) {
            let deltas: Vec<u32> = (0..101)
                .map(|i| {
                    rng = crate::data::partition::mix64(rng, i);
                    let len = if i == 50 || all_longest {
                        top
                    } else {
                        (rng % (top as u64 + 1)) as u32
                    };
                    match len {
                        0 => 0,
                        n => (1 << (n - 1)) | (rng >> 32) as u32 & ((1u64 << (n - 1)) - 1) as u32,
                    }
                })
                .collect();
            let (mut lows, mut lengths) = (deltas.clone(), vec![0u8; deltas.len()]);
            let largest = split(&mut lows, &mut lengths);
            assert_eq!(largest as u32, top);
            #[cfg(target_arch = "x86_64")]
            if crate::codec::cpu::avx512_available() && vector_split_available() {
                let (mut vector, mut vector_lengths) = (deltas.clone(), vec![0u8; deltas.len()]);
                // SAFETY: the CPU has the features (checked just above).
                let vector_largest = unsafe { split_avx512(&mut vector, &mut vector_lengths) };
                assert_eq!(
                    (vector_largest, &vector_lengths, &vector),
                    (largest, &lengths, &lows)
                );
            }
            let (mut grouped, mut single) = (Vec::new(), Vec::new());
            let mut w = BitWriter::new(&mut grouped);
            w.write(1, 3);
            write_low_bits(&mut w, &lows, &lengths, largest);
            w.finish();
            let mut w = BitWriter::new(&mut single);
            w.write(1, 3);
            for (&delta, &len) in deltas.iter().zip(&lengths) {
                assert_eq!(len as u32, u32::BITS - delta.leading_zeros());
                let below = (len as u32).saturating_sub(1);
                w.write(delta as u64 & ((1u64 << below) - 1), below);
            }
            w.finish();
            assert_eq!(grouped, single, "largest length {top}, all {all_longest}");
        }
    }

    /// Keys read back from their deltas' low bits are the keys, with and without BMI2.
    #[test]
    fn keys_read_back_from_their_low_bits_with_and_without_bmi2() {
        let keys: Vec<u32> = (0..1000u64)
            .scan(0u64, |k, i| {
                *k += 1 + crate::data::partition::mix64(3, i) % (1 << (i % 20));
                Some(*k as u32)
            })
            .collect();
        let (mut lows, mut lengths) = (Vec::new(), Vec::new());
        let top = split_deltas(&keys, &mut lows, &mut lengths);
        let mut buf = Vec::new();
        let mut w = BitWriter::new(&mut buf);
        write_low_bits(&mut w, &lows, &lengths, top);
        w.finish();
        let mut plain = vec![0u32; keys.len()];
        let next = read_keys_in(&mut BitReader::new(&buf), &lengths, &mut plain).unwrap();
        assert_eq!(
            (plain.as_slice(), next),
            (keys.as_slice(), keys[999] as u64 + 1)
        );
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("bmi2") {
            let mut bmi2 = vec![0u32; keys.len()];
            // SAFETY: the CPU has BMI2 (checked just above).
            let next = unsafe { read_keys_bmi2(&mut BitReader::new(&buf), &lengths, &mut bmi2) };
            assert_eq!((bmi2, next.unwrap()), (keys, plain[999] as u64 + 1));
        }
    }
}
