//! Which worker owns which key under `sharded`: the owner sums that key's gradient pieces,
//! holds its optimizer state and sends its changes to every replica.
//!
//! * `hashed` (default): a seeded hash of the key picks the owner. Popular keys are spread over
//!   all owners, so on skewed data every owner sends about the same bytes.
//! * `ranges`: `W` contiguous key ranges, `[⌊D·w/W⌋, ⌊D·(w+1)/W⌋)`. When popular features
//!   have low indices (one-hot encodings of small vocabularies first, as in real CTR tables),
//!   the owner of the low range sends far more than the others, and the slowest link sets the
//!   pace of every round.
//! * `strided`: key `k` is owner `k mod W`'s. Like `hashed`, it spreads popular low keys
//!   over every owner; unlike it, an owner's keys are numbered `k div W` without a table,
//!   so an owner can keep its keys' weights in an array of its own (`train.state =
//!   "sharded"`, which serves `hashed` as `strided`).
//!
//! `ranges` and `strided` number each owner's keys `0..`[`Owners::shard_len`] in key order
//! ([`Owners::slot`], [`Owners::key`]): the layout of an owner's shard.

use serde::{Deserialize, Serialize};

use crate::data::partition::mix64;
use crate::sparse::SparseGrad;

/// How keys are assigned to owners.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Ownership {
    /// A seeded hash of the key.
    #[default]
    Hashed,
    /// Contiguous key ranges.
    Ranges,
    /// Key `k` to owner `k mod W`.
    Strided,
}

impl Ownership {
    /// The name job files use.
    pub fn name(self) -> &'static str {
        match self {
            Ownership::Hashed => "hashed",
            Ownership::Ranges => "ranges",
            Ownership::Strided => "strided",
        }
    }
}

/// The owner map of one job: `parts` owners over dimension `dim`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owners {
    /// The scheme.
    pub scheme: Ownership,
    /// Dimension.
    pub dim: u32,
    /// Number of owners (workers).
    pub parts: u32,
    /// Seed of the hash (from the job seed): the odd multiplier `a` of `(a·x + b) >> 32`.
    pub seed: u64,
    /// The hash's addend `b` (from the job seed).
    pub addend: u64,
}

impl Owners {
    /// The owner map for `parts` workers; `job_seed` seeds the hash.
    pub fn new(scheme: Ownership, dim: u32, parts: u32, job_seed: u64) -> Self {
        Owners {
            scheme,
            dim,
            parts,
            seed: mix64(job_seed, 0x0e_4e_e5) | 1,
            addend: mix64(job_seed, 0xadd),
        }
    }

    /// The owner of `key`.
    #[inline]
    pub fn owner(&self, key: u32) -> u32 {
        if self.parts == 1 {
            return 0;
        }
        match self.scheme {
            Ownership::Hashed => {
                // Multiply-add-shift (Dietzfelbinger), a 2-universal hash: one multiply a key
                // instead of a full mix (four), since the split runs it on every key.
                let h = (key as u64)
                    .wrapping_mul(self.seed)
                    .wrapping_add(self.addend)
                    >> 32;
                ((h * self.parts as u64) >> 32) as u32
            }
            Ownership::Ranges => {
                // The w with lo(w) <= key < lo(w + 1), lo(w) = ⌊D·w/W⌋.
                let mut w = ((key as u64 * self.parts as u64) / self.dim.max(1) as u64) as u32;
                while w + 1 < self.parts && self.lo(w + 1) <= key {
                    w += 1;
                }
                while w > 0 && self.lo(w) > key {
                    w -= 1;
                }
                w
            }
            Ownership::Strided => key % self.parts,
        }
    }

    fn lo(&self, w: u32) -> u32 {
        ((self.dim as u64 * w as u64) / self.parts as u64) as u32
    }

    /// Whether an owner's keys can be numbered without a table ([`Self::slot`]).
    pub fn has_slots(&self) -> bool {
        self.parts == 1 || self.scheme != Ownership::Hashed
    }

    /// How many keys owner `w` owns (`ranges` or `strided`).
    pub fn shard_len(&self, w: u32) -> u32 {
        if self.parts == 1 {
            return self.dim;
        }
        match self.scheme {
            Ownership::Strided => (self.dim - w.min(self.dim)).div_ceil(self.parts),
            _ => {
                let hi = if w + 1 == self.parts {
                    self.dim
                } else {
                    self.lo(w + 1)
                };
                hi - self.lo(w)
            }
        }
    }

    /// The place of `key` among its owner's keys, in key order (`ranges` or `strided`).
    #[inline]
    pub fn slot(&self, key: u32) -> u32 {
        if self.parts == 1 {
            return key;
        }
        match self.scheme {
            Ownership::Strided => key / self.parts,
            _ => key - self.lo(self.owner(key)),
        }
    }

    /// Owner `w`'s key at `slot` (the inverse of [`Self::slot`]).
    #[inline]
    pub fn key(&self, w: u32, slot: u32) -> u32 {
        if self.parts == 1 {
            return slot;
        }
        match self.scheme {
            Ownership::Strided => slot * self.parts + w,
            _ => self.lo(w) + slot,
        }
    }

    /// Splits a sorted sparse vector into one sorted piece per owner (`pieces` is resized to
    /// `parts`; buffers are reused).
    pub fn split(&self, v: &SparseGrad, pieces: &mut Vec<SparseGrad>) {
        pieces.resize_with(self.parts as usize, SparseGrad::default);
        pieces.iter_mut().for_each(SparseGrad::clear);
        if self.parts == 1 {
            pieces[0].clone_from(v);
            return;
        }
        match self.scheme {
            Ownership::Ranges => {
                let mut start = 0;
                for (w, piece) in pieces.iter_mut().enumerate() {
                    let end = if w + 1 == self.parts as usize {
                        v.keys.len()
                    } else {
                        let bound = self.lo(w as u32 + 1);
                        start + v.keys[start..].partition_point(|&k| k < bound)
                    };
                    piece.keys.extend_from_slice(&v.keys[start..end]);
                    piece.values.extend_from_slice(&v.values[start..end]);
                    start = end;
                }
            }
            Ownership::Hashed if self.parts == 2 => {
                let [first, second] = &mut pieces[..] else {
                    unreachable!("two pieces")
                };
                self.split_two(v, first, second);
            }
            Ownership::Hashed | Ownership::Strided => {
                for (&k, &x) in v.keys.iter().zip(&v.values) {
                    let piece = &mut pieces[self.owner(k) as usize];
                    piece.keys.push(k);
                    piece.values.push(x);
                }
            }
        }
    }
}

impl Owners {
    /// [`Self::split`] for two hashed owners into the empty `first` and `second`. Every pair
    /// is written at both pieces' cursors and only its owner's cursor moves past it: one pass,
    /// no branch on the (random) owner. With more owners the pushes stay: a counting sort
    /// measured slower. The writes go to spare capacity, not to zeros written first
    /// (figures: `docs/results.md`, "Design measurements").
    /// With AVX-512 the whole blocks of 16 go through [`split_two_avx512`] first.
    fn split_two(&self, v: &SparseGrad, first: &mut SparseGrad, second: &mut SparseGrad) {
        let n = v.len();
        for piece in [&mut *first, &mut *second] {
            piece.keys.reserve(n + 16);
            piece.values.reserve(n + 16);
        }
        let (k0, v0) = (first.keys.as_mut_ptr(), first.values.as_mut_ptr());
        let (k1, v1) = (second.keys.as_mut_ptr(), second.values.as_mut_ptr());
        let (mut at0, mut at1, mut done) = (0, 0, 0);
        #[cfg(target_arch = "x86_64")]
        if crate::cpu::avx512() {
            // SAFETY: the CPU has AVX-512F; both pieces have `n + 16` pairs of capacity.
            (at0, at1) = unsafe { split_two_avx512(self, v, [k0, k1], [v0, v1]) };
            done = at0 + at1;
        }
        for (&k, &x) in v.keys[done..].iter().zip(&v.values[done..]) {
            let second_owns = self.owner(k) as usize;
            // SAFETY: both pieces hold `n` pairs of capacity and each cursor has passed
            // fewer than `n` pairs so far.
            unsafe {
                (*k0.add(at0), *v0.add(at0)) = (k, x);
                (*k1.add(at1), *v1.add(at1)) = (k, x);
            }
            at0 += 1 - second_owns;
            at1 += second_owns;
        }
        // SAFETY: the pieces were empty, and every position below a final cursor was
        // written (a cursor's position is written before it moves past it).
        unsafe {
            first.keys.set_len(at0);
            first.values.set_len(at0);
            second.keys.set_len(at1);
            second.values.set_len(at1);
        }
    }
}

/// The whole blocks of 16 pairs of [`Owners::split_two`] (two hashed owners), with AVX-512F:
/// returns the two cursors. The owner of a key is bit 63 of `key · seed + addend` (what
/// [`Owners::owner`] computes for two owners, `(h · 2) >> 32` of that sum's high half
/// `h`), 8 keys to a register; each piece takes its block's pairs by a register compress
/// (`vpcompressd`) stored whole at its cursor, so its last lanes land past the pairs it keeps,
/// where the next store or spare capacity takes them: about three times faster than the
/// scalar pass (figures: `docs/results.md`, "Design measurements").
///
/// # Safety
/// The CPU has AVX-512F; `keys[w]` and `values[w]` have room for `v.len() + 16` pairs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,popcnt")]
unsafe fn split_two_avx512(
    owners: &Owners,
    v: &SparseGrad,
    keys: [*mut u32; 2],
    values: [*mut f32; 2],
) -> (usize, usize) {
    use std::arch::x86_64::*;
    let seed_lo = _mm512_set1_epi64((owners.seed & 0xFFFF_FFFF) as i64);
    let seed_hi = _mm512_set1_epi64((owners.seed >> 32) as i64);
    let addend = _mm512_set1_epi64(owners.addend as i64);
    let zero = _mm512_setzero_si512();
    // `key · seed + addend` modulo 2^64, for 8 keys widened to 64 bits; negative when the
    // second owns the key.
    let second_owns = |k: __m512i| {
        let low = _mm512_mul_epu32(k, seed_lo);
        let high = _mm512_slli_epi64::<32>(_mm512_mul_epu32(k, seed_hi));
        let sum = _mm512_add_epi64(_mm512_add_epi64(low, high), addend);
        _mm512_cmplt_epi64_mask(sum, zero)
    };
    let (mut at0, mut at1) = (0usize, 0usize);
    for (k, x) in v.keys.chunks_exact(16).zip(v.values.chunks_exact(16)) {
        // SAFETY: 16 keys and values; each store writes 16 lanes at a cursor below the pairs
        // passed so far, within the promised capacity.
        unsafe {
            let k = _mm512_loadu_si512(k.as_ptr().cast());
            let x = _mm512_loadu_si512(x.as_ptr().cast());
            let lower = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(k));
            let upper = _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64::<1>(k));
            let second: __mmask16 = second_owns(lower) as u16 | (second_owns(upper) as u16) << 8;
            let first = !second;
            // Piece `w` takes the lanes of `mask`, compressed, at its cursor `at`.
            let take = |w: usize, mask: __mmask16, at: usize| {
                _mm512_storeu_si512(keys[w].add(at).cast(), _mm512_maskz_compress_epi32(mask, k));
                _mm512_storeu_si512(
                    values[w].add(at).cast(),
                    _mm512_maskz_compress_epi32(mask, x),
                );
            };
            take(0, first, at0);
            take(1, second, at1);
            let taken = second.count_ones() as usize;
            at1 += taken;
            at0 += 16 - taken;
        }
    }
    (at0, at1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_schemes_partition_the_keys_in_order() {
        let v = SparseGrad {
            keys: (0..1000).map(|i| i * 7).collect(),
            values: (0..1000).map(|i| i as f32).collect(),
        };
        // Two owners take their own path (two cursors); three the general one.
        for (scheme, parts) in [
            (Ownership::Hashed, 2),
            (Ownership::Hashed, 3),
            (Ownership::Ranges, 3),
            (Ownership::Strided, 2),
            (Ownership::Strided, 3),
        ] {
            let owners = Owners::new(scheme, 7000, parts, 5);
            let mut pieces = Vec::new();
            owners.split(&v, &mut pieces);
            owners.split(&v, &mut pieces); // buffers reused
            assert_eq!(pieces.len(), parts as usize);
            let mut all: Vec<u32> = Vec::new();
            for (w, p) in pieces.iter().enumerate() {
                assert!(p.keys.windows(2).all(|x| x[0] < x[1]), "{scheme:?}: sorted");
                assert!(p.keys.iter().all(|&k| owners.owner(k) == w as u32));
                assert!(p
                    .keys
                    .iter()
                    .zip(&p.values)
                    .all(|(&k, &x)| x == (k / 7) as f32));
                assert!(p.len() > 250, "{scheme:?}: piece {w} has {} keys", p.len());
                all.extend(&p.keys);
            }
            all.sort_unstable();
            assert_eq!(all, v.keys);
        }
        // Two owners over the whole key range (the vector split widens keys of 2^31 and more
        // unsigned), at lengths around its blocks of 16.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut keys: Vec<u32> = (0..5000)
            .map(|_| {
                x = crate::data::partition::mix64(x, 1);
                x as u32
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        for n in [0, 15, 16, 17, 33, 4999] {
            let n = n.min(keys.len());
            let v = SparseGrad {
                keys: keys[..n].to_vec(),
                values: keys[..n].iter().map(|&k| k as f32).collect(),
            };
            let owners = Owners::new(Ownership::Hashed, u32::MAX, 2, n as u64);
            let mut pieces = Vec::new();
            owners.split(&v, &mut pieces);
            for (w, p) in pieces.iter().enumerate() {
                let want: Vec<u32> = v
                    .keys
                    .iter()
                    .copied()
                    .filter(|&k| owners.owner(k) == w as u32)
                    .collect();
                assert_eq!(p.keys, want, "{n} keys, piece {w}");
                assert!(p.keys.iter().zip(&p.values).all(|(&k, &x)| x == k as f32));
            }
        }
        let r = Owners::new(Ownership::Ranges, 10, 3, 0);
        let owners: Vec<u32> = (0..10).map(|k| r.owner(k)).collect();
        assert_eq!(owners, vec![0, 0, 0, 1, 1, 1, 2, 2, 2, 2]);
        let s = Owners::new(Ownership::Strided, 10, 3, 0);
        let owners: Vec<u32> = (0..10).map(|k| s.owner(k)).collect();
        assert_eq!(owners, vec![0, 1, 2, 0, 1, 2, 0, 1, 2, 0]);
    }

    /// Each owner's slots number its keys `0..shard_len` in key order, and `key` undoes `slot`.
    #[test]
    fn slots_number_each_owners_keys_in_order() {
        for scheme in [Ownership::Ranges, Ownership::Strided] {
            for (dim, parts) in [(10, 3), (7, 1), (1000, 4), (3, 5), (0, 2)] {
                let owners = Owners::new(scheme, dim, parts, 9);
                assert!(owners.has_slots());
                let mut next = vec![0u32; parts as usize];
                for k in 0..dim {
                    let w = owners.owner(k);
                    assert_eq!(
                        owners.slot(k),
                        next[w as usize],
                        "{scheme:?} {dim}/{parts}: {k}"
                    );
                    assert_eq!(owners.key(w, owners.slot(k)), k);
                    next[w as usize] += 1;
                }
                let lens: Vec<u32> = (0..parts).map(|w| owners.shard_len(w)).collect();
                assert_eq!(lens, next, "{scheme:?} {dim}/{parts}");
            }
        }
        assert!(!Owners::new(Ownership::Hashed, 10, 2, 0).has_slots());
    }
}
