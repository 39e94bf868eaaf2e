//! Error-feedback memory, beside the codec (GRACE's compressor / memory / communicator split).
//!
//! A worker passes its gradient through its memory before encoding and tells the memory what the
//! receivers will decode afterwards:
//!
//! ```text
//! c = compensate(g)            e.g. g + e: what earlier rounds dropped or shrank
//! m = encode(c); ĉ = decode(m)
//! update(c, ĉ)                 e.g. e ← c − ĉ: what this round drops is delayed, not lost
//! ```
//!
//! Memories: [`none::NoMemory`], [`residual::Residual`] (EF-SGD, Karimireddy et al. ICML'19),
//! [`lazy_residual::LazyResidual`] (the same residual, added back only on the gradient's keys) and
//! [`dgc::Dgc`] (momentum correction and momentum-factor masking, Lin et al. ICLR'18; the
//! accumulation Sketched-SGD's Algorithm 3 uses).
//!
//! **State cost.** `residual` keeps one dense f32 array of the model's dimension per worker
//! (4·D bytes), `dgc` two (8·D bytes), each on lazily-zeroed pages, plus the sorted list of
//! keys whose state is nonzero. The compensated vector covers the gradient's keys and that list,
//! so with error feedback a message's key set grows towards every key the worker has touched;
//! `lazy_residual` (4·D bytes, no list) keeps the gradient's key set.

pub mod dgc;
pub mod lazy_residual;
pub mod none;
pub mod residual;

use serde::{Deserialize, Serialize};

use crate::snapshot::NonZero;
use crate::sparse::SparseGrad;

/// Error-feedback state of one worker (or one owner's downlink).
pub trait Memory: Send {
    /// The job-file name.
    fn name(&self) -> &'static str;
    /// Replaces `grad` by the vector to transmit (the gradient plus whatever the memory holds).
    /// `scratch` is a buffer the memory may use.
    fn compensate(&mut self, grad: &mut SparseGrad, scratch: &mut SparseGrad);
    /// Records that of the compensated vector `compensated` the receivers decode `sent` (whose
    /// keys are a subset of `compensated`'s).
    fn update(&mut self, compensated: &SparseGrad, sent: &SparseGrad);
    /// Whether [`Memory::update`] needs `sent` (a memory that ignores it saves the local decode).
    fn needs_sent(&self) -> bool {
        true
    }
    /// The memory's state for a checkpoint ([`crate::snapshot`]), `None` when it cannot be
    /// saved (the default: a checkpoint of a run that uses it is an error saying so).
    fn save(&self) -> Option<Vec<u8>> {
        None
    }
    /// Restores what [`Memory::save`] returned into this fresh memory of the same kind and
    /// dimension, so that the run continues bit for bit.
    fn restore(&mut self, _saved: &[u8]) -> Result<(), String> {
        Err(format!(
            "memory {} cannot restore a checkpoint",
            self.name()
        ))
    }
}

/// A memory as a job names it: `memory = "residual"` or `memory = { name = "dgc", momentum = 0.9 }`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "toml::Value", into = "toml::Value")]
pub enum MemorySpec {
    /// No memory: what a codec drops is lost.
    None,
    /// `e ← (g + e) − decode(encode(g + e))`.
    Residual,
    /// `e ← (g + e) − decode(encode(g + e))` on the gradient's keys; other keys' residuals wait.
    LazyResidual,
    /// DGC's momentum correction with momentum `momentum` and momentum-factor masking.
    Dgc {
        /// Momentum factor ρ (the paper: 0.9).
        momentum: f32,
    },
}

/// Every memory name.
pub const MEMORY_NAMES: &[&str] = &["none", "residual", "lazy_residual", "dgc"];

impl MemorySpec {
    /// The job-file name.
    pub fn name(&self) -> &'static str {
        match self {
            MemorySpec::None => "none",
            MemorySpec::Residual => "residual",
            MemorySpec::LazyResidual => "lazy_residual",
            MemorySpec::Dgc { .. } => "dgc",
        }
    }

    /// The memory for a model of dimension `dim`.
    pub fn build(&self, dim: u32) -> Box<dyn Memory> {
        match *self {
            MemorySpec::None => Box::new(none::NoMemory),
            MemorySpec::Residual => Box::new(residual::Residual::new(dim)),
            MemorySpec::LazyResidual => Box::new(lazy_residual::LazyResidual::new(dim)),
            MemorySpec::Dgc { momentum } => Box::new(dgc::Dgc::new(dim, momentum)),
        }
    }
}

impl TryFrom<toml::Value> for MemorySpec {
    type Error = String;
    fn try_from(v: toml::Value) -> Result<Self, String> {
        let unknown = |n: &str| {
            format!("unknown memory '{n}' (expected none, residual, lazy_residual or dgc)")
        };
        match v {
            toml::Value::String(name) => match name.as_str() {
                "none" => Ok(MemorySpec::None),
                "residual" => Ok(MemorySpec::Residual),
                "lazy_residual" => Ok(MemorySpec::LazyResidual),
                "dgc" => Ok(MemorySpec::Dgc { momentum: 0.9 }),
                other => Err(unknown(other)),
            },
            toml::Value::Table(mut t) => {
                let name = match t.remove("name") {
                    Some(toml::Value::String(s)) => s,
                    _ => return Err("a memory table needs name = \"...\"".into()),
                };
                let spec = match name.as_str() {
                    "none" => MemorySpec::None,
                    "residual" => MemorySpec::Residual,
                    "lazy_residual" => MemorySpec::LazyResidual,
                    "dgc" => {
                        let momentum = match t.remove("momentum") {
                            None => 0.9,
                            Some(toml::Value::Float(x)) => x as f32,
                            Some(toml::Value::Integer(x)) => x as f32,
                            Some(other) => {
                                return Err(format!("dgc momentum: expected a number, got {other}"))
                            }
                        };
                        if !(0.0..1.0).contains(&momentum) {
                            return Err(format!("dgc momentum: must be in [0, 1), got {momentum}"));
                        }
                        MemorySpec::Dgc { momentum }
                    }
                    other => return Err(unknown(other)),
                };
                match t.keys().next() {
                    Some(field) => Err(format!("memory {name}: unknown field '{field}'")),
                    None => Ok(spec),
                }
            }
            other => Err(format!("expected a memory name or table, got {other}")),
        }
    }
}

impl From<MemorySpec> for toml::Value {
    fn from(m: MemorySpec) -> toml::Value {
        match m {
            MemorySpec::Dgc { momentum } => {
                let mut t = toml::Table::new();
                t.insert("name".into(), "dgc".into());
                t.insert("momentum".into(), toml::Value::Float(momentum as f64));
                toml::Value::Table(t)
            }
            other => toml::Value::String(other.name().into()),
        }
    }
}

/// Dense per-key state over the model's dimension plus the sorted keys where it is nonzero:
/// the storage the memories share.
pub(crate) struct SparseState {
    /// One value per key of the model.
    pub values: crate::mem::ZeroedArray<f32>,
    /// Keys with a nonzero value, increasing.
    pub support: Vec<u32>,
}

impl SparseState {
    pub fn new(dim: u32) -> Self {
        SparseState {
            values: crate::mem::ZeroedArray::new(dim as usize),
            support: Vec::new(),
        }
    }

    /// The values on the support (the rest are zero).
    pub fn save(&self) -> NonZero {
        NonZero {
            len: self.values.len() as u64,
            keys: self.support.clone(),
            values: self
                .support
                .iter()
                .map(|&k| self.values[k as usize])
                .collect(),
        }
    }

    /// Restores [`SparseState::save`]'s entries into this fresh state.
    pub fn restore(&mut self, saved: &NonZero, what: &str) -> Result<(), String> {
        saved.restore(&mut self.values, what)?;
        self.support.clone_from(&saved.keys);
        Ok(())
    }
}

/// Calls `f(key, gradient value or 0)` for every key of `grad` or `support`, in increasing
/// order (a sorted merge; no hashing).
pub(crate) fn for_union(grad: &SparseGrad, support: &[u32], mut f: impl FnMut(u32, f32)) {
    crate::sparse::merge_keys(&grad.keys, support, |k, i, _| {
        f(k, i.map_or(0.0, |i| grad.values[i]))
    });
}

/// Calls `f(key, compensated value, sent value or 0)` for every key of `compensated`, merging
/// with `sent` (whose keys must be a subset).
pub(crate) fn for_sent(
    compensated: &SparseGrad,
    sent: &SparseGrad,
    mut f: impl FnMut(u32, f32, f32),
) {
    let mut j = 0;
    for (&k, &c) in compensated.keys.iter().zip(&compensated.values) {
        let s = if sent.keys.get(j) == Some(&k) {
            j += 1;
            sent.values[j - 1]
        } else {
            0.0
        };
        f(k, c, s);
    }
    debug_assert_eq!(j, sent.keys.len(), "sent keys must be compensated keys");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct J {
        memory: MemorySpec,
    }

    #[test]
    fn specs_parse_and_errors_name_the_problem() {
        let p = |s: &str| toml::from_str::<J>(s).map(|j| j.memory);
        assert_eq!(p("memory = \"residual\"").unwrap(), MemorySpec::Residual);
        assert_eq!(
            p("memory = { name = \"dgc\", momentum = 0.5 }").unwrap(),
            MemorySpec::Dgc { momentum: 0.5 }
        );
        assert_eq!(
            p("memory = \"dgc\"").unwrap(),
            MemorySpec::Dgc { momentum: 0.9 }
        );
        for (bad, says) in [
            ("memory = \"resid\"", "resid"),
            ("memory = { name = \"dgc\", momentum = 1.5 }", "momentum"),
            ("memory = { name = \"dgc\", momentun = 0.5 }", "momentun"),
            ("memory = 3", "memory"),
        ] {
            let e = p(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        for name in MEMORY_NAMES {
            let spec = p(&format!("memory = \"{name}\"")).unwrap();
            assert_eq!(spec.build(10).name(), *name);
        }
    }

    #[test]
    fn union_and_sent_merges_visit_keys_in_order() {
        let g = SparseGrad {
            keys: vec![1, 4, 9],
            values: vec![1.0, 4.0, 9.0],
        };
        let mut seen = Vec::new();
        for_union(&g, &[0, 4, 5, 12], |k, v| seen.push((k, v)));
        assert_eq!(
            seen,
            vec![(0, 0.0), (1, 1.0), (4, 4.0), (5, 0.0), (9, 9.0), (12, 0.0)]
        );
        let sent = SparseGrad {
            keys: vec![4],
            values: vec![3.5],
        };
        let mut seen = Vec::new();
        for_sent(&g, &sent, |k, c, s| seen.push((k, c, s)));
        assert_eq!(seen, vec![(1, 1.0, 0.0), (4, 4.0, 3.5), (9, 9.0, 0.0)]);
    }
}
