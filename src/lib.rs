//! gradflow: data-parallel SGD for sparse linear models on timely dataflow, with the gradient
//! exchange (codec and pattern) pluggable and measured.
//!
//! Layers, each ignorant of the ones above it (`tests/layers.rs` checks every import):
//! [`sparse`] and small helpers, with [`metrics`]'s counters → [`data`] → [`model`], [`codec`],
//! [`memory`] (error feedback) and [`optim`] → [`exchange`] (strategies, with their own view of
//! the plan and the worker's model state) → [`dataflow`] (timely operators) → [`job`] (TOML) →
//! [`auto`] → [`runtime`] (timely configuration, processes) → `cli` and `bench`.
//!
//! Cargo features (both default): `cli`, the command line (`gradflow::cli`, with clap and
//! indicatif), and `bench`, the benchmark harness (`gradflow::bench`, with plotters). With
//! `default-features = false` the crate is the engine alone.
//!
//! A codec round trip (SketchML never flips a sign, and by default keeps each sign's sum):
//!
//! ```
//! use gradflow::codec::{build_codec, CodecSpec, EncodeContext};
//! use gradflow::sparse::SparseGrad;
//!
//! let mut codec = build_codec(&CodecSpec::with_defaults("sketchml").unwrap()).unwrap();
//! let (keys, values) = (vec![3, 17, 40, 99], vec![0.5f32, -0.25, 0.125, -2.0]);
//! let mut message = Vec::new();
//! codec.encode(&keys, &values, 100, EncodeContext::default(), &mut message).unwrap();
//! let mut decoded = SparseGrad::default();
//! assert_eq!(codec.decode(&message, &mut decoded).unwrap(), 100);
//! assert_eq!(decoded.keys, keys);
//! for (d, t) in decoded.values.iter().zip(&values) {
//!     assert_eq!(d.signum(), t.signum());
//! }
//! let negative_sum: f32 = decoded.values.iter().filter(|v| **v < 0.0).sum();
//! assert!((negative_sum - (-2.25)).abs() < 1e-6);
//! ```

pub mod atomic;
pub mod auto;
#[cfg(feature = "bench")]
pub mod bench;
#[cfg(feature = "cli")]
pub mod cli;
pub mod codec;
pub mod cores;
pub mod cpu;
pub mod data;
pub mod dataflow;
pub mod exchange;
pub mod handshake;
pub mod job;
pub mod le;
pub mod mem;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod named;
pub mod optim;
pub mod placement;
pub mod runtime;
pub mod snapshot;
pub mod sparse;
