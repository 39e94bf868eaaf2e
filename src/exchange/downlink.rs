//! The owner's side of the `sharded` downlink: each round an owner sends the *change* of its
//! keys, encoded with the job's downlink codec; every replica, the owner's own included, adds the
//! same decoded change, so all replicas stay bit-identical. What the codec drops or shrinks stays
//! in a residual (a [`Residual`] memory) and is added to the owner's next change, so nothing is
//! lost over rounds: the owner's exact model is always `replica + residual`.

use crate::codec::{Codec, CodecError, EncodeContext};
use crate::memory::residual::Residual;
use crate::memory::Memory;
use crate::sparse::SparseGrad;

/// The stream index of downlink messages in [`EncodeContext::piece`] (uplink pieces use the
/// receiving worker's index).
pub const DOWNLINK_PIECE: u32 = u32::MAX;

/// One owner's downlink encoder (its residual is part of the worker's state, which checkpoints
/// keep).
pub struct Downlink {
    codec: Box<dyn Codec>,
    scratch: SparseGrad,
    /// The decoded change of the last lossy [`Downlink::encode`].
    decoded: SparseGrad,
}

impl Downlink {
    /// A downlink encoding with `codec`.
    pub fn new(codec: Box<dyn Codec>) -> Self {
        Downlink {
            codec,
            scratch: SparseGrad::default(),
            decoded: SparseGrad::default(),
        }
    }

    /// Encodes `change` (this round's optimizer step on the owner's keys; it becomes the change
    /// plus `residual`) into `payload` (`None` when no other replica exists), and returns
    /// what replicas decode. A lossless codec skips the local decode and keeps no residual:
    /// replicas decode `change` itself.
    pub fn encode<'a>(
        &'a mut self,
        residual: &mut Residual,
        change: &'a mut SparseGrad,
        dim: u32,
        ctx: EncodeContext,
        payload: Option<&mut Vec<u8>>,
    ) -> Result<&'a SparseGrad, CodecError> {
        let ctx = EncodeContext {
            piece: DOWNLINK_PIECE,
            ..ctx
        };
        if self.codec.is_lossless() {
            // Encoding checks the values (the `Codec::encode` contract); without a message,
            // the check alone.
            match payload {
                Some(payload) => {
                    (self.codec).encode(&change.keys, &change.values, dim, ctx, payload)?
                }
                None => crate::codec::check_finite(&change.keys, &change.values)?,
            }
            return Ok(change);
        }
        residual.compensate(change, &mut self.scratch);
        let mut local = Vec::new();
        let payload = payload.unwrap_or(&mut local);
        self.codec
            .encode(&change.keys, &change.values, dim, ctx, payload)?;
        self.codec.decode(payload, &mut self.decoded)?;
        residual.update(change, &self.decoded);
        Ok(&self.decoded)
    }

    /// As [`Downlink::encode`] for a change that no other replica is sent (the other workers
    /// share the owner's): returns what the replica adds, and the length the message would
    /// have (its logical bytes), which a lossless codec tells without encoding.
    pub fn encode_unsent<'a>(
        &'a mut self,
        residual: &mut Residual,
        change: &'a mut SparseGrad,
        dim: u32,
        ctx: EncodeContext,
    ) -> Result<(&'a SparseGrad, usize), CodecError> {
        if self.codec.is_lossless() {
            let ctx = EncodeContext {
                piece: DOWNLINK_PIECE,
                ..ctx
            };
            let bytes = (self.codec).encoded_len(&change.keys, &change.values, dim, ctx)?;
            return Ok((change, bytes));
        }
        let mut payload = Vec::new();
        let decoded = self.encode(residual, change, dim, ctx, Some(&mut payload))?;
        Ok((decoded, payload.len()))
    }

    /// The codec (also a compressed pull reply's, `train.state = "sharded"`).
    pub fn codec_mut(&mut self) -> &mut dyn Codec {
        self.codec.as_mut()
    }

    /// Whether the downlink codec is lossless (replicas add the change itself).
    pub fn is_lossless(&self) -> bool {
        self.codec.is_lossless()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{build_codec, CodecSpec};

    /// A lossless change with a non-finite value is an error naming its key, whether it is
    /// encoded for other replicas or only checked (no other replica, or all of them local).
    #[test]
    fn a_non_finite_lossless_change_is_an_error_encoded_or_not() {
        let mut d = Downlink::new(build_codec(&CodecSpec::with_defaults("none").unwrap()).unwrap());
        let mut residual = Residual::new(8);
        let bad = || SparseGrad {
            keys: vec![1, 5],
            values: vec![0.5, f32::NAN],
        };
        let ctx = EncodeContext::default();
        let mut payload = Vec::new();
        let results = [
            d.encode(&mut residual, &mut bad(), 8, ctx, Some(&mut payload))
                .map(|_| ())
                .map_err(|e| e.to_string()),
            d.encode(&mut residual, &mut bad(), 8, ctx, None)
                .map(|_| ())
                .map_err(|e| e.to_string()),
            d.encode_unsent(&mut residual, &mut bad(), 8, ctx)
                .map(|_| ())
                .map_err(|e| e.to_string()),
        ];
        let want = CodecError::NonFinite {
            key: 5,
            value: f32::NAN,
        }
        .to_string();
        for result in results {
            assert_eq!(result, Err(want.clone()));
        }
    }

    #[test]
    fn what_the_downlink_drops_is_sent_later() {
        let spec: CodecSpec = toml::from_str::<toml::Table>("c = { name = \"topk\", ratio = 0.5 }")
            .unwrap()["c"]
            .clone()
            .try_into()
            .unwrap();
        let mut d = Downlink::new(build_codec(&spec).unwrap());
        let mut residual = Residual::new(8);
        let (mut exact, mut replica) = (vec![0f32; 8], vec![0f32; 8]);
        let mut change = SparseGrad::default();
        for round in 0..30u64 {
            change.clear();
            if round < 20 {
                for k in 0..6u32 {
                    let v = ((k as u64 * 7 + round * 3) % 5) as f32 * 0.1 - 0.2;
                    change.keys.push(k);
                    change.values.push(v);
                    exact[k as usize] += v;
                }
            }
            let mut payload = Vec::new();
            let ctx = EncodeContext::default();
            let decoded = d
                .encode(&mut residual, &mut change, 8, ctx, Some(&mut payload))
                .unwrap()
                .clone();
            assert!(decoded.len() <= change.len().div_ceil(2), "top half only");
            for (&k, &v) in decoded.keys.iter().zip(&decoded.values) {
                replica[k as usize] += v;
            }
        }
        for (e, r) in exact.iter().zip(&replica) {
            assert!((e - r).abs() < 1e-5, "exact {exact:?}, replica {replica:?}");
        }
    }
}
