//! The MinMaxSketch (SketchML §3.3): `rows x cols` cells of small bucket indexes, where a
//! smaller index means closer to zero. Insert keeps, in each row, the smaller of the cell and
//! the new index ("min"); empty cells start at the largest index. Query takes the largest of
//! the key's cells over the rows ("max"). Every cell a key maps to was lowered to at most the
//! key's own index, so the answer never exceeds the true index: decoded magnitudes are never
//! larger than the true ones.
//!
//! Hashing: multiply-shift with a fixed odd multiplier per row, then Lemire's multiply-high
//! range reduction to `cols`; deterministic and identical on sender and receiver.

use super::cpu::avx2;
use crate::data::partition::mix64;

/// SketchML's groups of MinMaxSketches (§3.3): one sketch per group, all with the same rows and
/// largest index `max_index`, each with its own column count. The cells of every group are in
/// one buffer, group after group, each group row by row (the order a message carries them), so
/// that inserts and queries in key order, whose groups alternate, batch across groups.
#[derive(Default)]
pub struct MinMaxSketches {
    rows: usize,
    max_index: u8,
    /// Per group: its columns, and where its cells start (one more entry: the end).
    cols: Vec<u64>,
    starts: Vec<usize>,
    /// The same as `u32`, for the vector path (empty when some value does not fit).
    cols32: Vec<u32>,
    starts32: Vec<u32>,
    /// Every cell, then [`GATHER_PAD`] bytes that no group owns: a 4-byte gather at the last
    /// cell stays inside the buffer.
    cells: Vec<u8>,
}

/// Blocks of eight keys the AVX2 query gathers before it hands out their answers.
const QUERY_BLOCKS: usize = 4;

/// Bytes after the last cell (see [`MinMaxSketches::cells`]).
const GATHER_PAD: usize = 3;

/// Keys ahead of the current block whose inputs (key and group) the vector loops prefetch: the
/// input streams are read in order, but the gathers' and read-modify-writes' misses crowd out
/// the hardware's stream prefetch, and without it half of the vector loops' samples waited on
/// the block's key and group loads (D = 54M, d = 5M).
const INPUT_AHEAD: usize = 512;

/// Most rows a sketch may have.
pub const MAX_ROWS: usize = 8;

/// Keys whose cells are located before any is read or written: one key at a time, each
/// read-modify-write waited for the hashing of the key before it could be ordered against the
/// stores before it, and the inserts ran at a third of the batched speed (figures: `docs/results.md`, "Design measurements").
const BATCH: usize = 64;

/// `$obj.$method::<R>(args)` with `R` the row count `$rows` as a constant (1 to [`MAX_ROWS`]),
/// so that the loops over a key's rows unroll.
macro_rules! for_rows {
    ($rows:expr, $obj:ident . $method:ident ( $($arg:expr),* )) => {
        match $rows {
            1 => $obj.$method::<1>($($arg),*),
            2 => $obj.$method::<2>($($arg),*),
            3 => $obj.$method::<3>($($arg),*),
            4 => $obj.$method::<4>($($arg),*),
            5 => $obj.$method::<5>($($arg),*),
            6 => $obj.$method::<6>($($arg),*),
            7 => $obj.$method::<7>($($arg),*),
            _ => $obj.$method::<8>($($arg),*),
        }
    };
}

/// One odd multiplier per row, fixed at compile time.
const MULTIPLIERS: [u64; MAX_ROWS] = {
    let mut m = [0u64; MAX_ROWS];
    let mut r = 0;
    while r < MAX_ROWS {
        m[r] = mix64(0x005E_ED0F_5EED, r as u64) | 1;
        r += 1;
    }
    m
};

/// Column of `key` in `row` for a sketch of `cols` columns.
#[inline]
pub fn column(key: u32, row: usize, cols: u64) -> u64 {
    let h = (key as u64).wrapping_mul(MULTIPLIERS[row]) >> 32;
    (h * cols) >> 32
}

/// `min(cell, index)` in arithmetic: whether a key lowers a cell is a coin flip, and as a
/// branch (what the compiler makes of `min` or even `select_unpredictable` on a loaded byte) it
/// mispredicted on half the inserts.
#[inline]
fn lower(cell: u8, index: u8) -> u8 {
    let d = cell as i32 - index as i32;
    (index as i32 + (d & (d >> 31))) as u8
}

/// `max(answer, cell)` in arithmetic, for the same reason.
#[inline]
fn raise(answer: u8, cell: u8) -> u8 {
    let d = answer as i32 - cell as i32;
    (answer as i32 - (d & (d >> 31))) as u8
}

impl MinMaxSketches {
    /// Empties the set for new shapes, keeping its buffers: one group per entry of `cols`, each
    /// with `rows` rows of that many columns, every cell `max_index`.
    pub fn reset(&mut self, rows: usize, max_index: u8, cols: impl IntoIterator<Item = usize>) {
        assert!((1..=MAX_ROWS).contains(&rows), "1 to {MAX_ROWS} rows");
        (self.rows, self.max_index) = (rows, max_index);
        self.cols.clear();
        self.starts.clear();
        self.starts.push(0);
        for c in cols {
            assert!(c >= 1, "a sketch has at least one column");
            self.cols.push(c as u64);
            self.starts.push(self.starts.last().unwrap() + rows * c);
        }
        let total = *self.starts.last().unwrap();
        self.cells.clear();
        self.cells.resize(total + GATHER_PAD, max_index);
        // The vector path addresses cells with 32-bit signed offsets.
        let fits = total + GATHER_PAD < i32::MAX as usize;
        self.cols32.clear();
        self.starts32.clear();
        if fits {
            self.cols32.extend(self.cols.iter().map(|&c| c as u32));
            self.starts32.extend(self.starts.iter().map(|&s| s as u32));
        }
    }

    /// Number of cells.
    fn total(&self) -> usize {
        self.cells.len() - GATHER_PAD
    }

    /// Number of groups.
    pub fn groups(&self) -> usize {
        self.cols.len()
    }

    /// Every group's cells, group after group, each row by row.
    pub fn cells(&self) -> &[u8] {
        &self.cells[..self.total()]
    }

    /// The cells, to fill from a message (each at most [`Self::max_index`]).
    pub fn cells_mut(&mut self) -> &mut [u8] {
        let total = self.total();
        &mut self.cells[..total]
    }

    /// Group `g`'s cells, row by row.
    pub fn group_cells(&self, g: usize) -> &[u8] {
        &self.cells[self.starts[g]..self.starts[g + 1]]
    }

    /// The largest index the sketches hold.
    pub fn max_index(&self) -> u8 {
        self.max_index
    }

    /// Where `key`'s cells of group `g` are, row by row.
    #[inline(always)]
    fn locate<const R: usize>(&self, key: u32, g: u8) -> [usize; R] {
        let (cols, start) = (self.cols[g as usize], self.starts[g as usize]);
        std::array::from_fn(|r| {
            let at = start + r * cols as usize + column(key, r, cols) as usize;
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch is a hint; any address is allowed.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    self.cells.as_ptr().wrapping_add(at) as *const i8,
                );
            }
            at
        })
    }

    /// For every `i`, inserts `indexes[i]` for `keys[i]` into group `groups[i]`'s sketch: in
    /// each row the cell keeps the smaller index. Panics on a group beyond the set.
    pub fn insert_all(&mut self, keys: &[u32], groups: &[u8], indexes: &[u8]) {
        assert!(keys.len() == groups.len() && keys.len() == indexes.len());
        #[cfg(target_arch = "x86_64")]
        if self.vector_path(groups) {
            // SAFETY: see `vector_path`.
            let done =
                unsafe { for_rows!(self.rows, self.insert_rows_avx2(keys, groups, indexes)) };
            let rest = (&keys[done..], &groups[done..], &indexes[done..]);
            return for_rows!(self.rows, self.insert_rows(rest.0, rest.1, rest.2));
        }
        for_rows!(self.rows, self.insert_rows(keys, groups, indexes))
    }

    fn insert_rows<const R: usize>(&mut self, keys: &[u32], groups: &[u8], indexes: &[u8]) {
        let mut at = [[0usize; R]; BATCH];
        for ((keys, groups), indexes) in keys
            .chunks(BATCH)
            .zip(groups.chunks(BATCH))
            .zip(indexes.chunks(BATCH))
        {
            for ((at, &key), &g) in at.iter_mut().zip(keys).zip(groups) {
                *at = self.locate::<R>(key, g);
            }
            for (cells, &index) in at.iter().zip(indexes) {
                for &cell in cells {
                    let c = &mut self.cells[cell];
                    *c = lower(*c, index);
                }
            }
        }
    }

    /// Calls `answer(i, a)` for every `i` in order, `a` the largest of `keys[i]`'s cells in group
    /// `groups[i]`: at most the smallest index ever inserted for that key there. Panics on a
    /// group beyond the set (a decoder checks its labels first).
    ///
    /// With AVX2 (checked at run time) eight keys at a time: their columns hashed in vector
    /// registers and their cells gathered (`query_rows_avx2`), the same answers as the scalar
    /// loop's.
    pub fn query_all(&self, keys: &[u32], groups: &[u8], mut answer: impl FnMut(usize, u8)) {
        assert_eq!(keys.len(), groups.len(), "a group for every key");
        #[cfg(target_arch = "x86_64")]
        if self.vector_path(groups) {
            // SAFETY: see `vector_path`.
            let done =
                unsafe { for_rows!(self.rows, self.query_rows_avx2(keys, groups, &mut answer)) };
            let rest = (&keys[done..], &groups[done..]);
            return for_rows!(
                self.rows,
                self.query_rows(rest.0, rest.1, |i, a| answer(done + i, a))
            );
        }
        for_rows!(self.rows, self.query_rows(keys, groups, answer))
    }

    /// Whether inserts and queries of keys in `groups` take the AVX2 path: the CPU has it
    /// ([`avx2`]) and every cell offset fits 32 bits (`cols32` is filled only then), which
    /// with every group in the set (checked here: beyond it is a panic, as in the scalar loops)
    /// is what the vector loops need to stay inside their tables and cells.
    #[cfg(target_arch = "x86_64")]
    fn vector_path(&self, groups: &[u8]) -> bool {
        if self.cols32.is_empty() || !avx2() {
            return false;
        }
        let g = groups.iter().fold(0u8, |m, &g| m.max(g));
        assert!(
            (g as usize) < self.groups(),
            "group {g} beyond {}",
            self.groups()
        );
        true
    }

    /// The AVX2 query loop over the whole blocks of eight keys; returns how many keys it
    /// answered (a multiple of 8; the caller answers the rest): each block's cells located in
    /// vector registers ([`VectorHash::offsets`]) and gathered as 4-byte words at their byte
    /// offsets, masked to their byte; the answer is the rows' maximum. Four blocks' answers
    /// are gathered before any is handed out, so that their cells' misses overlap (one block
    /// at a time, each gather waited for its cells).
    ///
    /// # Safety
    /// AVX2 is available, every `groups[i]` is below [`Self::groups`], and the cells' offsets
    /// fit 32 bits (`cols32` and `starts32` are filled).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn query_rows_avx2<const R: usize>(
        &self,
        keys: &[u32],
        groups: &[u8],
        answer: &mut impl FnMut(usize, u8),
    ) -> usize {
        use std::arch::x86_64::*;
        let blocks = keys.len() / 8;
        let hash = VectorHash::new(self);
        let byte = _mm256_set1_epi32(0xFF);
        let base = self.cells.as_ptr() as *const i32;
        let mut out = [0u32; 8 * QUERY_BLOCKS];
        for batch in 0..blocks.div_ceil(QUERY_BLOCKS) {
            let first = batch * QUERY_BLOCKS;
            let here = (blocks - first).min(QUERY_BLOCKS);
            for (q, out) in out.chunks_exact_mut(8).take(here).enumerate() {
                let at = 8 * (first + q);
                prefetch_inputs(keys, groups, at + INPUT_AHEAD);
                // SAFETY: the block is inside `keys` and `groups`, its groups in the set (the
                // caller's promise); each offset is a cell's, and the word read from it ends
                // within GATHER_PAD.
                let answers = unsafe {
                    let offsets = hash.offsets::<R>(self, &keys[at..at + 8], &groups[at..at + 8]);
                    offsets.iter().fold(_mm256_setzero_si256(), |a, &offset| {
                        let cell = _mm256_i32gather_epi32::<1>(base, offset);
                        _mm256_max_epu32(a, _mm256_and_si256(cell, byte))
                    })
                };
                // SAFETY: 32 bytes into a chunk of 8 u32.
                unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), answers) };
            }
            for (j, &a) in out[..8 * here].iter().enumerate() {
                answer(8 * first + j, a as u8);
            }
        }
        8 * blocks
    }

    /// The AVX2 insert loop over whole batches of [`BATCH`] keys (see [`Self::insert_rows`]);
    /// returns how many keys it inserted. The cells are located in vector registers and each
    /// lowered by a scalar read-modify-write: two keys of a block may share a cell.
    ///
    /// # Safety
    /// As [`Self::query_rows_avx2`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn insert_rows_avx2<const R: usize>(
        &mut self,
        keys: &[u32],
        groups: &[u8],
        indexes: &[u8],
    ) -> usize {
        use std::arch::x86_64::*;
        let hash = VectorHash::new(self);
        let batches = keys.len() / BATCH;
        let mut at = [[0u32; 8]; BATCH / 8 * MAX_ROWS];
        for b in 0..batches {
            for q in 0..BATCH / 8 {
                let i = b * BATCH + 8 * q;
                prefetch_inputs(keys, groups, i + INPUT_AHEAD);
                // SAFETY: the block is inside the inputs, its groups in the set (the caller's
                // promise).
                let offsets =
                    unsafe { hash.offsets::<R>(self, &keys[i..i + 8], &groups[i..i + 8]) };
                for (r, offset) in offsets.iter().enumerate() {
                    let row = &mut at[q * R + r];
                    // SAFETY: 32 bytes into an array of 8 u32.
                    unsafe { _mm256_storeu_si256(row.as_mut_ptr().cast(), *offset) };
                    for &cell in row.iter() {
                        // SAFETY: a prefetch is a hint; the offset is a cell's anyway.
                        unsafe {
                            _mm_prefetch::<_MM_HINT_T0>(
                                self.cells.as_ptr().add(cell as usize).cast(),
                            )
                        };
                    }
                }
            }
            for q in 0..BATCH / 8 {
                let indexes = &indexes[b * BATCH + 8 * q..][..8];
                for row in &at[q * R..(q + 1) * R] {
                    for (&cell, &index) in row.iter().zip(indexes) {
                        let c = &mut self.cells[cell as usize];
                        *c = lower(*c, index);
                    }
                }
            }
        }
        batches * BATCH
    }

    fn query_rows<const R: usize>(
        &self,
        keys: &[u32],
        groups: &[u8],
        mut answer: impl FnMut(usize, u8),
    ) {
        let mut at = [[0usize; R]; BATCH];
        for (b, (keys, groups)) in keys.chunks(BATCH).zip(groups.chunks(BATCH)).enumerate() {
            for ((at, &key), &g) in at.iter_mut().zip(keys).zip(groups) {
                *at = self.locate::<R>(key, g);
            }
            for (j, cells) in at[..keys.len()].iter().enumerate() {
                let a = cells
                    .iter()
                    .fold(0u8, |a, &cell| raise(a, self.cells[cell]));
                answer(b * BATCH + j, a);
            }
        }
    }

    /// The answer for one key of group `g` (see [`Self::query_all`]).
    pub fn query(&self, g: u8, key: u32) -> u8 {
        let mut a = 0;
        self.query_all(&[key], &[g], |_, x| a = x);
        a
    }
}

/// Prefetches the cache lines of `keys[at]` and `groups[at]` (wherever `at` is: a prefetch is
/// a hint, any address is allowed).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_inputs(keys: &[u32], groups: &[u8], at: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: a prefetch is a hint; any address is allowed.
    unsafe {
        _mm_prefetch::<_MM_HINT_T0>(keys.as_ptr().wrapping_add(at).cast());
        _mm_prefetch::<_MM_HINT_T0>(groups.as_ptr().wrapping_add(at).cast());
    }
}

/// What the AVX2 paths need to locate eight keys' cells at once: each group's columns and
/// first cell in registers (for up to 8 groups, SketchML's default; beyond, they are gathered
/// from memory).
#[cfg(target_arch = "x86_64")]
struct VectorHash {
    few: bool,
    cols: std::arch::x86_64::__m256i,
    starts: std::arch::x86_64::__m256i,
}

#[cfg(target_arch = "x86_64")]
impl VectorHash {
    #[target_feature(enable = "avx2")]
    fn new(set: &MinMaxSketches) -> VectorHash {
        use std::arch::x86_64::*;
        let table = |v: &[u32]| {
            let mut t = [0u32; 8];
            let n = v.len().min(8);
            t[..n].copy_from_slice(&v[..n]);
            // SAFETY: 32 bytes read from a local array of 8 u32.
            unsafe { _mm256_loadu_si256(t.as_ptr().cast()) }
        };
        VectorHash {
            few: set.groups() <= 8,
            cols: table(&set.cols32),
            starts: table(&set.starts32),
        }
    }

    /// The cell offsets of 8 keys, row by row: per row the column
    /// `((key·m >> 32) · cols) >> 32` of [`column`] in 32-bit halves (`key·m >> 32` is
    /// `hi(key·m_lo) + key·m_hi` modulo 2³²), after the row's first cell.
    ///
    /// # Safety
    /// `keys` and `groups` hold 8 entries, every group is in `set`, and `set`'s offsets fit
    /// 32 bits.
    #[target_feature(enable = "avx2")]
    unsafe fn offsets<const R: usize>(
        &self,
        set: &MinMaxSketches,
        keys: &[u32],
        groups: &[u8],
    ) -> [std::arch::x86_64::__m256i; R] {
        use std::arch::x86_64::*;
        debug_assert!(keys.len() == 8 && groups.len() == 8);
        // SAFETY: 8 keys and 8 groups (the caller's promise); groups index `cols32` and
        // `starts32` (in the set).
        let (key, g) = unsafe {
            (
                _mm256_loadu_si256(keys.as_ptr().cast()),
                _mm256_cvtepu8_epi32(_mm_loadl_epi64(groups.as_ptr().cast())),
            )
        };
        let (cols, mut row_start) = if self.few {
            (
                _mm256_permutevar8x32_epi32(self.cols, g),
                _mm256_permutevar8x32_epi32(self.starts, g),
            )
        } else {
            // SAFETY: every lane of `g` is a group of `set` (the caller's promise), so each
            // gather reads an element of `cols32` and of `starts32`, which hold one per group.
            unsafe {
                (
                    _mm256_i32gather_epi32::<4>(set.cols32.as_ptr() as *const i32, g),
                    _mm256_i32gather_epi32::<4>(set.starts32.as_ptr() as *const i32, g),
                )
            }
        };
        const ODD: i32 = 0xAA;
        let cols_odd = _mm256_srli_epi64::<32>(cols);
        let key_odd = _mm256_srli_epi64::<32>(key);
        std::array::from_fn(|r| {
            let m = MULTIPLIERS[r];
            let (m_lo, m_hi) = (
                _mm256_set1_epi64x(m as u32 as i64),
                _mm256_set1_epi32((m >> 32) as u32 as i32),
            );
            let even = _mm256_srli_epi64::<32>(_mm256_mul_epu32(key, m_lo));
            let hi = _mm256_blend_epi32::<ODD>(even, _mm256_mul_epu32(key_odd, m_lo));
            let h = _mm256_add_epi32(hi, _mm256_mullo_epi32(key, m_hi));
            let even = _mm256_srli_epi64::<32>(_mm256_mul_epu32(h, cols));
            let odd_col = _mm256_mul_epu32(_mm256_srli_epi64::<32>(h), cols_odd);
            let column = _mm256_blend_epi32::<ODD>(even, odd_col);
            let offset = _mm256_add_epi32(row_start, column);
            row_start = _mm256_add_epi32(row_start, cols);
            offset
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_min_and_max_match_the_library_on_every_byte_pair() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(lower(a, b), a.min(b), "lower({a}, {b})");
                assert_eq!(raise(a, b), a.max(b), "raise({a}, {b})");
            }
        }
    }

    /// The cells of `key` in group `g` of a set with these columns, straight from the definition.
    fn cells_of(rows: usize, cols: &[usize], g: usize, key: u32) -> Vec<usize> {
        let start: usize = cols[..g].iter().map(|c| rows * c).sum();
        (0..rows)
            .map(|r| start + r * cols[g] + column(key, r, cols[g] as u64) as usize)
            .collect()
    }

    #[test]
    fn batched_inserts_and_queries_across_groups_equal_one_key_at_a_time() {
        let cols = [97, 1, 300, 13];
        // More keys than a batch, not a multiple of it, groups alternating irregularly.
        let items: Vec<(u32, u8, u8)> = (0..1000u32)
            .map(|k| (k * 7919, ((k * 5 + k / 3) % 4) as u8, (k % 29) as u8))
            .collect();
        let keys: Vec<u32> = items.iter().map(|x| x.0).collect();
        let groups: Vec<u8> = items.iter().map(|x| x.1).collect();
        let indexes: Vec<u8> = items.iter().map(|x| x.2).collect();
        for rows in [1, 2, 3, 8] {
            let total: usize = cols.iter().map(|c| rows * c).sum();
            let mut expected = vec![31u8; total];
            for &(k, g, i) in &items {
                for c in cells_of(rows, &cols, g as usize, k) {
                    expected[c] = expected[c].min(i);
                }
            }
            let mut set = MinMaxSketches::default();
            set.reset(rows, 31, cols);
            set.insert_all(&keys, &groups, &indexes);
            assert_eq!(set.cells(), &expected[..], "{rows} rows");
            for (g, &c) in cols.iter().enumerate() {
                assert_eq!(set.group_cells(g).len(), rows * c);
            }
            let mut answered = 0;
            set.query_all(&keys, &groups, |i, a| {
                let (k, g, _) = items[i];
                let want = cells_of(rows, &cols, g as usize, k)
                    .iter()
                    .map(|&c| expected[c])
                    .max()
                    .unwrap();
                assert_eq!(a, want, "key {k} of group {g}, {rows} rows");
                assert_eq!(i, answered, "answers in order");
                answered += 1;
            });
            assert_eq!(answered, items.len());
        }
    }

    /// The AVX2 inserts and queries (where the CPU has them) leave the cells and give the
    /// answers of the scalar loops: one to eight rows, up to 8 groups (a permutation) and more
    /// (a gather), key counts that are not a multiple of a block, keys over the whole u32
    /// range, columns from 1 to 2^20.
    #[test]
    fn vector_queries_answer_what_the_scalar_loop_answers() {
        #[cfg(target_arch = "x86_64")]
        if !avx2() {
            eprintln!("no AVX2 here: only the scalar path runs");
        }
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state = mix64(state, 1);
            state
        };
        for (rows, groups, n) in [(1, 2, 1000), (2, 8, 4099), (3, 16, 77), (8, 40, 2048)] {
            let cols: Vec<usize> = (0..groups)
                .map(|g| [1, 7, 300, 1 << 20][g % 4] + g)
                .collect();
            let keys: Vec<u32> = (0..n).map(|_| next() as u32).collect();
            let labels: Vec<u8> = (0..n).map(|_| (next() % groups as u64) as u8).collect();
            let indexes: Vec<u8> = (0..n).map(|_| (next() % 32) as u8).collect();
            let mut set = MinMaxSketches::default();
            set.reset(rows, 31, cols.clone());
            set.insert_all(&keys, &labels, &indexes);
            let mut one_by_one = MinMaxSketches::default();
            one_by_one.reset(rows, 31, cols.clone());
            for_rows!(rows, one_by_one.insert_rows(&keys, &labels, &indexes));
            assert!(
                set.cells() == one_by_one.cells(),
                "{rows} rows, {groups} groups, {n} keys"
            );
            let mut scalar = Vec::new();
            for_rows!(rows, set.query_rows(&keys, &labels, |_, a| scalar.push(a)));
            let mut answers = Vec::new();
            set.query_all(&keys, &labels, |i, a| {
                assert_eq!(i, answers.len(), "answers in order");
                answers.push(a);
            });
            assert_eq!(answers, scalar, "{rows} rows, {groups} groups, {n} keys");
        }
    }

    #[test]
    fn never_overestimates_and_is_exact_without_collisions() {
        let mut s = MinMaxSketches::default();
        s.reset(2, 31, [300, 300]);
        let items: Vec<(u32, u8, u8)> = (0..1000u32)
            .map(|k| (k * 7 + 3, (k % 2) as u8, ((k * 13) % 32) as u8))
            .collect();
        let keys: Vec<u32> = items.iter().map(|x| x.0).collect();
        let groups: Vec<u8> = items.iter().map(|x| x.1).collect();
        let indexes: Vec<u8> = items.iter().map(|x| x.2).collect();
        s.insert_all(&keys, &groups, &indexes);
        let mut exact = 0;
        s.query_all(&keys, &groups, |i, q| {
            let (k, _, index) = items[i];
            assert!(q <= index, "key {k}: {q} > {index}");
            exact += (q == index) as usize;
        });
        assert!(exact > 300, "{exact} of 1000 exact");
        let mut big = MinMaxSketches::default();
        big.reset(2, 31, [1 << 16]);
        big.insert_all(&[5], &[0], &[17]);
        assert_eq!(big.query(0, 5), 17);
        assert_eq!(
            big.query(0, 6),
            31,
            "an untouched key answers the largest index"
        );
    }
}
