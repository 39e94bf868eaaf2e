//! `none64`: uncompressed with f64 values (the papers' double-precision baseline). Body: keys
//! (32 bits each) then values (64 bits each).

use super::keys::KeyCoding;
use super::{read_message, write_message, Codec, CodecError, EncodeContext, FromParams, NoParams};
use crate::sparse::SparseGrad;

const ID: u8 = 1;
const VERSION: u8 = 1;

/// Uncompressed, f64 values.
#[derive(Clone, Debug, Default)]
pub struct None64;

impl FromParams for None64 {
    type Params = NoParams;
    fn from_params(_: &NoParams) -> Result<Self, String> {
        Ok(None64)
    }
}

impl Codec for None64 {
    fn is_lossless(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "none64"
    }

    fn encode(
        &mut self,
        keys: &[u32],
        values: &[f32],
        dim: u32,
        _ctx: EncodeContext,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        super::check_finite(keys, values)?;
        write_message(out, ID, VERSION, dim, keys.len(), |w| {
            KeyCoding::Raw.encode(keys, w);
            for &v in values {
                let bits = (v as f64).to_bits();
                w.write(bits & 0xFFFF_FFFF, 32);
                w.write(bits >> 32, 32);
            }
        });
        Ok(())
    }

    fn decode(&mut self, bytes: &[u8], out: &mut SparseGrad) -> Result<u32, CodecError> {
        read_message(bytes, ID, VERSION, out, |h, r, out| {
            KeyCoding::Raw.decode(h.count as usize, h.dim, r, &mut out.keys)?;
            for _ in 0..h.count {
                let bits = r.read(32)? | (r.read(32)? << 32);
                out.values.push(f64::from_bits(bits) as f32);
            }
            Ok(())
        })
    }
}
