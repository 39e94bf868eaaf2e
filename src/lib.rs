//! gradflow: data-parallel SGD for sparse linear models on timely dataflow, with the gradient
//! exchange (codec and pattern) pluggable and measured.
//!
//! Layers, each ignorant of the ones above it:
//! [`data`] → [`model`] → [`codec`] → [`exchange`] → [`optim`] → [`dataflow`] (timely operators)
//! → [`job`] (TOML + CLI) and [`runtime`] (timely configuration, processes); [`metrics`] observes.

pub mod codec;
pub mod data;
pub mod dataflow;
pub mod exchange;
pub mod job;
pub mod mem;
pub mod metrics;
pub mod model;
pub mod optim;
pub mod runtime;
