//! Exchange strategies by `train.exchange` name, as codecs are by theirs
//! ([`crate::codec::registry`]). A strategy's parameters are the job's other `train` fields
//! (`pull`, `ownership`, `downlink`, `[train.sketch]`), which its parts read from their
//! [`super::ExchangePlan`]. Adding a strategy: one file (its parts, its description and, for
//! `auto` to rank it, its round model) and one line in the list below.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Exchange;

/// A program's own exchange ([`crate::dataflow::Training::set_exchange`]).
pub type CustomExchange = crate::named::Named<dyn Exchange>;

macro_rules! registry {
    ($($(#[$attr:meta])* $variant:ident $name:literal => $ty:expr, $doc:literal;)*) => {
        /// Which exchange strategy a job uses (`train.exchange`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
        #[serde(rename_all = "lowercase")]
        pub enum ExchangeKind {
            $(
                #[doc = $doc]
                $(#[$attr])*
                $variant,
            )*
        }

        /// Builds the strategy `kind` names.
        pub fn build_exchange(kind: ExchangeKind) -> Arc<dyn Exchange> {
            match kind {
                $( ExchangeKind::$variant => Arc::new($ty), )*
            }
        }

        impl ExchangeKind {
            /// The strategy's `train.exchange` name.
            pub fn name(self) -> &'static str {
                match self {
                    $( ExchangeKind::$variant => $name, )*
                }
            }
        }

        /// Every strategy's name, in registry order.
        pub const EXCHANGE_NAMES: &[&str] = &[$($name),*];

        impl std::str::FromStr for ExchangeKind {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $( $name => Ok(ExchangeKind::$variant), )*
                    _ => Err(format!(
                        "unknown exchange '{s}' (expected {})",
                        EXCHANGE_NAMES.join(", ")
                    )),
                }
            }
        }
    };
}

registry! {
    #[default]
    Sharded "sharded" => super::sharded::Sharded,
        "Key shards, one per worker: owners update their keys and send the change to every \
         replica (parameter-server style; [`super::sharded`]).";
    Allgather "allgather" => super::allgather::Allgather,
        "Every worker receives every gradient and updates its whole replica \
         ([`super::allgather`]).";
    Sketch "sketch" => super::sketch::Sketch,
        "Sketched-SGD: summed count sketches, then the exact values of the candidates \
         ([`super::sketch`]).";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_and_builds_the_strategy_of_that_name() {
        for name in EXCHANGE_NAMES {
            let kind: ExchangeKind = name.parse().unwrap();
            assert_eq!(build_exchange(kind).name(), *name);
            let plan = crate::job::Job::default().plan(4, 1).exchange_plan();
            assert!(build_exchange(kind).describe(&plan).starts_with(name));
            #[derive(Deserialize)]
            struct J {
                exchange: ExchangeKind,
            }
            let j: J = toml::from_str(&format!("exchange = \"{name}\"")).unwrap();
            assert_eq!(j.exchange, kind);
        }
        let e = "ring".parse::<ExchangeKind>().unwrap_err();
        assert_eq!(
            e,
            "unknown exchange 'ring' (expected sharded, allgather, sketch)"
        );
        assert_eq!(ExchangeKind::default(), ExchangeKind::Sharded);
    }
}
