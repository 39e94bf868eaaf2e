//! The rows one worker trains and tests on.

use super::Dataset;

/// The rows one worker trains and tests on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkerData {
    /// Training rows.
    pub train: Dataset,
    /// Test rows.
    pub test: Dataset,
    /// Features of a separate test file beyond the training data's dimension, ignored (the
    /// whole file's count).
    pub ignored_test_features: u64,
    /// Every worker's training and test rows, in worker order, once the workers have compared
    /// them (empty before): what the run reports of the data.
    pub shares: Vec<(u64, u64)>,
}

impl WorkerData {
    /// No rows, of dimension `dim`.
    pub fn empty(dim: u32) -> WorkerData {
        WorkerData {
            train: Dataset::new(dim),
            test: Dataset::new(dim),
            ignored_test_features: 0,
            shares: Vec::new(),
        }
    }
}
