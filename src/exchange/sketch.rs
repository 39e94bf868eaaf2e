//! The Sketched-SGD exchange (Ivkin et al., NeurIPS'19, §4 and §5.1, Algorithm 3), with the
//! parameter server's work spread over the workers so that no worker receives `W` sketches.
//!
//! Each round, on every worker (its memory keeps momentum `u` and accumulation `v`):
//!
//! ```text
//! 1. sketch v into a count sketch S_i (r rows × c columns, same hashes everywhere);
//!    send columns slice j of S_i to worker j                                     uplink  |S|
//! 2. worker j sums the W slices j (linearity: the slice of Σ S_i) and sends the
//!    summed slice to every worker                                              downlink |S|
//! 3. every worker assembles Σ S_i, queries every coordinate and takes the same P·k
//!    candidates (largest estimates; or HEAVYMIX, Algorithm 1); it sends its exact v
//!    at candidate chunk j to worker j                                             uplink  P·k
//! 4. worker j sums the exact values of chunk j and sends them to every worker  downlink P·k
//! 5. every worker takes the top k of the exact sums, applies (1/W)·sum through the
//!    optimizer, and zeroes u and v at those k coordinates (momentum-factor masking)
//! ```
//!
//! Per worker and round: `|S| + P·k` values up and `|S| + P·k` down (counting messages a worker
//! addresses to itself, as the paper's worker ↔ server accounting does), whatever `W`. The
//! paper's `k` values down become `P·k` here because the server role is sharded: the owner of a
//! candidate chunk cannot know the global top k alone.
//!
//! Payloads are little-endian f32 arrays ([`super::write_f32s`]) whose length both sides know
//! from the job (slice widths, candidate chunks); a receiver checks the length and that every
//! value is finite.

use rand::seq::index::sample;
use serde::{Deserialize, Serialize};

use super::write_f32s;
use crate::codec::countsketch::CountSketch;
use crate::codec::EncodeContext;

/// How candidates are recovered from the summed sketch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Recovery {
    /// The P·k coordinates with the largest estimated magnitudes (§5.1).
    #[default]
    Topk,
    /// HEAVYMIX (Algorithm 1) with parameter P·k: every coordinate whose squared estimate
    /// reaches ℓ̂²/(P·k) (by magnitude, at most P·k), filled up to P·k with coordinates drawn at
    /// random (seeded by the job and the round, the same on every worker).
    Heavymix,
}

/// Parameters of the sketch exchange (`[train.sketch]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SketchParams {
    /// Coordinates updated per round (absent or 0: 1% of the dimension).
    pub k: u32,
    /// Candidates per update coordinate: P·k exact values are fetched (the paper: 16-36 on
    /// models of 10^7-10^8 parameters).
    pub p: u32,
    /// Sketch rows r (the paper: 5).
    pub rows: u32,
    /// Sketch columns c (absent or 0: ⌈P·k / r⌉, so that |S| = P·k, the ratio the paper found
    /// to work).
    pub columns: u32,
    /// Candidate recovery.
    pub recovery: Recovery,
}

impl Default for SketchParams {
    fn default() -> Self {
        SketchParams {
            k: 0,
            p: 4,
            rows: 5,
            columns: 0,
            recovery: Recovery::Topk,
        }
    }
}

/// The sketch exchange's sizes for one job, resolved against the dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SketchShape {
    /// Update coordinates per round.
    pub k: usize,
    /// Candidates per round (`min(P·k, D)`).
    pub candidates: usize,
    /// Sketch rows.
    pub rows: usize,
    /// Sketch columns.
    pub columns: usize,
    /// Recovery rule.
    pub recovery: Recovery,
}

impl SketchParams {
    /// Checks ranges; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.p == 0 {
            return Err("train.sketch.p: must be at least 1".into());
        }
        if !(1..=16).contains(&self.rows) {
            return Err(format!(
                "train.sketch.rows: must be in 1..=16, got {}",
                self.rows
            ));
        }
        Ok(())
    }

    /// Sizes for dimension `dim`.
    pub fn shape(&self, dim: u32) -> SketchShape {
        let dim = dim.max(1) as usize;
        let k = if self.k == 0 {
            (dim / 100).max(1)
        } else {
            (self.k as usize).min(dim)
        };
        let candidates = (self.p as usize * k).min(dim);
        let rows = self.rows as usize;
        let columns = if self.columns == 0 {
            candidates.div_ceil(rows).max(1)
        } else {
            self.columns as usize
        };
        SketchShape {
            k,
            candidates,
            rows,
            columns,
            recovery: self.recovery,
        }
    }
}

/// `[lo, hi)` of part `j` when `len` items are cut into `parts` near-equal contiguous parts
/// (sketch columns per worker; candidate chunks per worker).
pub fn part(len: usize, parts: usize, j: usize) -> (usize, usize) {
    (len * j / parts, len * (j + 1) / parts)
}

/// The sketch seed every worker uses (from the job seed).
pub fn sketch_seed(job_seed: u64) -> u64 {
    crate::data::partition::mix64(job_seed, 0x5ce7c4)
}

/// Step 1: columns `[lo, hi)` of every row of `sketch`, row by row, as f32.
pub fn write_slice(sketch: &CountSketch, lo: usize, hi: usize, out: &mut Vec<u8>) {
    let cols = sketch.columns();
    for row in sketch.cells().chunks_exact(cols) {
        write_f32s(row[lo..hi].iter().copied(), out);
    }
}

/// Step 3: writes a slice of columns `[lo, hi)` (as read by [`read_f32s`]) into `sketch`.
pub fn put_slice(sketch: &mut CountSketch, lo: usize, hi: usize, slice: &[f32]) {
    let (cols, width) = (sketch.columns(), hi - lo);
    for (row, values) in sketch
        .cells_mut()
        .chunks_exact_mut(cols)
        .zip(slice.chunks_exact(width.max(1)))
    {
        row[lo..hi].copy_from_slice(values);
    }
}

/// Step 3: the candidate coordinates (sorted) recovered from the summed sketch, the same on
/// every worker. `estimates` is a reusable buffer.
pub fn candidates(
    sketch: &CountSketch,
    dim: u32,
    shape: &SketchShape,
    ctx: EncodeContext,
    estimates: &mut Vec<f32>,
) -> Vec<u32> {
    sketch.estimate_all(dim, estimates);
    match shape.recovery {
        Recovery::Topk => crate::codec::largest(estimates, shape.candidates),
        Recovery::Heavymix => {
            // HEAVYMIX with parameter P·k (the number of candidates fetched):
            // H = {i : ĝ_i² ≥ ℓ̂²/(P·k)}, at most P·k of them by magnitude.
            let threshold = sketch.l2_squared_estimate() / shape.candidates as f32;
            let heavy: Vec<u32> = (0..dim)
                .filter(|&i| estimates[i as usize].powi(2) >= threshold)
                .collect();
            let mut chosen: Vec<u32> = if heavy.len() > shape.candidates {
                let est: Vec<f32> = heavy.iter().map(|&i| estimates[i as usize]).collect();
                crate::codec::largest(&est, shape.candidates)
                    .into_iter()
                    .map(|j| heavy[j as usize])
                    .collect()
            } else {
                heavy
            };
            // Fill with l = P·k − |H| coordinates drawn uniformly from the rest.
            let fill = shape.candidates - chosen.len();
            if fill > 0 {
                let mut is_heavy = vec![false; dim as usize];
                chosen.iter().for_each(|&i| is_heavy[i as usize] = true);
                let rest: Vec<u32> = (0..dim).filter(|&i| !is_heavy[i as usize]).collect();
                let mut rng = ctx.rng();
                chosen.extend(
                    sample(&mut rng, rest.len(), fill.min(rest.len()))
                        .into_iter()
                        .map(|j| rest[j]),
                );
            }
            chosen.sort_unstable();
            chosen
        }
    }
}

/// Step 3: `v`'s values at the sorted `keys` (0 where `v` has no entry), by a sorted merge.
pub fn values_at(v_keys: &[u32], v_values: &[f32], keys: &[u32], out: &mut Vec<f32>) {
    out.clear();
    let mut j = 0;
    for &k in keys {
        j += v_keys[j..].partition_point(|&x| x < k);
        out.push(if v_keys.get(j) == Some(&k) {
            v_values[j]
        } else {
            0.0
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::read_f32s;
    use crate::sparse::SparseGrad;
    use rand::{RngExt, SeedableRng};

    /// Runs steps 1-5 of the protocol for `vs.len()` simulated workers, as the dataflow does,
    /// and returns the k coordinates every worker would update with their summed values.
    fn protocol(vs: &[SparseGrad], dim: u32, shape: &SketchShape) -> (Vec<u32>, Vec<f32>) {
        let w = vs.len();
        let seed = sketch_seed(3);
        // 1-2: slices, summed per column owner.
        let sketches: Vec<CountSketch> = vs
            .iter()
            .map(|v| {
                let mut s = CountSketch::new(shape.rows, shape.columns, seed);
                v.keys
                    .iter()
                    .zip(&v.values)
                    .for_each(|(&k, &x)| s.insert(k, x));
                s
            })
            .collect();
        let mut summed = CountSketch::new(shape.rows, shape.columns, seed);
        let mut buf = Vec::new();
        for j in 0..w {
            let (lo, hi) = part(shape.columns, w, j);
            let mut acc = vec![0f32; shape.rows * (hi - lo)];
            for s in &sketches {
                let mut bytes = Vec::new();
                write_slice(s, lo, hi, &mut bytes);
                read_f32s(&bytes, acc.len(), &mut buf).unwrap();
                acc.iter_mut().zip(&buf).for_each(|(a, b)| *a += b);
            }
            put_slice(&mut summed, lo, hi, &acc);
        }
        // 3-4: candidates, exact sums.
        let mut est = Vec::new();
        let cands = candidates(&summed, dim, shape, EncodeContext::default(), &mut est);
        let mut sums = vec![0f32; cands.len()];
        for v in vs {
            let mut at = Vec::new();
            values_at(&v.keys, &v.values, &cands, &mut at);
            sums.iter_mut().zip(&at).for_each(|(s, a)| *s += a);
        }
        // 5: top k.
        let top = crate::codec::largest(&sums, shape.k);
        (
            top.iter().map(|&i| cands[i as usize]).collect(),
            top.iter().map(|&i| sums[i as usize]).collect(),
        )
    }

    #[test]
    fn planted_heavy_coordinates_are_recovered_exactly() {
        let dim = 50_000u32;
        let heavy: Vec<u32> = vec![17, 4_000, 12_345, 30_001, 49_999];
        let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(11);
        // Four workers with noise on 5,000 keys each; the heavy keys are split across workers
        // (each holds a third of the planted value on three workers), so no single worker's
        // vector reveals them: only the sum does.
        let vs: Vec<SparseGrad> = (0..4)
            .map(|w| {
                let mut keys: Vec<u32> = (0..5_000).map(|_| rng.random_range(0..dim)).collect();
                keys.extend(&heavy);
                keys.sort_unstable();
                keys.dedup();
                let values = keys
                    .iter()
                    .map(|k| {
                        if heavy.contains(k) && !(*k as usize + w).is_multiple_of(4) {
                            1.0
                        } else {
                            rng.random_range(-0.05f32..0.05)
                        }
                    })
                    .collect();
                SparseGrad { keys, values }
            })
            .collect();
        for recovery in [Recovery::Topk, Recovery::Heavymix] {
            // 5 x 1,000 cells for ~20,000 nonzero keys: each cell holds ~20 noise values.
            let params = SketchParams {
                k: 5,
                p: 8,
                columns: 1_000,
                recovery,
                ..Default::default()
            };
            let shape = params.shape(dim);
            assert_eq!(shape.candidates, 40);
            let (keys, sums) = protocol(&vs, dim, &shape);
            assert_eq!(keys, heavy, "{recovery:?}");
            for s in sums {
                assert!((2.9..3.1).contains(&s), "{recovery:?}: exact sum {s}");
            }
        }
    }

    #[test]
    fn payloads_are_checked() {
        let mut out = Vec::new();
        let mut bytes = Vec::new();
        write_f32s([1.0, -2.0], &mut bytes);
        read_f32s(&bytes, 2, &mut out).unwrap();
        assert_eq!(out, vec![1.0, -2.0]);
        assert!(read_f32s(&bytes, 3, &mut out)
            .unwrap_err()
            .contains("expected 3"));
        write_f32s([f32::NAN], &mut bytes);
        assert!(read_f32s(&bytes, 3, &mut out)
            .unwrap_err()
            .contains("not finite"));
        let shape = SketchParams::default().shape(100_000);
        assert_eq!(
            (shape.k, shape.candidates, shape.columns),
            (1000, 4000, 800)
        );
    }
}
