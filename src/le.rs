//! Little-endian words in bulk: the codecs' messages, gradient files, pull answers and the data
//! cache all store arrays of fixed-width numbers this way. Each helper reserves once and writes
//! straight into the spare capacity: no zeros written first, no capacity check per word (on
//! little-endian machines the loop compiles to a copy).

use std::mem::MaybeUninit;

/// Appends `items` as `N`-byte little-endian words (`bytes` is e.g. `u32::to_le_bytes`).
pub fn put_le<T: Copy, const N: usize>(
    out: &mut Vec<u8>,
    items: &[T],
    bytes: impl Fn(T) -> [u8; N],
) {
    let len = N * items.len();
    out.reserve(len);
    let spare = &mut out.spare_capacity_mut()[..len];
    for (word, &x) in spare.chunks_exact_mut(N).zip(items) {
        write_all(word, &bytes(x));
    }
    // SAFETY: the loop initialised all `len` bytes after the old length (`chunks_exact_mut`
    // of `N * items.len()` bytes yields exactly one word per item).
    unsafe { out.set_len(out.len() + len) };
}

/// Appends the `N`-byte little-endian words of `bytes` (a multiple of `N` long) to `out`
/// (`read` is e.g. `u32::from_le_bytes`).
pub fn get_le<T: Copy, const N: usize>(
    bytes: &[u8],
    out: &mut Vec<T>,
    read: impl Fn([u8; N]) -> T,
) {
    let words = bytes.chunks_exact(N);
    let len = words.len();
    out.reserve(len);
    for (x, word) in out.spare_capacity_mut()[..len].iter_mut().zip(words) {
        x.write(read(word.try_into().expect("N bytes")));
    }
    // SAFETY: the loop wrote all `len` items after the old length (one per whole word).
    unsafe { out.set_len(out.len() + len) };
}

/// Copies `src` into the uninitialised `dst` (the same length).
#[inline(always)]
fn write_all(dst: &mut [MaybeUninit<u8>], src: &[u8]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        d.write(s);
    }
}

/// Appends `x` as an unsigned LEB128 varint: 7 bits a byte, low bits first, the high bit set
/// on every byte but the last (1 byte below 128, at most 5 for a `u32`).
pub fn put_uleb128(out: &mut Vec<u8>, mut x: u32) {
    while x >= 0x80 {
        out.push(x as u8 | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

/// Reads an unsigned LEB128 varint of at most 32 bits from the front of `bytes`, advancing it;
/// None when `bytes` ends inside one or it does not fit a `u32`.
pub fn get_uleb128(bytes: &mut &[u8]) -> Option<u32> {
    let mut x: u64 = 0;
    for i in 0..5 {
        let (&b, rest) = bytes.split_first()?;
        *bytes = rest;
        x |= ((b & 0x7f) as u64) << (7 * i);
        if b & 0x80 == 0 {
            return u32::try_from(x).ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_in_little_endian_order() {
        let mut b = vec![9u8];
        put_le(&mut b, &[1u32, 0x0102_0304], u32::to_le_bytes);
        put_le(&mut b, &[u64::MAX - 1], u64::to_le_bytes);
        assert_eq!(&b[..9], &[9, 1, 0, 0, 0, 4, 3, 2, 1]);
        let (mut words, mut longs) = (vec![7u32], Vec::new());
        get_le(&b[1..9], &mut words, u32::from_le_bytes);
        get_le(&b[9..], &mut longs, u64::from_le_bytes);
        assert_eq!(
            (words, longs),
            (vec![7, 1, 0x0102_0304], vec![u64::MAX - 1])
        );
    }

    #[test]
    fn varints_round_trip_and_overlong_or_cut_ones_are_refused() {
        let values = [0u32, 1, 127, 128, 16_383, 16_384, u32::MAX];
        let mut out = Vec::new();
        values.iter().for_each(|&x| put_uleb128(&mut out, x));
        assert_eq!(out.len(), 1 + 1 + 1 + 2 + 2 + 3 + 5);
        let mut rest = &out[..];
        for &x in &values {
            assert_eq!(get_uleb128(&mut rest), Some(x));
        }
        assert!(rest.is_empty());
        // 2^32 does not fit; a sixth byte is never read; a cut varint is no varint.
        assert_eq!(get_uleb128(&mut &[0x80, 0x80, 0x80, 0x80, 0x10][..]), None);
        assert_eq!(get_uleb128(&mut &[0xff; 6][..]), None);
        assert_eq!(get_uleb128(&mut &[0x80][..]), None);
    }
}
