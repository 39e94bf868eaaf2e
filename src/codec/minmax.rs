//! The MinMaxSketch (SketchML §3.3): `rows x cols` cells of small bucket indexes, where a
//! smaller index means closer to zero. Insert keeps, in each row, the smaller of the cell and
//! the new index ("min"); empty cells start at the largest index. Query takes the largest of
//! the key's cells over the rows ("max"). Every cell a key maps to was lowered to at most the
//! key's own index, so the answer never exceeds the true index: decoded magnitudes are never
//! larger than the true ones.
//!
//! Hashing: multiply-shift with a fixed odd multiplier per row, then Lemire's multiply-high
//! range reduction to `cols`; deterministic and identical on sender and receiver.

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
    cells: Vec<u8>,
}

/// Most rows a sketch may have.
pub const MAX_ROWS: usize = 8;

/// Keys whose cells are located before any is read or written: one key at a time, each
/// read-modify-write waited for the hashing of the key before it could be ordered against the
/// stores before it, and the inserts ran at a third of the batched speed (9.5 against 3.0 ms per
/// million keys, measured).
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
        self.cells.clear();
        self.cells.resize(*self.starts.last().unwrap(), max_index);
    }

    /// Number of groups.
    pub fn groups(&self) -> usize {
        self.cols.len()
    }

    /// Every group's cells, group after group, each row by row.
    pub fn cells(&self) -> &[u8] {
        &self.cells
    }

    /// The cells, to fill from a message (each at most [`Self::max_index`]).
    pub fn cells_mut(&mut self) -> &mut [u8] {
        &mut self.cells
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
    pub fn query_all(&self, keys: &[u32], groups: &[u8], answer: impl FnMut(usize, u8)) {
        for_rows!(self.rows, self.query_rows(keys, groups, answer))
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
