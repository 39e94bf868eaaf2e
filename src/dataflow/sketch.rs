//! The Sketched-SGD exchange as four operators at the round's timestamp (protocol steps 2-5 of
//! [`crate::exchange::sketch`]; step 1 is the gradient operator's).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

use timely::dataflow::Stream;

use super::{ms, one_from_each, per_round};
use super::{RoundTime, Supervisor, TrainPlan, WorkerState};
use crate::codec::countsketch::CountSketch;
use crate::codec::{largest, EncodeContext};
use crate::exchange::sketch::{candidates, part, put_slice, sketch_seed, values_at};
use crate::exchange::{broadcast, local_message, read_f32s, write_f32s};
use crate::exchange::{Envelope, DATA};
use crate::sparse::SparseGrad;

/// Steps 2-5 of Sketched-SGD. Input: the column slices of every worker's sketch (routed to the
/// slice's owner). Output: the round's update, to this worker's own gradient step (a local
/// envelope): every worker computes the same top-k update, and each gradient step adds it to
/// its replica.
pub fn sketch_exchange<'s>(
    slices: Stream<'s, RoundTime, Vec<Envelope>>,
    plan: &TrainPlan,
    state: Rc<RefCell<WorkerState>>,
    supervisor: Supervisor,
) -> Stream<'s, RoundTime, Vec<Envelope>> {
    let scope = slices.scope();
    let me = scope.index() as u32;
    let peers = scope.peers();
    let plan = Rc::new(plan.clone());
    let (shape, dim) = (plan.sketch.shape(plan.dim), plan.dim);
    let threads = plan.threads_per_process;
    let remote = move |w: u32| w as usize / threads != me as usize / threads;
    let bad = move |r: u64, what: &str, src: u32, e: String| {
        format!("worker {me}, round {r}: bad {what} from worker {src}: {e}")
    };
    // Step 2: sum the column slice this worker owns over all workers; send it to everyone.
    let (lo, hi) = part(shape.columns, peers, me as usize);
    let sum = SumStep { me, peers, threads };
    let summed = sum.build(
        slices,
        "SumSlices",
        "sketch slice",
        shape.rows * (hi - lo),
        &state,
        &supervisor,
    );

    // Step 3: assemble the summed sketch, recover the candidates, send this worker's exact
    // values of candidate chunk j to worker j.
    let mut sketch = CountSketch::new(shape.rows, shape.columns, sketch_seed(plan.seed));
    let (st3, plan3) = (state.clone(), plan.clone());
    let (mut estimates, mut mine, mut buf) = (Vec::new(), Vec::new(), Vec::new());
    let exact = per_round(
        summed,
        "Candidates",
        Some(peers),
        supervisor.clone(),
        move |r, mut msgs, out| {
            let st = &mut *st3.borrow_mut();
            let t = Instant::now();
            one_from_each(&mut msgs, peers)
                .map_err(|e| format!("worker {me}, round {r}: summed sketch slices: {e}"))?;
            for m in &msgs {
                st.received(false, m.payload.len(), remote(m.src));
                let (lo, hi) = part(shape.columns, peers, m.src as usize);
                read_f32s(&m.payload, shape.rows * (hi - lo), &mut buf)
                    .map_err(|e| bad(r, "summed sketch slice", m.src, e))?;
                put_slice(&mut sketch, lo, hi, &buf);
            }
            let ctx = EncodeContext {
                seed: plan3.seed,
                round: r,
                ..Default::default()
            };
            st.candidates = candidates(&sketch, plan3.dim, &shape, ctx, &mut estimates);
            values_at(
                &st.compensated.keys,
                &st.compensated.values,
                &st.candidates,
                &mut mine,
            );
            for dest in 0..peers {
                let (a, b) = part(mine.len(), peers, dest);
                let mut payload = Vec::with_capacity(4 * (b - a));
                write_f32s(mine[a..b].iter().copied(), &mut payload);
                st.sent(true, payload.len(), remote(dest as u32));
                out.push(Envelope {
                    dest: dest as u32,
                    src: me,
                    rows: 0,
                    kind: DATA,
                    payload,
                    local: None,
                });
            }
            st.aggregate_ms += ms(t);
            Ok(())
        },
    );

    // Step 4: sum the exact values of this worker's candidate chunk; send the sums to everyone.
    let (a, b) = part(shape.candidates, peers, me as usize);
    let sums = sum.build(
        exact,
        "SumExact",
        "exact values",
        b - a,
        &state,
        &supervisor,
    );

    // Step 5: the top k of the exact sums is the update; every worker applies (1/W)·sum through
    // the optimizer and masks its memory where its own v was taken.
    let (mut total, mut buf, mut update, mut changes) =
        (Vec::new(), Vec::new(), SparseGrad::default(), Vec::new());
    let mut taken = SparseGrad::default();
    per_round(
        sums,
        "ApplyTopK",
        Some(peers),
        supervisor,
        move |r, mut msgs, out| {
            let st = &mut *state.borrow_mut();
            let t = Instant::now();
            one_from_each(&mut msgs, peers)
                .map_err(|e| format!("worker {me}, round {r}: sums: {e}"))?;
            let n = st.candidates.len();
            total.clear();
            total.resize(n, 0f32);
            for m in &msgs {
                st.received(false, m.payload.len(), remote(m.src));
                let (a, b) = part(n, peers, m.src as usize);
                read_f32s(&m.payload, b - a, &mut buf).map_err(|e| bad(r, "sums", m.src, e))?;
                total[a..b].copy_from_slice(&buf);
            }
            let top = largest(&total, shape.k);
            update.keys.clear();
            update
                .keys
                .extend(top.iter().map(|&i| st.candidates[i as usize]));
            update.values.clear();
            update
                .values
                .extend(top.iter().map(|&i| total[i as usize] / peers as f32));
            st.optimizer
                .step(r, &update.keys, &update.values, &mut changes);
            std::mem::swap(&mut update.values, &mut changes);
            // Momentum-factor masking: this worker's v at the k coordinates counts as sent.
            taken.keys.clone_from(&update.keys);
            values_at(
                &st.compensated.keys,
                &st.compensated.values,
                &update.keys,
                &mut taken.values,
            );
            let compensated = std::mem::take(&mut st.compensated);
            st.memory.update(&compensated, filter_zero(&mut taken));
            st.compensated = compensated;
            out.push(local_message(me, me, 0, dim, update.clone(), 0));
            st.update_ms = ms(t);
            Ok(())
        },
    )
}

/// Steps 2 and 4 share a shape: sum one round's f32 payloads of `len` values, one from each
/// worker, in worker order (uplink), and send the sum to every worker (downlink).
#[derive(Clone, Copy)]
struct SumStep {
    me: u32,
    peers: usize,
    threads: usize,
}

impl SumStep {
    fn build<'s>(
        self,
        input: Stream<'s, RoundTime, Vec<Envelope>>,
        name: &str,
        what: &'static str,
        len: usize,
        state: &Rc<RefCell<WorkerState>>,
        supervisor: &Supervisor,
    ) -> Stream<'s, RoundTime, Vec<Envelope>> {
        let (state, mut acc, mut buf) = (state.clone(), Vec::new(), Vec::new());
        let SumStep { me, peers, threads } = self;
        let remote = move |w: u32| w as usize / threads != me as usize / threads;
        per_round(
            input,
            name,
            Some(peers),
            supervisor.clone(),
            move |r, mut msgs, out| {
                let st = &mut *state.borrow_mut();
                let t = Instant::now();
                one_from_each(&mut msgs, peers)
                    .map_err(|e| format!("worker {me}, round {r}: {what}: {e}"))?;
                acc.clear();
                acc.resize(len, 0f32);
                for m in &msgs {
                    st.received(true, m.payload.len(), remote(m.src));
                    read_f32s(&m.payload, len, &mut buf).map_err(|e| {
                        format!(
                            "worker {me}, round {r}: bad {what} from worker {}: {e}",
                            m.src
                        )
                    })?;
                    acc.iter_mut().zip(&buf).for_each(|(a, b)| *a += b);
                }
                let mut payload = Vec::with_capacity(4 * len);
                write_f32s(acc.iter().copied(), &mut payload);
                broadcast(me, 0, 0..peers as u32, payload, |e| {
                    st.sent(false, e.payload.len(), remote(e.dest));
                    out.push(e);
                });
                st.aggregate_ms += ms(t);
                Ok(())
            },
        )
    }
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
