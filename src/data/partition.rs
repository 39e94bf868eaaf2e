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

    /// Whether [`Self::side`] is `Some(Side::Train)` for every row: one worker's filter that
    /// holds nothing out (a NaN fraction, which the job refuses, answers no: the copy then
    /// decides row by row).
    pub fn keeps_every_row_for_training(&self) -> bool {
        self.workers == 1 && self.tail_from.is_none() && self.test_fraction <= 0.0
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

    /// As [`Dataset::split_numbered`], taking `self`: when `filter` keeps every row for
    /// training (one worker's filter and no test rows), `self` is the training set as it is,
    /// with room reserved for an intercept, instead of a copy (on the 600k-row set the copy
    /// and its page faults took a quarter of the loading time).
    pub fn into_split_numbered(
        mut self,
        first: usize,
        filter: &RowFilter,
    ) -> (super::Dataset, super::Dataset) {
        if !filter.keeps_every_row_for_training() {
            return self.split_numbered(first, filter);
        }
        let rows = self.rows();
        self.reserve(0, rows);
        let test = super::Dataset::new(self.dim);
        (self, test)
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

    /// Taking the rows gives the sets the copy gives, for filters that keep every row for
    /// training and for those that do not.
    #[test]
    fn taking_the_rows_splits_as_copying_them_does() {
        let mut d = super::super::Dataset::new(9);
        for r in 0..200u32 {
            let keys: Vec<u32> = (0..r % 5)
                .map(|i| (r + 2 * i) % 9)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let values: Vec<f32> = keys.iter().map(|&k| k as f32 - 0.5 * r as f32).collect();
            d.push_row(&keys, &values, (r % 2) as f32);
        }
        for (workers, test_fraction, tail) in [
            (1, 0.0, false),
            (1, 0.3, false),
            (1, 0.3, true),
            (2, 0.0, false),
        ] {
            let filter = RowFilter {
                tail_from: tail.then(|| RowFilter::tail_start(200, test_fraction)),
                worker: 0,
                workers,
                test_fraction,
                seed: 3,
            };
            let copied = d.split_numbered(7, &filter);
            let taken = d.clone().into_split_numbered(7, &filter);
            assert_eq!(
                copied, taken,
                "{workers} workers, test {test_fraction}, tail {tail}"
            );
            let (mut a, mut b) = (copied.0, taken.0);
            a.add_intercept();
            b.add_intercept();
            assert_eq!(a, b);
        }
    }

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
