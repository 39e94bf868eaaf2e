//! Codecs by job-file name. A job says `compressor = { name = "none" }`; each variant of
//! [`CodecSpec`] carries that codec's typed parameters. Adding a codec: one file, one variant,
//! one line in [`build_codec`].

use serde::{Deserialize, Serialize};

use super::none::NoneCodec;
use super::Codec;

/// A codec and its parameters, as written in a job file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "lowercase", deny_unknown_fields)]
pub enum CodecSpec {
    /// Uncompressed u32 keys + f32 values.
    #[default]
    None,
}

/// Builds the codec a spec names.
pub fn build_codec(spec: &CodecSpec) -> Box<dyn Codec> {
    match spec {
        CodecSpec::None => Box::new(NoneCodec),
    }
}

/// The names a job may use.
pub const CODEC_NAMES: &[&str] = &["none"];
