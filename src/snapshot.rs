//! Bytes of state that a checkpoint keeps (`crate::checkpoint`): what the memories, update
//! rules and operators save, and read back from files that may be damaged or hostile.
//!
//! State is encoded with bincode (fixed-width integers, little-endian), and every decode is
//! limited to the bytes actually given, so a length field cannot make the reader allocate more
//! than the input could hold. Dense per-key arrays are stored as their entries whose bits are
//! not zero ([`NonZero`]): most keys of a sparse model are never touched, and `-0.0` keeps its
//! sign, so a restored array is bit-identical to the saved one.

use bincode::Options;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

fn options() -> impl Options {
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_little_endian()
}

/// The bytes of `value`.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    options()
        .serialize(value)
        .expect("serializing to memory does not fail")
}

/// Decodes a `T` from all of `bytes`; `what` names the state in the error.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, String> {
    options()
        .with_limit(bytes.len() as u64)
        .reject_trailing_bytes()
        .deserialize(bytes)
        .map_err(|e| format!("{what}: corrupt state ({e})"))
}

/// The entries of a dense array whose bits are not zero, keys increasing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NonZero {
    /// The array's length.
    pub len: u64,
    /// Indices of the entries, increasing.
    pub keys: Vec<u32>,
    /// Their values.
    pub values: Vec<f32>,
}

impl NonZero {
    /// The entries of `array` whose bits are not zero.
    pub fn of(array: &[f32]) -> Self {
        let mut out = NonZero {
            len: array.len() as u64,
            ..Default::default()
        };
        for (k, &v) in array.iter().enumerate() {
            if v.to_bits() != 0 {
                out.keys.push(k as u32);
                out.values.push(v);
            }
        }
        out
    }

    /// Writes the entries into `array` (all zeros before), checking that the lengths agree and
    /// the keys are increasing and in range; `what` names the array in errors.
    pub fn restore(&self, array: &mut [f32], what: &str) -> Result<(), String> {
        if self.len != array.len() as u64 || self.keys.len() != self.values.len() {
            return Err(format!(
                "{what}: {} entries of an array of {}, expected {}",
                self.keys.len(),
                self.len,
                array.len()
            ));
        }
        let mut next = 0u64;
        for (&k, &v) in self.keys.iter().zip(&self.values) {
            if (k as u64) < next || k as u64 >= self.len {
                return Err(format!("{what}: key {k} out of order or out of range"));
            }
            array[k as usize] = v;
            next = k as u64 + 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_round_trip_bit_for_bit_and_damage_is_an_error() {
        let a = vec![0.0, -0.0, 1.5, 0.0, f32::MIN_POSITIVE, -3.0];
        let saved = encode(&NonZero::of(&a));
        let back: NonZero = decode(&saved, "weights").unwrap();
        assert_eq!(back.keys, vec![1, 2, 4, 5]);
        let mut b = vec![0.0f32; a.len()];
        back.restore(&mut b, "weights").unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b));
        // Wrong length, keys out of order or range, truncation, trailing bytes.
        assert!(back.restore(&mut [0.0; 5], "w").unwrap_err().contains("w:"));
        let mut bad = back.clone();
        bad.keys.swap(0, 1);
        assert!(bad.restore(&mut b, "w").is_err());
        bad.keys = vec![1, 2, 4, 6];
        assert!(bad.restore(&mut b, "w").is_err());
        assert!(decode::<NonZero>(&saved[..saved.len() - 1], "w").is_err());
        let mut longer = saved.clone();
        longer.push(0);
        assert!(decode::<NonZero>(&longer, "w").is_err());
        // A length field claiming 2^60 entries is refused without allocating them.
        let mut huge = saved.clone();
        huge[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
        let e = decode::<NonZero>(&huge, "weights").unwrap_err();
        assert!(e.starts_with("weights: corrupt state"), "{e}");
    }
}
