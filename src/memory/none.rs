//! No memory: the codec's losses are final.

use super::Memory;
use crate::sparse::SparseGrad;

/// The memory that remembers nothing.
pub struct NoMemory;

impl Memory for NoMemory {
    fn name(&self) -> &'static str {
        "none"
    }
    fn compensate(&mut self, _grad: &mut SparseGrad, _scratch: &mut SparseGrad) {}
    fn update(&mut self, _compensated: &SparseGrad, _sent: &SparseGrad) {}
    fn needs_sent(&self) -> bool {
        false
    }
}
