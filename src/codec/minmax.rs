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

    /// A sketch from its cells (as read from a message).
    pub fn from_cells(rows: usize, cols: usize, max_index: u8, cells: Vec<u8>) -> Self {
        debug_assert_eq!(cells.len(), rows * cols);
        MinMaxSketch {
            rows,
            cols,
            max_index,
            cells,
        }
    }

    /// The cells, row by row.
    pub fn cells(&self) -> &[u8] {
        &self.cells
    }

    /// The cells' buffer back, for reuse.
    pub fn into_cells(self) -> Vec<u8> {
        self.cells
    }

    /// The largest index the sketch holds.
    pub fn max_index(&self) -> u8 {
        self.max_index
    }

    /// Inserts `index` for `key`: each row's cell keeps the smaller index.
    #[inline]
    pub fn insert(&mut self, key: u32, index: u8) {
        for r in 0..self.rows {
            let c = &mut self.cells[r * self.cols + column(key, r, self.cols)];
            *c = (*c).min(index);
        }
    }

    /// The largest of `key`'s cells: at most the smallest index ever inserted for it.
    #[inline]
    pub fn query(&self, key: u32) -> u8 {
        (0..self.rows)
            .map(|r| self.cells[r * self.cols + column(key, r, self.cols)])
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
