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

/// The median of a few values (the mean of the middle two for an even count).
fn median(v: &mut [f32]) -> f32 {
    v.sort_unstable_by(f32::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        0.5 * (v[m - 1] + v[m])
    }
}

/// A count sketch.
#[derive(Clone, Debug, PartialEq)]
pub struct CountSketch {
    rows: usize,
    cols: usize,
    seed: u64,
    cells: Vec<f32>,
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
        }
    }

    #[inline]
    fn slot(&self, key: u32, row: usize) -> (usize, f32) {
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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

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
