//! Tables: CSV files (plain, gzip or zstd) with a header, turned into sparse rows by a feature
//! spec (categorical, numeric, date/time parts, crosses; hashed or with a vocabulary; joins with
//! dimension tables), by a differential-dataflow pipeline on the training workers.

pub mod features;
pub mod lines;
#[cfg(feature = "parquet")]
pub mod parquet;
pub mod pipeline;
pub mod read;
pub mod spec;
pub mod text;

pub use features::{FeatureMap, NumericStats};
pub use lines::{stream_map, CsvLines};
pub use pipeline::{encode_file, prepare, Encoded, Prepared, TableInput};
pub use spec::{
    DatePart, DatetimeSpec, FeatureSpec, JoinSpec, LabelSpec, NumericSpec, TableSpec, TextSpec,
    Transform,
};

pub mod rows;
pub use rows::{parse_rows, read_rows, write_rows, PreparedRow};
