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

/// Walks the union of two strictly increasing key lists in order, calling `f(key, i, j)` with
/// the key's position in `a` and in `b` (`None` where absent): a sorted merge, no hashing.
pub fn merge_keys(a: &[u32], b: &[u32], mut f: impl FnMut(u32, Option<usize>, Option<usize>)) {
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) if x == y => {
                f(x, Some(i), Some(j));
                i += 1;
                j += 1;
            }
            (Some(&x), Some(&y)) if x < y => {
                f(x, Some(i), None);
                i += 1;
            }
            (Some(&x), None) => {
                f(x, Some(i), None);
                i += 1;
            }
            (_, Some(&y)) => {
                f(y, None, Some(j));
                j += 1;
            }
            (None, None) => unreachable!(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keys_visits_the_union_with_positions() {
        let mut seen = Vec::new();
        merge_keys(&[1, 4, 9], &[0, 4, 12], |k, i, j| seen.push((k, i, j)));
        assert_eq!(
            seen,
            vec![
                (0, None, Some(0)),
                (1, Some(0), None),
                (4, Some(1), Some(1)),
                (9, Some(2), None),
                (12, None, Some(2)),
            ]
        );
    }
}
