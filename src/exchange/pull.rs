//! Pull requests of the `sharded` exchange (`train.pull = true`): instead of every owner
//! broadcasting the change of every key any worker touched, a worker that knows its next
//! mini-batch asks each owner for exactly the keys of that batch it owns, and the owner answers
//! with their current weights (f32, in request order: the keys are not sent back).
//!
//! The gradient reads only the weights of its batch's keys (regularisation included), so a
//! pulled run trains exactly the model of a broadcast run; what it saves is every key the
//! worker does not need. At epoch ends a worker also asks for the keys of its test rows, and at
//! the end worker 0 asks for every key (the model it writes).
//!
//! A request on the wire: a flag byte (0: a key list follows, 1: every key the owner owns, 2: a
//! key list whose reply must be exact), the key count (u32 LE), then the keys, Golomb-Rice
//! coded.
//!
//! Under `train.state = "sharded"` the reply to another process may be compressed with the
//! job's `train.downlink` codec: the weights, as the values of keys `0..n` (their places in
//! the request), so the codec must keep every one ([`check_reply_codec`]: a quantizer, not a
//! sparsifier). It needs no residual: the owner keeps the exact weights, and each reply reads
//! them afresh, so a reply's rounding error is never carried into the model, only into the
//! one gradient computed from it. Requests for an evaluation (or the last round) are
//! [`Request::Exact`]: test metrics score the model the owners hold.

use super::Owners;
use crate::codec::bits::{BitReader, BitWriter};
use crate::codec::keys::KeyCoding;
use crate::codec::{Codec, EncodeContext};

/// What a worker asks an owner for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// These keys (sorted).
    Keys(Vec<u32>),
    /// Every key the owner owns.
    All,
    /// These keys (sorted), answered exactly whatever `train.downlink`: for an evaluation.
    Exact(Vec<u32>),
}

impl Request {
    /// The request's bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Request::All => {
                out.push(1);
                out.extend_from_slice(&0u32.to_le_bytes());
            }
            Request::Keys(keys) | Request::Exact(keys) => {
                out.push(if matches!(self, Request::Keys(_)) {
                    0
                } else {
                    2
                });
                out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
                let mut w = BitWriter::new(out);
                KeyCoding::Rice.encode(keys, &mut w);
                w.finish();
            }
        }
    }

    /// Reads a request for dimension `dim`; keys must be increasing, below `dim`, and fill the
    /// message exactly. The count is checked against the bytes received before anything is
    /// allocated (a Rice-coded key takes at least one bit).
    pub fn decode(bytes: &[u8], dim: u32) -> Result<Request, String> {
        if bytes.len() < 5 {
            return Err(format!("request of {} bytes", bytes.len()));
        }
        let count = u32::from_le_bytes(bytes[1..5].try_into().unwrap()) as usize;
        let body = &bytes[5..];
        match bytes[0] {
            1 if count == 0 && body.is_empty() => Ok(Request::All),
            flag @ (0 | 2) => {
                if count > body.len().saturating_mul(8) || count > dim as usize {
                    return Err(format!("{count} keys in {} bytes", body.len()));
                }
                let mut keys = Vec::new();
                let mut r = BitReader::new(body);
                KeyCoding::Rice
                    .decode(count, dim, &mut r, &mut keys)
                    .map_err(|e| e.to_string())?;
                r.finish().map_err(|e| e.to_string())?;
                Ok(match flag {
                    0 => Request::Keys(keys),
                    _ => Request::Exact(keys),
                })
            }
            flag => Err(format!("bad request flag {flag} (count {count})")),
        }
    }

    /// The keys this request names at owner `owner` (resolving [`Request::All`]).
    pub fn keys_at(&self, owners: &Owners, owner: u32) -> Vec<u32> {
        match self {
            Request::Keys(keys) | Request::Exact(keys) => keys.clone(),
            Request::All => (0..owners.dim)
                .filter(|&k| owners.owner(k) == owner)
                .collect(),
        }
    }

    /// Whether the reply may be compressed with the job's downlink codec (only
    /// [`Request::Keys`]'s).
    pub fn compressible(&self) -> bool {
        matches!(self, Request::Keys(_))
    }
}

/// Whether the reply to `asked` is encoded with the downlink codec rather than sent as f32:
/// under sharded state, with a lossy downlink, to a worker in another process, for a request
/// that allows it. The owner that answers and the worker that reads decide by this one rule.
pub fn reply_is_compressed(sharded: bool, lossy: bool, remote: bool, asked: &Request) -> bool {
    sharded && lossy && remote && asked.compressible()
}

/// An owner's room to encode compressed replies, kept across rounds: the weights asked for,
/// and their places `0..n` (the keys of the reply's message).
#[derive(Default)]
pub struct ReplyScratch {
    values: Vec<f32>,
    places: Vec<u32>,
}

impl ReplyScratch {
    /// Encodes `values` with `codec` as the values of keys `0..n` into `out`.
    pub fn encode(
        &mut self,
        codec: &mut dyn Codec,
        values: impl Iterator<Item = f32>,
        ctx: EncodeContext,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        self.values.clear();
        self.values.extend(values);
        let n = self.values.len();
        if self.places.len() < n {
            self.places.extend(self.places.len() as u32..n as u32);
        }
        let places = &self.places[..n];
        (codec.encode(places, &self.values, n as u32, ctx, out)).map_err(|e| e.to_string())
    }
}

/// The largest relative error (‖decoded − weights‖ / ‖weights‖) a reply codec may make on the
/// test weights of [`check_reply_codec`]: quantizers make a few percent; sparsifiers, which
/// read every weight they leave out as zero, make most of the weights' norm.
pub const MAX_REPLY_ERROR: f64 = 0.25;

/// Why `codec` cannot compress a pull reply, if it cannot: on 256 weights of mixed signs and
/// magnitudes its relative error must stay within [`MAX_REPLY_ERROR`].
pub fn check_reply_codec(codec: &mut dyn Codec) -> Result<(), String> {
    if codec.is_lossless() {
        return Ok(());
    }
    let n = 256u32;
    let keys: Vec<u32> = (0..n).collect();
    let values: Vec<f32> = (0..n)
        .map(|i| (i as f32 * 0.7).sin() * 10f32.powi(i as i32 % 3 - 2))
        .collect();
    let (mut bytes, mut decoded) = (Vec::new(), crate::sparse::SparseGrad::default());
    let mut weights = Vec::new();
    codec
        .encode(&keys, &values, n, EncodeContext::default(), &mut bytes)
        .map_err(|e| format!("it cannot encode weights: {e}"))?;
    decode_weights(codec, &bytes, n as usize, &mut decoded, &mut weights)
        .map_err(|e| format!("it cannot decode weights: {e}"))?;
    let (mut err, mut norm) = (0f64, 0f64);
    for (&w, &v) in weights.iter().zip(&values) {
        err += (w as f64 - v as f64).powi(2);
        norm += (v as f64).powi(2);
    }
    let relative = (err / norm).sqrt();
    if relative > MAX_REPLY_ERROR {
        return Err(format!(
            "its relative error on weights is {relative:.2}, more than {MAX_REPLY_ERROR} (a \
             pull reply reads every weight it leaves out as zero): use a quantizer, such as \
             logquant, zipml or fastsgd"
        ));
    }
    Ok(())
}

/// Reads a compressed reply of `n` weights (`bytes`, a message of `codec` whose keys are the
/// weights' places `0..n`; a place it leaves out is a zero) into `values`; `scratch` is room
/// to decode.
pub fn decode_weights(
    codec: &mut dyn Codec,
    bytes: &[u8],
    n: usize,
    scratch: &mut crate::sparse::SparseGrad,
    values: &mut Vec<f32>,
) -> Result<(), String> {
    let dim = codec.decode(bytes, scratch).map_err(|e| e.to_string())?;
    if dim as usize != n {
        return Err(format!("a reply of dimension {dim} for {n} weights"));
    }
    values.clear();
    values.resize(n, 0.0);
    let mut previous = None;
    for (&k, &w) in scratch.keys.iter().zip(&scratch.values) {
        if k as usize >= n || previous.is_some_and(|p| p >= k) || !w.is_finite() {
            return Err(format!(
                "weight {w} at place {k} (after {previous:?}, of {n})"
            ));
        }
        previous = Some(k);
        values[k as usize] = w;
    }
    Ok(())
}

/// The sorted distinct keys the features of `rows` of a dataset reach, split by owner (own keys
/// dropped: a worker's replica of its own keys is always current): feature `f` reaches the
/// `width` keys from `f·width` (a model's weights per feature), and every row the `dense` keys
/// (a network's dense layers; none if there are no rows). `features` is reusable room: the
/// work and memory follow the rows, not the model's size.
pub fn keys_by_owner<'a>(
    rows: impl Iterator<Item = &'a [u32]>,
    width: u32,
    dense: std::ops::Range<u32>,
    owners: &Owners,
    me: u32,
    features: &mut Vec<u32>,
    out: &mut Vec<Vec<u32>>,
) {
    features.clear();
    let mut any = false;
    for row in rows {
        any = true;
        features.extend_from_slice(row);
    }
    // Rows' features are sorted each; one row (a view's features) is sorted as a whole.
    if !features.windows(2).all(|w| w[0] < w[1]) {
        radsort::sort(features);
        features.dedup();
    }
    out.resize_with(owners.parts as usize, Vec::new);
    out.iter_mut().for_each(Vec::clear);
    let keys = features.iter().flat_map(|&f| f * width..(f + 1) * width);
    let dense = if any { dense } else { 0..0 };
    for k in keys.chain(dense) {
        let o = owners.owner(k);
        if o != me {
            out[o as usize].push(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::Ownership;
    use crate::sparse::SparseGrad;

    #[test]
    fn requests_round_trip_and_bad_ones_are_errors() {
        for req in [
            Request::All,
            Request::Keys(vec![]),
            Request::Keys(vec![0, 5, 6, 999]),
            Request::Exact(vec![3, 4]),
        ] {
            let mut b = Vec::new();
            req.encode(&mut b);
            assert_eq!(Request::decode(&b, 1000).unwrap(), req);
            assert!(Request::decode(&b[..b.len() - 1], 1000).is_err());
            let mut longer = b.clone();
            longer.push(0);
            assert!(Request::decode(&longer, 1000).is_err(), "{req:?} + 1 byte");
        }
        // A huge claimed count in a tiny message is refused before any allocation.
        let huge = [0u8, 0xff, 0xff, 0xff, 0x7f, 0, 0];
        assert!(Request::decode(&huge, u32::MAX)
            .unwrap_err()
            .contains("keys in 2 bytes"));
        let mut b = Vec::new();
        Request::Keys(vec![3, 900]).encode(&mut b);
        assert!(
            Request::decode(&b, 500).is_err(),
            "key beyond the dimension"
        );
        assert!(Request::decode(&[7, 0, 0, 0, 0], 10).is_err(), "bad flag");
    }

    /// Quantizers may compress a reply, sparsifiers may not; a place a reply leaves out is a
    /// zero, and a reply of another dimension than the request's is an error.
    #[test]
    fn a_reply_codec_must_keep_the_weights_and_its_message_the_places() {
        use crate::codec::{build_codec, CodecSpec};
        let build = |name: &str| build_codec(&CodecSpec::with_defaults(name).unwrap()).unwrap();
        for name in ["none", "logquant", "zipml", "fastsgd"] {
            assert_eq!(check_reply_codec(build(name).as_mut()), Ok(()), "{name}");
        }
        for name in ["topk", "randomk", "signsgd", "terngrad"] {
            let e = check_reply_codec(build(name).as_mut()).unwrap_err();
            assert!(e.contains("relative error"), "{name}: {e}");
        }
        let mut none = build("none");
        let (mut scratch, mut values) = (SparseGrad::default(), Vec::new());
        let mut message = |keys: &[u32], dim: u32| {
            let mut b = Vec::new();
            let ones = vec![1.0; keys.len()];
            none.encode(keys, &ones, dim, EncodeContext::default(), &mut b)
                .unwrap();
            b
        };
        let (good, short, other) = (message(&[0, 2], 3), message(&[0], 1), message(&[0], 9));
        decode_weights(none.as_mut(), &good, 3, &mut scratch, &mut values).unwrap();
        assert_eq!(values, [1.0, 0.0, 1.0], "a place left out is a zero");
        for bad in [&short, &other] {
            let e = decode_weights(none.as_mut(), bad, 3, &mut scratch, &mut values);
            assert!(e.unwrap_err().contains("dimension"));
        }
    }

    #[test]
    fn keys_are_split_by_owner_without_own_keys() {
        let owners = Owners::new(Ownership::Hashed, 100, 3, 1);
        let rows: Vec<Vec<u32>> = vec![vec![1, 5, 9], vec![5, 50, 99], vec![0, 1]];
        let (mut seen, mut out) = (Vec::new(), Vec::new());
        keys_by_owner(
            rows.iter().map(Vec::as_slice),
            1,
            0..0,
            &owners,
            1,
            &mut seen,
            &mut out,
        );
        let mut all: Vec<u32> = out.concat();
        all.sort_unstable();
        let expected: Vec<u32> = [0, 1, 5, 9, 50, 99]
            .into_iter()
            .filter(|&k| owners.owner(k) != 1)
            .collect();
        assert_eq!(all, expected);
        // Two weights per feature: feature f reaches keys 2f and 2f + 1; and dense keys 200-209.
        let wide = Owners::new(Ownership::Hashed, 210, 3, 1);
        let (mut seen2, mut out2) = (Vec::new(), Vec::new());
        let rows = rows.iter().map(Vec::as_slice);
        keys_by_owner(rows, 2, 200..210, &wide, 1, &mut seen2, &mut out2);
        let mut all: Vec<u32> = out2.concat();
        all.sort_unstable();
        let expected: Vec<u32> = [0, 1, 5, 9, 50, 99]
            .into_iter()
            .flat_map(|f| [2 * f, 2 * f + 1])
            .chain(200..210)
            .filter(|&k| wide.owner(k) != 1)
            .collect();
        assert_eq!(all, expected);
        keys_by_owner(
            std::iter::empty(),
            2,
            200..210,
            &wide,
            1,
            &mut seen2,
            &mut out2,
        );
        assert!(out2.iter().all(Vec::is_empty), "no rows, no keys");
        assert!(out[1].is_empty());
        for (o, keys) in out.iter().enumerate() {
            assert!(keys.windows(2).all(|w| w[0] < w[1]));
            assert!(keys.iter().all(|&k| owners.owner(k) == o as u32));
        }
    }
}
