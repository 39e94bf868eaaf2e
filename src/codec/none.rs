//! `none`: the uncompressed baseline. Body: `n` u32 keys then `n` f32 values, little-endian
//! (8 bytes per pair).

use super::{check_finite, check_keys, read_header, write_header};
use super::{Codec, CodecError, EncodeContext};
use super::{FromParams, NoParams};
use crate::le::{get_le, put_le};
use crate::sparse::SparseGrad;

const ID: u8 = 0;
const VERSION: u8 = 1;

/// The uncompressed codec (f32 values).
#[derive(Clone, Debug, Default)]
pub struct NoneCodec;

impl FromParams for NoneCodec {
    type Params = NoParams;
    fn from_params(_: &NoParams) -> Result<Self, String> {
        Ok(NoneCodec)
    }
}

impl Codec for NoneCodec {
    fn is_lossless(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "none"
    }

    fn encode(
        &mut self,
        keys: &[u32],
        values: &[f32],
        dim: u32,
        _ctx: EncodeContext,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        check_finite(keys, values)?;
        // One allocation for the whole message (the values would otherwise grow it again).
        out.reserve(super::HEADER_LEN + 8 * keys.len());
        write_header(out, ID, VERSION, dim, keys.len() as u32);
        put_le(out, keys, u32::to_le_bytes);
        put_le(out, values, f32::to_le_bytes);
        Ok(())
    }

    /// The header and 8 bytes a pair, checked as [`Codec::encode`] checks.
    fn encoded_len(
        &mut self,
        keys: &[u32],
        values: &[f32],
        _dim: u32,
        _ctx: EncodeContext,
    ) -> Result<usize, CodecError> {
        check_finite(keys, values)?;
        Ok(super::HEADER_LEN + 8 * keys.len())
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        let (h, body) = read_header(bytes, ID, VERSION)?;
        let n = h.count as usize;
        let needed = 8 * n;
        if body.len() < needed {
            return Err(CodecError::Truncated {
                needed: needed + super::HEADER_LEN,
                have: bytes.len(),
            });
        }
        if body.len() > needed {
            return Err(CodecError::Trailing {
                extra: body.len() - needed,
            });
        }
        out.clear();
        get_le(&body[..4 * n], &mut out.keys, u32::from_le_bytes);
        get_le(&body[4 * n..], &mut out.values, f32::from_le_bytes);
        check_keys(&out.keys, h.dim)?;
        check_finite(&out.keys, &out.values)?;
        Ok(h.dim)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grad() -> SparseGrad {
        SparseGrad {
            keys: vec![0, 7, 1000, u32::MAX - 1],
            values: vec![0.5, -1.25, 3e-8, -7.0],
        }
    }

    fn encoded(c: &mut NoneCodec) -> Vec<u8> {
        let (g, mut buf) = (grad(), Vec::new());
        c.encode(
            &g.keys,
            &g.values,
            u32::MAX,
            EncodeContext::default(),
            &mut buf,
        )
        .unwrap();
        buf
    }

    #[test]
    fn round_trips_exactly() {
        let mut c = NoneCodec;
        let buf = encoded(&mut c);
        assert_eq!(buf.len(), super::super::HEADER_LEN + 8 * 4);
        let mut out = SparseGrad::default();
        assert_eq!(c.decode(&buf, &mut out).unwrap(), u32::MAX);
        assert_eq!(out, grad());
        let mut empty = Vec::new();
        c.encode(&[], &[], 5, EncodeContext::default(), &mut empty)
            .unwrap();
        assert_eq!(c.decode(&empty, &mut out).unwrap(), 5);
        assert!(out.is_empty());
    }

    #[test]
    fn corrupt_messages_are_errors() {
        let mut c = NoneCodec;
        let buf = encoded(&mut c);
        let mut out = SparseGrad::default();
        for cut in 0..buf.len() {
            assert!(
                c.decode(&buf[..cut], &mut out).is_err(),
                "truncated at {cut}"
            );
        }
        let mut longer = buf.clone();
        longer.push(0);
        assert!(matches!(
            c.decode(&longer, &mut out),
            Err(CodecError::Trailing { .. })
        ));
        let mut swapped = buf.clone();
        swapped[10..14].copy_from_slice(&8u32.to_le_bytes()); // first key 8 > second key 7
        assert!(matches!(
            c.decode(&swapped, &mut out),
            Err(CodecError::BadKeys(_))
        ));
        let mut wrong = buf.clone();
        wrong[0] = 9;
        assert!(matches!(
            c.decode(&wrong, &mut out),
            Err(CodecError::WrongCodec { .. })
        ));
        // Every single bit flip either decodes to something valid or is an error: never a panic.
        for bit in 0..buf.len() * 8 {
            let mut b = buf.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            let _ = c.decode(&b, &mut out);
        }
    }

    #[test]
    fn non_finite_values_name_the_key() {
        let g = SparseGrad {
            keys: vec![3, 9],
            values: vec![1.0, f32::NAN],
        };
        let err = NoneCodec
            .encode(
                &g.keys,
                &g.values,
                10,
                EncodeContext::default(),
                &mut Vec::new(),
            )
            .unwrap_err();
        assert!(matches!(err, CodecError::NonFinite { key: 9, .. }), "{err}");
    }
}
