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
//! a third ANS stream of a million symbols cost 10 ms of decoding here. Values decode exactly as in SketchML (its `decode` table: the
//! per-class mean by default; never a larger bucket index, never a flipped sign).
//!
//! Body: shape and bucket table, each group's key count, the length-class model and stream, the
//! cell model and stream, the packed labels, then the raw delta bits of the keys.

use serde::{Deserialize, Serialize};

use super::entropy::{read_symbols, write_symbols};
use super::keys::{bit_len, KeyCoding};
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
    /// Encode scratch, reused across messages: the pipeline's, the keys' length classes.
    sketched: Sketched,
    classes: Vec<u8>,
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
            classes: Vec::new(),
            decoding: Unsketch::default(),
            lengths: Vec::new(),
            cells: Vec::new(),
        })
    }
}

/// The delta of each key against the previous (first against 0, later ones minus one).
fn deltas(keys: &[u32]) -> impl Iterator<Item = u32> + '_ {
    keys.iter()
        .enumerate()
        .map(move |(i, &k)| if i == 0 { k } else { k - keys[i - 1] - 1 })
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
        let lengths = &mut self.classes;
        lengths.clear();
        lengths.extend(deltas(sent).map(|d| bit_len(d as u64) as u8));
        let mut result = Ok(());
        write_message(out, ID, VERSION, dim, sent.len(), |w| {
            write_shape_and_table(w, &self.p, &s.table);
            write_group_counts(w, &s.counts);
            result = write_symbols(w, lengths, LENGTH_CLASSES)
                .and_then(|_| write_symbols(w, s.sketches.cells(), sh.per_group));
            w.write_packed(s.labels.iter().map(|&g| g as u64), label_bits(&sh));
            // Each delta's bits below its leading one (none for 0 and 1).
            w.write_fields(deltas(sent).map(|d| {
                let below = bit_len(d as u64).saturating_sub(1);
                ((d as u64) & ((1u64 << below) - 1), below)
            }));
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
            out.keys.reserve(n);
            // A delta of bit length `len` is its leading one (none for 0) and `len - 1` bits below
            // it; each key is the one after the previous key plus its delta (the first: 0 plus
            // it), so keys only increase and the last is the largest: it alone is checked
            // against the dimension (a key at 2^32 or more wraps in `keys` but not in `next`).
            let mut next = 0u64;
            let fields = lengths.iter().map(|&len| len as u32);
            r.read_fields(
                fields,
                |&len| len.saturating_sub(1),
                |len, low| {
                    let key = next + ((1u64 << len) >> 1 | low);
                    out.keys.push(key as u32);
                    next = key + 1;
                },
            )?;
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
