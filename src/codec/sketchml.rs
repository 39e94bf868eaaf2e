//! `sketchml`: SketchML (Jiang et al., SIGMOD'18, `shared/papers/sketchml-sigmod18.txt`).
//!
//! 1. Quantile buckets (§3.2): positive and negative values are bucketed separately (§3.3,
//!    Solution 1), `q/2` equal-count magnitude buckets per sign ([`super::quantile`]), so no
//!    bucket straddles zero and no sign can flip.
//! 2. Grouped MinMaxSketch (§3.3): each sign's buckets are cut into `r/2` groups of consecutive
//!    buckets; a group has its own [`MinMaxSketch`] of `s` rows and `ceil(ratio · n_g)` columns
//!    holding bucket indexes local to the group.
//! 3. Keys (§3.4): delta-coded, but once over the whole message in key order, each key followed
//!    by its group's label (log2(groups) bits) in a section of its own. This holds the same
//!    information as the paper's per-group delta lists (log2 C(D, n) + n·log2(groups) bits
//!    against Σ_g log2 C(D, n_g), equal for equal-sized groups; measured: the same 1.54 bytes
//!    per pair at D = 29M, d = 1M), and the decoder writes keys and values in key order in one
//!    pass, where per-group lists had to be merged back into order (three passes over the
//!    message, a third of the decode). Rice-coded deltas by default, the project's key coder
//!    (1.545 bytes per pair at D = 29M, d = 1M, against 1.692 with the reference code's
//!    adaptive keys and 1.958 with the paper's delta-binary).
//!
//! Decoding a key queries its group's sketch, which never answers above the key's true bucket,
//! and looks the answer up in a per-sign table of bucket values the encoder chose ([`Decode`]):
//!
//! * `mean` (default): for every (sign, answered bucket), the mean magnitude of the keys whose
//!   query answers that bucket (the encoder runs the receiver's queries, so it knows). This is
//!   the least-squares value for what the receiver can tell apart, and every such class decodes
//!   to its true sum, so each sign's sum, and with it the size of an SGD step, is kept. A
//!   correctly answered key decodes above its true magnitude when collided keys share its
//!   class. Measured on the convergence set (`docs/codecs.md`): plain SGD ends 0.75% above uncompressed
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
//! and the bucket values (f32), the key coder, each group's key count (32 bits), every group's
//! cells, the keys, and each key's group label.

use serde::{Deserialize, Serialize};

use super::bits::{BitReader, BitWriter};
use super::keys::{bit_len, KeyCoding};
use super::minmax::MinMaxSketches;
use super::quantile::{signed_bucket_edges, SignedEdges};
use super::{
    check_finite, read_message, write_message, Codec, CodecError, EncodeContext, FromParams,
};
use crate::sparse::SparseGrad;

const ID: u8 = 13;
const VERSION: u8 = 3;

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
        if !(2..=4096).contains(&bins) || !bins.is_multiple_of(2) {
            return Err(format!("bins: must be even and in 2..=4096, got {bins}"));
        }
        if !(2..=bins).contains(&groups) || !groups.is_multiple_of(2) {
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
    /// Decode scratch, reused across messages.
    decoding: Unsketch,
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
            decoding: Unsketch::default(),
        })
    }
}

/// The SketchML pipeline up to the message layout: per-sign bucket tables, the sent keys in
/// key order with their groups, and each group's MinMaxSketch. Shared with `skcompress`, which
/// codes keys, labels and cells differently. Kept by the encoder across messages, so that its
/// buffers are reused.
#[derive(Default)]
pub(crate) struct Sketched {
    /// Per sign, the magnitude each answered bucket decodes to.
    pub(crate) table: [Vec<f32>; 2],
    /// The keys sent (those with nonzero values), in key order, when some value was zero
    /// (see [`Sketched::sent_keys`]).
    keys: Vec<u32>,
    /// Whether some value was zero, so that `keys`, `local` and `mags` hold the others.
    compacted: bool,
    /// The group of each key sent.
    pub(crate) labels: Vec<u8>,
    /// Keys per group.
    pub(crate) counts: Vec<usize>,
    /// Each group's MinMaxSketch.
    pub(crate) sketches: MinMaxSketches,
    /// Per key sent, its bucket within its group and its magnitude.
    local: Vec<u8>,
    mags: Vec<f32>,
}

impl Sketched {
    /// The keys sent, in key order: `keys` (those given to [`sketch_gradient`]) when none of
    /// their values was zero.
    pub(crate) fn sent_keys<'a>(&'a self, keys: &'a [u32]) -> &'a [u32] {
        if self.compacted {
            &self.keys
        } else {
            keys
        }
    }
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
    let buckets = signed_bucket_edges(values, sh.half);
    // Each value's group (numbered over both signs) and bucket within it, by its slot: one load
    // per value. A value of a sign without buckets is zero, and dropped.
    let codes = buckets.slot_table(|sign, b| {
        let group = sign * sh.groups_per_sign + b / sh.per_group;
        (group as u8, (b % sh.per_group) as u8)
    });

    // 1. Bucket every value. Without zero values (the usual gradient) only each key's group and
    //    bucket in it are written; the keys and magnitudes are read from the input later. With
    //    them, the nonzero ones are kept in key order (branch-free compaction: every value is
    //    written, the cursor advances for a nonzero one).
    let n = keys.len();
    s.compacted = values.iter().fold(false, |zero, &v| zero | (v == 0.0));
    s.labels.resize(n, 0);
    s.local.resize(n, 0);
    if s.compacted {
        s.keys.resize(n, 0);
        s.mags.resize(n, 0.0);
        let mut m = 0;
        for (&k, &v) in keys.iter().zip(values) {
            let (g, local) = codes.get(v);
            (s.keys[m], s.labels[m], s.local[m], s.mags[m]) = (k, g, local, v.abs());
            m += (v != 0.0) as usize;
        }
        s.keys.truncate(m);
        s.labels.truncate(m);
        s.local.truncate(m);
        s.mags.truncate(m);
    } else {
        codes.get_all(values, &mut s.labels, &mut s.local);
    }
    let sent: &[u32] = if s.compacted { &s.keys } else { keys };
    // Magnitudes as signed values (the sums take their absolute values).
    let signed: &[f32] = if s.compacted { &s.mags } else { values };

    // 2. Each group's sketch, sized for its keys; then every key inserted, in key order. The
    //    inserts batch across groups, and the sketches (600 KB at d = 1M) stay in the L2 cache:
    //    sorting the keys by group first, so that each group's sketch was built alone, costs
    //    more than its locality saves (figures: `docs/results.md`, "Design measurements").
    let n_groups = 2 * sh.groups_per_sign;
    s.counts.clear();
    s.counts.resize(n_groups, 0);
    s.labels.iter().for_each(|&g| s.counts[g as usize] += 1);
    s.sketches.reset(
        sh.rows,
        (sh.per_group - 1) as u8,
        s.counts.iter().map(|&n| sh.columns(n)),
    );
    s.sketches.insert_all(sent, &s.labels, &s.local);

    // 3. What each answered bucket decodes to.
    let SignedEdges {
        edges, max: maxima, ..
    } = buckets;
    s.table = match decode {
        Decode::Edge => edges,
        Decode::Midpoint => [0, 1].map(|sign| {
            let e = &edges[sign];
            (0..e.len())
                .map(|j| 0.5 * (e[j] + e.get(j + 1).copied().unwrap_or(maxima[sign])))
                .collect()
        }),
        Decode::Mean => {
            // Run the receiver's queries and average the true magnitudes per answer. Neighbouring
            // keys often answer the same bucket, so each of four consecutive keys adds into its
            // own bank of sums: one bank made every add wait for the one before it.
            const BANKS: usize = 4;
            let mut banks = vec![(0f64, 0u32); n_groups * sh.per_group * BANKS];
            // Slices, not the vectors: through a `&mut Vec` the adds reloaded its length.
            let (labels, signed, slots) = (&s.labels[..], &signed[..sent.len()], &mut banks[..]);
            s.sketches.query_all(sent, labels, |i, answer| {
                let class = labels[i] as usize * sh.per_group + answer as usize;
                let slot = &mut slots[class * BANKS + i % BANKS];
                slot.0 += signed[i].abs() as f64;
                slot.1 += 1;
            });
            let mut sums = [
                vec![(0f64, 0u32); edges[0].len()],
                vec![(0f64, 0u32); edges[1].len()],
            ];
            for (class, bank) in banks.chunks_exact(BANKS).enumerate() {
                let (sign, first) = sh.group_origin(class / sh.per_group);
                if let Some(slot) = sums[sign].get_mut(first + class % sh.per_group) {
                    for &(sum, n) in bank {
                        slot.0 += sum;
                        slot.1 += n;
                    }
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

/// Writes each group's key count (32 bits).
pub(crate) fn write_group_counts(w: &mut BitWriter, counts: &[usize]) {
    counts.iter().for_each(|&n| w.write(n as u64, 32));
}

/// The decoder's side of the pipeline, in buffers reused across messages: the groups' key
/// counts and sketches, the keys' labels, and the signed value of every (group, answer).
#[derive(Default)]
pub(crate) struct Unsketch {
    pub(crate) counts: Vec<usize>,
    pub(crate) sketches: MinMaxSketches,
    pub(crate) labels: Vec<u8>,
    values: Vec<f32>,
}

impl Unsketch {
    /// Reads the group counts, which must add up to the header's `count`; returns the number of
    /// sketch cells they call for (nothing is allocated for them yet: the caller checks that
    /// the message can hold them first).
    pub(crate) fn read_counts(
        &mut self,
        sh: &Shape,
        r: &mut BitReader,
        count: u32,
    ) -> Result<usize, CodecError> {
        self.counts.clear();
        let mut seen = 0usize;
        for _ in 0..2 * sh.groups_per_sign {
            let n = r.read(32)? as usize;
            seen += n;
            if seen > count as usize {
                return Err(CodecError::Corrupt(format!(
                    "groups hold more than {count} keys"
                )));
            }
            self.counts.push(n);
        }
        if seen != count as usize {
            return Err(CodecError::Corrupt(format!(
                "groups hold {seen} keys, the header counts {count}"
            )));
        }
        Ok(self.counts.iter().map(|&n| sh.rows * sh.columns(n)).sum())
    }

    /// Sizes each group's (empty) sketch for its key count.
    pub(crate) fn size_sketches(&mut self, sh: &Shape) {
        self.sketches.reset(
            sh.rows,
            (sh.per_group - 1) as u8,
            self.counts.iter().map(|&n| sh.columns(n)),
        );
    }

    /// Appends the value of every key, in order: the table's value of what the key's group's
    /// sketch answers for it. Checks the labels and the answers against the shape.
    pub(crate) fn values(
        &mut self,
        sh: &Shape,
        table: &[Vec<f32>; 2],
        keys: &[u32],
        out: &mut Vec<f32>,
    ) -> Result<(), CodecError> {
        // The signed value of every (group, local bucket); NaN where the table has no bucket.
        let n_groups = 2 * sh.groups_per_sign;
        self.values.clear();
        for g in 0..n_groups {
            let (sign, first) = sh.group_origin(g);
            self.values.extend((0..sh.per_group).map(|j| {
                let m = table[sign].get(first + j).copied().unwrap_or(f32::NAN);
                if sign == 1 {
                    -m
                } else {
                    m
                }
            }));
        }
        if self.labels.len() != keys.len() {
            return Err(CodecError::Corrupt(format!(
                "{} group labels for {} keys",
                self.labels.len(),
                keys.len()
            )));
        }
        // Checks as folds without an early exit, which vectorise; the culprit is named after.
        let top_label = self.labels.iter().fold(0u8, |a, &g| a.max(g));
        if top_label as usize >= n_groups {
            return Err(CodecError::Corrupt(format!(
                "group label {top_label} of {n_groups} groups"
            )));
        }
        let start = out.len();
        out.resize(start + keys.len(), 0.0);
        let (decoded, values, labels) = (&mut out[start..], &self.values, &self.labels);
        let mut beyond = false;
        self.sketches.query_all(keys, labels, |i, answer| {
            let v = values[labels[i] as usize * sh.per_group + answer as usize];
            beyond |= v.is_nan();
            decoded[i] = v;
        });
        if beyond {
            let i = decoded.iter().position(|v| v.is_nan()).unwrap_or(0);
            return Err(CodecError::Corrupt(format!(
                "key {} answers a bucket beyond its sign's table",
                keys[i]
            )));
        }
        Ok(())
    }
}

/// Bits of a group label.
pub(crate) fn label_bits(sh: &Shape) -> u32 {
    bit_len(2 * sh.groups_per_sign as u64 - 1).max(1)
}

impl Codec for SketchMl {
    fn name(&self) -> &'static str {
        "sketchml"
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
        write_message(out, ID, VERSION, dim, sent.len(), |w| {
            write_shape_and_table(w, &self.p, &s.table);
            self.p.keys.write_id(w);
            write_group_counts(w, &s.counts);
            w.write_packed(s.sketches.cells().iter().map(|&c| c as u64), sh.cell_bits);
            self.p.keys.encode(sent, w);
            w.write_packed(s.labels.iter().map(|&g| g as u64), label_bits(&sh));
        });
        Ok(())
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        let u = &mut self.decoding;
        read_message(bytes, ID, VERSION, out, |h, r, out| {
            let (sh, table) = read_shape_and_table(r)?;
            let coder = KeyCoding::read_id(r)?;
            let cells = u.read_counts(&sh, r, h.count)?;
            if cells.saturating_mul(sh.cell_bits as usize) > r.remaining_bits() {
                return Err(CodecError::Corrupt(format!(
                    "{cells} sketch cells do not fit in the message"
                )));
            }
            u.size_sketches(&sh);
            let max_index = (sh.per_group - 1) as u64;
            r.read_packed(u.sketches.cells_mut(), sh.cell_bits, max_index)?;
            coder.decode(h.count as usize, h.dim, r, &mut out.keys)?;
            u.labels.resize(out.keys.len(), 0);
            r.read_packed(&mut u.labels, label_bits(&sh), u8::MAX as u64)?;
            u.values(&sh, &table, &out.keys, &mut out.values)
        })
    }
}
