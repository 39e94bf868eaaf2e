//! The sparse vector every layer above the data shares: gradients, model changes, decoded
//! messages. It sits below both the model and the codec layer, so that neither depends on the
//! other.

/// A sparse gradient: strictly increasing `keys` with their `values`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SparseGrad {
    /// Strictly increasing keys.
    pub keys: Vec<u32>,
    /// One value per key.
    pub values: Vec<f32>,
}

impl SparseGrad {
    /// Number of stored pairs.
    pub fn len(&self) -> usize {
        self.keys.len()
    }
    /// Whether no pair is stored.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
    /// Removes all pairs, keeping the allocations.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.values.clear();
    }
    /// `self += scale * other`, as a sorted merge into `scratch` (swapped into `self`).
    pub fn add_scaled(&mut self, other: &SparseGrad, scale: f32, scratch: &mut SparseGrad) {
        scratch.clear();
        scratch.keys.reserve(self.len() + other.len());
        scratch.values.reserve(self.len() + other.len());
        let (mut i, mut j) = (0, 0);
        while i < self.len() && j < other.len() {
            let (a, b) = (self.keys[i], other.keys[j]);
            if a < b {
                scratch.keys.push(a);
                scratch.values.push(self.values[i]);
                i += 1;
            } else if b < a {
                scratch.keys.push(b);
                scratch.values.push(scale * other.values[j]);
                j += 1;
            } else {
                scratch.keys.push(a);
                scratch
                    .values
                    .push(self.values[i] + scale * other.values[j]);
                i += 1;
                j += 1;
            }
        }
        scratch.keys.extend_from_slice(&self.keys[i..]);
        scratch.values.extend_from_slice(&self.values[i..]);
        for (&k, &v) in other.keys[j..].iter().zip(&other.values[j..]) {
            scratch.keys.push(k);
            scratch.values.push(scale * v);
        }
        std::mem::swap(self, scratch);
    }
}
