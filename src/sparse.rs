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
    ///
    /// The merge is branch-free: each step writes the smaller key and advances past it in
    /// one or both inputs by comparison results, so interleaved keys (two workers' gradient
    /// pieces) cost no mispredicted branches.
    pub fn add_scaled(&mut self, other: &SparseGrad, scale: f32, scratch: &mut SparseGrad) {
        if self.is_empty() {
            self.keys.extend_from_slice(&other.keys);
            self.values.extend(other.values.iter().map(|&v| scale * v));
            return;
        }
        let (n, m) = (self.len(), other.len());
        scratch.keys.clear();
        scratch.values.clear();
        scratch.keys.resize(n + m, 0);
        scratch.values.resize(n + m, 0.0);
        let (ak, av) = (&self.keys[..], &self.values[..]);
        let bk = &other.keys[..];
        let (ok, ov) = (&mut scratch.keys[..], &mut scratch.values[..]);
        // `other`'s values, scaled, wait at `ov[n..]`: the merge writes `ov[o]` with
        // `o <= i + j < n + j`, below every value it has yet to read. (Scaling inside the loop
        // makes the compiler branch on which side the product is for.)
        for (out, &v) in ov[n..].iter_mut().zip(&other.values) {
            *out = scale * v;
        }
        let (mut i, mut j, mut o) = (0, 0, 0);
        while i < n && j < m {
            let (a, b) = (ak[i], bk[j]);
            let (x, y) = (av[i], ov[n + j]);
            let (take_a, take_b) = (a <= b, b <= a);
            ok[o] = a.min(b);
            // Each side contributes its value or -0.0, the exact identity of addition
            // (x + -0.0 == x bit for bit, -0.0 included), chosen by masks, not branches.
            ov[o] = or_negative_zero(x, take_a) + or_negative_zero(y, take_b);
            i += take_a as usize;
            j += take_b as usize;
            o += 1;
        }
        let (rest_a, rest_b) = (n - i, m - j);
        ok[o..o + rest_a].copy_from_slice(&ak[i..]);
        ov[o..o + rest_a].copy_from_slice(&av[i..]);
        o += rest_a;
        ok[o..o + rest_b].copy_from_slice(&bk[j..]);
        ov.copy_within(n + j.., o);
        o += rest_b;
        scratch.keys.truncate(o);
        scratch.values.truncate(o);
        std::mem::swap(self, scratch);
    }
}

/// `x` when `keep`, else -0.0, without a branch.
#[inline(always)]
fn or_negative_zero(x: f32, keep: bool) -> f32 {
    let mask = (keep as u32).wrapping_neg();
    f32::from_bits((x.to_bits() & mask) | ((-0.0f32).to_bits() & !mask))
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
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;
    use std::collections::BTreeMap;

    fn sparse(map: &BTreeMap<u32, f32>) -> SparseGrad {
        SparseGrad {
            keys: map.keys().copied().collect(),
            values: map.values().copied().collect(),
        }
    }

    /// Values in [-4, 4), and sometimes -0.0 (which a merge adding 0.0 would turn into +0.0).
    fn value() -> impl Strategy<Value = f32> {
        prop_oneof![4 => -4.0f32..4.0, 1 => Just(-0.0f32)]
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 2000,
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(11),
            ..ProptestConfig::default()
        })]

        /// The merge equals a map's sum key by key, bit for bit (a key in one input keeps its
        /// value exactly, -0.0 included), whatever the overlap and lengths.
        #[test]
        fn add_scaled_is_the_keywise_sum(
            a in proptest::collection::btree_map(0u32..64, value(), 0..40),
            b in proptest::collection::btree_map(0u32..64, value(), 0..40),
            scale in prop_oneof![Just(1.0f32), Just(0.5), Just(-0.25)],
        ) {
            let mut want = a.clone();
            for (&k, &v) in &b {
                *want.entry(k).or_insert(0.0) += scale * v;
            }
            for (k, v) in want.iter_mut() {
                if !b.contains_key(k) {
                    *v = a[k];
                } else if !a.contains_key(k) {
                    *v = scale * b[k];
                }
            }
            let (mut got, mut scratch) = (sparse(&a), SparseGrad::default());
            got.add_scaled(&sparse(&b), scale, &mut scratch);
            prop_assert_eq!(&got.keys, &sparse(&want).keys);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&got.values), bits(&sparse(&want).values));
        }
    }

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
