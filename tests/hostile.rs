//! Decoders facing hostile messages: headers that claim billions of keys in a few bytes. This
//! test binary refuses any single allocation over 256 MiB (the process aborts, and the test
//! fails), so a decoder that reserves memory from a claimed count cannot pass.

use std::alloc::{GlobalAlloc, Layout, System};

use gradflow::codec::{build_codec, CodecSpec, EncodeContext, CODEC_NAMES};
use gradflow::sparse::SparseGrad;

const LIMIT: usize = 256 << 20;

struct Guarded;

unsafe impl GlobalAlloc for Guarded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > LIMIT {
            return std::ptr::null_mut(); // the caller aborts: the test fails
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > LIMIT {
            return std::ptr::null_mut();
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Guarded = Guarded;

/// A valid message of `name` for a small gradient.
fn valid_message(name: &str) -> Vec<u8> {
    let mut codec = build_codec(&CodecSpec::with_defaults(name).unwrap()).unwrap();
    let keys: Vec<u32> = (0..400).map(|i| i * 37 + 5).collect();
    let values: Vec<f32> = (0..400)
        .map(|i| ((i * 7919) % 200) as f32 * 1e-3 - 0.1)
        .collect();
    let mut out = Vec::new();
    codec
        .encode(&keys, &values, 20_000, EncodeContext::default(), &mut out)
        .unwrap();
    out
}

/// The reproduction: an 11-byte topk message whose header claims 2^32 − 1 keys in
/// dimension 2^32 − 1 made the receiver reserve 16 GiB and abort.
#[test]
fn the_eleven_byte_topk_message_is_an_error() {
    let msg = [
        0x05, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
    ];
    let mut topk = build_codec(&CodecSpec::with_defaults("topk").unwrap()).unwrap();
    assert_eq!(
        valid_message("topk")[..2],
        msg[..2],
        "topk's id and version"
    );
    let e = topk.decode(&msg, &mut SparseGrad::default()).unwrap_err();
    assert!(
        e.to_string().contains("claimed") || e.to_string().contains("truncated"),
        "{e}"
    );
}

/// Every codec, every valid message with its header's count and dimension raised to huge
/// values, whole or cut short: an error, within the allocation limit.
#[test]
fn huge_claimed_counts_are_errors_for_every_codec() {
    for name in CODEC_NAMES {
        let mut codec = build_codec(&CodecSpec::with_defaults(name).unwrap()).unwrap();
        let valid = valid_message(name);
        let mut out = SparseGrad::default();
        codec.decode(&valid, &mut out).unwrap();
        for (dim, count) in [
            (u32::MAX, u32::MAX - 1),
            (u32::MAX, 100_000_000),
            (200_000_000, 100_000_000),
            (20_000, 20_000),
        ] {
            for cut in [valid.len(), 64.min(valid.len()), 11] {
                let mut msg = valid[..cut].to_vec();
                msg[2..6].copy_from_slice(&dim.to_le_bytes());
                msg[6..10].copy_from_slice(&count.to_le_bytes());
                let got = codec.decode(&msg, &mut out);
                assert!(
                    got.is_err(),
                    "{name}: count {count} in dimension {dim}, {cut} bytes: decoded {} keys",
                    out.len()
                );
            }
        }
    }
}
