//! The sparse vector every layer above the data shares: gradients, model changes, decoded
//! messages. It sits below both the model and the codec layer, so that neither depends on the
//! other.

/// A sparse gradient: strictly increasing `keys` with their `values`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SparseGrad {
    /// Strictly increasing keys.
    pub keys: Vec<u32>,
    /// One value per key.
    pub values: Vec<f32>,
}

impl SparseGrad {
    /// Number of stored pairs.
    pub fn len(&self) -> usize {
        self.keys.len()
    }
    /// Whether no pair is stored.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
    /// Removes all pairs, keeping the allocations.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.values.clear();
    }
    /// `self += scale * other`, as a sorted merge into `scratch` (swapped into `self`).
    ///
    /// The merge is branch-free: each step writes the smaller key and advances past it in
    /// one or both inputs by comparison results, so interleaved keys (two workers' gradient
    /// pieces) cost no mispredicted branches. A step waits for the loads the previous one
    /// chose (about 10 cycles), so two lanes merge the halves below and above a splitter key
    /// in turn, each hiding the other's wait (figures: `docs/results.md`, "Design measurements"). From 64 pairs
    /// on, on a CPU with AVX-512, a merge network on packed pairs does it instead (see
    /// the `vector` module's docs), with the same result bit for bit.
    pub fn add_scaled(&mut self, other: &SparseGrad, scale: f32, scratch: &mut SparseGrad) {
        if self.is_empty() {
            self.keys.extend_from_slice(&other.keys);
            self.values.extend(other.values.iter().map(|&v| scale * v));
            return;
        }
        let (n, m) = (self.len(), other.len());
        #[cfg(target_arch = "x86_64")]
        if n + m >= 64 && crate::cpu::avx512() && vector_merge_available() {
            // The packed pairs' sentinel is key u32::MAX with all value bits set: no pair may
            // be one.
            let top = self.keys[n - 1].max(other.keys.last().copied().unwrap_or(0));
            if top < u32::MAX {
                // SAFETY: the CPU has the features; the keys are below u32::MAX.
                unsafe { vector::add_scaled(self, other, scale, scratch) };
                std::mem::swap(self, scratch);
                return;
            }
        }
        scratch.clear();
        scratch.keys.reserve(n + m);
        // `other`'s values, scaled, wait past the largest output, at `n + m..n + 2m`.
        // (Scaling inside the loop makes the compiler branch on which side the product is
        // for.)
        scratch.values.reserve(n + 2 * m);
        let scaled = &mut scratch.values.spare_capacity_mut()[n + m..n + 2 * m];
        for (out, &v) in scaled.iter_mut().zip(&other.values) {
            out.write(scale * v);
        }
        // Lane 1 takes the keys from `self.keys[n / 2]` on (every key of `other` below it goes
        // to lane 0) and writes after lane 0's largest output.
        let a_split = n / 2;
        let b_split = other.keys.partition_point(|&k| k < self.keys[a_split]);
        let (out_keys, out_values) = (scratch.keys.as_mut_ptr(), scratch.values.as_mut_ptr());
        // SAFETY: the inputs' lengths are as given (`scaled` at `out_values + n + m` holds `m`
        // initialised values); lane 0 writes below `a_split + b_split` and lane 1 from there
        // below `n + m`, within the reserved capacity and below the scaled values, and the
        // lanes read nothing either writes. Every position below the returned length was
        // written.
        unsafe {
            let b_values = out_values.add(n + m).cast_const();
            let a = Side::new(&self.keys, &self.values);
            let b = Side {
                keys: other.keys.as_ptr(),
                values: b_values,
                len: m,
            };
            let out = Out {
                keys: out_keys,
                values: out_values,
            };
            let (lo, hi) = (a.split(a_split), b.split(b_split));
            let written = merge_two_lanes(lo, hi, out, a_split + b_split);
            scratch.keys.set_len(written);
            scratch.values.set_len(written);
        }
        std::mem::swap(self, scratch);
    }
}

/// One input of a merge: `len` keys and values from two pointers.
#[derive(Clone, Copy)]
struct Side {
    keys: *const u32,
    values: *const f32,
    len: usize,
}

impl Side {
    fn new(keys: &[u32], values: &[f32]) -> Side {
        debug_assert_eq!(keys.len(), values.len());
        Side {
            keys: keys.as_ptr(),
            values: values.as_ptr(),
            len: keys.len(),
        }
    }

    /// The first `at` pairs and the rest.
    ///
    /// # Safety
    /// `at <= self.len`.
    unsafe fn split(self, at: usize) -> (Side, Side) {
        let rest = Side {
            // SAFETY: `at <= len` (the caller's promise).
            keys: unsafe { self.keys.add(at) },
            values: unsafe { self.values.add(at) },
            len: self.len - at,
        };
        (Side { len: at, ..self }, rest)
    }
}

/// Where a merge writes.
#[derive(Clone, Copy)]
struct Out {
    keys: *mut u32,
    values: *mut f32,
}

/// A merge in progress: positions in its two inputs and its output.
struct Lane {
    a: Side,
    b: Side,
    out: Out,
    i: usize,
    j: usize,
    o: usize,
}

impl Lane {
    fn active(&self) -> bool {
        self.i < self.a.len && self.j < self.b.len
    }

    /// One step of the branch-free merge.
    ///
    /// # Safety
    /// [`Self::active`], and the output holds position `o`.
    #[inline(always)]
    unsafe fn step(&mut self) {
        // SAFETY: `i < a.len`, `j < b.len` (active) and `o` is in the output (the caller's
        // promise).
        unsafe {
            let (x, y) = (*self.a.keys.add(self.i), *self.b.keys.add(self.j));
            let (u, v) = (*self.a.values.add(self.i), *self.b.values.add(self.j));
            let (take_a, take_b) = (x <= y, y <= x);
            *self.out.keys.add(self.o) = x.min(y);
            // Each side contributes its value or -0.0, the exact identity of addition
            // (x + -0.0 == x bit for bit, -0.0 included), chosen by masks, not branches.
            *self.out.values.add(self.o) =
                or_negative_zero(u, take_a) + or_negative_zero(v, take_b);
            self.i += take_a as usize;
            self.j += take_b as usize;
            self.o += 1;
        }
    }

    /// Runs the merge to its end (the rest of the longer input copied) and returns the
    /// output's length.
    ///
    /// # Safety
    /// The output holds `a.len + b.len` positions from the lane's start, and overlaps
    /// neither input.
    unsafe fn finish(mut self) -> usize {
        // SAFETY: the caller's promises.
        unsafe {
            while self.active() {
                self.step();
            }
            for (side, at) in [(self.a, self.i), (self.b, self.j)] {
                let rest = side.len - at;
                std::ptr::copy_nonoverlapping(side.keys.add(at), self.out.keys.add(self.o), rest);
                std::ptr::copy_nonoverlapping(
                    side.values.add(at),
                    self.out.values.add(self.o),
                    rest,
                );
                self.o += rest;
            }
        }
        self.o
    }
}

/// Merges `lo` (the lower parts of both inputs, every key below every key of `hi`'s) into
/// `out` and `hi` into `out` from `hi_start = lo.0.len + lo.1.len`, the two lanes stepping in
/// turn, then moves `hi`'s output down behind `lo`'s; returns the length written.
///
/// # Safety
/// `out` holds `hi_start + hi.0.len + hi.1.len` positions and overlaps no input.
unsafe fn merge_two_lanes(
    (a_lo, a_hi): (Side, Side),
    (b_lo, b_hi): (Side, Side),
    out: Out,
    hi_start: usize,
) -> usize {
    // SAFETY: the caller's promises; each lane writes only its own part of `out`.
    unsafe {
        let mut lo = Lane {
            a: a_lo,
            b: b_lo,
            out,
            i: 0,
            j: 0,
            o: 0,
        };
        let mut hi = Lane {
            a: a_hi,
            b: b_hi,
            out: Out {
                keys: out.keys.add(hi_start),
                values: out.values.add(hi_start),
            },
            i: 0,
            j: 0,
            o: 0,
        };
        while lo.active() && hi.active() {
            lo.step();
            hi.step();
        }
        let low = lo.finish();
        let high = hi.finish();
        std::ptr::copy(out.keys.add(hi_start), out.keys.add(low), high);
        std::ptr::copy(out.values.add(hi_start), out.values.add(low), high);
        low + high
    }
}

/// Whether the CPU has what [`vector::add_scaled`] needs beyond AVX-512F.
#[cfg(target_arch = "x86_64")]
fn vector_merge_available() -> bool {
    std::arch::is_x86_feature_detected!("avx512vl")
}

/// [`SparseGrad::add_scaled`] with AVX-512: a bitonic merge network on packed pairs.
///
/// Each pair becomes one 64-bit word, its key above its value's bits, so that the words sort
/// by key. The two inputs' words are merged 8 at a time (Inoue et al., "AA-sort", PACT 2007:
/// the 8 smallest of two sorted registers come out sorted, the 8 largest stay in a register,
/// and the next 8 words come from the input whose next word is smaller), with no branch on
/// the keys. A key in both inputs comes out as two adjacent words; one vector pass then adds
/// each such pair's values into its first word, drops the second (a key is at most once in
/// each input, so at most twice here) and unpacks. The sum of a pair is `u + v` either way
/// round (addition commutes bit for bit), and a key of one input keeps its value (`+ -0.0`,
/// the identity): the same values, bit for bit, as the scalar merge, in fewer steps (figures: `docs/results.md`, "Design measurements"); two
/// lanes, as in the scalar merge.
#[cfg(target_arch = "x86_64")]
mod vector {
    use super::SparseGrad;
    use std::arch::x86_64::*;

    /// The sentinel word: after every pair's (whose keys are below u32::MAX).
    const END: u64 = u64::MAX;

    /// `scratch = self + scale · other`.
    ///
    /// # Safety
    /// The CPU has AVX-512F and -VL; every key is below u32::MAX; `this` is not empty.
    #[target_feature(enable = "avx512f,avx512vl,popcnt")]
    pub(super) unsafe fn add_scaled(
        this: &SparseGrad,
        other: &SparseGrad,
        scale: f32,
        scratch: &mut SparseGrad,
    ) {
        let (n, m) = (this.len(), other.len());
        // `LANES` lanes: lane `l` takes the keys from `this.keys[n·l / LANES]` on, below the
        // next lane's.
        let starts: [(usize, usize); LANES] = std::array::from_fn(|l| {
            let i = n * l / LANES;
            let j = if l == 0 {
                0
            } else {
                other.keys.partition_point(|&k| k < this.keys[i])
            };
            (i, j)
        });
        let parts: [_; LANES] = std::array::from_fn(|l| {
            let (i, j) = starts[l];
            let (i_end, j_end) = starts.get(l + 1).copied().unwrap_or((n, m));
            (i..i_end, j..j_end)
        });
        // Each lane's packed inputs, padded to whole registers and two more of sentinels (the
        // merge loads at most two registers past an input's last pair, and only once both
        // inputs are spent), then its merged words and a register of sentinels after them.
        let lens = parts.clone().map(|(a, b)| {
            let steps = (a.len() + b.len()).div_ceil(8);
            let padded = |len: usize| len.div_ceil(8) * 8 + 16;
            (padded(a.len()), padded(b.len()), 8 * steps + 16)
        });
        let size: usize = lens.iter().map(|(a, b, out)| a + b + out).sum();
        WORDS.with_borrow_mut(|words| {
            // Grown, never refilled: every word read is written first (`pack` fills each
            // input and its padding, `merge` the merged words, and the sentinel after them is
            // set below; the fold reads past it only in lanes it drops).
            if words.len() < size {
                words.resize(size, END);
            }
            let mut rest = &mut words[..];
            let mut lanes: [_; LANES] = std::array::from_fn(|l| {
                let (a_range, b_range) = parts[l].clone();
                let (a_len, b_len, out_len) = lens[l];
                let (a, tail) = std::mem::take(&mut rest).split_at_mut(a_len);
                let (b, tail) = tail.split_at_mut(b_len);
                let (out, tail) = tail.split_at_mut(out_len);
                rest = tail;
                let total = a_range.len() + b_range.len();
                // SAFETY: `a` and `b` are longer than their ranges by 16; the CPU has the
                // features.
                unsafe {
                    let (keys, values) = (&this.keys[a_range.clone()], &this.values[a_range]);
                    pack(keys, values, 1.0, a);
                    let (keys, values) = (&other.keys[b_range.clone()], &other.values[b_range]);
                    pack(keys, values, scale, b);
                }
                (a, b, out, total)
            });
            scratch.clear();
            scratch.keys.reserve(n + m + 16);
            scratch.values.reserve(n + m + 16);
            let (keys, values) = (&mut scratch.keys, &mut scratch.values);
            // SAFETY: the buffers are laid out as `merge` and `fold_pairs` require; the output
            // has room for every lane's pairs and 8 more; the CPU has the features.
            unsafe {
                merge(lanes.each_mut().map(|(a, b, out, total)| {
                    (a.as_ptr(), b.as_ptr(), out.as_mut_ptr(), total.div_ceil(8))
                }));
                let mut written = 0;
                for (_, _, out, total) in &mut lanes {
                    out[*total] = END;
                    written += fold_pairs(
                        out.as_ptr(),
                        *total,
                        keys.as_mut_ptr().add(written),
                        values.as_mut_ptr().add(written),
                    );
                }
                keys.set_len(written);
                values.set_len(written);
            }
        });
    }

    thread_local! {
        /// The packed words of [`add_scaled`], kept between calls.
        static WORDS: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    /// Writes `keys[i] << 32 | bits(scale · values[i])` into `to`, then sentinels to its end.
    ///
    /// # Safety
    /// `to` is longer than `keys` by 16 or more; AVX-512F.
    #[target_feature(enable = "avx512f,avx512vl,popcnt")]
    unsafe fn pack(keys: &[u32], values: &[f32], scale: f32, to: &mut [u64]) {
        let n = keys.len();
        let len = to.len();
        assert!(len >= n + 16 && values.len() == n);
        let to = to.as_mut_ptr();
        let scale_v = _mm512_set1_ps(scale);
        let mut i = 0;
        // SAFETY: reads within the inputs, writes below `n + 16 <= len` words.
        unsafe {
            while i + 16 <= n {
                let k = _mm512_loadu_si512(keys.as_ptr().add(i).cast());
                let v = _mm512_castps_si512(_mm512_mul_ps(
                    _mm512_loadu_ps(values.as_ptr().add(i)),
                    scale_v,
                ));
                let (k_lo, k_hi) = (_mm512_castsi512_si256(k), _mm512_extracti64x4_epi64::<1>(k));
                let (v_lo, v_hi) = (_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v));
                let word = |k, v| {
                    _mm512_or_si512(
                        _mm512_slli_epi64::<32>(_mm512_cvtepu32_epi64(k)),
                        _mm512_cvtepu32_epi64(v),
                    )
                };
                _mm512_storeu_si512(to.add(i).cast(), word(k_lo, v_lo));
                _mm512_storeu_si512(to.add(i + 8).cast(), word(k_hi, v_hi));
                i += 16;
            }
            for j in i..n {
                let v = scale * values[j];
                to.add(j)
                    .write_unaligned((keys[j] as u64) << 32 | v.to_bits() as u64);
            }
            for j in n..len {
                to.add(j).write_unaligned(END);
            }
        }
    }

    /// The 8 words of a bitonic register in order: ascending, or descending when `DOWN`.
    /// Three compare-exchange stages, lanes `i` and `i ^ d` for d = 4, 2, 1.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn sort_bitonic<const DOWN: bool>(x: __m512i) -> __m512i {
        // Lanes that take the larger word of their pair in each stage (ascending).
        let stage = |x: __m512i, partner: __m512i, high: __mmask8| {
            let (lo, hi) = (_mm512_min_epu64(x, partner), _mm512_max_epu64(x, partner));
            let high = if DOWN { !high } else { high };
            _mm512_mask_blend_epi64(high, lo, hi)
        };
        let x = stage(x, _mm512_shuffle_i64x2::<0b01_00_11_10>(x, x), 0xF0);
        let x = stage(x, _mm512_permutex_epi64::<0b01_00_11_10>(x), 0xCC);
        stage(x, _mm512_permutex_epi64::<0b10_11_00_01>(x), 0xAA)
    }

    /// One lane's merge in progress: its inputs, their positions, and the two registers.
    struct Lane {
        a: *const u64,
        b: *const u64,
        out: *mut u64,
        i: usize,
        j: usize,
        /// The 8 smallest words not yet written (in no order).
        low: __m512i,
        /// The 8 largest words so far, descending.
        high: __m512i,
    }

    impl Lane {
        /// # Safety
        /// As [`merge`]; AVX-512F.
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn new(a: *const u64, b: *const u64, out: *mut u64) -> Lane {
            // SAFETY: both inputs hold 16 words or more.
            let (first, second) =
                unsafe { (_mm512_loadu_si512(a.cast()), _mm512_loadu_si512(b.cast())) };
            let reversed =
                _mm512_permutexvar_epi64(_mm512_set_epi64(0, 1, 2, 3, 4, 5, 6, 7), second);
            Lane {
                a,
                b,
                out,
                i: 8,
                j: 8,
                low: _mm512_min_epu64(first, reversed),
                high: sort_bitonic::<true>(_mm512_max_epu64(first, reversed)),
            }
        }

        /// Writes the 8 smallest words as register `s` of the output and takes the next 8
        /// from the input whose next word is smaller.
        ///
        /// # Safety
        /// As [`merge`]; AVX-512F.
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn step(&mut self, s: usize) {
            // SAFETY: the caller's promises (the padding bounds the loads).
            unsafe {
                _mm512_storeu_si512(self.out.add(8 * s).cast(), sort_bitonic::<false>(self.low));
                let take_a = self.a.add(self.i).read() <= self.b.add(self.j).read();
                let from = if take_a {
                    self.a.add(self.i)
                } else {
                    self.b.add(self.j)
                };
                self.i += 8 * take_a as usize;
                self.j += 8 * !take_a as usize;
                let next = _mm512_loadu_si512(from.cast());
                self.low = _mm512_min_epu64(next, self.high);
                self.high = sort_bitonic::<true>(_mm512_max_epu64(next, self.high));
            }
        }
    }

    /// Independent merges that [`add_scaled`] steps in turn, so that each one's network hides
    /// the others' latency.
    const LANES: usize = 2;

    /// Merges each lane's sorted words at `a` and `b` (padded as [`add_scaled`] says) into
    /// its `out`: its smallest `8 · steps` words in order, the lanes stepping in turn.
    ///
    /// # Safety
    /// The buffers are laid out as [`add_scaled`] lays them out; AVX-512F.
    #[target_feature(enable = "avx512f")]
    unsafe fn merge(lanes: [(*const u64, *const u64, *mut u64, usize); LANES]) {
        // SAFETY: the caller's promises.
        unsafe {
            let mut merging = lanes.map(|(a, b, out, _)| Lane::new(a, b, out));
            let both = lanes.iter().map(|l| l.3).min().unwrap_or(0);
            for s in 0..both {
                for lane in &mut merging {
                    lane.step(s);
                }
            }
            for (lane, (_, _, _, steps)) in merging.iter_mut().zip(lanes) {
                for s in both..steps {
                    lane.step(s);
                }
            }
        }
    }

    /// Unpacks the `total` merged words at `words` (a sentinel after them) into `keys` and
    /// `values`, adding the values of each two adjacent words of one key into the first and
    /// dropping the second; returns how many pairs it wrote.
    ///
    /// # Safety
    /// `words` holds `total + 8` readable words, sentinels from `total` on; `keys` and
    /// `values` have room for `total + 8`; AVX-512F, -VL and POPCNT.
    #[target_feature(enable = "avx512f,avx512vl,popcnt")]
    unsafe fn fold_pairs(
        words: *const u64,
        total: usize,
        keys: *mut u32,
        values: *mut f32,
    ) -> usize {
        let mut o = 0;
        let negative_zero = _mm256_set1_ps(-0.0);
        // SAFETY: the caller's promises; each block stores 8 lanes at `o`, of which only the
        // kept ones count (the next block's stores overwrite the rest).
        unsafe {
            let (mut i, mut previous_pairs) = (0, 0u8);
            while i < total {
                let here = _mm512_loadu_si512(words.add(i).cast());
                let next = _mm512_loadu_si512(words.add(i + 1).cast());
                let key = _mm512_srli_epi64::<32>(here);
                let next_key = _mm512_srli_epi64::<32>(next);
                let paired = _mm512_cmpeq_epi64_mask(key, next_key);
                // A word is dropped when the word before it has its key: the first lane's
                // word before is the previous block's last (none for the first block).
                let second = (paired << 1) | previous_pairs;
                previous_pairs = paired >> 7;
                let lanes = if total - i >= 8 {
                    0xFF
                } else {
                    (1u8 << (total - i)) - 1
                };
                let keep = !second & lanes;
                let value = _mm512_cvtepi64_epi32(here);
                let next_value = _mm512_cvtepi64_epi32(next);
                let sum = _mm256_add_ps(
                    _mm256_castsi256_ps(value),
                    _mm256_mask_blend_ps(paired, negative_zero, _mm256_castsi256_ps(next_value)),
                );
                let key32 = _mm512_cvtepi64_epi32(key);
                _mm256_storeu_si256(keys.add(o).cast(), _mm256_maskz_compress_epi32(keep, key32));
                _mm256_storeu_ps(values.add(o), _mm256_maskz_compress_ps(keep, sum));
                o += keep.count_ones() as usize;
                i += 8;
            }
        }
        o
    }
}

/// `x` when `keep`, else -0.0, without a branch.
#[inline(always)]
fn or_negative_zero(x: f32, keep: bool) -> f32 {
    let mask = opaque((keep as u32).wrapping_neg());
    f32::from_bits((x.to_bits() & mask) | ((-0.0f32).to_bits() & !mask))
}

/// `x`, hidden from the optimiser: a mask made from a comparison stays a mask. Seen as one,
/// the compiler turns the masked value into a conditional load and the merge into a branch
/// on every step, three times slower (figures: `docs/results.md`, "Design measurements").
#[inline(always)]
fn opaque(x: u32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        let mut x = x;
        // SAFETY: an empty instruction: it reads and writes only `x`'s register.
        unsafe {
            std::arch::asm!("/* {0:e} */", inout(reg) x, options(pure, nomem, nostack, preserves_flags))
        };
        x
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::hint::black_box(x)
}

/// Sets bits `start .. start + len` of a bitset of 64-bit words (a run of keys marked in one
/// pass: a feature's `width` keys, a model's dense block).
#[inline(always)]
pub fn set_bits(words: &mut [u64], start: usize, len: usize) {
    let end = start + len;
    let mut k = start;
    while k < end {
        let (word, low) = (k >> 6, k & 63);
        let high = (end - (word << 6)).min(64);
        words[word] |= (u64::MAX >> (64 - (high - low))) << low;
        k = (word + 1) << 6;
    }
}

/// Walks the union of two strictly increasing key lists in order, calling `f(key, i, j)` with
/// the key's position in `a` and in `b` (`None` where absent): a sorted merge, no hashing.
pub fn merge_keys(a: &[u32], b: &[u32], mut f: impl FnMut(u32, Option<usize>, Option<usize>)) {
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) if x == y => {
                f(x, Some(i), Some(j));
                i += 1;
                j += 1;
            }
            (Some(&x), Some(&y)) if x < y => {
                f(x, Some(i), None);
                i += 1;
            }
            (Some(&x), None) => {
                f(x, Some(i), None);
                i += 1;
            }
            (_, Some(&y)) => {
                f(y, None, Some(j));
                j += 1;
            }
            (None, None) => unreachable!(),
        }
    }
}

/// A weighted sum of sparse vectors of one dimension, added pair by pair into a dense array
/// (with a bitmap of the keys added) and read out in key order. Summing `W` vectors of `n`
/// pairs costs `W·n` scattered adds and one pass over the bitmap, where summing them by
/// [`SparseGrad::add_scaled`] passes over the sum so far at each merge (about `W²·n/2`
/// steps). The sums are those of `add_scaled` in the same order, bit for bit: every entry
/// starts at −0.0, which any value added to it leaves as it is.
#[derive(Clone, Debug, Default)]
pub struct DenseSum {
    values: Vec<f32>,
    added: Vec<u64>,
}

impl DenseSum {
    /// An empty sum of dimension `dim` (`dim` floats and `dim` bits).
    pub fn new(dim: u32) -> DenseSum {
        DenseSum {
            values: vec![-0.0; dim as usize],
            added: vec![0; (dim as usize).div_ceil(64)],
        }
    }

    /// The dimension.
    pub fn dim(&self) -> u32 {
        self.values.len() as u32
    }

    /// `self += scale * (keys, values)`. Panics on a key at or beyond the dimension.
    pub fn add(&mut self, keys: &[u32], values: &[f32], scale: f32) {
        for (&k, &v) in keys.iter().zip(values) {
            let k = k as usize;
            self.values[k] += scale * v;
            self.added[k / 64] |= 1 << (k % 64);
        }
    }

    /// Moves the sum into `out` (cleared first), in key order, leaving `self` empty.
    pub fn take(&mut self, out: &mut SparseGrad) {
        out.clear();
        for (word, bits) in self.added.iter_mut().enumerate() {
            let mut bits = std::mem::take(bits);
            while bits != 0 {
                let k = 64 * word + bits.trailing_zeros() as usize;
                out.keys.push(k as u32);
                out.values
                    .push(std::mem::replace(&mut self.values[k], -0.0));
                bits &= bits - 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;
    use std::collections::BTreeMap;

    fn sparse(map: &BTreeMap<u32, f32>) -> SparseGrad {
        SparseGrad {
            keys: map.keys().copied().collect(),
            values: map.values().copied().collect(),
        }
    }

    /// Values in [-4, 4), and sometimes -0.0 (which a merge adding 0.0 would turn into +0.0).
    fn value() -> impl Strategy<Value = f32> {
        prop_oneof![4 => -4.0f32..4.0, 1 => Just(-0.0f32)]
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 2000,
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(11),
            ..ProptestConfig::default()
        })]

        /// The merge equals a map's sum key by key, bit for bit (a key in one input keeps its
        /// value exactly, -0.0 included), whatever the overlap and lengths: short inputs, and
        /// long ones over wide key ranges (long runs of both lanes, one input past the
        /// other's splitter, one lane done long before the other).
        /// A dense sum is the sorted merges' sum, bit for bit (zeros of either sign, zero
        /// scales, keys at both ends of the dimension), and is empty once read: a second
        /// round of the same parts gives the same sum.
        #[test]
        fn a_dense_sum_is_the_merged_sum_bit_for_bit(
            parts in proptest::collection::vec(
                (
                    proptest::collection::btree_map(0u32..300, value(), 0..80),
                    prop_oneof![Just(1.0f32), Just(0.5), Just(-0.25), Just(0.0)],
                ),
                1..6,
            ),
        ) {
            let (mut merged, mut scratch) = (SparseGrad::default(), SparseGrad::default());
            for (part, scale) in &parts {
                merged.add_scaled(&sparse(part), *scale, &mut scratch);
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let (mut dense, mut out) = (DenseSum::new(300), SparseGrad::default());
            for _ in 0..2 {
                for (part, scale) in &parts {
                    let part = sparse(part);
                    dense.add(&part.keys, &part.values, *scale);
                }
                dense.take(&mut out);
                prop_assert_eq!(&out.keys, &merged.keys);
                prop_assert_eq!(bits(&out.values), bits(&merged.values));
            }
        }

        #[test]
        fn add_scaled_is_the_keywise_sum(
            (a, b) in prop_oneof![
                (keys_values(64, 40), keys_values(64, 40)),
                (keys_values(3000, 600), keys_values(3000, 600)),
                (keys_values(400, 300), keys_values(100_000, 300)),
            ],
            scale in prop_oneof![Just(1.0f32), Just(0.5), Just(-0.25)],
        ) {
            let mut want = a.clone();
            for (&k, &v) in &b {
                *want.entry(k).or_insert(0.0) += scale * v;
            }
            for (k, v) in want.iter_mut() {
                if !b.contains_key(k) {
                    *v = a[k];
                } else if !a.contains_key(k) {
                    *v = scale * b[k];
                }
            }
            let (mut got, mut scratch) = (sparse(&a), SparseGrad::default());
            got.add_scaled(&sparse(&b), scale, &mut scratch);
            prop_assert_eq!(&got.keys, &sparse(&want).keys);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&got.values), bits(&sparse(&want).values));
        }
    }

    /// Up to `len` keys below `range` with their values.
    fn keys_values(range: u32, len: usize) -> impl Strategy<Value = BTreeMap<u32, f32>> {
        proptest::collection::btree_map(0..range, value(), 0..len)
    }

    /// The vector merge (taken from 64 pairs on, where the CPU has AVX-512) at the edges of
    /// its registers and buffers: every split of lengths around multiples of 8, one input
    /// inside the other, disjoint runs, every key in both, keys up to u32::MAX - 1, and -0.0
    /// values; the same bits as the key-wise sum.
    #[test]
    fn add_scaled_is_the_keywise_sum_at_register_edges() {
        let mut x = 7u64;
        let mut next = || {
            x = crate::data::partition::mix64(x, 3);
            x
        };
        let mut cases: Vec<(BTreeMap<u32, f32>, BTreeMap<u32, f32>)> = Vec::new();
        let values = |keys: &mut dyn Iterator<Item = u32>, next: &mut dyn FnMut() -> u64| {
            keys.map(|k| {
                let r = next();
                let v = if r.is_multiple_of(5) {
                    -0.0
                } else {
                    (r % 1000) as f32 / 64.0 - 7.0
                };
                (k, v)
            })
            .collect::<BTreeMap<u32, f32>>()
        };
        for n in [1usize, 7, 8, 9, 31, 32, 33, 56, 63, 64, 65, 100] {
            for m in [0usize, 1, 8, 15, 16, 17, 40, 64, 99] {
                // Random keys from a small range (many in both) and from a wide one (few).
                for range in [200u64, 1 << 32] {
                    let top = (u32::MAX - 1) as u64;
                    let a_keys: Vec<u32> =
                        (0..n).map(|_| (next() % range).min(top) as u32).collect();
                    let a = values(&mut a_keys.into_iter(), &mut next);
                    let b_keys: Vec<u32> =
                        (0..m).map(|_| (next() % range).min(top) as u32).collect();
                    let b = values(&mut b_keys.into_iter(), &mut next);
                    cases.push((a, b));
                }
            }
        }
        // Every key in both; disjoint runs; one inside the other; the largest keys.
        let run = |r: std::ops::Range<u32>, next: &mut dyn FnMut() -> u64| {
            values(&mut r.into_iter(), next)
        };
        cases.push((run(0..100, &mut next), run(0..100, &mut next)));
        cases.push((run(0..70, &mut next), run(70..140, &mut next)));
        cases.push((run(70..140, &mut next), run(0..70, &mut next)));
        cases.push((run(0..200, &mut next), run(90..110, &mut next)));
        cases.push((
            run(u32::MAX - 80..u32::MAX, &mut next),
            run(u32::MAX - 40..u32::MAX, &mut next),
        ));
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut scratch = SparseGrad::default();
        for (a, b) in &cases {
            for scale in [1.0f32, -0.5] {
                let mut want = a.clone();
                for (&k, &v) in b {
                    let sum = a.get(&k).map_or(scale * v, |&u| u + scale * v);
                    want.insert(k, sum);
                }
                let mut got = sparse(a);
                got.add_scaled(&sparse(b), scale, &mut scratch);
                let want = sparse(&want);
                assert_eq!(got.keys, want.keys, "{} + {} keys", a.len(), b.len());
                assert_eq!(
                    bits(&got.values),
                    bits(&want.values),
                    "{} + {}",
                    a.len(),
                    b.len()
                );
            }
        }
    }

    #[test]
    fn merge_keys_visits_the_union_with_positions() {
        let mut seen = Vec::new();
        merge_keys(&[1, 4, 9], &[0, 4, 12], |k, i, j| seen.push((k, i, j)));
        assert_eq!(
            seen,
            vec![
                (0, None, Some(0)),
                (1, Some(0), None),
                (4, Some(1), Some(1)),
                (9, Some(2), None),
                (12, None, Some(2)),
            ]
        );
    }
}
