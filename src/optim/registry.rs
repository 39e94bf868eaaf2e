//! Update rules by `optimizer.kind` name, as codecs and exchanges are by theirs
//! ([`crate::named::Registry`]). A rule's parameters are the `[optimizer]` table's fields,
//! which it reads from [`OptimizerConfig`]. Adding a rule: one file (the rule, its
//! [`FromConfig`]) and one line in the list below, or, from a program, one call to
//! [`register`] before the job is read.

use std::sync::Arc;

use super::{OptimizerConfig, UpdateRule};
use crate::named::Registry;

/// Builds a rule for the keys `lo..hi` from the job's `[optimizer]` table.
pub type MakeRule = dyn Fn(&OptimizerConfig, u32, u32) -> Box<dyn UpdateRule> + Send + Sync;

/// A built-in rule: how it is made from the job's `[optimizer]` table, and what state it keeps.
pub trait FromConfig: UpdateRule + Sized + 'static {
    /// Bytes of state per key (for the job's memory estimate).
    const STATE_BYTES: u64;
    /// What that state is, for people ("Adam's moments").
    const STATE: &'static str;
    /// The rule for keys `lo..hi`.
    fn from_config(cfg: &OptimizerConfig, lo: u32, hi: u32) -> Self;
}

/// Every rule by name: the built-in ones below and those added by [`register`].
pub static OPTIMIZERS: Registry<MakeRule> = Registry::new("optimizer", OPTIMIZER_NAMES);

/// Adds the rule `make` builds under `name`: `optimizer.kind = "name"` then builds it, with
/// the job's `[optimizer]` table. Call it at the top of `main`, before
/// [`crate::cli::main_with`] reads the job.
///
/// # Panics
/// If the name is taken (built in or added before).
pub fn register(
    name: &str,
    make: impl Fn(&OptimizerConfig, u32, u32) -> Box<dyn UpdateRule> + Send + Sync + 'static,
) {
    OPTIMIZERS.add(name, Arc::new(make));
}

macro_rules! registry {
    ($($(#[$attr:meta])* $variant:ident $name:literal => $ty:ty, $doc:literal;)*) => {
        /// Which update rule a job uses (`optimizer.kind`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
        pub enum OptimizerKind {
            $(
                #[doc = $doc]
                $(#[$attr])*
                $variant,
            )*
            /// A rule added by [`register`], by name.
            Added(&'static str),
        }

        /// Builds the rule `cfg.kind` names for the keys `lo..hi`.
        pub fn build_optimizer(cfg: &OptimizerConfig, lo: u32, hi: u32) -> Box<dyn UpdateRule> {
            match cfg.kind {
                $( OptimizerKind::$variant => Box::new(<$ty>::from_config(cfg, lo, hi)), )*
                OptimizerKind::Added(name) => {
                    (OPTIMIZERS.added(name).expect("added rules stay").1)(cfg, lo, hi)
                }
            }
        }

        impl OptimizerKind {
            /// The rule's `optimizer.kind` name.
            pub fn name(self) -> &'static str {
                match self {
                    $( OptimizerKind::$variant => $name, )*
                    OptimizerKind::Added(name) => name,
                }
            }

            /// Bytes of state per key and what they are (an added rule's are not known: 0).
            pub fn state(self) -> (u64, &'static str) {
                match self {
                    $( OptimizerKind::$variant => (<$ty>::STATE_BYTES, <$ty>::STATE), )*
                    OptimizerKind::Added(_) => (0, ""),
                }
            }
        }

        /// Every built-in rule's name, in registry order ([`OPTIMIZERS`] adds the added ones).
        pub const OPTIMIZER_NAMES: &[&str] = &[$($name),*];

        impl std::str::FromStr for OptimizerKind {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $( $name => Ok(OptimizerKind::$variant), )*
                    _ => OPTIMIZERS
                        .added(s)
                        .map(|(name, _)| OptimizerKind::Added(name))
                        .ok_or_else(|| OPTIMIZERS.unknown(s)),
                }
            }
        }
    };
}

crate::named::serde_by_name!(OptimizerKind);

registry! {
    Sgd "sgd" => super::sgd::Sgd,
        "Plain SGD with rate `lr / (1 + decay·t)` ([`super::sgd`]).";
    Momentum "momentum" => super::momentum::Momentum,
        "Heavy-ball momentum ([`super::momentum`]).";
    #[default]
    Adam "adam" => super::adam::Adam,
        "Adam, the compression papers' default ([`super::adam`]).";
    Adagrad "adagrad" => super::adagrad::AdaGrad,
        "AdaGrad: per-key rates from the sum of squared gradients ([`super::adagrad`]).";
    Ftrl "ftrl" => super::ftrl::Ftrl,
        "FTRL-Proximal: per-key rates and an L1 that gives exact zeros ([`super::ftrl`]).";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_and_builds_a_rule_that_saves_its_state() {
        for name in OPTIMIZER_NAMES {
            let kind: OptimizerKind = name.parse().unwrap();
            assert_eq!(kind.name(), *name);
            let cfg = OptimizerConfig {
                kind,
                ..Default::default()
            };
            let mut rule = build_optimizer(&cfg, 0, 4);
            let mut changes = Vec::new();
            rule.step(0, &[1, 3], &[0.5, -0.25], &mut changes);
            assert_eq!(changes.len(), 2);
            assert!(changes[0] < 0.0 && changes[1] > 0.0, "{name}: {changes:?}");
            // A fresh rule restored from the state continues as the first.
            let saved = rule.save().expect("built-in rules save their state");
            let mut again = build_optimizer(&cfg, 0, 4);
            again.restore(&saved).unwrap();
            let (mut a, mut b) = (Vec::new(), Vec::new());
            rule.step(1, &[1, 2], &[0.5, 1.0], &mut a);
            again.step(1, &[1, 2], &[0.5, 1.0], &mut b);
            assert_eq!(a, b, "{name}");
            // Another rule's state is refused, never misread.
            let other = if kind == OptimizerKind::Ftrl {
                "adam"
            } else {
                "ftrl"
            };
            let other = OptimizerConfig {
                kind: other.parse().unwrap(),
                ..Default::default()
            };
            let theirs = build_optimizer(&other, 0, 4).save().unwrap();
            assert!(
                build_optimizer(&cfg, 0, 4).restore(&theirs).is_err(),
                "{name}"
            );
            #[derive(serde::Deserialize)]
            struct J {
                kind: OptimizerKind,
            }
            let j: J = toml::from_str(&format!("kind = \"{name}\"")).unwrap();
            assert_eq!(j.kind, kind);
        }
        let e = "lbfgs".parse::<OptimizerKind>().unwrap_err();
        assert_eq!(
            e,
            "unknown optimizer 'lbfgs' (expected sgd, momentum, adam, adagrad, ftrl)"
        );
        assert_eq!(OptimizerKind::default(), OptimizerKind::Adam);
    }
}
