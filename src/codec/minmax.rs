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

/// A MinMaxSketch over indexes `0..=max_index`.
pub struct MinMaxSketch {
    rows: usize,
    cols: usize,
    max_index: u8,
    cells: Vec<u8>,
}

/// Most rows a sketch may have.
pub const MAX_ROWS: usize = 8;

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
pub fn column(key: u32, row: usize, cols: usize) -> usize {
    let h = (key as u64).wrapping_mul(MULTIPLIERS[row]) >> 32;
    ((h * cols as u64) >> 32) as usize
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

impl MinMaxSketch {
    /// An empty sketch.
    pub fn new(rows: usize, cols: usize, max_index: u8) -> Self {
        assert!(rows <= MAX_ROWS, "at most {MAX_ROWS} rows");
        MinMaxSketch {
            rows,
            cols,
            max_index,
            cells: vec![max_index; rows * cols],
        }
    }

    /// Empties the sketch for a new shape, keeping its buffer.
    pub fn reset(&mut self, rows: usize, cols: usize, max_index: u8) {
        assert!(rows <= MAX_ROWS, "at most {MAX_ROWS} rows");
        (self.rows, self.cols, self.max_index) = (rows, cols, max_index);
        self.cells.clear();
        self.cells.resize(rows * cols, max_index);
    }

    /// The cells, row by row.
    pub fn cells(&self) -> &[u8] {
        &self.cells
    }

    /// The cells, row by row, to fill from a message (each at most [`Self::max_index`]).
    pub fn cells_mut(&mut self) -> &mut [u8] {
        &mut self.cells
    }

    /// The largest index the sketch holds.
    pub fn max_index(&self) -> u8 {
        self.max_index
    }

    /// Inserts `index` for `key`: each row's cell keeps the smaller index. (Branch-free: whether
    /// a key lowers a cell is a coin flip, and as a branch it was half the encode's misses.)
    #[inline]
    pub fn insert(&mut self, key: u32, index: u8) {
        for r in 0..self.rows {
            let c = &mut self.cells[r * self.cols + column(key, r, self.cols)];
            *c = lower(*c, index);
        }
    }

    /// Inserts `indexes[i]` for every `keys[i]`, in batches: the cells of a batch of keys are
    /// located first, then lowered. One key at a time, each read-modify-write waited for the
    /// hashing of the key before it could be ordered against the stores before it, and the
    /// inserts ran at a third of this speed (9.5 against 3.0 ms per million keys, measured).
    pub fn insert_all(&mut self, keys: &[u32], indexes: &[u8]) {
        const BATCH: usize = 128;
        let (rows, cols, cells) = (self.rows, self.cols, &mut self.cells[..]);
        let mut at = [0u32; BATCH * MAX_ROWS];
        for (keys, indexes) in keys.chunks(BATCH).zip(indexes.chunks(BATCH)) {
            for (j, &key) in keys.iter().enumerate() {
                for r in 0..rows {
                    at[j * rows + r] = (r * cols + column(key, r, cols)) as u32;
                }
            }
            for (j, &index) in indexes.iter().enumerate() {
                for &cell in &at[j * rows..(j + 1) * rows] {
                    let c = &mut cells[cell as usize];
                    *c = lower(*c, index);
                }
            }
        }
    }

    /// The largest of `key`'s cells: at most the smallest index ever inserted for it.
    #[inline]
    pub fn query(&self, key: u32) -> u8 {
        let mut answer = 0u8;
        for r in 0..self.rows {
            let c = self.cells[r * self.cols + column(key, r, self.cols)];
            answer = raise(answer, c);
        }
        answer
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

    #[test]
    fn batched_inserts_equal_single_inserts() {
        let items: Vec<(u32, u8)> = (0..1000u32).map(|k| (k * 7919, (k % 29) as u8)).collect();
        let (keys, indexes): (Vec<u32>, Vec<u8>) = items.iter().copied().unzip();
        for rows in [1, 2, 3, 8] {
            let mut one = MinMaxSketch::new(rows, 97, 31);
            items.iter().for_each(|&(k, i)| one.insert(k, i));
            let mut batched = MinMaxSketch::new(rows, 97, 31);
            batched.insert_all(&keys, &indexes);
            assert_eq!(one.cells(), batched.cells(), "{rows} rows");
        }
    }

    #[test]
    fn never_overestimates_and_is_exact_without_collisions() {
        let mut s = MinMaxSketch::new(2, 300, 31);
        let items: Vec<(u32, u8)> = (0..1000u32)
            .map(|k| (k * 7 + 3, ((k * 13) % 32) as u8))
            .collect();
        for &(k, i) in &items {
            s.insert(k, i);
        }
        let mut exact = 0;
        for &(k, i) in &items {
            let q = s.query(k);
            assert!(q <= i, "key {k}: {q} > {i}");
            exact += (q == i) as usize;
        }
        assert!(exact > 300, "{exact} of 1000 exact");
        let mut big = MinMaxSketch::new(2, 1 << 16, 31);
        big.insert(5, 17);
        assert_eq!(big.query(5), 17);
    }
}
