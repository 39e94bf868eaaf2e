//! Codecs by job-file name. A job says `compressor = { name = "topk", ratio = 0.01 }`; the name
//! picks the codec and the other fields are its typed parameters ([`FromParams::Params`], with
//! defaults, unknown fields rejected). Adding a codec: one file and one line in the list below.

use serde::{Deserialize, Serialize};

use super::{Codec, FromParams};

macro_rules! registry {
    ($($variant:ident $name:literal => $ty:ty,)*) => {
        /// A codec and its parameters, as written in a job file.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "name")]
        pub enum CodecSpec {
            $(
                #[doc = concat!("`", $name, "`: see [`", stringify!($ty), "`].")]
                #[serde(rename = $name)]
                $variant(<$ty as FromParams>::Params),
            )*
            /// A program's own codec ([`crate::dataflow::Training::set_codec`]); not in job files.
            #[serde(skip)]
            Custom(super::CustomCodec),
        }

        /// Builds the codec a spec names; an out-of-range parameter is an error naming it.
        pub fn build_codec(spec: &CodecSpec) -> Result<Box<dyn Codec>, String> {
            match spec {
                $( CodecSpec::$variant(p) => Ok(Box::new(<$ty>::from_params(p)?)), )*
                CodecSpec::Custom(c) => Ok((c.make)()),
            }
        }

        /// Every codec name, in registry order.
        pub const CODEC_NAMES: &[&str] = &[$($name),*];

        impl CodecSpec {
            /// The job-file name of the codec (a program's own codec: the name it was given).
            pub fn name(&self) -> &str {
                match self {
                    $( CodecSpec::$variant(_) => $name, )*
                    CodecSpec::Custom(c) => &c.name,
                }
            }

            /// The spec of `name` with default parameters.
            pub fn with_defaults(name: &str) -> Option<CodecSpec> {
                match name {
                    $( $name => Some(CodecSpec::$variant(Default::default())), )*
                    _ => None,
                }
            }
        }
    };
}

registry! {
    None "none" => super::none::NoneCodec,
    None64 "none64" => super::none64::None64,
    Zipml "zipml" => super::zipml::Zipml,
    Fastsgd "fastsgd" => super::fastsgd::FastSgd,
    Gspar "gspar" => super::gspar::Gspar,
    Topk "topk" => super::topk::TopK,
    Randomk "randomk" => super::randomk::RandomK,
    Threshold "threshold" => super::threshold::Threshold,
    Qsgd "qsgd" => super::qsgd::Qsgd,
    Terngrad "terngrad" => super::terngrad::TernGrad,
    Signsgd "signsgd" => super::signsgd::SignSgd,
    Logquant "logquant" => super::logquant::LogQuant,
    Sketchml "sketchml" => super::sketchml::SketchMl,
    Skcompress "skcompress" => super::skcompress::SkCompress,
}

impl Default for CodecSpec {
    fn default() -> Self {
        CodecSpec::None(Default::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_defaults_and_reject_unknown_fields() {
        #[derive(Deserialize)]
        struct J {
            compressor: CodecSpec,
        }
        let j: J = toml::from_str("compressor = { name = \"topk\", ratio = 0.25 }").unwrap();
        match &j.compressor {
            CodecSpec::Topk(p) => assert_eq!(p.ratio, 0.25),
            other => panic!("{other:?}"),
        }
        assert!(toml::from_str::<J>("compressor = { name = \"topk\", ratoi = 0.25 }").is_err());
        assert!(toml::from_str::<J>("compressor = { name = \"nope\" }").is_err());
        let j: J = toml::from_str("compressor = { name = \"none\" }").unwrap();
        assert_eq!(j.compressor, CodecSpec::default());
        for name in CODEC_NAMES {
            let spec = CodecSpec::with_defaults(name).unwrap();
            assert_eq!(build_codec(&spec).unwrap().name(), *name);
            assert_eq!(spec.name(), *name);
        }
    }

    #[test]
    fn out_of_range_parameters_are_errors_naming_the_field() {
        #[derive(Deserialize)]
        struct J {
            compressor: CodecSpec,
        }
        for (table, field) in [
            ("{ name = \"qsgd\", bucket = 0 }", "qsgd.bucket"),
            ("{ name = \"qsgd\", levels = 0 }", "qsgd.levels"),
            ("{ name = \"sketchml\", bins = 3 }", "sketchml.bins"),
            ("{ name = \"fastsgd\", tau = 0 }", "fastsgd.tau"),
        ] {
            let j: J = toml::from_str(&format!("compressor = {table}")).unwrap();
            let e = build_codec(&j.compressor).err().expect(table);
            assert!(e.contains(field), "{table}: {e}");
        }
        let e = toml::from_str::<J>("compressor = { name = \"sketchml\", decode = \"median\" }")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("mean") && e.contains("midpoint"), "{e}");
    }
}
