//! Gradient codecs: a sparse gradient in, a self-describing byte message out, and back.
//!
//! Every message starts with the same 10-byte header (little-endian):
//!
//! | bytes | field |
//! |-------|-------|
//! | 0     | codec id |
//! | 1     | format version |
//! | 2..6  | dimension `D` (u32) |
//! | 6..10 | number of keys `n` (u32) |
//!
//! followed by the codec's body. Decoders validate everything they read and return a
//! [`CodecError`] on a truncated, extended or corrupt message; they never panic.
//!
//! One codec per file behind the [`Codec`] trait; [`registry`] maps job-file names to codecs.

pub mod bits;
pub mod keys;
pub mod none;
pub mod registry;

pub use registry::{build_codec, CodecSpec};

use crate::model::SparseGrad;

/// Size of the common header.
pub const HEADER_LEN: usize = 10;

/// Why a message could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CodecError {
    /// The message ends before the data it declares.
    #[error("message truncated: needs {needed} bytes, has {have}")]
    Truncated { needed: usize, have: usize },
    /// The message has bytes after the data it declares.
    #[error("message has {extra} trailing bytes")]
    Trailing { extra: usize },
    /// The header names another codec.
    #[error("message is for codec id {found}, expected {expected}")]
    WrongCodec { found: u8, expected: u8 },
    /// The header has an unknown format version.
    #[error("unsupported format version {0}")]
    Version(u8),
    /// Keys are not strictly increasing or not below the dimension.
    #[error("corrupt keys: {0}")]
    BadKeys(String),
    /// A gradient value is NaN or infinite.
    #[error("gradient value at key {key} is not finite ({value})")]
    NonFinite { key: u32, value: f32 },
    /// Anything else wrong with the content.
    #[error("corrupt message: {0}")]
    Corrupt(String),
}

/// Context of one encode call: randomised codecs draw from a generator seeded by these, so that
/// every run of the same job produces the same bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EncodeContext {
    /// The job seed.
    pub seed: u64,
    /// The SGD round.
    pub round: u64,
    /// The sending worker.
    pub worker: u32,
}

/// A gradient compressor: encodes a sorted sparse gradient of dimension `dim` into bytes and
/// decodes such bytes back.
pub trait Codec: Send {
    /// The job-file name.
    fn name(&self) -> &'static str;
    /// Appends the message for the pairs `(keys[i], values[i])` to `out`. Keys must be strictly
    /// increasing and `< dim`; a NaN or infinite value is an error naming its key.
    fn encode(
        &mut self,
        keys: &[u32],
        values: &[f32],
        dim: u32,
        ctx: EncodeContext,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError>;
    /// Decodes a whole message into `out` (cleared first); returns the dimension it declares.
    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError>;
}

/// Fails with [`CodecError::NonFinite`] naming the first NaN or infinite value.
pub fn check_finite(keys: &[u32], values: &[f32]) -> Result<(), CodecError> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(i) => Err(CodecError::NonFinite {
            key: keys[i],
            value: values[i],
        }),
    }
}

/// Appends the common header.
pub fn write_header(out: &mut Vec<u8>, codec_id: u8, version: u8, dim: u32, count: u32) {
    out.push(codec_id);
    out.push(version);
    out.extend_from_slice(&dim.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
}

/// The parsed common header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Codec id.
    pub codec_id: u8,
    /// Format version.
    pub version: u8,
    /// Dimension.
    pub dim: u32,
    /// Number of keys.
    pub count: u32,
}

/// Reads and checks the common header; returns it and the body.
pub fn read_header(bytes: &[u8], codec_id: u8, version: u8) -> Result<(Header, &[u8]), CodecError> {
    if bytes.len() < HEADER_LEN {
        return Err(CodecError::Truncated {
            needed: HEADER_LEN,
            have: bytes.len(),
        });
    }
    let h = Header {
        codec_id: bytes[0],
        version: bytes[1],
        dim: u32::from_le_bytes(bytes[2..6].try_into().unwrap()),
        count: u32::from_le_bytes(bytes[6..10].try_into().unwrap()),
    };
    if h.codec_id != codec_id {
        return Err(CodecError::WrongCodec {
            found: h.codec_id,
            expected: codec_id,
        });
    }
    if h.version != version {
        return Err(CodecError::Version(h.version));
    }
    if h.count as u64 > h.dim as u64 {
        return Err(CodecError::BadKeys(format!(
            "{} keys in dimension {}",
            h.count, h.dim
        )));
    }
    Ok((h, &bytes[HEADER_LEN..]))
}

/// Checks that `keys` are strictly increasing and below `dim`.
pub fn check_keys(keys: &[u32], dim: u32) -> Result<(), CodecError> {
    if let Some(w) = keys.windows(2).find(|w| w[0] >= w[1]) {
        return Err(CodecError::BadKeys(format!(
            "key {} follows {}",
            w[1], w[0]
        )));
    }
    match keys.last() {
        Some(&k) if k >= dim => Err(CodecError::BadKeys(format!(
            "key {k} beyond dimension {dim}"
        ))),
        _ => Ok(()),
    }
}
