//! Codecs by job-file name. A job says `compressor = { name = "topk", ratio = 0.01 }`; the name
//! picks the codec and the other fields are its typed parameters ([`FromParams::Params`], with
//! defaults, unknown fields rejected). Adding a codec: one file and one line in the list below,
//! or, from a program, one call to [`register`] before the job is read.

use std::sync::Arc;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Codec, CustomCodec, FromParams};
use crate::named::Registry;

/// Builds an added codec from its job-file parameters (the table without `name`).
pub type BuildCodec = dyn Fn(&toml::Table) -> Result<Box<dyn Codec>, String> + Send + Sync;

/// Every codec by name: the built-in ones below and those added by [`register`].
pub static CODECS: Registry<BuildCodec> = Registry::new("codec", CODEC_NAMES);

/// Adds the codec `C` under `name` (its [`Codec::name`]): job files, `--codec` flags, `bench`
/// suites and `codec compare` then accept `{ name = "...", ... }` with `C`'s typed parameters.
/// Call it at the top of `main`, before [`crate::cli::main_with`] reads the job.
///
/// # Panics
/// If `name` is taken (built in or added before).
pub fn register<C: FromParams>(name: &str) {
    CODECS.add(
        name,
        Arc::new(|table: &toml::Table| {
            let params: C::Params = toml::Value::Table(table.clone())
                .try_into()
                .map_err(|e| e.to_string().trim_end().to_string())?;
            Ok(Box::new(C::from_params(&params)?) as Box<dyn Codec>)
        }),
    );
}

/// The spec of the added codec `name` with `params`, checked by building the codec once.
fn added_spec(name: &str, params: toml::Table) -> Result<CodecSpec, String> {
    let (name, make) = CODECS.added(name).ok_or_else(|| CODECS.unknown(name))?;
    make(&params)?;
    let mut codec = CustomCodec::new(name, make);
    codec.params = params;
    Ok(CodecSpec::Custom(codec))
}

macro_rules! registry {
    ($($variant:ident $name:literal => $ty:ty,)*) => {
        /// A codec and its parameters, as written in a job file.
        #[derive(Clone, Debug, PartialEq)]
        pub enum CodecSpec {
            $(
                #[doc = concat!("`", $name, "`: see [`", stringify!($ty), "`].")]
                $variant(<$ty as FromParams>::Params),
            )*
            /// An added codec ([`register`]) with its parameters, or a program's own
            /// ([`crate::dataflow::Training::set_codec`]).
            Custom(CustomCodec),
        }

        /// The built-in codecs' tables (`name` and parameters), as serde reads and writes them.
        #[derive(Serialize, Deserialize)]
        #[serde(tag = "name")]
        enum Builtin {
            $(
                #[serde(rename = $name)]
                $variant(<$ty as FromParams>::Params),
            )*
        }

        impl Serialize for CodecSpec {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    $( CodecSpec::$variant(p) => Builtin::$variant(p.clone()).serialize(s), )*
                    CodecSpec::Custom(c) => {
                        let mut table = c.params.clone();
                        table.insert("name".into(), c.name.clone().into());
                        table.serialize(s)
                    }
                }
            }
        }

        impl<'de> Deserialize<'de> for CodecSpec {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let mut table = toml::Table::deserialize(d)?;
                let Some(toml::Value::String(name)) = table.remove("name") else {
                    return Err(D::Error::missing_field("name"));
                };
                if !CODEC_NAMES.contains(&name.as_str()) {
                    return added_spec(&name, table).map_err(D::Error::custom);
                }
                table.insert("name".into(), name.into());
                match Builtin::deserialize(toml::Value::Table(table)) {
                    $( Ok(Builtin::$variant(p)) => Ok(CodecSpec::$variant(p)), )*
                    Err(e) => Err(D::Error::custom(e.to_string().trim_end())),
                }
            }
        }

        /// Builds the codec a spec names; an out-of-range parameter is an error naming it.
        pub fn build_codec(spec: &CodecSpec) -> Result<Box<dyn Codec>, String> {
            match spec {
                $( CodecSpec::$variant(p) => Ok(Box::new(<$ty>::from_params(p)?)), )*
                CodecSpec::Custom(c) => (c.make)(&c.params),
            }
        }

        /// Every built-in codec name, in registry order ([`CODECS`] adds the added ones).
        pub const CODEC_NAMES: &[&str] = &[$($name),*];

        impl CodecSpec {
            /// The job-file name of the codec (a program's own codec: the name it was given).
            pub fn name(&self) -> &str {
                match self {
                    $( CodecSpec::$variant(_) => $name, )*
                    CodecSpec::Custom(c) => &c.name,
                }
            }

            /// The spec of `name` (built in or added) with default parameters.
            pub fn with_defaults(name: &str) -> Option<CodecSpec> {
                match name {
                    $( $name => Some(CodecSpec::$variant(Default::default())), )*
                    _ => added_spec(name, toml::Table::new()).ok(),
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

    /// A registered codec is named like a built-in one: its typed parameters are read, checked
    /// and written back, and it builds.
    #[test]
    fn a_registered_codec_reads_checks_and_writes_its_parameters() {
        register::<super::super::topk::TopK>("test-topk");
        #[derive(Deserialize, Serialize)]
        struct J {
            compressor: CodecSpec,
        }
        let text = "compressor = { name = \"test-topk\", ratio = 0.5 }";
        let j: J = toml::from_str(text).unwrap();
        assert_eq!(j.compressor.name(), "test-topk");
        let written = toml::to_string(&j).unwrap();
        let again: J = toml::from_str(&written).unwrap();
        assert_eq!(again.compressor, j.compressor, "{written}");
        assert!(written.contains("ratio = 0.5"), "{written}");
        let mut codec = build_codec(&j.compressor).unwrap();
        let (mut bytes, mut back) = (Vec::new(), crate::sparse::SparseGrad::default());
        let ctx = crate::codec::EncodeContext::default();
        codec
            .encode(&[1, 2, 3, 4], &[1.0, -4.0, 2.0, 3.0], 8, ctx, &mut bytes)
            .unwrap();
        codec.decode(&bytes, &mut back).unwrap();
        assert_eq!(back.keys, [2, 4], "ratio 0.5 keeps the larger half");
        for (table, why) in [
            (
                "{ name = \"test-topk\", ratoi = 0.5 }",
                "unknown field `ratoi`",
            ),
            ("{ name = \"test-topk\", ratio = 2.0 }", "topk.ratio"),
            (
                "{ name = \"test-nope\" }",
                "unknown codec 'test-nope' (expected none,",
            ),
        ] {
            let e = toml::from_str::<J>(&format!("compressor = {table}"))
                .err()
                .unwrap();
            assert!(e.to_string().contains(why), "{table}: {e}");
        }
        assert!(CodecSpec::with_defaults("test-topk").is_some());
        assert!(CODECS.names().ends_with(&["test-topk"]));
    }

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
