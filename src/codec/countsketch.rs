//! The count sketch (Charikar et al.; Sketched-SGD, Ivkin et al. NeurIPS'19, §3): `rows x cols`
//! f32 cells with, per row, a bucket hash `h_j` and a sign hash `s_j`. Insert adds
//! `s_j(i) · g_i` to `S[j][h_j(i)]`; a coordinate's estimate is the median over rows of
//! `s_j(i) · S[j][h_j(i)]`. Sketches of the same shape and seed are linear: the sum of the
//! workers' sketches is the sketch of the summed gradient ([`CountSketch::merge`]). The
//! two-round protocol that uses it is `exchange::sketch`.

use crate::codec::bits::{BitReader, BitWriter};
use crate::codec::CodecError;
use crate::data::partition::mix64;

/// The most rows a sketch may have (estimates are taken on the stack).
pub const MAX_ROWS: usize = 16;

/// The median of a few values (the mean of the middle two for an even count). Five rows (the
/// paper's and the default) take a branch-free sorting network: a round's estimate of every
/// coordinate is a median per coordinate, and a general sort of five was a sixth of a round.
fn median(v: &mut [f32]) -> f32 {
    if let [a, b, c, d, e] = *v {
        return median5([a, b, c, d, e]);
    }
    v.sort_unstable_by(f32::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        0.5 * (v[m - 1] + v[m])
    }
}

/// The middle of five finite values, by an optimal sorting network of nine compare-exchanges.
fn median5(mut v: [f32; 5]) -> f32 {
    for (i, j) in [
        (0, 1),
        (3, 4),
        (2, 4),
        (2, 3),
        (0, 3),
        (0, 2),
        (1, 4),
        (1, 3),
        (1, 2),
    ] {
        let (lo, hi) = (v[i].min(v[j]), v[i].max(v[j]));
        (v[i], v[j]) = (lo, hi);
    }
    v[2]
}

/// The most `(key, row)` slots a sketch keeps in a table (16 MB), instead of hashing them anew.
pub const MAX_SLOT_TABLE: usize = 1 << 22;

/// A count sketch.
#[derive(Clone, Debug)]
pub struct CountSketch {
    rows: usize,
    cols: usize,
    seed: u64,
    cells: Vec<f32>,
    /// Optional: each key's cell per row, key by key, sign in the low bit
    /// ([`CountSketch::with_slot_table`]); keys past it are hashed.
    slots: Vec<u32>,
}

/// Sketches are equal when their shape, seed and cells are (a slot table only saves hashing).
impl PartialEq for CountSketch {
    fn eq(&self, other: &Self) -> bool {
        (self.rows, self.cols, self.seed) == (other.rows, other.cols, other.seed)
            && self.cells == other.cells
    }
}

impl CountSketch {
    /// An empty sketch; every party that merges or queries it must use the same shape and seed.
    pub fn new(rows: usize, cols: usize, seed: u64) -> Self {
        assert!(
            (1..=MAX_ROWS).contains(&rows) && cols > 0,
            "a count sketch needs 1 to {MAX_ROWS} rows and some columns"
        );
        CountSketch {
            rows,
            cols,
            seed,
            cells: vec![0.0; rows * cols],
            slots: Vec::new(),
        }
    }

    /// The sketch with the slots of keys `0..dim` computed once, for a sketch that inserts or
    /// estimates most of them every round (the sketch exchange of a dense gradient: hashing
    /// was a third of its round). Without effect when the table would pass [`MAX_SLOT_TABLE`].
    pub fn with_slot_table(mut self, dim: u32) -> Self {
        let entries = dim as usize * self.rows;
        if entries <= MAX_SLOT_TABLE && self.cells.len() < 1 << 31 {
            let slots = (0..dim).flat_map(|k| (0..self.rows).map(move |r| (k, r)));
            self.slots = slots
                .map(|(k, r)| {
                    let (i, sign) = self.hashed_slot(k, r);
                    (i as u32) << 1 | u32::from(sign < 0.0)
                })
                .collect();
        }
        self
    }

    #[inline]
    fn slot(&self, key: u32, row: usize) -> (usize, f32) {
        match self.slots.get(key as usize * self.rows + row) {
            Some(&s) => ((s >> 1) as usize, if s & 1 == 0 { 1.0 } else { -1.0 }),
            None => self.hashed_slot(key, row),
        }
    }

    #[inline]
    fn hashed_slot(&self, key: u32, row: usize) -> (usize, f32) {
        let h = mix64(self.seed ^ row as u64, key as u64);
        let col = (((h >> 32) * self.cols as u64) >> 32) as usize;
        let sign = if h & 1 == 0 { 1.0 } else { -1.0 };
        (row * self.cols + col, sign)
    }

    /// Adds `value` at `key`.
    #[inline]
    pub fn insert(&mut self, key: u32, value: f32) {
        for r in 0..self.rows {
            let (i, s) = self.slot(key, r);
            self.cells[i] += s * value;
        }
    }

    /// The median-of-rows estimate of `key`'s value.
    pub fn estimate(&self, key: u32) -> f32 {
        let mut est = [0f32; MAX_ROWS];
        for (r, e) in est.iter_mut().enumerate().take(self.rows) {
            let (i, s) = self.slot(key, r);
            *e = s * self.cells[i];
        }
        median(&mut est[..self.rows])
    }

    /// The estimate of every key `0..dim` into `out` (resized): what Sketched-SGD does on its
    /// parameter server (§5.2: "query the sketch for every gradient coordinate").
    pub fn estimate_all(&self, dim: u32, out: &mut Vec<f32>) {
        out.clear();
        out.extend((0..dim).map(|k| self.estimate(k)));
    }

    /// The estimate of ‖g‖²: the median over rows of the row's sum of squared cells (each row is
    /// an unbiased estimate; HEAVYMIX's ℓ̂²).
    pub fn l2_squared_estimate(&self) -> f32 {
        let mut sums = [0f32; MAX_ROWS];
        for (r, row) in self.cells.chunks_exact(self.cols).enumerate() {
            sums[r] = row.iter().map(|c| c * c).sum();
        }
        median(&mut sums[..self.rows])
    }

    /// Number of columns.
    pub fn columns(&self) -> usize {
        self.cols
    }

    /// The cells, row by row.
    pub fn cells(&self) -> &[f32] {
        &self.cells
    }

    /// The cells, row by row, for writing (a summed slice received from a peer).
    pub fn cells_mut(&mut self) -> &mut [f32] {
        &mut self.cells
    }

    /// Zeroes every cell.
    pub fn clear(&mut self) {
        self.cells.iter_mut().for_each(|c| *c = 0.0);
    }

    /// Adds another sketch of the same shape and seed (linearity).
    pub fn merge(&mut self, other: &CountSketch) -> Result<(), String> {
        if (self.rows, self.cols, self.seed) != (other.rows, other.cols, other.seed) {
            return Err(format!(
                "count sketches differ: {}x{} seed {} vs {}x{} seed {}",
                self.rows, self.cols, self.seed, other.rows, other.cols, other.seed
            ));
        }
        self.cells
            .iter_mut()
            .zip(&other.cells)
            .for_each(|(a, b)| *a += b);
        Ok(())
    }

    /// The `k` candidates of largest estimated magnitude (ties to the smaller key), sorted by key.
    pub fn heavy_hitters(&self, candidates: &[u32], k: usize) -> Vec<u32> {
        let est: Vec<f32> = candidates.iter().map(|&c| self.estimate(c)).collect();
        crate::codec::largest(&est, k.min(candidates.len()))
            .into_iter()
            .map(|i| candidates[i as usize])
            .collect()
    }

    /// Serialises shape, seed and cells (f32).
    pub fn write(&self, w: &mut BitWriter) {
        w.write(self.rows as u64, 8);
        w.write(self.cols as u64, 32);
        w.write(self.seed & 0xFFFF_FFFF, 32);
        w.write(self.seed >> 32, 32);
        self.cells.iter().for_each(|&c| w.write_f32(c));
    }

    /// Reads a sketch written by [`CountSketch::write`]; `max_cells` bounds the allocation.
    pub fn read(r: &mut BitReader, max_cells: usize) -> Result<CountSketch, CodecError> {
        let rows = r.read(8)? as usize;
        let cols = r.read(32)? as usize;
        let seed = r.read(32)? | (r.read(32)? << 32);
        if rows == 0 || rows > MAX_ROWS || cols == 0 || rows * cols > max_cells {
            return Err(CodecError::Corrupt(format!(
                "count sketch of {rows}x{cols}"
            )));
        }
        let cells = (0..rows * cols)
            .map(|_| r.read_f32())
            .collect::<Result<Vec<f32>, _>>()?;
        if cells.iter().any(|c| !c.is_finite()) {
            return Err(CodecError::Corrupt("non-finite count sketch cell".into()));
        }
        Ok(CountSketch {
            rows,
            cols,
            seed,
            cells,
            slots: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    /// The network's middle is the sorted middle for every order of five values, with ties.
    #[test]
    fn the_median_of_five_is_the_sorted_middle() {
        let sets = [
            [1.0, 2.0, 3.0, 4.0, 5.0],
            [-2.0, 7.5, 7.5, 0.0, -9.0],
            [3.0; 5],
        ];
        for set in sets {
            let mut sorted = set;
            sorted.sort_unstable_by(f32::total_cmp);
            // Every permutation, by index: 5^5 choices, those that use each index once.
            for n in 0..5usize.pow(5) {
                let idx: Vec<usize> = (0..5).map(|p| n / 5usize.pow(p) % 5).collect();
                if (0..5).any(|i| !idx.contains(&i)) {
                    continue;
                }
                let mut v: Vec<f32> = idx.iter().map(|&i| set[i]).collect();
                assert_eq!(median(&mut v), sorted[2], "{v:?}");
            }
        }
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    /// A sketch with a slot table inserts and estimates exactly as one that hashes, for keys
    /// inside the table and past it.
    #[test]
    fn the_slot_table_changes_no_cell_and_no_estimate() {
        let (mut hashed, mut tabled) = (
            CountSketch::new(5, 64, 7),
            CountSketch::new(5, 64, 7).with_slot_table(300),
        );
        assert_eq!(tabled.slots.len(), 1500);
        for k in (0..600).step_by(3) {
            hashed.insert(k, k as f32 - 250.0);
            tabled.insert(k, k as f32 - 250.0);
        }
        assert_eq!(hashed.cells, tabled.cells);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        hashed.estimate_all(600, &mut a);
        tabled.estimate_all(600, &mut b);
        assert_eq!(a, b);
        // Too large a table is not built.
        let big = CountSketch::new(5, 64, 7).with_slot_table(MAX_SLOT_TABLE as u32);
        assert!(big.slots.is_empty());
    }

    #[test]
    fn sketches_are_linear() {
        let (mut a, mut b, mut sum) = (
            CountSketch::new(5, 64, 9),
            CountSketch::new(5, 64, 9),
            CountSketch::new(5, 64, 9),
        );
        for k in 0..300u32 {
            let (x, y) = ((k % 7) as f32 * 0.25, (k % 5) as f32 * -0.5);
            a.insert(k, x);
            b.insert(k, y);
            sum.insert(k, x);
            sum.insert(k, y);
        }
        a.merge(&b).unwrap();
        assert_eq!(
            a, sum,
            "insert order is the same per cell, so the sums match exactly"
        );
        assert!(a.merge(&CountSketch::new(5, 65, 9)).is_err());
    }

    #[test]
    fn heavy_hitters_are_recovered_and_estimates_are_close() {
        let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(4);
        let keys: Vec<u32> = (0..20_000).map(|i| i * 3).collect();
        let heavy: Vec<u32> = vec![300, 6_000, 45_000, 59_997];
        let mut s = CountSketch::new(5, 2_000, 1);
        for &k in &keys {
            let v = if heavy.contains(&k) {
                10.0
            } else {
                rng.random_range(-0.01f32..0.01)
            };
            s.insert(k, v);
        }
        for &h in &heavy {
            assert!((s.estimate(h) - 10.0).abs() < 0.2, "{}", s.estimate(h));
        }
        assert_eq!(s.heavy_hitters(&keys, 4), heavy);
    }

    #[test]
    fn round_trips_and_rejects_corrupt_shapes() {
        let mut s = CountSketch::new(3, 10, 77);
        s.insert(5, 1.5);
        let mut buf = Vec::new();
        let mut w = BitWriter::new(&mut buf);
        s.write(&mut w);
        w.finish();
        assert_eq!(
            CountSketch::read(&mut BitReader::new(&buf), 1000).unwrap(),
            s
        );
        assert!(
            CountSketch::read(&mut BitReader::new(&buf), 10).is_err(),
            "allocation bound"
        );
        assert!(CountSketch::read(&mut BitReader::new(&buf[..buf.len() - 1]), 1000).is_err());
    }
}
