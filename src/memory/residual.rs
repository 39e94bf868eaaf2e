//! Residual error feedback (EF-SGD, Karimireddy et al. ICML'19; Stich et al. NeurIPS'18): send
//! `C(g + e)` and keep `e ← (g + e) − C(g + e)`, so that what a biased codec drops or shrinks is
//! delayed, not lost. State: one f32 per model key (4·D bytes) plus the keys where `e ≠ 0`.

use super::{for_sent, for_union, Memory, SparseState};
use crate::sparse::SparseGrad;

/// The residual `e` of one worker.
pub struct Residual {
    e: SparseState,
}

impl Residual {
    /// A zero residual over `dim` keys.
    pub fn new(dim: u32) -> Self {
        Residual {
            e: SparseState::new(dim),
        }
    }
}

impl Memory for Residual {
    fn name(&self) -> &'static str {
        "residual"
    }

    fn compensate(&mut self, grad: &mut SparseGrad, scratch: &mut SparseGrad) {
        scratch.clear();
        let e = &self.e.values;
        for_union(grad, &self.e.support, |k, g| {
            scratch.keys.push(k);
            scratch.values.push(g + e[k as usize]);
        });
        std::mem::swap(grad, scratch);
    }

    fn update(&mut self, compensated: &SparseGrad, sent: &SparseGrad) {
        let SparseState { values, support } = &mut self.e;
        support.clear();
        for_sent(compensated, sent, |k, c, s| {
            let r = c - s;
            values[k as usize] = r;
            if r != 0.0 {
                support.push(k);
            }
        });
    }

    fn save(&self) -> Option<Vec<u8>> {
        Some(crate::snapshot::encode(&self.e.save()))
    }

    fn restore(&mut self, saved: &[u8]) -> Result<(), String> {
        let e = crate::snapshot::decode(saved, "residual memory")?;
        self.e.restore(&e, "residual memory")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_dropped_comes_back_and_what_is_sent_is_forgotten() {
        let mut m = Residual::new(10);
        let mut scratch = SparseGrad::default();
        let mut g = SparseGrad {
            keys: vec![2, 5],
            values: vec![1.0, -3.0],
        };
        m.compensate(&mut g, &mut scratch);
        assert_eq!(g.values, vec![1.0, -3.0], "nothing remembered yet");
        // Only key 5 is sent, and shrunk to -2.
        let sent = SparseGrad {
            keys: vec![5],
            values: vec![-2.0],
        };
        m.update(&g, &sent);
        let mut next = SparseGrad {
            keys: vec![7],
            values: vec![0.5],
        };
        m.compensate(&mut next, &mut scratch);
        assert_eq!(next.keys, vec![2, 5, 7]);
        assert_eq!(next.values, vec![1.0, -1.0, 0.5]);
        // Everything sent exactly: the residual is empty again.
        m.update(&next, &next.clone());
        let mut empty = SparseGrad::default();
        m.compensate(&mut empty, &mut scratch);
        assert!(empty.is_empty());
    }
}
