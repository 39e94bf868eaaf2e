//! Deterministic assignment of rows to workers and to the train/test sides.
//!
//! Row `i` (0-based, counting data lines only) belongs to worker `i mod W`; it is a test row when a
//! seeded hash of `i` falls below the test fraction. The split therefore depends only on the job
//! seed, not on the number of workers, and no worker needs to talk to another to know its rows.

/// Which side of the split a row is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// A training row.
    Train,
    /// A test row.
    Test,
}

/// Decides, for each row number, whether this worker keeps it and on which side.
#[derive(Clone, Debug, PartialEq)]
pub struct RowFilter {
    /// This worker's index.
    pub worker: usize,
    /// Number of workers sharing the file.
    pub workers: usize,
    /// Fraction of rows held out for testing (0 keeps every row for training).
    pub test_fraction: f64,
    /// Seed of the split.
    pub seed: u64,
    /// An ordered split instead of the seeded hash: rows from this number on are test rows
    /// (the last `test_fraction` of a file, as a time split needs); `None`: the hash split.
    pub tail_from: Option<usize>,
}

impl RowFilter {
    /// Keeps every row, all on the training side.
    pub fn all() -> Self {
        RowFilter {
            worker: 0,
            workers: 1,
            test_fraction: 0.0,
            seed: 0,
            tail_from: None,
        }
    }

    /// The first test row of an ordered split of `rows` rows holding out `test_fraction` of
    /// them (rounded to the nearest row).
    pub fn tail_start(rows: usize, test_fraction: f64) -> usize {
        rows - ((rows as f64 * test_fraction).round() as usize).min(rows)
    }

    /// The side of row `row` if this worker keeps it.
    #[inline]
    pub fn side(&self, row: usize) -> Option<Side> {
        if row % self.workers != self.worker {
            return None;
        }
        let test = match self.tail_from {
            Some(first) => row >= first,
            None => {
                self.test_fraction > 0.0 && unit_hash(self.seed, row as u64) < self.test_fraction
            }
        };
        Some(if test { Side::Test } else { Side::Train })
    }
}

impl super::Dataset {
    /// The rows of `self` that `filter` gives this worker, as (train, test).
    pub fn split(&self, filter: &RowFilter) -> (super::Dataset, super::Dataset) {
        self.split_numbered(0, filter)
    }

    /// As [`Dataset::split`], for rows numbered from `first` (a part of a file whose earlier
    /// parts hold `first` rows).
    ///
    /// Each side is allocated once at its final size, plus one entry per row for an
    /// intercept ([`Dataset::add_intercept`] then moves the rows in place).
    pub fn split_numbered(
        &self,
        first: usize,
        filter: &RowFilter,
    ) -> (super::Dataset, super::Dataset) {
        let sides: Vec<Option<Side>> = (0..self.rows()).map(|i| filter.side(first + i)).collect();
        // (rows, nonzeros) of each side.
        let mut sizes = [(0, 0); 2];
        for (i, side) in sides.iter().enumerate() {
            if let Some(side) = side {
                let size = &mut sizes[(*side == Side::Test) as usize];
                size.0 += 1;
                size.1 += self.row_ptr[i + 1] - self.row_ptr[i];
            }
        }
        let mut train = super::Dataset::new(self.dim);
        let mut test = super::Dataset::new(self.dim);
        for (set, (rows, nonzeros)) in [&mut train, &mut test].into_iter().zip(sizes) {
            set.reserve(rows, nonzeros + rows);
        }
        for (i, side) in sides.iter().enumerate() {
            let (k, v) = self.row(i);
            match side {
                Some(Side::Train) => train.push_row(k, v, self.labels[i]),
                Some(Side::Test) => test.push_row(k, v, self.labels[i]),
                None => {}
            }
        }
        (train, test)
    }
}

/// SplitMix64 finaliser: a well-mixed 64-bit hash of `(seed, x)`.
#[inline]
pub const fn mix64(seed: u64, x: u64) -> u64 {
    let mut z = seed ^ x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A hash of `(seed, x)` mapped to `[0, 1)`.
#[inline]
pub fn unit_hash(seed: u64, x: u64) -> f64 {
    (mix64(seed, x) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_has_exactly_one_owner_and_split_is_worker_independent() {
        let filters: Vec<RowFilter> = (0..3)
            .map(|w| RowFilter {
                tail_from: None,
                worker: w,
                workers: 3,
                test_fraction: 0.25,
                seed: 7,
            })
            .collect();
        let single = RowFilter {
            tail_from: None,
            worker: 0,
            workers: 1,
            test_fraction: 0.25,
            seed: 7,
        };
        let mut tests = 0;
        for row in 0..10_000 {
            let owners: Vec<_> = filters.iter().filter_map(|f| f.side(row)).collect();
            assert_eq!(owners.len(), 1);
            assert_eq!(Some(owners[0]), single.side(row));
            tests += (owners[0] == Side::Test) as usize;
        }
        assert!(
            (2300..2700).contains(&tests),
            "test share {tests} of 10000 should be near 25%"
        );
    }
}
