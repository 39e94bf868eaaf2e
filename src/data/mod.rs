//! Data layer: the in-memory CSR dataset, the LibSVM reader, deterministic partitioning and the
//! synthetic generators. Knows nothing of models, codecs or the dataflow.

pub mod libsvm;
pub mod partition;
pub mod synth;

pub use libsvm::{count_rows, read_libsvm, write_libsvm, DataError, LibsvmOptions};
pub use partition::RowFilter;

/// A sparse dataset in compressed sparse row form: row `i` has the features
/// `indices[row_ptr[i]..row_ptr[i+1]]` (strictly increasing, `< dim`) with the matching `values`,
/// and label `labels[i]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dataset {
    /// Number of features; every index is `< dim`.
    pub dim: u32,
    /// Row offsets into `indices`/`values`; `row_ptr.len() == rows() + 1`.
    pub row_ptr: Vec<usize>,
    /// Feature indices, row by row.
    pub indices: Vec<u32>,
    /// Feature values, row by row.
    pub values: Vec<f32>,
    /// One label per row: +1/-1 (or 1/0) for classification, real for regression.
    pub labels: Vec<f32>,
}

impl Dataset {
    /// An empty dataset of dimension `dim`.
    pub fn new(dim: u32) -> Self {
        Dataset {
            dim,
            row_ptr: vec![0],
            indices: Vec::new(),
            values: Vec::new(),
            labels: Vec::new(),
        }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.labels.len()
    }

    /// Number of stored nonzeros.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// The features and values of row `i`.
    #[inline]
    pub fn row(&self, i: usize) -> (&[u32], &[f32]) {
        let (lo, hi) = (self.row_ptr[i], self.row_ptr[i + 1]);
        (&self.indices[lo..hi], &self.values[lo..hi])
    }

    /// Appends a row; `indices` must be strictly increasing and `< dim` (checked in debug builds,
    /// the readers check it for every input).
    pub fn push_row(&mut self, indices: &[u32], values: &[f32], label: f32) {
        debug_assert_eq!(indices.len(), values.len());
        debug_assert!(indices.windows(2).all(|w| w[0] < w[1]));
        debug_assert!(indices.iter().all(|&i| i < self.dim));
        self.indices.extend_from_slice(indices);
        self.values.extend_from_slice(values);
        self.labels.push(label);
        self.row_ptr.push(self.indices.len());
    }
}
