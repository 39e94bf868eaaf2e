//! Exchange strategies by `train.exchange` name, as codecs are by theirs
//! ([`crate::codec::registry`]). A strategy's parameters are the job's other `train` fields
//! (`pull`, `ownership`, `downlink`, `[train.sketch]`), which its parts read from their
//! [`super::ExchangePlan`]. Adding a strategy: one file (its parts, its description and, for
//! `auto` to rank it, its round model) and one line in the list below, or, from a program, one
//! call to [`register`] before the job is read.

use std::sync::Arc;

use super::Exchange;
use crate::named::Registry;

/// A program's own exchange ([`crate::dataflow::Training::set_exchange`]).
pub type CustomExchange = crate::named::Named<dyn Exchange>;

/// Every strategy by name: the built-in ones below and those added by [`register`].
pub static EXCHANGES: Registry<dyn Exchange> = Registry::new("exchange", EXCHANGE_NAMES);

/// Adds `exchange` under its [`Exchange::name`]: `train.exchange`, `bench` suites and, when it
/// has a [`Exchange::round_model`], `auto` then accept it. Call it at the top of `main`, before
/// [`crate::cli::main_with`] reads the job.
///
/// # Panics
/// If the name is taken (built in or added before).
pub fn register(exchange: impl Exchange + 'static) {
    let name = exchange.name().to_string();
    EXCHANGES.add(&name, Arc::new(exchange));
}

macro_rules! registry {
    ($($(#[$attr:meta])* $variant:ident $name:literal => $ty:expr, $doc:literal;)*) => {
        /// Which exchange strategy a job uses (`train.exchange`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
        pub enum ExchangeKind {
            $(
                #[doc = $doc]
                $(#[$attr])*
                $variant,
            )*
            /// A strategy added by [`register`], by name.
            Added(&'static str),
        }

        /// Builds the strategy `kind` names.
        pub fn build_exchange(kind: ExchangeKind) -> Arc<dyn Exchange> {
            match kind {
                $( ExchangeKind::$variant => Arc::new($ty), )*
                ExchangeKind::Added(name) => EXCHANGES.added(name).expect("added strategies stay").1,
            }
        }

        impl ExchangeKind {
            /// The strategy's `train.exchange` name.
            pub fn name(self) -> &'static str {
                match self {
                    $( ExchangeKind::$variant => $name, )*
                    ExchangeKind::Added(name) => name,
                }
            }
        }

        /// Every built-in strategy's name, in registry order ([`EXCHANGES`] adds the added ones).
        pub const EXCHANGE_NAMES: &[&str] = &[$($name),*];

        impl std::str::FromStr for ExchangeKind {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $( $name => Ok(ExchangeKind::$variant), )*
                    _ => EXCHANGES
                        .added(s)
                        .map(|(name, _)| ExchangeKind::Added(name))
                        .ok_or_else(|| EXCHANGES.unknown(s)),
                }
            }
        }
    };
}

impl ExchangeKind {
    /// Every strategy, built in or added, in registry order.
    pub fn all() -> Vec<ExchangeKind> {
        EXCHANGES
            .names()
            .into_iter()
            .map(|n| n.parse().expect("a registered name"))
            .collect()
    }
}

crate::named::serde_by_name!(ExchangeKind);

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
            #[derive(serde::Deserialize)]
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
