//! `sketchml`: SketchML (Jiang et al., SIGMOD'18, `shared/papers/sketchml-sigmod18.txt`).
//!
//! 1. Quantile buckets (§3.2): positive and negative values are bucketed separately (§3.3,
//!    Solution 1), `q/2` equal-count magnitude buckets per sign ([`super::quantile`]), so no
//!    bucket straddles zero and no sign can flip.
//! 2. Grouped MinMaxSketch (§3.3): each sign's buckets are cut into `r/2` groups of consecutive
//!    buckets; a group has its own [`MinMaxSketch`] of `s` rows and `ceil(ratio · n_g)` columns
//!    holding bucket indexes local to the group.
//! 3. Keys (§3.4): the keys of each group, delta-encoded: Rice-coded deltas by default, the
//!    project's key coder (smallest and fastest: 1.545 bytes per pair at D = 29M, d = 1M,
//!    against 1.692 with the reference code's adaptive keys and 1.958 with the paper's
//!    delta-binary, which wastes most of a byte on each group's 8x sparser deltas).
//!
//! Decoding a key queries its group's sketch, which never answers above the key's true bucket,
//! and looks the answer up in a per-sign table of bucket values the encoder chose ([`Decode`]):
//!
//! * `mean` (default): for every (sign, answered bucket), the mean magnitude of the keys whose
//!   query answers that bucket (the encoder runs the receiver's queries, so it knows). This is
//!   the least-squares value for what the receiver can tell apart, and every such class decodes
//!   to its true sum, so each sign's sum, and with it the size of an SGD step, is kept. A
//!   correctly answered key decodes above its true magnitude when collided keys share its
//!   class. Measured on the convergence set (README): plain SGD ends 0.75% above uncompressed
//!   with `mean` and 3.7% with `edge`, whose shrinking acts as a smaller learning rate; Adam,
//!   which normalises scale, is the same with either.
//! * `edge`: the bucket's zero-side edge, the largest value with `|decoded| <= |true|` for every
//!   key. Its error can reach a whole bucket width instead of the midpoint's half, so the
//!   paper's variance bound (App. A.1) loosens by a factor 4.
//! * `midpoint`: the paper's (§3.2) bucket midpoint; the last bucket ends at the largest
//!   magnitude.
//!
//! A decoded bucket index never exceeds the true one, and no sign flips, whichever the table.
//! Zero values are not sent. The table has the same size whichever value it holds, and the
//! decoder does not need to know which one it got.
//!
//! Body: q (16 bits), r (8), s (4), ratio (f32), then for each sign the bucket count (16 bits)
//! and the bucket values (f32), then for each group its key count (32 bits), keys, and cells.

use serde::{Deserialize, Serialize};

use super::bits::{BitReader, BitWriter};
use super::keys::{bit_len, KeyCoding};
use super::minmax::MinMaxSketch;
use super::quantile::{signed_bucket_edges, BucketFinder, SignedEdges};
use super::{
    check_finite, read_message, write_message, Codec, CodecError, EncodeContext, FromParams,
};
use crate::sparse::SparseGrad;

const ID: u8 = 13;
const VERSION: u8 = 2;

/// Parameters of `sketchml` (defaults: the paper's and the reference code's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SketchMlParams {
    /// Quantile buckets (both signs together).
    pub bins: u32,
    /// Sketch groups (both signs together).
    pub groups: u32,
    /// Rows per sketch.
    pub rows: u32,
    /// Columns per sketch as a fraction of the group's keys.
    pub column_ratio: f32,
    /// Key coder.
    pub keys: KeyCoding,
    /// What a decoded bucket stands for.
    pub decode: Decode,
}

impl Default for SketchMlParams {
    fn default() -> Self {
        SketchMlParams {
            bins: 256,
            groups: 8,
            rows: 2,
            column_ratio: 0.3,
            keys: KeyCoding::Rice,
            decode: Decode::Mean,
        }
    }
}

/// The value a decoded bucket stands for (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decode {
    /// Mean magnitude of the keys whose query answers the bucket (exact sums per class).
    #[default]
    Mean,
    /// The bucket's zero-side edge (never larger than the true magnitude).
    Edge,
    /// The bucket's midpoint (the paper's).
    Midpoint,
}

/// Sizes derived from the parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub(crate) half: usize,
    pub(crate) groups_per_sign: usize,
    pub(crate) per_group: usize,
    pub(crate) cell_bits: u32,
    pub(crate) rows: usize,
    pub(crate) ratio: f32,
}

impl Shape {
    pub(crate) fn new(bins: u32, groups: u32, rows: u32, ratio: f32) -> Result<Shape, String> {
        if !(2..=4096).contains(&bins) || bins % 2 != 0 {
            return Err(format!("bins: must be even and in 2..=4096, got {bins}"));
        }
        if !(2..=bins).contains(&groups) || groups % 2 != 0 {
            return Err(format!(
                "groups: must be even and in 2..=bins, got {groups}"
            ));
        }
        if !(1..=8).contains(&rows) {
            return Err(format!("rows: must be in 1..=8, got {rows}"));
        }
        if !(ratio.is_finite() && ratio > 0.0 && ratio <= 16.0) {
            return Err(format!("column_ratio: must be in (0, 16], got {ratio}"));
        }
        let half = bins as usize / 2;
        let groups_per_sign = groups as usize / 2;
        let per_group = half.div_ceil(groups_per_sign);
        if per_group > 256 {
            return Err(format!(
                "bins / groups must be at most 256 buckets per group, got {per_group}"
            ));
        }
        Ok(Shape {
            half,
            groups_per_sign,
            per_group,
            cell_bits: bit_len(per_group as u64 - 1).max(1),
            rows: rows as usize,
            ratio,
        })
    }

    /// The sign of group `g` and the sign's bucket its local index 0 stands for.
    pub(crate) fn group_origin(&self, g: usize) -> (usize, usize) {
        (
            g / self.groups_per_sign,
            (g % self.groups_per_sign) * self.per_group,
        )
    }

    pub(crate) fn columns(&self, keys: usize) -> usize {
        ((self.ratio as f64 * keys as f64).ceil() as usize).max(1)
    }
}

/// SketchML compression.
pub struct SketchMl {
    p: SketchMlParams,
    shape: Shape,
    /// Encode scratch, reused across messages.
    sketched: Sketched,
    /// Decode scratch, reused across messages: one group's keys, its cells, the run merger.
    keys: Vec<u32>,
    cells: Vec<u8>,
    merger: RunMerger,
}

impl FromParams for SketchMl {
    type Params = SketchMlParams;
    fn from_params(p: &SketchMlParams) -> Result<Self, String> {
        let shape = Shape::new(p.bins, p.groups, p.rows, p.column_ratio)
            .map_err(|e| format!("sketchml.{e}"))?;
        Ok(SketchMl {
            p: p.clone(),
            shape,
            sketched: Sketched::default(),
            keys: Vec::new(),
            cells: Vec::new(),
            merger: RunMerger::default(),
        })
    }
}

/// The SketchML pipeline up to the message layout: per-sign bucket tables, the keys of each
/// group and each group's MinMaxSketch. Shared with `skcompress`, which codes keys and cells
/// differently. Kept by the encoder across messages, so that its buffers are reused.
#[derive(Default)]
pub(crate) struct Sketched {
    /// Per sign, the magnitude each answered bucket decodes to.
    pub(crate) table: [Vec<f32>; 2],
    pub(crate) group_keys: Vec<Vec<u32>>,
    pub(crate) sketches: Vec<MinMaxSketch>,
    group_idx: Vec<Vec<u8>>,
    group_mags: Vec<Vec<f32>>,
}

/// Buckets, groups and sketches a gradient into `s` (zero values are dropped), with the table
/// of what each answered bucket decodes to.
pub(crate) fn sketch_gradient(
    sh: &Shape,
    decode: Decode,
    keys: &[u32],
    values: &[f32],
    s: &mut Sketched,
) {
    let SignedEdges { edges, max: maxima } = signed_bucket_edges(values, sh.half);
    let finders = [
        BucketFinder::new(&edges[0], maxima[0]),
        BucketFinder::new(&edges[1], maxima[1]),
    ];
    let n_groups = 2 * sh.groups_per_sign;
    s.group_keys.resize_with(n_groups, Vec::new);
    s.group_keys.iter_mut().for_each(Vec::clear);
    s.group_idx.resize_with(n_groups, Vec::new);
    s.group_idx.iter_mut().for_each(Vec::clear);
    s.group_mags.resize_with(n_groups, Vec::new);
    s.group_mags.iter_mut().for_each(Vec::clear);
    let (group_keys, group_idx, group_mags) =
        (&mut s.group_keys, &mut s.group_idx, &mut s.group_mags);
    for (&k, &v) in keys.iter().zip(values) {
        if v == 0.0 {
            continue;
        }
        let sign = (v < 0.0) as usize;
        let b = finders[sign].find(v.abs());
        let g = sign * sh.groups_per_sign + b / sh.per_group;
        group_keys[g].push(k);
        group_idx[g].push((b % sh.per_group) as u8);
        if decode == Decode::Mean {
            group_mags[g].push(v.abs());
        }
    }
    s.sketches
        .resize_with(n_groups, || MinMaxSketch::new(1, 1, 0));
    for (g, sketch) in s.sketches.iter_mut().enumerate() {
        sketch.reset(
            sh.rows,
            sh.columns(group_keys[g].len()),
            (sh.per_group - 1) as u8,
        );
        for (&k, &i) in group_keys[g].iter().zip(&group_idx[g]) {
            sketch.insert(k, i);
        }
    }
    let sketches = &s.sketches;
    let table = match decode {
        Decode::Edge => edges,
        Decode::Midpoint => [0, 1].map(|sign| {
            let e = &edges[sign];
            (0..e.len())
                .map(|j| 0.5 * (e[j] + e.get(j + 1).copied().unwrap_or(maxima[sign])))
                .collect()
        }),
        Decode::Mean => {
            // Run the receiver's queries and average the true magnitudes per answer.
            let mut sums = [
                vec![(0f64, 0u32); edges[0].len()],
                vec![(0f64, 0u32); edges[1].len()],
            ];
            for g in 0..n_groups {
                let (sign, first) = sh.group_origin(g);
                for (&k, &m) in group_keys[g].iter().zip(&group_mags[g]) {
                    let slot = &mut sums[sign][first + sketches[g].query(k) as usize];
                    slot.0 += m as f64;
                    slot.1 += 1;
                }
            }
            [0, 1].map(|sign| {
                sums[sign]
                    .iter()
                    .zip(&edges[sign])
                    .map(|(&(sum, n), &edge)| {
                        if n == 0 {
                            edge
                        } else {
                            (sum / n as f64) as f32
                        }
                    })
                    .collect()
            })
        }
    };
    s.table = table;
}

/// Appends the values of group `g`'s keys from its sketch: the table's value of the answered
/// bucket.
pub(crate) fn group_values(
    sh: &Shape,
    table: &[Vec<f32>; 2],
    g: usize,
    keys: &[u32],
    sketch: &MinMaxSketch,
    out: &mut Vec<f32>,
) -> Result<(), CodecError> {
    let (sign, first) = sh.group_origin(g);
    let e = &table[sign];
    out.reserve(keys.len());
    for &k in keys {
        let b = first + sketch.query(k) as usize;
        let m = *e
            .get(b)
            .ok_or_else(|| CodecError::Corrupt(format!("bucket {b} of {}", e.len())))?;
        out.push(if sign == 1 { -m } else { m });
    }
    Ok(())
}

/// Writes the shape parameters and the per-sign bucket tables.
pub(crate) fn write_shape_and_table(w: &mut BitWriter, p: &SketchMlParams, table: &[Vec<f32>; 2]) {
    w.write(p.bins as u64, 16);
    w.write(p.groups as u64, 8);
    w.write(p.rows as u64, 4);
    w.write_f32(p.column_ratio);
    for e in table {
        w.write(e.len() as u64, 16);
        e.iter().for_each(|&x| w.write_f32(x));
    }
}

/// Reads what [`write_shape_and_table`] wrote, validating it.
pub(crate) fn read_shape_and_table(
    r: &mut BitReader,
) -> Result<(Shape, [Vec<f32>; 2]), CodecError> {
    let (bins, groups, rows) = (r.read(16)? as u32, r.read(8)? as u32, r.read(4)? as u32);
    let ratio = r.read_f32()?;
    let sh = Shape::new(bins, groups, rows, ratio).map_err(CodecError::Corrupt)?;
    let mut table: [Vec<f32>; 2] = [Vec::new(), Vec::new()];
    for e in table.iter_mut() {
        let n = r.read(16)? as usize;
        if n > sh.half {
            return Err(CodecError::Corrupt(format!(
                "{n} bucket values for {} buckets",
                sh.half
            )));
        }
        for _ in 0..n {
            let x = r.read_f32()?;
            if !(x.is_finite() && x >= 0.0) {
                return Err(CodecError::Corrupt(format!("bucket value {x}")));
            }
            e.push(x);
        }
    }
    Ok((sh, table))
}

/// Reads a group's key count, checking the running total against the header's count.
pub(crate) fn read_group_count(
    r: &mut BitReader,
    seen: &mut usize,
    count: u32,
) -> Result<usize, CodecError> {
    let n = r.read(32)? as usize;
    *seen += n;
    if *seen > count as usize {
        return Err(CodecError::Corrupt(format!(
            "groups hold more than {count} keys"
        )));
    }
    Ok(n)
}

/// Merges the sorted per-group runs a decoder appended to one gradient into key order: pairwise
/// levels (log2(groups) linear passes) between the gradient's buffers and a scratch gradient
/// kept across messages, so that a decode allocates nothing once warm.
#[derive(Default)]
pub(crate) struct RunMerger {
    /// Where each run ends in the gradient being decoded (after a leading 0).
    pub(crate) bounds: Vec<usize>,
    next_bounds: Vec<usize>,
    scratch: SparseGrad,
}

impl RunMerger {
    /// Starts a message: the first run begins at 0.
    pub(crate) fn start(&mut self) {
        self.bounds.clear();
        self.bounds.push(0);
    }

    /// Ends a run at `len` entries.
    pub(crate) fn end_run(&mut self, len: usize) {
        self.bounds.push(len);
    }

    /// Merges the runs of `out` into key order; a key in two runs is an error.
    pub(crate) fn merge(&mut self, out: &mut SparseGrad) -> Result<(), CodecError> {
        let n = out.keys.len();
        while self.bounds.len() > 2 {
            self.scratch.keys.resize(n, 0);
            self.scratch.values.resize(n, 0.0);
            self.next_bounds.clear();
            self.next_bounds.push(0);
            for pair in self.bounds.windows(3).step_by(2) {
                let (lo, mid, hi) = (pair[0], pair[1], pair[2]);
                merge_two(out, (lo, mid, hi), &mut self.scratch);
                self.next_bounds.push(hi);
            }
            if self.bounds.len() % 2 == 0 {
                // An odd number of runs: the last one is copied as it is.
                let lo = self.bounds[self.bounds.len() - 2];
                self.scratch.keys[lo..].copy_from_slice(&out.keys[lo..]);
                self.scratch.values[lo..].copy_from_slice(&out.values[lo..]);
                self.next_bounds.push(n);
            }
            std::mem::swap(&mut out.keys, &mut self.scratch.keys);
            std::mem::swap(&mut out.values, &mut self.scratch.values);
            std::mem::swap(&mut self.bounds, &mut self.next_bounds);
        }
        if let Some(w) = out.keys.windows(2).find(|w| w[0] >= w[1]) {
            return Err(CodecError::BadKeys(format!(
                "key {} appears in two groups",
                w[1]
            )));
        }
        Ok(())
    }
}

/// Merges the sorted runs `from[lo..mid]` and `from[mid..hi]` into `to[lo..hi]`, branch-free in
/// the loop (the interleaving of two groups' keys is random, so a branch would mispredict half
/// the time). Keys in both runs end up adjacent and are caught by [`RunMerger::merge`]'s order
/// check.
fn merge_two(from: &SparseGrad, (lo, mid, hi): (usize, usize, usize), to: &mut SparseGrad) {
    let (ak, av) = (&from.keys[lo..mid], &from.values[lo..mid]);
    let (bk, bv) = (&from.keys[mid..hi], &from.values[mid..hi]);
    let (ok, ov) = (&mut to.keys[lo..hi], &mut to.values[lo..hi]);
    let (mut i, mut j, mut k) = (0, 0, 0);
    while i < ak.len() && j < bk.len() {
        // SAFETY: i < ak.len() == av.len(), j < bk.len() == bv.len(), and k = i + j <
        // ak.len() + bk.len() == ok.len() == ov.len(). Unchecked, the loop body is a handful
        // of conditional moves; with bounds checks it was a third of the decode.
        unsafe {
            let (x, y) = (*ak.get_unchecked(i), *bk.get_unchecked(j));
            let take_a = x < y;
            *ok.get_unchecked_mut(k) = if take_a { x } else { y };
            *ov.get_unchecked_mut(k) = if take_a {
                *av.get_unchecked(i)
            } else {
                *bv.get_unchecked(j)
            };
            i += take_a as usize;
            j += !take_a as usize;
        }
        k += 1;
    }
    let rest = ak.len() - i;
    ok[k..k + rest].copy_from_slice(&ak[i..]);
    ov[k..k + rest].copy_from_slice(&av[i..]);
    k += rest;
    ok[k..].copy_from_slice(&bk[j..]);
    ov[k..].copy_from_slice(&bv[j..]);
}

/// Reads `count` cells of `bits` bits into `cells` (cleared first), refusing a count the rest of
/// the message cannot hold before reserving anything.
pub(crate) fn read_cells(
    r: &mut BitReader,
    count: usize,
    bits: u32,
    cells: &mut Vec<u8>,
) -> Result<(), CodecError> {
    cells.clear();
    if count.saturating_mul(bits as usize) > r.remaining_bits() {
        return Err(CodecError::Corrupt(format!(
            "{count} sketch cells do not fit in the message"
        )));
    }
    cells.reserve(count);
    for _ in 0..count {
        cells.push(r.read(bits)? as u8);
    }
    Ok(())
}

impl Codec for SketchMl {
    fn name(&self) -> &'static str {
        "sketchml"
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
        let count: usize = s.group_keys.iter().map(Vec::len).sum();
        write_message(out, ID, VERSION, dim, count, |w| {
            write_shape_and_table(w, &self.p, &s.table);
            self.p.keys.write_id(w);
            for (keys, sketch) in s.group_keys.iter().zip(&s.sketches) {
                w.write(keys.len() as u64, 32);
                self.p.keys.encode(keys, w);
                for &c in sketch.cells() {
                    w.write(c as u64, sh.cell_bits);
                }
            }
        });
        Ok(())
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        let (keys, cells, merger) = (&mut self.keys, &mut self.cells, &mut self.merger);
        read_message(bytes, ID, VERSION, out, |h, r, out| {
            let (sh, table) = read_shape_and_table(r)?;
            let coder = KeyCoding::read_id(r)?;
            let mut seen = 0usize;
            merger.start();
            for g in 0..2 * sh.groups_per_sign {
                let n = read_group_count(r, &mut seen, h.count)?;
                coder.decode(n, h.dim, r, keys)?;
                let cols = sh.columns(n);
                read_cells(r, sh.rows * cols, sh.cell_bits, cells)?;
                let sketch = MinMaxSketch::from_cells(
                    sh.rows,
                    cols,
                    (sh.per_group - 1) as u8,
                    std::mem::take(cells),
                );
                let decoded = group_values(&sh, &table, g, keys, &sketch, &mut out.values);
                *cells = sketch.into_cells();
                decoded?;
                out.keys.extend_from_slice(keys);
                merger.end_run(out.keys.len());
            }
            merger.merge(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `runs` appended one after another, as a decoder appends its groups.
    fn merged(runs: &[&[u32]]) -> (Result<(), CodecError>, SparseGrad) {
        let (mut merger, mut out) = (RunMerger::default(), SparseGrad::default());
        merger.start();
        for run in runs {
            out.keys.extend_from_slice(run);
            out.values.extend(run.iter().map(|&k| k as f32 * 0.5));
            merger.end_run(out.keys.len());
        }
        (merger.merge(&mut out), out)
    }

    #[test]
    fn runs_merge_into_key_order_with_their_values_and_a_shared_key_is_an_error() {
        let runs: [&[u32]; 5] = [&[3, 9, 40], &[1, 2], &[], &[10, 41, 42, 50], &[0]];
        let (result, out) = merged(&runs);
        result.unwrap();
        assert_eq!(out.keys, [0, 1, 2, 3, 9, 10, 40, 41, 42, 50]);
        assert!(out
            .keys
            .iter()
            .zip(&out.values)
            .all(|(&k, &v)| v == k as f32 * 0.5));
        let (result, _) = merged(&[&[1, 5], &[2, 5]]);
        assert!(matches!(result, Err(CodecError::BadKeys(_))), "{result:?}");
    }
}
