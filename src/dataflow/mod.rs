//! The training loop as a timely dataflow.
//!
//! One iterative scope whose inner timestamp is the SGD round. Per round, on every worker:
//!
//! ```text
//!            ┌──────────── model updates of round r-1 (feedback edge, +1 round) ◄─────────┐
//!            ▼                                                                            │
//!   [Gradient] apply updates, (evaluate at epoch ends), mini-batch gradient, encode      │
//!            │ gradient envelopes ── Exchange(dest) ──►  [Aggregate] decode, sum in       │
//!            │                                          worker order, optimizer update ──┘
//!            │ round statistics ── Exchange(→ worker 0) ──► [Collect] metrics rows
//! ```
//!
//! Operators decide that a round is complete from their input frontiers: the gradient operator
//! starts round `r` only when no update for round `r` can still arrive, the aggregator sums
//! round `r` only when every gradient of round `r` is in. There is no external barrier and no
//! driver stepping rounds. The public operator functions let a program assemble its own loop;
//! [`build_training`] assembles the standard one.

mod operators;
pub mod supervisor;

pub use operators::{
    aggregate, build_training, collect, gradient, RoundStats, TrainHandle, TrainPlan, WorkerData,
    WorkerState,
};
pub use supervisor::Supervisor;

/// The timestamp inside the training scope: `()` outside, the round inside.
pub type RoundTime = timely::order::Product<(), u64>;
