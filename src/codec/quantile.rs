//! Quantile buckets for magnitudes (SketchML §3.2): `q` buckets of about equal count per sign.
//!
//! SketchML finds the quantiles with a quantile sketch; this module uses a log-scale histogram
//! with relative accuracy, as DDSketch does (Masson et al., VLDB 2019): a magnitude's slot is
//! the top 17 bits of its float (exponent and 8 mantissa bits; non-negative floats order like
//! their bits), so a slot spans 1/256 of its power of two. One pass counts a strided sample of
//! up to [`SAMPLE`] values per sign into the slots between each sign's smallest and largest
//! magnitude (a few thousand for gradients); the `j`-th edge is the lower end of the slot that
//! holds the sample's `j/q` quantile. Every edge but the first (the sign's exact minimum) is a
//! slot boundary, so a slot lies in one bucket and a value's bucket is one table load
//! ([`SlotTable`]).
//!
//! Choice, by measurement (figures: `docs/results.md`, "Design measurements"): an exact sort of the magnitudes costs more than the
//! whole SketchML budget, and a radix-sorted sample with a lookup table beside it a quarter of
//! an encode. The histogram replaces both. The buckets'
//! counts are off equal by at most a slot's count, which is all they need: correctness does not
//! depend on the edges being exact quantiles, because every value is assigned by the edges
//! themselves (bucket `j` holds the magnitudes in `[edge[j], edge[j+1])`), so `edge[j]` is a
//! lower bound of every value in bucket `j`.

/// Sample size per sign for the edges.
pub const SAMPLE: usize = 16_384;

/// Float bits below a slot: a slot is the top `32 - SLOT_SHIFT` bits.
const SLOT_SHIFT: u32 = 15;

/// The slot of a magnitude's float bits.
#[inline]
fn slot_of(magnitude_bits: u32) -> u32 {
    magnitude_bits >> SLOT_SHIFT
}

/// Bucket edges for the magnitudes of each sign of a set of values (zeros belong to neither):
/// index 0 for positive values, 1 for negative ones.
pub struct SignedEdges {
    /// Lower edges of up to `q` buckets per sign: `edges[s][0]` is the sign's exact minimum
    /// magnitude, the others lower ends of slots; strictly increasing (a slot holding several
    /// quantiles gives one edge, so there may be fewer than `q`).
    pub edges: [Vec<f32>; 2],
    /// The largest magnitude of each sign (0 when it has none).
    pub max: [f32; 2],
    /// Per sign: the slot of its smallest magnitude, the slots up to its largest (at least
    /// one), and the slot where each bucket begins, counted from the first.
    first: [u32; 2],
    slots: [u32; 2],
    starts: [Vec<u32>; 2],
}

/// [`SignedEdges`] of `values` with `q` buckets per sign, without copying either sign's
/// magnitudes: one pass for each sign's count, minimum and maximum (on the float bits, branch-
/// free, so it vectorises), then a strided sample of about [`SAMPLE`] values per sign, taken
/// once over all values, counted into both signs' slots. A sign whose share of that sample is
/// small (fewer than `SAMPLE / 8` values while it has more) is sampled again on its own with a
/// stride of its own, so a sign with few values keeps its buckets.
pub fn signed_bucket_edges(values: &[f32], q: usize) -> SignedEdges {
    let stats = SignStats::of(values);
    let first = [0, 1].map(|s| slot_of(stats.min[s].to_bits()));
    let slots = [0, 1].map(|s| slot_of(stats.max[s].to_bits()) - first[s] + 1);
    // Both signs' slots, the negative after the positive, then one slot that zeros count into.
    let base = [0, slots[0] as usize];
    let zero_slot = (slots[0] + slots[1]) as usize;
    // A pass counts at most `2 * SAMPLE` values: 16 bits hold any count.
    let mut counts = vec![0u16; zero_slot + 1];
    let index = SlotIndex {
        first,
        last: slots.map(|s| s - 1),
        base: base.map(|b| b as u32),
    };
    let slot = |v: f32| if v == 0.0 { zero_slot } else { index.of(v) };
    let stride = values.len().div_ceil(2 * SAMPLE).max(1);
    if stride == 1 {
        index.count(values, &mut counts, zero_slot);
    } else {
        for &v in values.iter().step_by(stride) {
            counts[slot(v)] += 1;
        }
    }
    for sign in 0..2 {
        let part = base[sign]..base[sign] + slots[sign] as usize;
        let sampled = counts[part.clone()]
            .iter()
            .map(|&c| c as usize)
            .sum::<usize>();
        if sampled < SAMPLE / 8 && stats.count[sign] > sampled {
            counts[part.clone()].fill(0);
            let step = stats.count[sign].div_ceil(SAMPLE).max(1);
            let of_sign = |v: &&f32| **v != 0.0 && (**v < 0.0) as usize == sign;
            for &v in values.iter().filter(of_sign).step_by(step) {
                counts[slot(v)] += 1;
            }
        }
    }
    let mut edges: [Vec<f32>; 2] = Default::default();
    let mut starts: [Vec<u32>; 2] = Default::default();
    for sign in 0..2 {
        let part = &counts[base[sign]..][..slots[sign] as usize];
        starts[sign] = quantile_slots(part, q);
        edges[sign] = starts[sign]
            .iter()
            .map(|&s| match s {
                0 => stats.min[sign],
                s => f32::from_bits((first[sign] + s) << SLOT_SHIFT),
            })
            .collect();
    }
    SignedEdges {
        edges,
        max: stats.max,
        first,
        slots,
        starts,
    }
}

/// The slots (counted from the first) where `q` buckets of about equal count begin: slot 0,
/// then each slot holding a `j/q` quantile (`j = 1..q`) of the counted sample, once; none
/// without counts.
fn quantile_slots(counts: &[u16], q: usize) -> Vec<u32> {
    let total = counts.iter().map(|&c| c as usize).sum::<usize>();
    if total == 0 || q == 0 {
        return Vec::new();
    }
    let mut starts = Vec::with_capacity(q);
    starts.push(0u32);
    let (mut slot, mut below) = (0usize, 0usize);
    for j in 1..q {
        // The sample's element of rank `j * total / q` (from 0) lies in `slot`.
        let rank = j * total / q;
        while below + counts[slot] as usize <= rank {
            below += counts[slot] as usize;
            slot += 1;
        }
        if slot as u32 > *starts.last().unwrap() {
            starts.push(slot as u32);
        }
    }
    starts
}

impl SignedEdges {
    /// A table giving `label(sign, bucket)` for any value's float bits in one load: per slot of
    /// each sign, the label of the bucket it lies in. A value outside its sign's slots (zero,
    /// or beyond the magnitudes the edges were made from) gets the nearest slot's label; a sign
    /// without edges answers `label(sign, 0)`.
    pub fn slot_table<T: Copy>(&self, mut label: impl FnMut(usize, usize) -> T) -> SlotTable<T> {
        let mut table = Vec::with_capacity((self.slots[0] + self.slots[1]) as usize);
        for (sign, starts) in self.starts.iter().enumerate() {
            let slots = self.slots[sign] as usize;
            let base = table.len();
            for (b, &start) in starts.iter().enumerate() {
                let end = starts.get(b + 1).map_or(slots, |&e| e as usize);
                table.extend(std::iter::repeat_n(label(sign, b), end - start as usize));
            }
            let rest = slots - (table.len() - base);
            table.extend(std::iter::repeat_n(label(sign, 0), rest));
        }
        SlotTable {
            table,
            index: SlotIndex {
                first: self.first,
                last: self.slots.map(|s| s - 1),
                base: [0, self.slots[0]],
            },
        }
    }
}

/// A value's label by its slot ([`SignedEdges::slot_table`]).
pub struct SlotTable<T> {
    table: Vec<T>,
    index: SlotIndex,
}

impl<T: Copy> SlotTable<T> {
    /// The label of `v`'s bucket.
    #[inline]
    pub fn get(&self, v: f32) -> T {
        self.table[self.index.of(v)]
    }
}

impl<A: Copy, B: Copy> SlotTable<(A, B)> {
    /// `(first[i], second[i]) = self.get(values[i])` for every `i`, eight values' slots at a
    /// time with AVX2 (checked at run time). Panics unless all three have one length.
    pub fn get_all(&self, values: &[f32], first: &mut [A], second: &mut [B]) {
        assert!(
            values.len() == first.len() && values.len() == second.len(),
            "a label for every value"
        );
        #[allow(unused_mut)]
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if super::cpu::avx2() {
            // SAFETY: the CPU has AVX2.
            done = unsafe { self.get_all_avx2(values, first, second) };
        }
        let out = first[done..].iter_mut().zip(&mut second[done..]);
        for ((a, b), &v) in out.zip(&values[done..]) {
            (*a, *b) = self.get(v);
        }
    }

    /// [`Self::get_all`] over the whole blocks of eight values; returns how many it took.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn get_all_avx2(&self, values: &[f32], first: &mut [A], second: &mut [B]) -> usize {
        let blocks = values.chunks_exact(8);
        let done = values.len() - blocks.remainder().len();
        let out = first.chunks_exact_mut(8).zip(second.chunks_exact_mut(8));
        for (block, (first, second)) in blocks.zip(out) {
            // SAFETY: a block holds 8 values; the caller's promise.
            let at = unsafe { self.index.of8(block) };
            for ((a, b), &at) in first.iter_mut().zip(second.iter_mut()).zip(&at) {
                (*a, *b) = self.table[at as usize];
            }
        }
        done
    }
}

/// Where a value's slot is in a table of both signs' slots, the negative after the positive:
/// per sign its first slot, its last counted from the first, and where its part starts. A
/// slot beyond the sign's part is clamped to its nearest end.
#[derive(Clone, Copy)]
struct SlotIndex {
    first: [u32; 2],
    last: [u32; 2],
    base: [u32; 2],
}

impl SlotIndex {
    /// The entry of `v`'s slot.
    #[inline]
    fn of(&self, v: f32) -> usize {
        let bits = v.to_bits();
        let sign = (bits >> 31) as usize;
        let slot = slot_of(bits & 0x7FFF_FFFF).saturating_sub(self.first[sign]);
        (slot.min(self.last[sign]) + self.base[sign]) as usize
    }

    /// Counts every value into `counts` at its slot's entry, a zero at `zero`: with AVX2
    /// (checked at run time) eight slots computed at once ([`Self::of8`]), where one at a time
    /// took a dozen instructions per value.
    fn count(&self, values: &[f32], counts: &mut [u16], zero: usize) {
        #[allow(unused_mut)]
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        if super::cpu::avx2() {
            // SAFETY: the CPU has AVX2.
            done = unsafe { self.count_avx2(values, counts, zero) };
        }
        for &v in &values[done..] {
            counts[if v == 0.0 { zero } else { self.of(v) }] += 1;
        }
    }

    /// [`Self::count`] over the whole blocks of eight values; returns how many it took.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn count_avx2(&self, values: &[f32], counts: &mut [u16], zero: usize) -> usize {
        let blocks = values.chunks_exact(8);
        let done = values.len() - blocks.remainder().len();
        for block in blocks {
            // SAFETY: a block holds 8 values; the caller's promise.
            let at = unsafe { self.of8(block) };
            for (&v, &at) in block.iter().zip(&at) {
                counts[if v == 0.0 { zero } else { at as usize }] += 1;
            }
        }
        done
    }

    /// [`Self::of`] of 8 values in AVX2 registers.
    ///
    /// # Safety
    /// The CPU has AVX2 and `values` holds 8.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn of8(&self, values: &[f32]) -> [u32; 8] {
        use std::arch::x86_64::*;
        debug_assert_eq!(values.len(), 8);
        let per_sign = |x: [u32; 2]| {
            (
                _mm256_set1_epi32(x[0] as i32),
                _mm256_set1_epi32(x[1] as i32),
            )
        };
        let ((first0, first1), (last0, last1), (base0, base1)) = (
            per_sign(self.first),
            per_sign(self.last),
            per_sign(self.base),
        );
        // SAFETY: 32 bytes from 8 values (the caller's promise).
        let bits = unsafe { _mm256_loadu_si256(values.as_ptr().cast()) };
        let negative = _mm256_srai_epi32::<31>(bits);
        let pick = |p: __m256i, n: __m256i| _mm256_blendv_epi8(p, n, negative);
        let magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFF_FFFF));
        let slot = _mm256_srli_epi32::<{ SLOT_SHIFT as i32 }>(magnitude);
        let first = pick(first0, first1);
        let from_first = _mm256_sub_epi32(_mm256_max_epu32(slot, first), first);
        let clamped = _mm256_min_epu32(from_first, pick(last0, last1));
        let mut at = [0u32; 8];
        // SAFETY: 32 bytes into 8 u32.
        unsafe {
            _mm256_storeu_si256(
                at.as_mut_ptr().cast(),
                _mm256_add_epi32(clamped, pick(base0, base1)),
            )
        };
        at
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The bucket of magnitude `m`: the last edge `<= m` (0 if `m` is below every edge).
    fn bucket_of(edges: &[f32], m: f32) -> usize {
        edges.partition_point(|&e| e <= m).saturating_sub(1)
    }

    #[test]
    fn edges_bound_their_buckets_and_are_nearly_equal_count() {
        let mags: Vec<f32> = (0..100_000)
            .map(|i| ((i * 7919) % 100_000) as f32 * 1e-5)
            .collect();
        let e = signed_bucket_edges(&mags, 128);
        let edges = &e.edges[0];
        assert_eq!(edges.len(), 128);
        assert_eq!(edges[0], 1e-5, "the first edge is the exact minimum");
        assert!(edges.windows(2).all(|w| w[0] < w[1]));
        let mut count = vec![0usize; edges.len()];
        for &m in mags.iter().filter(|&&m| m > 0.0) {
            // (zeros belong to no bucket)
            let b = bucket_of(edges, m);
            assert!(edges[b] <= m, "the edge is a lower bound");
            count[b] += 1;
        }
        let (lo, hi) = (count.iter().min().unwrap(), count.iter().max().unwrap());
        assert!(*hi < 2 * *lo, "bucket counts {lo}..{hi}");
        assert_eq!(signed_bucket_edges(&[0.5, 0.5, 0.5], 4).edges[0], vec![0.5]);
    }

    /// The slot table answers what a binary search over the edges answers, for every float
    /// from the smallest magnitude to the largest (stepping through each slot's ends and
    /// middle), and the nearest end's bucket beyond them; its vector loop answers the same.
    #[test]
    fn the_slot_table_is_a_binary_search_over_the_edges() {
        let values: Vec<f32> = (0..20_011u64)
            .map(|i| {
                let h = crate::data::partition::mix64(3, i);
                let m = f32::from_bits(0x3000_0000 + (h as u32 % 0x1800_0000)); // ~5e-10 .. ~1e3
                if h >> 63 == 1 {
                    -m
                } else {
                    m
                }
            })
            .collect();
        let e = signed_bucket_edges(&values, 64);
        let table = e.slot_table(|sign, b| (sign, b));
        for sign in 0..2 {
            let edges = &e.edges[sign];
            assert!(edges.len() > 32, "{} edges", edges.len());
            let (lo, hi) = (edges[0].to_bits(), e.max[sign].to_bits());
            let mut bits = lo;
            while bits <= hi {
                for probe in [bits, bits | 0x3FFF, bits | 0x7FFF] {
                    let m = f32::from_bits(probe.clamp(lo, hi));
                    let v = if sign == 1 { -m } else { m };
                    assert_eq!(table.get(v), (sign, bucket_of(edges, m)), "{v}");
                }
                bits = (bits | 0x7FFF) + 1;
            }
            let last = edges.len() - 1;
            let beyond = [(e.max[sign] * 2.0, last), (edges[0] * 0.5, 0), (0.0, 0)];
            for (m, want) in beyond {
                let v = if sign == 1 { -m } else { m };
                assert_eq!(table.get(v), (sign, want), "{v}");
            }
        }
        // Eight at a time (AVX2, where the CPU has it) the same as one at a time: every value
        // given, both zeros, values beyond both ends of both signs, a count not a multiple of 8.
        let mut probes = values.clone();
        probes.extend([0.0, -0.0, 1e30, -1e30, 1e-30, -1e-30, f32::MIN_POSITIVE]);
        let (mut signs, mut buckets) = (vec![0; probes.len()], vec![0; probes.len()]);
        table.get_all(&probes, &mut signs, &mut buckets);
        for (i, &v) in probes.iter().enumerate() {
            assert_eq!((signs[i], buckets[i]), table.get(v), "{v}");
        }
        // A sign without values answers its bucket 0 (its zeros are dropped by the caller).
        let positive = signed_bucket_edges(&[1.0, 2.0, 3.0], 4);
        assert!(positive.edges[1].is_empty());
        assert_eq!(positive.slot_table(|s, b| (s, b)).get(-0.0), (1, 0));
    }

    /// The histogram's count, eight slots at a time with AVX2 where the CPU has it, counts
    /// every value where one at a time would: zeros of both signs at the zero entry, values
    /// beyond both ends clamped, a count that is not a multiple of 8.
    #[test]
    fn counting_eight_at_a_time_counts_what_one_at_a_time_does() {
        let index = SlotIndex {
            first: [slot_of(1e-6f32.to_bits()), slot_of(1e-5f32.to_bits())],
            last: [3000, 2000],
            base: [0, 3001],
        };
        let zero = 5002;
        let mut values: Vec<f32> = (0..10_003u64)
            .map(|i| {
                let h = crate::data::partition::mix64(9, i);
                let m = f32::from_bits(0x3000_0000 + (h as u32 % 0x1400_0000));
                if h >> 63 == 1 {
                    -m
                } else {
                    m
                }
            })
            .collect();
        values.extend([0.0, -0.0, 1e30, -1e30, 1e-30, -1e-30]);
        let mut counted = vec![0u16; zero + 1];
        index.count(&values, &mut counted, zero);
        let mut one_by_one = vec![0u16; zero + 1];
        for &v in &values {
            one_by_one[if v == 0.0 { zero } else { index.of(v) }] += 1;
        }
        assert_eq!(counted, one_by_one);
        assert_eq!(counted[zero], 2, "both zeros");
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
