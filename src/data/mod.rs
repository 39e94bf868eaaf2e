//! Data layer: the in-memory CSR dataset, the LibSVM reader, deterministic partitioning and the
//! synthetic generators. Knows nothing of models, codecs or the dataflow.

pub mod cache;
pub mod column;
pub mod gather;
pub mod idx;
pub mod libsvm;
pub mod partition;
pub mod source;
pub mod stream;
pub mod synth;
pub mod table;
mod worker;

pub use column::Column;
pub use libsvm::{count_rows, read_libsvm, write_libsvm, DataError, LibsvmOptions};
pub use partition::RowFilter;
pub use source::Part;
pub use worker::WorkerData;

/// How one line of a stream becomes a row (LibSVM: [`libsvm::LineParser`]; CSV:
/// [`table::lines::CsvLines`]). A stream is read line by line ([`stream`]), so a row is one line.
pub trait LineRows {
    /// The label of `line` (with its line break), its features then in [`Self::features`];
    /// `None` for a line that is no row (blank, a comment, a row without a label). An error
    /// gives the 1-based column (0: none) and what is wrong.
    fn parse(&mut self, line: &[u8]) -> Result<Option<f32>, libsvm::LineError>;

    /// The features of the row [`Self::parse`] read last: ascending keys and their values.
    fn features(&self) -> (&[u32], &[f32]);

    /// Whether a file's first line names its columns (then given to [`Self::header`]).
    fn has_header(&self) -> bool {
        false
    }

    /// Reads a file's header line: the rows after it follow its columns.
    fn header(&mut self, _line: &[u8]) -> Result<(), libsvm::LineError> {
        Ok(())
    }

    /// What the reader says when the stream ends (rows passed over), if anything.
    fn note(&self) -> Option<String> {
        None
    }
}

/// The largest model dimension a job allocates unless it raises `data.max_dim` (2^27 =
/// 134,217,728 features; it may be raised to 2^32 - 2, and a model's weights, features times
/// weights per feature, number at most 2^32 - 1: its keys are `u32`). With a replica every
/// worker holds a dense weight per feature, and beside it the optimizer's state and the
/// error-feedback memory (4-16 bytes per feature in all), so this default costs up to ~2 GiB
/// per worker; a file's one stray index must not cost more.
pub const MAX_DIM: u32 = 1 << 27;

/// The most characters of input an error message quotes: a 200 MB line must not become a
/// 200 MB message.
pub const QUOTED_CHARS: usize = 80;

/// `text` as an error message quotes it: whole when short, else its first
/// [`QUOTED_CHARS`] characters and `… (N bytes)`; control characters escaped (`\u{1b}`), so
/// that input never drives the terminal (a title set, a screen cleared).
pub fn clip(text: &str) -> std::borrow::Cow<'_, str> {
    clip_to(text, QUOTED_CHARS)
}

/// [`clip`] to `chars` characters.
pub fn clip_to(text: &str, chars: usize) -> std::borrow::Cow<'_, str> {
    let (shown, cut) = match text.char_indices().nth(chars) {
        None => (text, false),
        Some((end, _)) => (&text[..end], true),
    };
    let shown: std::borrow::Cow<'_, str> = match shown.contains(char::is_control) {
        false => shown.into(),
        true => shown
            .chars()
            .map(|c| match c.is_control() {
                true => c.escape_unicode().to_string(),
                false => c.to_string(),
            })
            .collect::<String>()
            .into(),
    };
    match cut {
        false => shown,
        true => format!("{shown}… ({} bytes)", text.len()).into(),
    }
}

/// [`clip`] of bytes that need not be UTF-8 (shown lossily).
pub fn clip_bytes(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    // Four bytes a character at most: decode no more than the quote can show.
    let limit = 4 * QUOTED_CHARS + 4;
    if bytes.len() <= limit {
        return match String::from_utf8_lossy(bytes) {
            std::borrow::Cow::Borrowed(t) => clip(t),
            std::borrow::Cow::Owned(t) => clip(&t).into_owned().into(),
        };
    }
    let head = String::from_utf8_lossy(&bytes[..limit]);
    let head: String = head.chars().take(QUOTED_CHARS).collect();
    format!("{}… ({} bytes)", clip(&head), bytes.len()).into()
}

/// Whether `label` names one of the classes `0..classes` (a multiclass model's labels).
pub fn is_class(label: f32, classes: u32) -> bool {
    label >= 0.0 && label < classes as f32 && label.fract() == 0.0
}

/// Whether `label` is a class of a two-class model: -1/+1 or 0/1.
pub fn is_binary_label(label: f32) -> bool {
    [-1.0, 0.0, 1.0].contains(&label)
}

/// The error for a label (`label`, as the message shows it) that is not one of `0..classes`.
pub fn not_a_class(label: &str, classes: u32) -> String {
    format!(
        "label {label} is not a class: softmax with model.classes = {classes} reads labels 0 to {}",
        classes - 1
    )
}

/// A sparse dataset in compressed sparse row form: row `i` has the features
/// `indices[row_ptr[i]..row_ptr[i+1]]` (strictly increasing, `< dim`) with the matching `values`,
/// and label `labels[i]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dataset {
    /// Number of features; every index is `< dim`.
    pub dim: u32,
    /// Row offsets into `indices`/`values`; `row_ptr.len() == rows() + 1`.
    pub row_ptr: Column<usize>,
    /// Feature indices, row by row.
    pub indices: Column<u32>,
    /// Feature values, row by row.
    pub values: Column<f32>,
    /// One label per row: +1/-1 (or 1/0) for classification, real for regression.
    pub labels: Column<f32>,
}

impl Dataset {
    /// An empty dataset of dimension `dim`.
    pub fn new(dim: u32) -> Self {
        Dataset {
            dim,
            row_ptr: vec![0].into(),
            indices: Column::new(),
            values: Column::new(),
            labels: Column::new(),
        }
    }

    /// Reserves room for `rows` more rows holding `nonzeros` more features.
    ///
    /// On ordinary pages: huge pages (`madvise`) slowed loading more than they sped up epochs
    /// (the kernel zeroes whole 2 MiB pages, which the host must first supply)
    /// (figures: `docs/results.md`, "Design measurements").
    pub fn reserve(&mut self, rows: usize, nonzeros: usize) {
        self.row_ptr.reserve(rows);
        self.labels.reserve(rows);
        self.indices.reserve(nonzeros);
        self.values.reserve(nonzeros);
    }

    /// Removes every row, keeping the dimension and the memory.
    pub fn clear(&mut self) {
        self.row_ptr.truncate(1);
        self.indices.clear();
        self.values.clear();
        self.labels.clear();
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

    /// Adds an intercept: a feature of value 1 in every row, at key `dim` (the new last key).
    /// Returns its key.
    ///
    /// In place: the arrays grow by one entry per row and the rows move back, last row first
    /// (row `i` moves `i` places), so no second copy of the data is allocated (with room
    /// reserved, as [`Dataset::split_numbered`] does, not even a reallocation).
    pub fn add_intercept(&mut self) -> u32 {
        let key = self.dim;
        self.dim += 1;
        let (rows, nonzeros) = (self.rows(), self.indices.len());
        self.indices.resize(nonzeros + rows, 0);
        self.values.resize(nonzeros + rows, 0.0);
        for i in (0..rows).rev() {
            let (lo, hi) = (self.row_ptr[i], self.row_ptr[i + 1]);
            self.indices.copy_within(lo..hi, lo + i);
            self.values.copy_within(lo..hi, lo + i);
            self.indices[hi + i] = key;
            self.values[hi + i] = 1.0;
            self.row_ptr[i + 1] = hi + i + 1;
        }
        key
    }

    /// Appends a row given as sorted `(key, value)` pairs (see [`Dataset::push_row`]).
    pub fn push_pairs(&mut self, features: &[(u32, f32)], label: f32) {
        debug_assert!(features.windows(2).all(|w| w[0].0 < w[1].0));
        debug_assert!(features.iter().all(|f| f.0 < self.dim));
        self.indices.extend(features.iter().map(|f| f.0));
        self.values.extend(features.iter().map(|f| f.1));
        self.labels.push(label);
        self.row_ptr.push(self.indices.len());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_clipped_with_their_length() {
        assert_eq!(clip("short"), "short");
        let long = "x".repeat(10_000_000);
        let q = clip(&long);
        assert_eq!(q, format!("{}… (10000000 bytes)", "x".repeat(QUOTED_CHARS)));
        assert_eq!(clip_bytes(long.as_bytes()), q);
        assert_eq!(clip_bytes(b"a\xffb"), "a\u{fffd}b");
        // A cut never splits a character.
        let wide = "é".repeat(100);
        assert!(clip(&wide).starts_with(&"é".repeat(QUOTED_CHARS)));
        assert!(clip_bytes(wide.as_bytes()).ends_with("… (200 bytes)"));
        // Control characters never reach the terminal raw.
        let title = "\u{1b}]0;owned\u{7}\u{1b}[2J";
        assert_eq!(clip(title), "\\u{1b}]0;owned\\u{7}\\u{1b}[2J");
        assert!(!clip_bytes(format!("{title}{long}").as_bytes()).contains('\u{1b}'));
    }

    #[test]
    fn the_intercept_is_the_last_key_of_every_row() {
        let mut d = Dataset::new(5);
        d.push_row(&[1, 4], &[0.5, 2.0], 1.0);
        d.push_row(&[], &[], -1.0);
        d.push_row(&[0], &[3.0], 1.0);
        assert_eq!(d.add_intercept(), 5);
        assert_eq!(d.dim, 6);
        assert_eq!(d.row(0), (&[1, 4, 5][..], &[0.5, 2.0, 1.0][..]));
        assert_eq!(d.row(1), (&[5][..], &[1.0][..]));
        assert_eq!(d.row(2), (&[0, 5][..], &[3.0, 1.0][..]));
        assert_eq!(d.labels, vec![1.0, -1.0, 1.0]);
        assert_eq!(
            (d.row_ptr.into_vec(), d.indices.len(), d.values.len()),
            (vec![0, 3, 4, 6], 6, 6)
        );
    }
}
