//! Quantile buckets for magnitudes (SketchML §3.2): `q` buckets of about equal count whose
//! split edges come from a deterministic sample of the values.
//!
//! Choice, by measurement: exactly sorting 1M magnitudes costs ~60 ms, more than the whole
//! SketchML budget (25 ms for encode + decode); a strided sample of 16,384 values per sign
//! sorts (radix sort, `radsort`: half the time of `sort_unstable` here) in about 0.06 ms and
//! gives edges whose bucket counts are within a few percent of equal, which
//! is all the buckets need: correctness does not depend on the edges being exact quantiles,
//! because every value is assigned by the edges themselves (bucket `j` holds the magnitudes in
//! `[edge[j], edge[j+1])`), so `edge[j]` is a lower bound of every value in bucket `j`.

/// Sample size for the edges.
pub const SAMPLE: usize = 16_384;

/// Bucket edges for the magnitudes of each sign of a set of values (zeros belong to neither):
/// index 0 for positive values, 1 for negative ones.
pub struct SignedEdges {
    /// Lower edges of up to `q` buckets per sign: `edges[s][0]` is the sign's exact minimum
    /// magnitude, the others quantiles of a strided sample of up to [`SAMPLE`] of that sign's
    /// values; strictly increasing (duplicates removed, so there may be fewer than `q`).
    pub edges: [Vec<f32>; 2],
    /// The largest magnitude of each sign (0 when it has none).
    pub max: [f32; 2],
}

/// [`SignedEdges`] of `values` with `q` buckets per sign, without copying either sign's
/// magnitudes: one pass for each sign's count, minimum and maximum (on the float bits, branch-
/// free, so it vectorises), then a strided sample of about [`SAMPLE`] values per sign taken
/// once over all values. A sign whose share of that sample is small (fewer than `SAMPLE / 8`
/// values while it has more) is sampled again on its own with a stride of its own, so a sign
/// with few values keeps its buckets.
pub fn signed_bucket_edges(values: &[f32], q: usize) -> SignedEdges {
    let stats = SignStats::of(values);
    let count = stats.count;
    let stride = values.len().div_ceil(2 * SAMPLE).max(1);
    let mut samples: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    for &v in values.iter().step_by(stride) {
        if v != 0.0 {
            samples[(v < 0.0) as usize].push(v.to_bits() & 0x7FFF_FFFF);
        }
    }
    for sign in 0..2 {
        if samples[sign].len() < SAMPLE / 8 && count[sign] > samples[sign].len() {
            let step = count[sign].div_ceil(SAMPLE).max(1);
            samples[sign] = values
                .iter()
                .filter(|&&v| v != 0.0 && (v < 0.0) as usize == sign)
                .step_by(step)
                .map(|v| v.to_bits() & 0x7FFF_FFFF)
                .collect();
        }
    }
    SignedEdges {
        edges: [0, 1].map(|sign| edges_from_sample(&mut samples[sign], stats.min[sign], q)),
        max: stats.max,
    }
}

/// Per sign (0 positive, 1 negative; zeros belong to neither): count, smallest and largest
/// magnitude (0 for both when the sign has no values).
struct SignStats {
    count: [usize; 2],
    min: [f32; 2],
    max: [f32; 2],
}

impl SignStats {
    /// In eight independent lanes with selects instead of branches (a value's sign is a coin
    /// flip, so a branch on it mispredicts half the time), which the compiler vectorises.
    fn of(values: &[f32]) -> SignStats {
        const L: usize = 8;
        let (mut negatives, mut zeros) = ([0u32; L], [0u32; L]);
        let (mut min, mut max) = ([[f32::INFINITY; L]; 2], [[0f32; L]; 2]);
        let mut lane = |j: usize, v: f32| {
            let (m, negative, zero) = (v.abs(), v < 0.0, v == 0.0);
            negatives[j] += negative as u32;
            zeros[j] += zero as u32;
            let inf = f32::INFINITY;
            min[0][j] = min[0][j].min(if negative || zero { inf } else { m });
            min[1][j] = min[1][j].min(if negative { m } else { inf });
            max[0][j] = max[0][j].max(if negative { 0.0 } else { m });
            max[1][j] = max[1][j].max(if negative { m } else { 0.0 });
        };
        let chunks = values.chunks_exact(L);
        let tail = chunks.remainder();
        for chunk in chunks {
            for (j, &v) in chunk.iter().enumerate() {
                lane(j, v);
            }
        }
        for (j, &v) in tail.iter().enumerate() {
            lane(j, v);
        }
        let negatives = negatives.iter().map(|&c| c as usize).sum::<usize>();
        let zeros = zeros.iter().map(|&c| c as usize).sum::<usize>();
        let fold_min = |lanes: &[f32; L]| lanes.iter().fold(f32::INFINITY, |a, &b| a.min(b));
        let fold_max = |lanes: &[f32; L]| lanes.iter().fold(0f32, |a, &b| a.max(b));
        SignStats {
            count: [values.len() - negatives - zeros, negatives],
            min: [0, 1].map(|sign| {
                Some(fold_min(&min[sign]))
                    .filter(|m| m.is_finite())
                    .unwrap_or(0.0)
            }),
            max: [fold_max(&max[0]), fold_max(&max[1])],
        }
    }
}

/// Lower edges of `q` buckets from a sample of the magnitudes (as float bits, which sort like
/// the non-negative floats they are) and their exact minimum; sorts `sample`.
fn edges_from_sample(sample: &mut [u32], min: f32, q: usize) -> Vec<f32> {
    if sample.is_empty() || q == 0 {
        return Vec::new();
    }
    radsort::sort(sample);
    let mut edges = Vec::with_capacity(q);
    edges.push(min);
    for j in 1..q {
        let e = f32::from_bits(sample[j * sample.len() / q]);
        if e > *edges.last().unwrap() {
            edges.push(e);
        }
    }
    edges
}

/// The bucket of magnitude `m`: the last edge `<= m` (0 if `m` is below every edge).
#[inline]
pub fn bucket_of(edges: &[f32], m: f32) -> usize {
    edges.partition_point(|&e| e <= m).saturating_sub(1)
}

/// [`bucket_of`] for many values in one pass: a table indexed by the top bits of the float
/// (exponent and 8 mantissa bits; non-negative floats order like their bit patterns) gives the
/// bucket of the smallest value with those bits, and a fixed number of branch-free steps
/// finishes (the most edges any one table slot spans, measured when the table is built: one
/// or two for gradient magnitudes). The table spans only the prefixes between the first edge
/// and the largest value, a few thousand entries. One load and a compare or two per value,
/// without a chain of dependent loads (a binary search) or a data-dependent loop that
/// mispredicts.
pub struct BucketFinder {
    /// Edge bits, then `steps` sentinels (`u32::MAX`, above every finite value).
    edges: Vec<u32>,
    first_prefix: u32,
    /// `slots` entries.
    table: Vec<u16>,
    slots: usize,
    steps: usize,
}

const PREFIX_SHIFT: u32 = 15;

impl BucketFinder {
    /// A finder for `edges` (strictly increasing, non-negative, fewer than 65,536) and values up
    /// to `max`.
    pub fn new(edges: &[f32], max: f32) -> Self {
        let mut bits: Vec<u32> = edges.iter().map(|e| e.to_bits()).collect();
        let (first_prefix, last_prefix) = match (bits.first(), max.to_bits()) {
            (Some(&lo), hi) if hi >= lo => (lo >> PREFIX_SHIFT, hi >> PREFIX_SHIFT),
            _ => (0, 0),
        };
        // Each prefix's first and last bucket ([`bucket_of`] of its smallest and largest
        // value), by one pass over the prefixes and the edges together: both rise with the
        // prefix. (A binary search per prefix and end was a third of a 10k-pair message.)
        let (mut below_first, mut below_last) = (0, 0);
        let mut table = Vec::with_capacity((last_prefix - first_prefix + 1) as usize);
        let mut steps = 0;
        for p in first_prefix..=last_prefix {
            let (lo, hi) = (p << PREFIX_SHIFT, ((p + 1) << PREFIX_SHIFT) - 1);
            let (lo, hi) = (f32::from_bits(lo), f32::from_bits(hi));
            while edges.get(below_first).is_some_and(|&e| e <= lo) {
                below_first += 1;
            }
            while edges.get(below_last).is_some_and(|&e| e <= hi) {
                below_last += 1;
            }
            let (first, last) = (below_first.saturating_sub(1), below_last.saturating_sub(1));
            table.push(first as u16);
            steps = steps.max(last - first);
        }
        let slots = table.len();
        bits.extend(std::iter::repeat_n(u32::MAX, steps + 1));
        BucketFinder {
            edges: bits,
            first_prefix,
            table,
            slots,
            steps,
        }
    }

    /// How many buckets it answers: every answer is below this (1 without edges).
    pub fn buckets(&self) -> usize {
        (self.edges.len() - self.steps - 1).max(1)
    }

    /// The bucket of magnitude `m` (`0 <= m <= max`).
    #[inline]
    pub fn find(&self, m: f32) -> usize {
        let bits = m.to_bits();
        let slot =
            ((bits >> PREFIX_SHIFT).saturating_sub(self.first_prefix) as usize).min(self.slots - 1);
        let mut b = self.table[slot] as usize;
        for _ in 0..self.steps {
            b += (self.edges[b + 1] <= bits) as usize;
        }
        b
    }
}

/// Both signs' [`BucketFinder`]s in one set of tables, the negative sign's after the
/// positive's, for sixteen values of either sign at once: each value's bucket is found in its
/// own sign's part, as an index into the joint edges (its sign's `edge_base` plus the bucket).
/// One lookup per value where a finder per sign took two (every value looked up in both, its
/// sign picking one answer).
#[cfg(target_arch = "x86_64")]
pub(crate) struct SignedFinders {
    /// Both tables' entries as joint edge indexes.
    table: Vec<u32>,
    /// Both finders' edges, each with its sentinels.
    edges: Vec<u32>,
    /// Per sign: its first prefix, its first and last slot in `table`.
    first_prefix: [u32; 2],
    first_slot: [u32; 2],
    last_slot: [u32; 2],
    steps: usize,
    /// Per sign: where its edges start in the joint ones.
    pub(crate) edge_base: [usize; 2],
}

#[cfg(target_arch = "x86_64")]
impl SignedFinders {
    /// The joint tables of the positive (`finders[0]`) and negative (`finders[1]`) finders.
    pub(crate) fn new(finders: &[BucketFinder; 2]) -> SignedFinders {
        let (mut table, mut edges) = (Vec::new(), Vec::new());
        let (mut first_slot, mut last_slot, mut edge_base) = ([0u32; 2], [0u32; 2], [0usize; 2]);
        for (sign, f) in finders.iter().enumerate() {
            (first_slot[sign], edge_base[sign]) = (table.len() as u32, edges.len());
            table.extend(f.table.iter().map(|&b| b as u32 + edge_base[sign] as u32));
            last_slot[sign] = table.len() as u32 - 1;
            edges.extend(&f.edges);
        }
        SignedFinders {
            table,
            edges,
            first_prefix: finders.each_ref().map(|f| f.first_prefix),
            first_slot,
            last_slot,
            steps: finders[0].steps.max(finders[1].steps),
            edge_base,
        }
    }

    /// `edge_base[sign] + finders[sign].find(|v|)` for sixteen values `v` (their float bits,
    /// one per 32-bit lane, sign bit included): the table entry gathered at the value's slot in
    /// its sign's part, then the most steps either finder needs, each a gather of the next
    /// edge (a finder that needs fewer stops at its first sentinel, which no finite magnitude
    /// reaches).
    ///
    /// # Safety
    /// AVX-512F is available.
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn find16(
        &self,
        bits: std::arch::x86_64::__m512i,
    ) -> std::arch::x86_64::__m512i {
        use std::arch::x86_64::*;
        let negative = _mm512_cmplt_epi32_mask(bits, _mm512_setzero_si512());
        let per_sign = |v: [u32; 2]| {
            _mm512_mask_blend_epi32(
                negative,
                _mm512_set1_epi32(v[0] as i32),
                _mm512_set1_epi32(v[1] as i32),
            )
        };
        let magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFF_FFFF));
        let first = per_sign(self.first_prefix);
        let prefix = _mm512_srli_epi32::<{ PREFIX_SHIFT }>(magnitude);
        let slot = _mm512_sub_epi32(_mm512_max_epu32(prefix, first), first);
        let slot = _mm512_add_epi32(slot, per_sign(self.first_slot));
        let slot = _mm512_min_epu32(slot, per_sign(self.last_slot));
        // SAFETY: each slot is within its sign's part of the table; `b + 1` stays within its
        // sign's edges and their sentinels (each step moves past an edge at most, the table's
        // entry is at most its finder's `steps` edges below the bucket, and no finite magnitude
        // passes a sentinel).
        unsafe {
            let mut b = _mm512_i32gather_epi32::<4>(slot, self.table.as_ptr() as *const i32);
            let one = _mm512_set1_epi32(1);
            for _ in 0..self.steps {
                let next = _mm512_add_epi32(b, one);
                let edge = _mm512_i32gather_epi32::<4>(next, self.edges.as_ptr() as *const i32);
                let past = _mm512_cmple_epu32_mask(edge, magnitude);
                b = _mm512_mask_add_epi32(b, past, b, one);
            }
            b
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_bound_their_buckets_and_are_nearly_equal_count() {
        let mags: Vec<f32> = (0..100_000)
            .map(|i| ((i * 7919) % 100_000) as f32 * 1e-5)
            .collect();
        let edges = &signed_bucket_edges(&mags, 128).edges[0];
        assert_eq!(edges.len(), 128);
        assert!(edges.windows(2).all(|w| w[0] < w[1]));
        let mut count = vec![0usize; edges.len()];
        for &m in mags.iter().filter(|&&m| m > 0.0) {
            // (zeros belong to no bucket)
            let b = bucket_of(edges, m);
            assert!(edges[b] <= m, "the edge is a lower bound");
            count[b] += 1;
        }
        for max in [1.0, 0.5, 1e-3, 3e4] {
            let finder = BucketFinder::new(edges, max);
            for &m in mags
                .iter()
                .chain([0.0, 1.0, max].iter())
                .filter(|&&m| m <= max)
            {
                assert_eq!(finder.find(m), bucket_of(edges, m), "{m}");
            }
            // The table and steps are those of a binary search per prefix.
            let first = edges[0].to_bits() >> PREFIX_SHIFT;
            let last = (max.to_bits() >> PREFIX_SHIFT).max(first);
            let at = |bits: u32| bucket_of(edges, f32::from_bits(bits));
            let span = |p: u32| at(((p + 1) << PREFIX_SHIFT) - 1) - at(p << PREFIX_SHIFT);
            let table: Vec<u16> = (first..=last)
                .map(|p| at(p << PREFIX_SHIFT) as u16)
                .collect();
            if max.to_bits() >= edges[0].to_bits() {
                assert_eq!(finder.table, table, "max {max}");
                assert_eq!(finder.steps, (first..=last).map(span).max().unwrap());
            }
        }
        let (lo, hi) = (count.iter().min().unwrap(), count.iter().max().unwrap());
        assert!(*hi < 2 * *lo, "bucket counts {lo}..{hi}");
        assert_eq!(signed_bucket_edges(&[0.5, 0.5, 0.5], 4).edges[0], vec![0.5]);
    }

    #[test]
    fn each_sign_is_sampled_with_its_own_stride() {
        // 100 distinct negative values among 200,000 positive ones: the negative side gets
        // 100 edges (sampled whole), not the one or two a shared stride would pick.
        let values: Vec<f32> = (0..200_100)
            .map(|i| {
                if i % 2001 == 7 && i / 2001 < 100 {
                    -((i / 2001 + 1) as f32)
                } else {
                    1.0 + (i % 977) as f32
                }
            })
            .collect();
        let e = signed_bucket_edges(&values, 128);
        assert_eq!(e.edges[1].len(), 100);
        assert_eq!((e.edges[1][0], e.max[1]), (1.0, 100.0));
        assert_eq!(e.edges[0][0], 1.0);
        assert_eq!(
            signed_bucket_edges(&[0.0, 0.0], 4).edges,
            [Vec::<f32>::new(), Vec::new()]
        );
    }
}
