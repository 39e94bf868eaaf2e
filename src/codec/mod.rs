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
pub mod countsketch;
pub use crate::cpu;
pub mod entropy;
pub mod keys;
pub mod measure;
pub mod minmax;
pub mod quantile;
pub mod reduce;
pub mod registry;

pub mod fastsgd;
pub mod gspar;
pub mod logquant;
pub mod none;
pub mod none64;
pub mod qsgd;
pub mod randomk;
pub mod signsgd;
pub mod skcompress;
pub mod sketchml;
pub mod terngrad;
pub mod threshold;
pub mod topk;
pub mod zipml;

pub use registry::{build_codec, register, CodecSpec, CODECS, CODEC_NAMES};

use rand::rngs::Xoshiro256PlusPlus;
use rand::SeedableRng;
use serde::de::DeserializeOwned;

use crate::data::partition::mix64;
use crate::sparse::SparseGrad;
use bits::{BitReader, BitWriter};

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
    /// Which piece of the worker's vector this message carries: the receiving worker under
    /// `sharded` (each piece draws its own random stream), 0 for a whole vector.
    pub piece: u32,
}

impl EncodeContext {
    /// The generator of a randomised codec for this message: seeded by (seed, round, worker,
    /// piece), so that no two messages of a run share a stream.
    pub fn rng(&self) -> Xoshiro256PlusPlus {
        let worker = mix64(mix64(self.seed, self.round), self.worker as u64);
        Xoshiro256PlusPlus::seed_from_u64(mix64(worker, self.piece as u64))
    }
}

/// Parameters of a codec that has none (`compressor = { name = "none" }`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// Parameters of the sparse baselines that only choose their key coder.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KeysOnly {
    /// Key coder.
    pub keys: keys::KeyCoding,
}

/// How the messages of several workers combine at the receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// `Σ_w (rows_w / Σ rows) · decode(m_w)`.
    Sum,
    /// signSGD with majority vote (Bernstein et al., ICLR'19): each key takes the sign most
    /// workers sent, with the rows-weighted mean of the magnitudes they sent; a tie drops the key.
    MajorityVote,
}

/// The error feedback a codec's paper pairs it with (the default of `train.memory`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorFeedback {
    /// None: the codec is unbiased, or its paper found feedback to hurt (GSpar §4), or it does
    /// not use it (SketchML, FastSGD).
    None,
    /// A residual memory: the biased sparsifiers (top-k, threshold).
    Residual,
    /// A residual memory with SGD and momentum, none with Adam. EF-signSGD (Karimireddy et al.,
    /// ICML'19) is defined for SGD; under Adam every remembered key receives ±scale each round
    /// and Adam normalises that into full-size steps: on the quickstart (Adam, lr 0.05) the test
    /// loss swings between 0.6 and 9.9 over ten epochs, against 0.6006 without feedback.
    ResidualUnlessAdam,
    /// A lazy residual ([`crate::memory::lazy_residual`]) with plain SGD and momentum, none
    /// with Adam: SketchML's MinMaxSketch shrinks the top buckets of each group, which hold the
    /// frequent keys, by different factors for the two signs; that moves SGD's fixed point
    /// (`docs/codecs.md`, the SketchML notes, measure it), and the residual returns what was shrunk. Under
    /// Adam it slows the first epoch (+3% test loss on the convergence set): a job that sees the
    /// drift (time-split data) sets `memory = "lazy_residual"` with `decode = "edge"`.
    LazyResidualUnlessAdam,
}

/// An added or a program's own codec, as a plan holds it ([`CodecSpec::Custom`]): a name, its
/// parameters and a factory that builds one per worker and direction.
pub type CustomCodec = crate::named::Named<registry::BuildCodec>;

/// A codec built from its job-file parameters (see [`registry`]).
pub trait FromParams: Codec + Sized + 'static {
    /// The parameters, as a TOML table (`compressor = { name = "...", ... }`).
    type Params: Clone + std::fmt::Debug + PartialEq + Default + serde::Serialize + DeserializeOwned;
    /// Builds the codec; fails with a message naming the parameter when a value is out of range.
    fn from_params(p: &Self::Params) -> Result<Self, String>;
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
    /// The length of the message [`Codec::encode`] would append for these pairs, without
    /// keeping it: what a message costs between machines where it need not be sent (to
    /// workers that share the sender's replica). The default encodes into a scratch buffer.
    fn encoded_len(
        &mut self,
        keys: &[u32],
        values: &[f32],
        dim: u32,
        ctx: EncodeContext,
    ) -> Result<usize, CodecError> {
        let mut out = Vec::new();
        self.encode(keys, values, dim, ctx, &mut out)?;
        Ok(out.len())
    }
    /// The key coder the codec applies to the transmitted key set, used to split a message's
    /// size into key and value bits; `None` where keys are not coded as one set (grouped
    /// codecs), and the split is not reported.
    fn key_coding(&self) -> Option<keys::KeyCoding> {
        Some(keys::KeyCoding::Raw)
    }
    /// How a receiver combines the messages of several workers: a weighted sum (the default),
    /// or the majority of their signs (signSGD with majority vote).
    fn combine(&self) -> Combine {
        Combine::Sum
    }
    /// Whether `decode(encode(x)) == x` bit for bit (`none`, `none64`): the `sharded` downlink
    /// then skips the local round trip and keeps no residual.
    fn is_lossless(&self) -> bool {
        false
    }
    /// What the codec's paper does about error feedback; a job without `train.memory` gets it.
    fn error_feedback(&self) -> ErrorFeedback {
        ErrorFeedback::None
    }
}

/// Fails with [`CodecError::NonFinite`] naming the first NaN or infinite value.
pub fn check_finite(keys: &[u32], values: &[f32]) -> Result<(), CodecError> {
    // A scan without early exit (it vectorizes); the position only on failure.
    if values.iter().fold(true, |ok, v| ok & v.is_finite()) {
        return Ok(());
    }
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

/// The dimension a message's header declares (read before the body, so that a receiver can
/// refuse a message of another dimension than its job's before decoding it).
pub fn declared_dim(bytes: &[u8]) -> Result<u32, CodecError> {
    match bytes.get(2..6) {
        Some(d) => Ok(u32::from_le_bytes(d.try_into().expect("4 bytes"))),
        None => Err(CodecError::Truncated {
            needed: HEADER_LEN,
            have: bytes.len(),
        }),
    }
}

/// Checks that `keys` are strictly increasing and below `dim`.
pub fn check_keys(keys: &[u32], dim: u32) -> Result<(), CodecError> {
    // A scan without early exit (it vectorizes); the place only on failure.
    if !keys.windows(2).fold(true, |ok, w| ok & (w[0] < w[1])) {
        let w = keys
            .windows(2)
            .find(|w| w[0] >= w[1])
            .expect("a pair out of order");
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

/// Writes a message in the layout shared by the codecs: the common header with `count`
/// transmitted keys, then one bit stream written by `body` (scalars, keys, values).
pub fn write_message(
    out: &mut Vec<u8>,
    codec_id: u8,
    version: u8,
    dim: u32,
    count: usize,
    body: impl FnOnce(&mut BitWriter),
) {
    write_header(out, codec_id, version, dim, count as u32);
    let mut w = BitWriter::new(out);
    body(&mut w);
    w.finish();
}

/// Reads a message written by [`write_message`]: checks the header, lets `body` fill `out`
/// (keys and values) from the bit stream, then checks that the stream is used up exactly, that
/// there is one value per key and that every value is finite. Returns the dimension.
pub fn read_message(
    bytes: &[u8],
    codec_id: u8,
    version: u8,
    out: &mut SparseGrad,
    body: impl FnOnce(Header, &mut BitReader, &mut SparseGrad) -> Result<(), CodecError>,
) -> Result<u32, CodecError> {
    let (h, rest) = read_header(bytes, codec_id, version)?;
    out.clear();
    let mut r = BitReader::new(rest);
    body(h, &mut r, out)?;
    if out.keys.len() != h.count as usize || out.values.len() != out.keys.len() {
        return Err(CodecError::Corrupt(format!(
            "{} keys and {} values for a count of {}",
            out.keys.len(),
            out.values.len(),
            h.count
        )));
    }
    r.finish()?;
    check_finite(&out.keys, &out.values)?;
    Ok(h.dim)
}

/// Checks a scalar read from a message (a scale, a norm): finite and not negative.
pub fn check_scale(name: &str, x: f32) -> Result<f32, CodecError> {
    if x.is_finite() && x >= 0.0 {
        Ok(x)
    } else {
        Err(CodecError::Corrupt(format!(
            "{name} {x} is not a finite non-negative number"
        )))
    }
}

/// The coordinates a sparsifying codec keeps, as positions into a gradient's `keys`/`values`,
/// in buffers the codec reuses from message to message (a fresh multi-megabyte buffer per
/// message costs its page faults every time).
#[derive(Default)]
pub struct Kept {
    /// Sorted positions of the kept coordinates.
    pub positions: Vec<u32>,
    keys: Vec<u32>,
}

impl Kept {
    /// Keeps the positions `i < n` for which `keep(i)` holds, in increasing order. Branch-free:
    /// every position is written and the cursor advances by the predicate, so an unpredictable
    /// decision (a random draw, a sign) costs no mispredicted branch.
    pub fn select_where(&mut self, n: usize, mut keep: impl FnMut(usize) -> bool) -> &mut Self {
        self.positions.clear();
        self.positions.resize(n, 0);
        let mut m = 0;
        for i in 0..n {
            self.positions[m] = i as u32;
            m += keep(i) as usize; // before this line `m <= i`, so the write above is in bounds
        }
        self.positions.truncate(m);
        self
    }

    /// The number of kept coordinates.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }

    /// The kept positions and the kept keys of a gradient with keys `keys` (gathered into a
    /// reused buffer).
    pub fn with_keys(&mut self, keys: &[u32]) -> (&[u32], &[u32]) {
        self.keys.clear();
        self.keys
            .extend(self.positions.iter().map(|&i| keys[i as usize]));
        (&self.positions, &self.keys)
    }

    /// Writes the message of a sparsifying codec: (for `Signs`) the magnitude, the key coder,
    /// the kept keys, the kept values in the form `form`. Shared by `topk`, `randomk`,
    /// `threshold` (exact values) and `signsgd`, `terngrad` (signs); [`read_selection`] reads it.
    pub(crate) fn write(
        &mut self,
        out: &mut Vec<u8>,
        (id, dim, coder): (u8, u32, keys::KeyCoding),
        (keys, values): (&[u32], &[f32]),
        form: KeptValues,
    ) {
        let (positions, kept_keys) = self.with_keys(keys);
        let kept_values = positions.iter().map(|&i| values[i as usize]);
        write_message(out, id, 1, dim, kept_keys.len(), |w| {
            if let KeptValues::Signs(magnitude) = form {
                w.write_f32(magnitude);
            }
            coder.write_id(w);
            coder.encode(kept_keys, w);
            match form {
                KeptValues::Exact(factor) => kept_values.for_each(|v| w.write_f32(v * factor)),
                KeptValues::Signs(_) => bits::write_signs(kept_values, w),
            }
        });
    }
}

/// How a sparsifying codec writes the values it keeps.
#[derive(Clone, Copy, Debug)]
pub(crate) enum KeptValues {
    /// Each value times this factor, as an f32.
    Exact(f32),
    /// One sign bit per value; every value decodes to ± this magnitude (sent once).
    Signs(f32),
}

/// Reads a message written by [`Kept::write`] (`signs` tells which value form it holds).
pub(crate) fn read_selection(
    bytes: &[u8],
    id: u8,
    signs: bool,
    out: &mut SparseGrad,
) -> Result<u32, CodecError> {
    read_message(bytes, id, 1, out, |h, r, out| {
        let magnitude = if signs {
            check_scale("scale", r.read_f32()?)?
        } else {
            0.0
        };
        let coder = keys::KeyCoding::read_id(r)?;
        coder.decode(h.count as usize, h.dim, r, &mut out.keys)?;
        if signs {
            bits::read_signs(h.count as usize, magnitude, r, &mut out.values)?;
        } else {
            for _ in 0..h.count {
                out.values.push(r.read_f32()?);
            }
        }
        Ok(())
    })
}

/// Positions of the `k` values of largest magnitude (ties to the smaller position), in
/// increasing position order. A selection, not a sort: O(n) expected.
pub fn largest(values: &[f32], k: usize) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..values.len() as u32).collect();
    if k < idx.len() {
        let before = |a: &u32, b: &u32| {
            values[*b as usize]
                .abs()
                .total_cmp(&values[*a as usize].abs())
                .then(a.cmp(b))
        };
        idx.select_nth_unstable_by(k, before);
        idx.truncate(k);
    }
    idx.sort_unstable();
    idx
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;

    #[test]
    fn every_piece_of_a_message_draws_its_own_stream() {
        let ctx = EncodeContext {
            seed: 5,
            round: 3,
            worker: 1,
            piece: 0,
        };
        let draws = |c: EncodeContext| -> Vec<u64> {
            let mut rng = c.rng();
            (0..4).map(|_| rng.random()).collect()
        };
        let first = draws(ctx);
        assert_eq!(first, draws(ctx), "deterministic");
        for other in [
            EncodeContext { piece: 1, ..ctx },
            EncodeContext { worker: 0, ..ctx },
            EncodeContext { round: 4, ..ctx },
        ] {
            assert_ne!(ctx.rng().random::<u64>(), other.rng().random::<u64>());
        }
    }
}
