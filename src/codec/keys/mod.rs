//! Key coders: a strictly increasing key sequence in, bits out. Deltas are taken against the
//! previous key (the first against 0). Every decoder checks that keys stay strictly increasing
//! and below the dimension, and fails on running out of bits.

pub mod adaptive;
pub mod delta_binary;
pub mod raw;
pub mod rice;

use serde::{Deserialize, Serialize};

use super::bits::{BitReader, BitWriter};
use super::CodecError;

/// Which key coder a codec uses (job files: `keys = "rice"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyCoding {
    /// 32 bits per key.
    Raw,
    /// SketchML §3.4: each delta in 1-4 bytes behind a 2-bit byte-count flag.
    DeltaBinary,
    /// FastSGD §3.3 (Algorithm 2): bit-level deltas in one of 4 lengths behind a 2-bit flag.
    Adaptive,
    /// Golomb-Rice codes of the gaps: near the entropy bound for uniformly spread keys. The
    /// default for codecs whose paper prescribes no key coder (best measured: 0.8% over the
    /// entropy bound at D = 29M, d = 1M).
    #[default]
    Rice,
}

impl KeyCoding {
    /// Every coder, for comparisons.
    pub const ALL: [KeyCoding; 4] = [
        KeyCoding::Raw,
        KeyCoding::DeltaBinary,
        KeyCoding::Adaptive,
        KeyCoding::Rice,
    ];

    /// Name as in job files.
    pub fn name(self) -> &'static str {
        match self {
            KeyCoding::Raw => "raw",
            KeyCoding::DeltaBinary => "delta_binary",
            KeyCoding::Adaptive => "adaptive",
            KeyCoding::Rice => "rice",
        }
    }

    /// Writes which coder this is (2 bits), so that messages name their own key coding.
    pub fn write_id(self, w: &mut BitWriter) {
        w.write(Self::ALL.iter().position(|&c| c == self).unwrap() as u64, 2);
    }

    /// Reads a coder written by [`KeyCoding::write_id`].
    pub fn read_id(r: &mut BitReader) -> Result<KeyCoding, CodecError> {
        Ok(Self::ALL[r.read(2)? as usize])
    }

    /// Encodes `keys` (strictly increasing).
    pub fn encode(self, keys: &[u32], w: &mut BitWriter) {
        match self {
            KeyCoding::Raw => raw::encode(keys, w),
            KeyCoding::DeltaBinary => delta_binary::encode(keys, w),
            KeyCoding::Adaptive => adaptive::encode(keys, adaptive::DEFAULT_FLAG_BITS, w),
            KeyCoding::Rice => rice::encode(keys, w),
        }
    }

    /// Decodes `n` keys into `out` (cleared first), checking order and `dim`.
    pub fn decode(
        self,
        n: usize,
        dim: u32,
        r: &mut BitReader,
        out: &mut Vec<u32>,
    ) -> Result<(), CodecError> {
        out.clear();
        // Every coder spends at least one bit a key: a count the rest of the message cannot hold
        // is an error before anything is allocated for it.
        if n > r.remaining_bits() {
            return Err(CodecError::Corrupt(format!(
                "{n} keys claimed, {} bits left in the message",
                r.remaining_bits()
            )));
        }
        out.reserve(n);
        match self {
            KeyCoding::Raw => raw::decode(n, dim, r, out),
            KeyCoding::DeltaBinary => delta_binary::decode(n, dim, r, out),
            KeyCoding::Adaptive => adaptive::decode(n, dim, adaptive::DEFAULT_FLAG_BITS, r, out),
            KeyCoding::Rice => rice::decode(n, dim, r, out),
        }
    }
}

/// Accumulates decoded deltas into keys, enforcing strict increase and `< dim`.
pub(crate) struct KeyBuilder {
    next_min: u64,
    dim: u64,
}

impl KeyBuilder {
    pub(crate) fn new(dim: u32) -> Self {
        KeyBuilder {
            next_min: 0,
            dim: dim as u64,
        }
    }

    /// `delta` is the distance from the previous key (from 0 for the first).
    #[inline]
    pub(crate) fn push_delta(
        &mut self,
        prev: Option<u32>,
        delta: u64,
        out: &mut Vec<u32>,
    ) -> Result<(), CodecError> {
        let key = match prev {
            None => delta,
            Some(p) => p as u64 + delta,
        };
        if key < self.next_min || key >= self.dim {
            return Err(CodecError::BadKeys(format!(
                "decoded key {key} (dimension {})",
                self.dim
            )));
        }
        self.next_min = key + 1;
        out.push(key as u32);
        Ok(())
    }
}

/// Number of bits needed to write `x` (0 for 0).
#[inline]
pub(crate) fn bit_len(x: u64) -> u32 {
    64 - x.leading_zeros()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    fn random_keys(n: usize, dim: u32, seed: u64) -> Vec<u32> {
        let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut k: Vec<u32> = (0..n).map(|_| rng.random_range(0..dim)).collect();
        k.sort_unstable();
        k.dedup();
        k
    }

    fn cases() -> Vec<(Vec<u32>, u32)> {
        vec![
            (vec![], 10),
            (vec![0], 1),
            (vec![5], 10),
            (vec![u32::MAX - 1], u32::MAX),
            (vec![0, 1, 2, 3, u32::MAX - 2, u32::MAX - 1], u32::MAX),
            (random_keys(1000, 29_000_000, 1), 29_000_000),
            (random_keys(5000, 6000, 2), 6000),
            ((0..300).map(|i| i * 1_000_003).collect(), u32::MAX),
            // Dense keys around one far outlier: Rice's parameter follows the mean gap, so the
            // outlier's code (a unary run of thousands of bits) is longer than a reader's
            // buffer, in the middle of codes that fit it.
            (
                (0..2000)
                    .chain([1 << 31])
                    .chain((1 << 31) + 1..(1 << 31) + 2000)
                    .collect(),
                u32::MAX,
            ),
        ]
    }

    #[test]
    fn every_coder_decodes_keys_exactly() {
        for coder in KeyCoding::ALL {
            for (keys, dim) in cases() {
                let mut buf = Vec::new();
                let mut w = BitWriter::new(&mut buf);
                coder.encode(&keys, &mut w);
                w.finish();
                let mut r = BitReader::new(&buf);
                let mut out = Vec::new();
                coder.decode(keys.len(), dim, &mut r, &mut out).unwrap();
                r.finish().unwrap();
                assert_eq!(out, keys, "{coder:?}");
            }
        }
    }

    /// Rice's runs of keys written in one go are the bits of one code at a time, in runs where
    /// every code fits a field and in runs around a code that does not.
    #[test]
    fn rice_runs_write_the_codes_one_at_a_time_would() {
        for (keys, _) in cases() {
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            let mut w = BitWriter::new(&mut fast);
            rice::encode(&keys, &mut w);
            w.finish();
            let mut w = BitWriter::new(&mut slow);
            let k = rice::parameter(&keys);
            w.write(k as u64, 5);
            let mut next = 0u32;
            for &key in &keys {
                w.write_rice((key - next) as u64, k);
                next = key.wrapping_add(1);
            }
            w.finish();
            assert_eq!(fast, slow, "{} keys", keys.len());
        }
    }

    #[test]
    fn a_key_beyond_the_dimension_is_named() {
        // Keys up to 1M read against a dimension of 500k: the first key at or beyond it is
        // refused, wherever the reader is (buffered or checked).
        let keys = random_keys(20_000, 1_000_000, 4);
        let first_beyond = *keys.iter().find(|&&k| k >= 500_000).unwrap();
        for coder in KeyCoding::ALL {
            let mut buf = Vec::new();
            let mut w = BitWriter::new(&mut buf);
            coder.encode(&keys, &mut w);
            w.finish();
            let mut out = Vec::new();
            let e = coder
                .decode(keys.len(), 500_000, &mut BitReader::new(&buf), &mut out)
                .unwrap_err();
            assert!(matches!(e, CodecError::BadKeys(_)), "{coder:?}: {e}");
            if coder == KeyCoding::Rice {
                assert!(e.to_string().contains(&first_beyond.to_string()), "{e}");
            }
        }
    }

    #[test]
    fn decoders_survive_random_corruption() {
        let keys = random_keys(2000, 1_000_000, 3);
        let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(9);
        for coder in KeyCoding::ALL {
            let mut buf = Vec::new();
            let mut w = BitWriter::new(&mut buf);
            coder.encode(&keys, &mut w);
            w.finish();
            for _ in 0..300 {
                let mut b = buf.clone();
                let i = rng.random_range(0..b.len());
                b[i] ^= 1 << rng.random_range(0..8);
                let cut = rng.random_range(0..=b.len());
                let mut out = Vec::new();
                if coder
                    .decode(
                        keys.len(),
                        1_000_000,
                        &mut BitReader::new(&b[..cut]),
                        &mut out,
                    )
                    .is_ok()
                {
                    assert!(
                        out.windows(2).all(|w| w[0] < w[1]) && out.iter().all(|&k| k < 1_000_000)
                    );
                }
            }
        }
    }
}
