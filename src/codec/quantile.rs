//! Quantile buckets for magnitudes (SketchML §3.2): `q` buckets of about equal count whose
//! split edges come from a deterministic sample of the values.
//!
//! Choice, by measurement: exactly sorting 1M magnitudes costs ~60 ms, more than the whole
//! SketchML budget (25 ms for encode + decode); a strided sample of 16,384 values sorts in about
//! a millisecond and gives edges whose bucket counts are within a few percent of equal, which
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

/// [`SignedEdges`] of `values` with `q` buckets per sign, in two passes over `values` and
/// without copying either sign's magnitudes: one for each sign's count, minimum and maximum,
/// one for a sample with a stride of its own per sign (so a sign with few values is sampled
/// whole).
pub fn signed_bucket_edges(values: &[f32], q: usize) -> SignedEdges {
    let (mut count, mut min, mut max) = ([0usize; 2], [f32::INFINITY; 2], [0f32; 2]);
    for &v in values {
        if v != 0.0 {
            let (sign, m) = ((v < 0.0) as usize, v.abs());
            count[sign] += 1;
            min[sign] = min[sign].min(m);
            max[sign] = max[sign].max(m);
        }
    }
    let step = count.map(|n| n.div_ceil(SAMPLE).max(1));
    let mut samples = [0, 1].map(|sign| Vec::with_capacity(count[sign].div_ceil(step[sign])));
    let mut until_next = [0usize; 2];
    for &v in values {
        if v != 0.0 {
            let sign = (v < 0.0) as usize;
            if until_next[sign] == 0 {
                samples[sign].push(v.abs());
                until_next[sign] = step[sign];
            }
            until_next[sign] -= 1;
        }
    }
    SignedEdges {
        edges: [0, 1].map(|sign| edges_from_sample(&mut samples[sign], min[sign], q)),
        max,
    }
}

/// Lower edges of `q` buckets from a sample of the magnitudes and their exact minimum; sorts
/// `sample`.
fn edges_from_sample(sample: &mut [f32], min: f32, q: usize) -> Vec<f32> {
    if sample.is_empty() || q == 0 {
        return Vec::new();
    }
    sample.sort_unstable_by(f32::total_cmp);
    let mut edges = Vec::with_capacity(q);
    edges.push(min);
    for j in 1..q {
        let e = sample[j * sample.len() / q];
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
/// bucket of the smallest value with those bits, and a short forward scan finishes. The table
/// spans only the prefixes between the first edge and the largest value, a few thousand entries
/// for gradient magnitudes. One load and a compare or two per value, instead of a chain of
/// dependent loads in a binary search.
pub struct BucketFinder {
    edges: Vec<u32>,
    first_prefix: u32,
    table: Vec<u16>,
}

const PREFIX_SHIFT: u32 = 15;

impl BucketFinder {
    /// A finder for `edges` (strictly increasing, non-negative, fewer than 65,536) and values up
    /// to `max`.
    pub fn new(edges: &[f32], max: f32) -> Self {
        let bits: Vec<u32> = edges.iter().map(|e| e.to_bits()).collect();
        let (first_prefix, last_prefix) = match (bits.first(), max.to_bits()) {
            (Some(&lo), hi) if hi >= lo => (lo >> PREFIX_SHIFT, hi >> PREFIX_SHIFT),
            _ => (0, 0),
        };
        let table = (first_prefix..=last_prefix)
            .map(|p| bucket_of(edges, f32::from_bits(p << PREFIX_SHIFT)) as u16)
            .collect();
        BucketFinder {
            edges: bits,
            first_prefix,
            table,
        }
    }

    /// The bucket of magnitude `m` (`0 <= m <= max`).
    #[inline]
    pub fn find(&self, m: f32) -> usize {
        let bits = m.to_bits();
        let slot = ((bits >> PREFIX_SHIFT).saturating_sub(self.first_prefix) as usize)
            .min(self.table.len().saturating_sub(1));
        let mut b = self.table.get(slot).copied().unwrap_or(0) as usize;
        while b + 1 < self.edges.len() && self.edges[b + 1] <= bits {
            b += 1;
        }
        b
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
        let finder = BucketFinder::new(edges, 1.0);
        for &m in mags.iter().chain([0.0, 1.0].iter()) {
            assert_eq!(finder.find(m), bucket_of(edges, m), "{m}");
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
        assert_eq!(signed_bucket_edges(&[0.0, 0.0], 4).edges, [vec![], vec![]]);
    }
}
