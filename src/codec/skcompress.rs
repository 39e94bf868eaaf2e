//! `skcompress`: SKCompress (Jiang et al., VLDB Journal 2020; abstract in
//! `shared/papers/skcompress-vldbj20-abstract.txt`): SketchML's pipeline with two changes to
//! how it is written down:
//!
//! * the MinMaxSketch cells are entropy-coded: after the min/max merge, bucket indexes are far
//!   from uniform (ANS over their histogram, [`super::entropy`]);
//! * keys use an adaptive prefix: each delta's bit length is an entropy-coded class chosen from
//!   the histogram of gap lengths, followed by the delta's bits below its leading one.
//!
//! Values decode exactly as in SketchML (its `decode` table: the per-class mean by default; never
//! a larger bucket index, never a flipped sign). Body: shape and bucket table, each group's key count, the length-class model and stream, the
//! cell model and stream, then the raw delta bits of every group.

use serde::{Deserialize, Serialize};

use super::entropy::{read_symbols, write_symbols};
use super::keys::{bit_len, KeyBuilder, KeyCoding};
use super::minmax::MinMaxSketch;
use super::sketchml::{
    group_values, read_group_count, read_shape_and_table, sketch_gradient, write_shape_and_table,
    Decode, RunMerger, Shape, SketchMlParams, Sketched,
};
use super::{
    check_finite, read_message, write_message, Codec, CodecError, EncodeContext, FromParams,
};
use crate::sparse::SparseGrad;

const ID: u8 = 14;
const VERSION: u8 = 3;
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
    /// Encode scratch, reused across messages.
    sketched: Sketched,
    /// Decode scratch, reused across messages.
    merger: RunMerger,
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
            merger: RunMerger::default(),
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
        let (table, group_keys, sketches) = (&s.table, &s.group_keys, &s.sketches);
        let count: usize = group_keys.iter().map(Vec::len).sum();
        let lengths: Vec<u8> = group_keys
            .iter()
            .flat_map(|g| deltas(g).map(|d| bit_len(d as u64) as u8))
            .collect();
        let cells: Vec<u8> = sketches
            .iter()
            .flat_map(|s| s.cells().iter().copied())
            .collect();
        let mut result = Ok(());
        write_message(out, ID, VERSION, dim, count, |w| {
            write_shape_and_table(w, &self.p, table);
            group_keys.iter().for_each(|g| w.write(g.len() as u64, 32));
            result = write_symbols(w, &lengths, LENGTH_CLASSES)
                .and_then(|_| write_symbols(w, &cells, sh.per_group));
            for g in group_keys {
                for d in deltas(g) {
                    let len = bit_len(d as u64);
                    if len >= 2 {
                        w.write((d as u64) & ((1u64 << (len - 1)) - 1), len - 1);
                    }
                }
            }
        });
        result
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        read_message(bytes, ID, VERSION, out, |h, r, out| {
            let (sh, table) = read_shape_and_table(r)?;
            let mut seen = 0usize;
            let counts = (0..2 * sh.groups_per_sign)
                .map(|_| read_group_count(r, &mut seen, h.count))
                .collect::<Result<Vec<usize>, _>>()?;
            let mut lengths = Vec::new();
            read_symbols(r, seen, LENGTH_CLASSES, &mut lengths)?;
            let total_cells: usize = counts.iter().map(|&n| sh.rows * sh.columns(n)).sum();
            let mut cells = Vec::new();
            read_symbols(r, total_cells, sh.per_group, &mut cells)?;
            if cells.iter().any(|&c| c as usize >= sh.per_group) {
                return Err(CodecError::Corrupt("sketch cell out of range".into()));
            }
            let (mut at_len, mut at_cell) = (0, 0);
            let merger = &mut self.merger;
            merger.start();
            for (g, &n) in counts.iter().enumerate() {
                let run_start = out.keys.len();
                let mut builder = KeyBuilder::new(h.dim);
                let mut prev = None;
                for &len in &lengths[at_len..at_len + n] {
                    let len = len as u32;
                    let d = match len {
                        0 => 0,
                        1 => 1,
                        _ => (1u64 << (len - 1)) | r.read(len - 1)?,
                    };
                    let delta = if prev.is_none() { d } else { d + 1 };
                    builder.push_delta(prev, delta, &mut out.keys)?;
                    prev = out.keys.last().copied();
                }
                at_len += n;
                let size = sh.rows * sh.columns(n);
                let sketch = MinMaxSketch::from_cells(
                    sh.rows,
                    sh.columns(n),
                    (sh.per_group - 1) as u8,
                    cells[at_cell..at_cell + size].to_vec(),
                );
                at_cell += size;
                group_values(
                    &sh,
                    &table,
                    g,
                    &out.keys[run_start..],
                    &sketch,
                    &mut out.values,
                )?;
                merger.end_run(out.keys.len());
            }
            merger.merge(out)
        })
    }
}
