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

use std::collections::VecDeque;
use std::time::Instant;

use rand::seq::index::sample;
use serde::{Deserialize, Serialize};

use super::{broadcast, carry, local_message, one_from_each, read_f32s, take_carry, write_f32s};
use super::{Endpoint, Envelope, Exchange, Place, Step, DATA};
use super::{ExchangePlan, ModelState};
use crate::codec::countsketch::CountSketch;
use crate::codec::{largest, EncodeContext};
use crate::data::WorkerData;
use crate::optim::delay::DelayCompensation;
use crate::sparse::SparseGrad;

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
        // A linear merge: both sides are sorted, and the candidates are a good part of `v`.
        while v_keys.get(j).is_some_and(|&x| x < k) {
            j += 1;
        }
        out.push(if v_keys.get(j) == Some(&k) {
            v_values[j]
        } else {
            0.0
        });
    }
}

/// The `sketch` strategy: steps 1-5 above, step 1 in the worker's [`Endpoint`], steps 2-5 as
/// four [`Step`]s at the round's timestamp. What a worker's step needs of its own earlier one
/// (its `v` for step 3, the candidates for step 5) travels with the envelopes as a [`CARRY`]
/// that never leaves the worker; step 5 sends the update to the worker's own endpoint, which
/// adds it to the replica and masks its memory at the update's keys.
pub struct Sketch;

impl Exchange for Sketch {
    fn name(&self) -> &str {
        "sketch"
    }

    fn endpoint(&self, at: &Place<'_>, _data: &WorkerData) -> Result<Box<dyn Endpoint>, String> {
        let plan = at.plan;
        let shape = plan.sketch.shape(plan.dim);
        Ok(Box::new(SketchEndpoint {
            me: at.me,
            peers: at.peers,
            sketch: CountSketch::new(shape.rows, shape.columns, sketch_seed(plan.seed))
                .with_slot_table(plan.dim),
            shape,
            sent: VecDeque::new(),
            spare: Vec::new(),
            taken: SparseGrad::default(),
            scratch: SparseGrad::default(),
        }))
    }

    fn describe(&self, plan: &ExchangePlan) -> String {
        let s = &plan.sketch;
        let or_default = |x: u32, d: &str| if x == 0 { d.to_string() } else { x.to_string() };
        format!(
            "sketch, k {}, P {}, {} rows x {} columns, recovery {}, memory {}",
            or_default(s.k, "1% of dim"),
            s.p,
            s.rows,
            or_default(s.columns, "P·k/rows"),
            format!("{:?}", s.recovery).to_lowercase(),
            plan.memory.name()
        )
    }

    fn steps(&self, at: &Place<'_>) -> Result<Vec<Box<dyn Step>>, String> {
        let plan = at.plan;
        let (me, peers) = (at.me, at.peers as usize);
        let shape = plan.sketch.shape(plan.dim);
        let (lo, hi) = part(shape.columns, peers, me as usize);
        let (a, b) = part(shape.candidates, peers, me as usize);
        let threads = plan.threads_per_process;
        let sum = |name, what, len| SumStep {
            name,
            what,
            len,
            me,
            peers,
            threads,
            acc: Vec::new(),
            buf: Vec::new(),
        };
        Ok(vec![
            Box::new(sum("SumSlices", "sketch slice", shape.rows * (hi - lo))),
            Box::new(Candidates {
                me,
                peers,
                threads,
                seed: plan.seed,
                dim: plan.dim,
                shape,
                sketch: CountSketch::new(shape.rows, shape.columns, sketch_seed(plan.seed))
                    .with_slot_table(plan.dim),
                estimates: Vec::new(),
                mine: Vec::new(),
                buf: Vec::new(),
            }),
            Box::new(sum("SumExact", "exact values", b - a)),
            Box::new(ApplyTopK {
                me,
                peers,
                threads,
                plan: plan.clone(),
                delay: (plan.staleness > 0 && plan.delay_compensation > 0.0).then(|| {
                    DelayCompensation::new(plan.delay_compensation, plan.staleness, plan.dim)
                }),
                compensated: Vec::new(),
                k: shape.k,
                total: Vec::new(),
                buf: Vec::new(),
                update: SparseGrad::default(),
                changes: Vec::new(),
            }),
        ])
    }
}

/// Whether workers `a` and `b` are in different processes of `threads` workers each.
fn apart(a: u32, b: u32, threads: usize) -> bool {
    a as usize / threads != b as usize / threads
}

/// A worker's side of `sketch`: step 1, and the update applied with its masking.
struct SketchEndpoint {
    me: u32,
    peers: u32,
    sketch: CountSketch,
    shape: SketchShape,
    /// The compensated vectors of the rounds sent whose update has not arrived, oldest first
    /// (one at staleness 0; `1 + s` with `s` rounds in flight): each update masks its own
    /// round's.
    sent: VecDeque<SparseGrad>,
    /// Buffers of masked vectors, for the next rounds' copies.
    spare: Vec<SparseGrad>,
    taken: SparseGrad,
    scratch: SparseGrad,
}

impl Endpoint for SketchEndpoint {
    /// The update, from this worker's own step 5.
    fn changes_per_round(&self) -> Option<usize> {
        Some(1)
    }

    /// Adds the update to the replica, and masks the memory (momentum-factor masking): this
    /// worker's `v` at the update's coordinates counts as sent.
    fn receive(
        &mut self,
        r: u64,
        changes: Vec<Envelope>,
        st: &mut ModelState,
    ) -> Result<(), String> {
        let me = self.me;
        for msg in changes {
            let update = match (&msg.local, msg.src == me && msg.kind == DATA) {
                (Some(l), true) => &l.pairs,
                _ => {
                    return Err(format!(
                        "worker {me}, round {r}: a model change from worker {}, under the \
                         sketch exchange, where every worker computes its own",
                        msg.src
                    ))
                }
            };
            let v = self.sent.pop_front().ok_or_else(|| {
                format!("worker {me}, round {r}: an update for a round this worker did not send")
            })?;
            st.weights
                .add(update)
                .map_err(|e| format!("worker {me}, round {r}: model diverged: {e}"))?;
            self.taken.keys.clone_from(&update.keys);
            values_at(&v.keys, &v.values, &update.keys, &mut self.taken.values);
            st.memory.update(&v, filter_zero(&mut self.taken));
            self.spare.push(v);
        }
        Ok(())
    }

    /// Step 1: sketches `v`; column slice j goes to worker j, and `v` to this worker's own
    /// step 3. Sends no codec messages: returns 0 and 0 keys.
    fn send(
        &mut self,
        _r: u64,
        grad: &mut SparseGrad,
        rows: u32,
        st: &mut ModelState,
        out: &mut Vec<Envelope>,
    ) -> Result<(u64, u64), String> {
        st.memory.compensate(grad, &mut self.scratch);
        let (sketch, shape) = (&mut self.sketch, &self.shape);
        sketch.clear();
        for (&k, &v) in grad.keys.iter().zip(&grad.values) {
            sketch.insert(k, v);
        }
        for dest in 0..self.peers {
            let (lo, hi) = part(shape.columns, self.peers as usize, dest as usize);
            let mut payload = Vec::with_capacity(4 * shape.rows * (hi - lo));
            write_slice(sketch, lo, hi, &mut payload);
            out.push(Envelope {
                dest,
                src: self.me,
                rows,
                kind: DATA,
                payload,
                local: None,
            });
        }
        let mut v = self.spare.pop().unwrap_or_default();
        v.clone_from(grad);
        self.sent.push_back(v);
        out.push(carry(self.me, std::mem::take(grad)));
        Ok((0, 0))
    }
}

/// Steps 2 and 4 share a shape: sum one round's f32 payloads of `len` values, one from each
/// worker, in worker order (uplink), and send the sum to every worker (downlink); what the
/// worker carries passes on to its next step.
struct SumStep {
    name: &'static str,
    what: &'static str,
    len: usize,
    me: u32,
    peers: usize,
    threads: usize,
    acc: Vec<f32>,
    buf: Vec<f32>,
}

impl Step for SumStep {
    fn name(&self) -> &str {
        self.name
    }

    fn expected(&self) -> Option<usize> {
        Some(self.peers + 1)
    }

    fn run(
        &mut self,
        r: u64,
        mut msgs: Vec<Envelope>,
        st: &mut ModelState,
        out: &mut Vec<Envelope>,
    ) -> Result<(), String> {
        let (me, what, len) = (self.me, self.what, self.len);
        let t = Instant::now();
        let carried = own_and_one_from_each(&mut msgs, me, self.peers)
            .map_err(|e| format!("worker {me}, round {r}: {what}: {e}"))?;
        let (acc, buf) = (&mut self.acc, &mut self.buf);
        acc.clear();
        acc.resize(len, 0f32);
        for m in &msgs {
            st.received(true, m.payload.len(), apart(m.src, me, self.threads));
            read_f32s(&m.payload, len, buf).map_err(|e| {
                format!(
                    "worker {me}, round {r}: bad {what} from worker {}: {e}",
                    m.src
                )
            })?;
            acc.iter_mut().zip(buf.iter()).for_each(|(a, b)| *a += b);
        }
        let mut payload = Vec::with_capacity(4 * len);
        write_f32s(acc.iter().copied(), &mut payload);
        broadcast(me, 0, 0..self.peers as u32, payload, |e| {
            st.sent(false, e.payload.len(), apart(e.dest, me, self.threads));
            out.push(e);
        });
        out.push(carry(me, carried));
        st.aggregate_ms += crate::metrics::ms(t);
        Ok(())
    }
}

/// Step 3: assembles the summed sketch, recovers the candidates, and sends this worker's exact
/// values of candidate chunk j to worker j; the candidates pass on to step 5.
struct Candidates {
    me: u32,
    peers: usize,
    threads: usize,
    seed: u64,
    dim: u32,
    shape: SketchShape,
    sketch: CountSketch,
    estimates: Vec<f32>,
    mine: Vec<f32>,
    buf: Vec<f32>,
}

impl Step for Candidates {
    fn name(&self) -> &str {
        "Candidates"
    }

    fn expected(&self) -> Option<usize> {
        Some(self.peers + 1)
    }

    fn run(
        &mut self,
        r: u64,
        mut msgs: Vec<Envelope>,
        st: &mut ModelState,
        out: &mut Vec<Envelope>,
    ) -> Result<(), String> {
        let (me, peers, shape) = (self.me, self.peers, self.shape);
        let t = Instant::now();
        let what = "summed sketch slices";
        let v = own_and_one_from_each(&mut msgs, me, peers)
            .map_err(|e| format!("worker {me}, round {r}: {what}: {e}"))?;
        for m in &msgs {
            st.received(false, m.payload.len(), apart(m.src, me, self.threads));
            let (lo, hi) = part(shape.columns, peers, m.src as usize);
            read_f32s(&m.payload, shape.rows * (hi - lo), &mut self.buf).map_err(|e| {
                format!(
                    "worker {me}, round {r}: bad summed sketch slice from worker {}: {e}",
                    m.src
                )
            })?;
            put_slice(&mut self.sketch, lo, hi, &self.buf);
        }
        let ctx = EncodeContext {
            seed: self.seed,
            round: r,
            ..Default::default()
        };
        let chosen = candidates(&self.sketch, self.dim, &shape, ctx, &mut self.estimates);
        values_at(&v.keys, &v.values, &chosen, &mut self.mine);
        for dest in 0..peers {
            let (a, b) = part(self.mine.len(), peers, dest);
            let mut payload = Vec::with_capacity(4 * (b - a));
            write_f32s(self.mine[a..b].iter().copied(), &mut payload);
            st.sent(true, payload.len(), apart(dest as u32, me, self.threads));
            out.push(Envelope {
                dest: dest as u32,
                src: me,
                rows: 0,
                kind: DATA,
                payload,
                local: None,
            });
        }
        let chosen = SparseGrad {
            keys: chosen,
            values: Vec::new(),
        };
        out.push(carry(me, chosen));
        st.aggregate_ms += crate::metrics::ms(t);
        Ok(())
    }
}

/// Step 5: the top k of the exact sums is the update; (1/W)·sum goes through the optimizer,
/// and the change to this worker's own endpoint.
struct ApplyTopK {
    me: u32,
    peers: usize,
    threads: usize,
    plan: ExchangePlan,
    /// `train.delay_compensation`, from this worker's own updates (every worker's are the
    /// same).
    delay: Option<DelayCompensation>,
    compensated: Vec<f32>,
    k: usize,
    total: Vec<f32>,
    buf: Vec<f32>,
    update: SparseGrad,
    changes: Vec<f32>,
}

impl Step for ApplyTopK {
    fn name(&self) -> &str {
        "ApplyTopK"
    }

    fn expected(&self) -> Option<usize> {
        Some(self.peers + 1)
    }

    fn run(
        &mut self,
        r: u64,
        mut msgs: Vec<Envelope>,
        st: &mut ModelState,
        out: &mut Vec<Envelope>,
    ) -> Result<(), String> {
        let (me, peers) = (self.me, self.peers);
        let t = Instant::now();
        let chosen = own_and_one_from_each(&mut msgs, me, peers)
            .map_err(|e| format!("worker {me}, round {r}: sums: {e}"))?
            .keys;
        let n = chosen.len();
        self.total.clear();
        self.total.resize(n, 0f32);
        for m in &msgs {
            st.received(false, m.payload.len(), apart(m.src, me, self.threads));
            let (a, b) = part(n, peers, m.src as usize);
            read_f32s(&m.payload, b - a, &mut self.buf).map_err(|e| {
                format!(
                    "worker {me}, round {r}: bad sums from worker {}: {e}",
                    m.src
                )
            })?;
            self.total[a..b].copy_from_slice(&self.buf);
        }
        let top = largest(&self.total, self.k);
        let update = &mut self.update;
        update.keys.clear();
        update.keys.extend(top.iter().map(|&i| chosen[i as usize]));
        update.values.clear();
        (update.values).extend(top.iter().map(|&i| self.total[i as usize] / peers as f32));
        let grads = match self.delay.as_mut() {
            Some(dc) => {
                if self.plan.checkpoints.due(r) {
                    // A checkpoint's round is computed on the whole model.
                    dc.clear();
                }
                dc.compensate(&update.keys, &update.values, &mut self.compensated);
                &self.compensated
            }
            None => &update.values,
        };
        st.optimizer.step(r, &update.keys, grads, &mut self.changes);
        std::mem::swap(&mut update.values, &mut self.changes);
        if let Some(dc) = self.delay.as_mut() {
            dc.record(update);
        }
        out.push(local_message(me, me, 0, self.plan.dim, update.clone(), 0));
        st.update_ms = crate::metrics::ms(t);
        Ok(())
    }
}

/// What steps 2-5 receive each round: what the worker's own earlier step carried (taken out of
/// `msgs` and returned), and one message from each of `peers` workers (sorted by sender).
fn own_and_one_from_each(
    msgs: &mut Vec<Envelope>,
    me: u32,
    peers: usize,
) -> Result<SparseGrad, String> {
    let carried = take_carry(msgs, me)?;
    one_from_each(msgs, peers)?;
    Ok(carried)
}

/// Drops the entries of `v` whose value is 0 (keys this worker did not hold), in place.
fn filter_zero(v: &mut SparseGrad) -> &SparseGrad {
    let mut j = 0;
    for i in 0..v.keys.len() {
        if v.values[i] != 0.0 {
            v.keys[j] = v.keys[i];
            v.values[j] = v.values[i];
            j += 1;
        }
    }
    v.keys.truncate(j);
    v.values.truncate(j);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::harness::{grad, plan, round};
    use crate::exchange::read_f32s;
    use crate::exchange::CARRY;
    use crate::sparse::SparseGrad;
    use rand::{RngExt, SeedableRng};

    /// One round through the five steps on two workers, with as many candidates as keys (so
    /// the exact values decide): the update is the top k of the summed vectors over W, through
    /// the optimizer, in both replicas; each worker's residual loses exactly its own values
    /// at the update's keys (momentum-factor masking), and what the steps carry never leaves
    /// its worker.
    #[test]
    fn the_update_is_the_exact_top_k_and_each_memory_is_masked_at_it() {
        let train = "exchange = \"sketch\"\nmemory = \"residual\"\n";
        let plan = plan(train, "[train.sketch]\nk = 2\np = 8\n", 16, 1);
        let g0 = grad(&[(1, 2.0), (3, 8.0), (7, -1.0)]);
        let g1 = grad(&[(3, 4.0), (7, -6.0), (9, 0.5)]);
        let (states, sent) = round(&plan, &[(g0, 5), (g1, 1)]).unwrap();
        assert_eq!(sent.len(), 4, "four steps");
        for e in sent.iter().flatten().filter(|e| e.kind == CARRY) {
            assert!(
                e.src == e.dest && e.local.as_ref().is_some_and(|l| l.encoded_len == 0),
                "{e:?}"
            );
        }
        // Sums: key 3 12, key 7 −7 (key 1 2, key 9 0.5 not taken); over W = 2, rate 0.5.
        let mut residuals: Vec<Vec<(u32, f32)>> = Vec::new();
        for st in &states {
            let st = &mut *st.borrow_mut();
            let w = st.weights.to_vec();
            let mut want = vec![0.0; 16];
            (want[3], want[7]) = (-3.0, 1.75);
            assert_eq!(w, want);
            let (mut left, mut scratch) = (SparseGrad::default(), SparseGrad::default());
            st.memory.compensate(&mut left, &mut scratch);
            let kept = |(k, v): (&u32, &f32)| (*v != 0.0).then_some((*k, *v));
            residuals.push(
                left.keys
                    .iter()
                    .zip(&left.values)
                    .filter_map(kept)
                    .collect(),
            );
        }
        assert_eq!(residuals, [vec![(1, 2.0)], vec![(9, 0.5)]]);
    }

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
                acc.iter_mut().zip(buf.iter()).for_each(|(a, b)| *a += b);
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
