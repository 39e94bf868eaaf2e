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
    fn save(&self) -> Option<Vec<u8>> {
        Some(Vec::new())
    }
    fn restore(&mut self, saved: &[u8]) -> Result<(), String> {
        match saved.is_empty() {
            true => Ok(()),
            false => Err("memory none: a checkpoint of another memory".into()),
        }
    }
}
