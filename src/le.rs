//! Little-endian words in bulk: the codecs' messages, gradient files, pull answers and the data
//! cache all store arrays of fixed-width numbers this way. Each helper resizes once and then
//! copies without capacity checks (on little-endian machines the loop compiles to a copy).

/// Appends `items` as `N`-byte little-endian words (`bytes` is e.g. `u32::to_le_bytes`).
pub fn put_le<T: Copy, const N: usize>(
    out: &mut Vec<u8>,
    items: &[T],
    bytes: impl Fn(T) -> [u8; N],
) {
    let start = out.len();
    out.resize(start + N * items.len(), 0);
    for (word, &x) in out[start..].chunks_exact_mut(N).zip(items) {
        word.copy_from_slice(&bytes(x));
    }
}

/// Appends the `N`-byte little-endian words of `bytes` (a multiple of `N` long) to `out`
/// (`read` is e.g. `u32::from_le_bytes`).
pub fn get_le<T: Copy + Default, const N: usize>(
    bytes: &[u8],
    out: &mut Vec<T>,
    read: impl Fn([u8; N]) -> T,
) {
    let start = out.len();
    out.resize(start + bytes.len() / N, T::default());
    for (x, word) in out[start..].iter_mut().zip(bytes.chunks_exact(N)) {
        *x = read(word.try_into().expect("N bytes"));
    }
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
}
