//! Deep Gradient Compression's error feedback (Lin et al., ICLR'18, §3.2-3.3), which
//! Sketched-SGD's empirical training also uses (Ivkin et al., NeurIPS'19, Algorithm 3):
//!
//! ```text
//! u ← ρ·u + g          momentum correction: the momentum lives before the compressor
//! v ← v + u            error accumulation; v is what the codec sees
//! after sending ĉ:     v ← v − ĉ, and u ← 0 wherever ĉ is nonzero (momentum-factor masking)
//! ```
//!
//! With momentum in the memory, pair it with plain SGD (`optimizer.kind = "sgd"`); DGC's
//! gradient clipping and sparsity warm-up are not included. State: two f32 per model key
//! (8·D bytes) plus the keys where `u` or `v` is nonzero.

use super::{for_sent, for_union, Memory, SparseState};
use crate::snapshot::NonZero;
use crate::sparse::SparseGrad;

/// DGC momentum `u` and accumulation `v` of one worker.
pub struct Dgc {
    momentum: f32,
    u: crate::mem::ZeroedArray<f32>,
    v: SparseState,
}

impl Dgc {
    /// Zero state over `dim` keys with momentum factor `momentum`.
    pub fn new(dim: u32, momentum: f32) -> Self {
        Dgc {
            momentum,
            u: crate::mem::ZeroedArray::new(dim as usize),
            v: SparseState::new(dim),
        }
    }
}

impl Memory for Dgc {
    fn name(&self) -> &'static str {
        "dgc"
    }

    fn compensate(&mut self, grad: &mut SparseGrad, scratch: &mut SparseGrad) {
        scratch.clear();
        let (rho, u, v) = (self.momentum, &mut self.u, &mut self.v.values);
        for_union(grad, &self.v.support, |k, g| {
            let k = k as usize;
            u[k] = rho * u[k] + g;
            v[k] += u[k];
            scratch.keys.push(k as u32);
            scratch.values.push(v[k]);
        });
        std::mem::swap(grad, scratch);
    }

    fn update(&mut self, compensated: &SparseGrad, sent: &SparseGrad) {
        let SparseState { values: v, support } = &mut self.v;
        let u = &mut self.u;
        support.clear();
        for_sent(compensated, sent, |k, c, s| {
            let k = k as usize;
            v[k] = c - s;
            if s != 0.0 {
                u[k] = 0.0;
            }
            // The support tracks keys where u or v is nonzero: both feed the next round.
            if v[k] != 0.0 || u[k] != 0.0 {
                support.push(k as u32);
            }
        });
    }

    fn save(&self) -> Option<Vec<u8>> {
        Some(crate::snapshot::encode(&(
            NonZero::of(&self.u),
            self.v.save(),
        )))
    }

    fn restore(&mut self, saved: &[u8]) -> Result<(), String> {
        let what = "dgc memory";
        let (u, v): (NonZero, NonZero) = crate::snapshot::decode(saved, what)?;
        u.restore(&mut self.u, what)?;
        self.v.restore(&v, what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn momentum_accumulates_and_sent_keys_are_masked() {
        let mut m = Dgc::new(8, 0.5);
        let mut scratch = SparseGrad::default();
        let mut g = SparseGrad {
            keys: vec![1, 3],
            values: vec![2.0, 4.0],
        };
        m.compensate(&mut g, &mut scratch); // u = v = (2, 4)
        assert_eq!(g.values, vec![2.0, 4.0]);
        let sent = SparseGrad {
            keys: vec![3],
            values: vec![4.0],
        };
        m.update(&g, &sent); // key 3 sent: u3 = v3 = 0; key 1 keeps u = v = 2
        let mut g = SparseGrad {
            keys: vec![3],
            values: vec![1.0],
        };
        m.compensate(&mut g, &mut scratch);
        // key 1: u = 0.5·2 + 0 = 1, v = 2 + 1 = 3; key 3: u = 0 + 1, v = 0 + 1.
        assert_eq!(g.keys, vec![1, 3]);
        assert_eq!(g.values, vec![3.0, 1.0]);
    }
}
