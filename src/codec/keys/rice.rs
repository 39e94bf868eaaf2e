//! Golomb-Rice coded gaps. The first key is coded as is, later ones as `gap - 1` (gaps of a
//! strictly increasing sequence are at least 1). With Rice parameter `k`, a value `v` is
//! `v >> k` in unary and its low `k` bits. For `n` keys spread uniformly over `D`, gaps are
//! close to geometric and `k = floor(log2(mean gap))` is within a few percent of the entropy
//! bound `log2(C(D, n)) / n` (measured in `gradflow codec keys`). Header: `k` in 5 bits.
//!
//! Written here rather than taken from a crate: it is twenty lines over the shared bit writer,
//! and the succinct-structure crates (e.g. sucds' Elias-Fano) serialise their own containers,
//! which would not share this message's bit stream.

use super::{bit_len, BitReader, BitWriter, CodecError};

/// Rice parameter for `keys`: `floor(log2(mean gap))`.
pub(super) fn parameter(keys: &[u32]) -> u32 {
    match keys.last() {
        None => 0,
        Some(&last) => {
            let mean_gap = (last as u64 + 1) / keys.len() as u64;
            bit_len(mean_gap).saturating_sub(1).min(31)
        }
    }
}

/// Keys whose codes [`encode`] writes in one run of the bit writer.
const RUN: usize = 16;

/// Writes `k`, then every gap. A run of [`RUN`] keys whose codes surely fit a field of the
/// writer each (their span, which bounds every gap in them, is short enough) is written in one
/// [`BitWriter::write_fields`], the writer's state in registers; another run key by key. (One
/// call per key stored and reloaded that state for every key: 13% of a 10k-pair `sketchml`
/// encode.)
pub fn encode(keys: &[u32], w: &mut BitWriter) {
    let k = parameter(keys);
    w.write(k as u64, 5);
    let mut next = 0u32; // the smallest the next key can be: 0, then the previous key + 1
    for run in keys.chunks(RUN) {
        let span = (run[run.len() - 1] - next) as u64;
        if (span >> k) + 1 + k as u64 <= 56 {
            w.write_fields(run.iter().map(|&key| {
                let gap = (key - next) as u64;
                next = key.wrapping_add(1);
                let q = gap >> k;
                let low = gap & ((1u64 << k) - 1);
                (((1u64 << q) - 1) | low << (q + 1), q as u32 + 1 + k)
            }));
        } else {
            for &key in run {
                w.write_rice((key - next) as u64, k);
                next = key.wrapping_add(1);
            }
        }
    }
}

/// Reads `k` and `n` gaps. Gaps are at least 1 by construction, so keys only need checking
/// against the dimension. Codes that fit the reader's buffer are read
/// [`buffered`](BitReader::buffered); a longer one, a key out of range and the last few bytes
/// take the checked path.
pub fn decode(n: usize, dim: u32, r: &mut BitReader, out: &mut Vec<u32>) -> Result<(), CodecError> {
    let k = r.read(5)? as u32;
    let max_q = (dim as u64) >> k;
    let mut next = 0u64;
    let mut left = n;
    r.buffered(|b| {
        let q = (!b.peek()).trailing_zeros();
        if left == 0 || q + 1 + k > b.avail() {
            return false;
        }
        let low = (b.peek() >> (q + 1)) & ((1u64 << k) - 1);
        let key = next + ((q as u64) << k | low);
        if key >= dim as u64 {
            return false;
        }
        b.consume(q + 1 + k);
        out.push(key as u32);
        next = key + 1;
        left -= 1;
        true
    });
    for _ in 0..left {
        let key = next + r.read_rice(k, max_q)?;
        if key >= dim as u64 {
            return Err(CodecError::BadKeys(format!(
                "decoded key {key} (dimension {dim})"
            )));
        }
        out.push(key as u32);
        next = key + 1;
    }
    Ok(())
}
