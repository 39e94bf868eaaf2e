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
//! A request on the wire: a flag byte (0: a key list follows, 1: every key the owner owns), the
//! key count (u32 LE), then the keys, Golomb-Rice coded.

use super::Owners;
use crate::codec::bits::{BitReader, BitWriter};
use crate::codec::keys::KeyCoding;

/// What a worker asks an owner for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// These keys (sorted).
    Keys(Vec<u32>),
    /// Every key the owner owns.
    All,
}

impl Request {
    /// The request's bytes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Request::All => {
                out.push(1);
                out.extend_from_slice(&0u32.to_le_bytes());
            }
            Request::Keys(keys) => {
                out.push(0);
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
            0 => {
                if count > body.len().saturating_mul(8) || count > dim as usize {
                    return Err(format!("{count} keys in {} bytes", body.len()));
                }
                let mut keys = Vec::new();
                let mut r = BitReader::new(body);
                KeyCoding::Rice
                    .decode(count, dim, &mut r, &mut keys)
                    .map_err(|e| e.to_string())?;
                r.finish().map_err(|e| e.to_string())?;
                Ok(Request::Keys(keys))
            }
            flag => Err(format!("bad request flag {flag} (count {count})")),
        }
    }

    /// The keys this request names at owner `owner` (resolving [`Request::All`]).
    pub fn keys_at(&self, owners: &Owners, owner: u32) -> Vec<u32> {
        match self {
            Request::Keys(keys) => keys.clone(),
            Request::All => (0..owners.dim)
                .filter(|&k| owners.owner(k) == owner)
                .collect(),
        }
    }
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

    #[test]
    fn requests_round_trip_and_bad_ones_are_errors() {
        for req in [
            Request::All,
            Request::Keys(vec![]),
            Request::Keys(vec![0, 5, 6, 999]),
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
