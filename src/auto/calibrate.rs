//! `train.exchange = "auto"` and `compressor = "auto"`: before training, every worker measures
//! what a round is made of on the job's own data and link, and all choose the configuration
//! with the least predicted round time ([`crate::exchange::cost`]).
//!
//! Named steps, on every worker, all starting together:
//! 1. **measure**: the gradients of `W` of its batches at the initial model (their pairs, and
//!    the union of their keys for the sum's size), every candidate codec on the first (whole,
//!    and split by owner as `sharded` sends it), the downlink's change, adding pairs and the
//!    optimizer's step;
//! 2. **probe** the link in a small dataflow of its own: rounds in which every worker sends a
//!    few bytes, then a gradient's worth, to every other worker; the first give a hop's time,
//!    the difference the rate;
//! 3. **share** the numbers with every worker ([`agree`]) and average them in worker order, so
//!    that every worker predicts from the same numbers and chooses alike.
//!
//! The choice depends on time measured on this run's machines, so two runs of one job may
//! choose differently: the run prints its choice as job settings that replay it.

use std::time::{Duration, Instant};

use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::{Exchange, Input, Inspect, Probe};
use timely::dataflow::InputHandle;
use timely::worker::Worker;

use crate::codec::{build_codec, CodecSpec, EncodeContext};
use crate::dataflow::{Supervisor, TrainPlan, WorkerData};
use crate::exchange::cost::{CodecCost, DownlinkCost, LinkCost, RoundInputs};
use crate::exchange::ownership::Owners;
use crate::exchange::ExchangeKind;
use crate::memory::{Memory, MemorySpec};
use crate::model::gradient::GradientWorkspace;
use crate::sparse::SparseGrad;

/// Repeats of each timed step (the median is kept).
const REPEATS: usize = 5;
/// Probe rounds of each payload size (the median is kept).
const PROBE_ROUNDS: usize = 7;
/// The probe's large payload per receiver: a gradient's uncompressed size, within these (at
/// least enough for a loopback's rate to show above a hop's time).
const PROBE_BYTES: (usize, usize) = (64 << 10, 1 << 20);

/// What calibration measured, averaged over the workers.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    /// Everything but the codecs.
    pub round: RoundInputs,
    /// Each candidate codec, in the order given.
    pub codecs: Vec<CodecCost>,
    /// Each candidate downlink codec (`sharded`'s), in the order given.
    pub downlinks: Vec<DownlinkCost>,
}

/// A downlink codec to measure on an owner's change (with the owner's residual): its name and
/// spec.
pub type Downlink = (String, CodecSpec);

/// Measures a round of `plan` on this worker's `data` for each codec of `codecs` and each
/// downlink of `downlinks`, probes the link with the other workers and returns the numbers
/// every worker agrees on, with the payload bytes this worker sent to other processes.
pub fn calibrate(
    worker: &mut Worker,
    data: &WorkerData,
    plan: &TrainPlan,
    codecs: &[Candidate],
    downlinks: &[Downlink],
    supervisor: &Supervisor,
) -> Result<(Calibration, u64), String> {
    let (me, workers) = (worker.index() as u32, worker.peers());
    let (numbers, sent) = probe(
        worker,
        plan.threads_per_process,
        || measure(data, plan, me, workers, codecs, downlinks),
        supervisor,
    )?;
    Ok((
        calibration(&numbers, plan, workers, codecs, downlinks),
        sent,
    ))
}

/// What one of `workers` workers (one a process) would measure of a round of `plan` on `data`
/// for each codec of `codecs`, without a link (no hop, no rate): the parts of the cost model
/// that do not depend on the network, for predictions on paper.
pub fn measure_alone(
    data: &WorkerData,
    plan: &TrainPlan,
    workers: usize,
    codecs: &[Candidate],
    downlinks: &[Downlink],
) -> Result<Calibration, String> {
    let (mut numbers, _) = measure(data, plan, 0, workers, codecs, downlinks)?;
    numbers[9] = f64::MAX / 4.0;
    let plan = TrainPlan {
        threads_per_process: 1,
        ..plan.clone()
    };
    Ok(calibration(&numbers, &plan, workers, codecs, downlinks))
}

/// The calibration of a worker's measured `link` numbers (in [`measure`]'s layout).
fn calibration(
    link: &[f64],
    plan: &TrainPlan,
    workers: usize,
    codecs: &[Candidate],
    downlinks: &[Downlink],
) -> Calibration {
    let mut round = RoundInputs {
        workers,
        threads: plan.threads_per_process,
        gradient_ms: link[0],
        pairs: link[1],
        union_keys: link[2],
        add_ns: link[3],
        update_ns: link[4],
        change_bytes: link[5],
        change_encode_ms: link[6],
        change_decode_ms: link[7],
        link: LinkCost {
            hop_ms: link[8],
            bytes_per_s: link[9],
        },
        staleness: plan.staleness,
    };
    round.link.bytes_per_s = round.link.bytes_per_s.max(1.0);
    let codecs: Vec<CodecCost> = codecs
        .iter()
        .enumerate()
        .map(|(i, (name, _, _))| {
            let c = &link[FIXED + CODEC_FIELDS * i..];
            CodecCost {
                name: name.clone(),
                encode_whole_ms: c[0],
                decode_whole_ms: c[1],
                whole_bytes: c[2],
                encode_pieces_ms: c[3],
                decode_piece_ms: c[4],
                pieces_bytes: c[5],
            }
        })
        .collect();
    let after_codecs = FIXED + CODEC_FIELDS * codecs.len();
    let downlinks = downlinks
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let d = &link[after_codecs + 3 * i..];
            DownlinkCost {
                name: name.clone(),
                change_bytes: d[0],
                change_encode_ms: d[1],
                change_decode_ms: d[2],
            }
        })
        .collect();
    Calibration {
        round,
        codecs,
        downlinks,
    }
}

/// Numbers before the codecs' in a worker's measurements.
const FIXED: usize = 10;
/// Numbers per codec.
const CODEC_FIELDS: usize = 6;

/// Step 1: this worker's measurements (the link's two left as 0), and the size of its first
/// gradient uncompressed (the probe's payload).
fn measure(
    data: &WorkerData,
    plan: &TrainPlan,
    me: u32,
    workers: usize,
    codecs: &[Candidate],
    downlinks: &[Downlink],
) -> Result<(Vec<f64>, usize), String> {
    let dim = plan.dim;
    let weights = initial_weights(plan);
    let rows = data.train.rows();
    let l2 = plan.l2();
    let mut workspace = GradientWorkspace::new(dim);
    let (mut union, mut scratch) = (SparseGrad::default(), SparseGrad::default());
    let mut grads = Vec::new();
    let mut gradient_ms = Vec::new();
    // A worker's batches are its own rows: its batches' gradients stand for its rounds', and
    // the union of `W` of them for the sum of `W` workers'.
    // Each batch twice, timed the second time: training's pages of the model and the
    // workspace are in memory after its first rounds, and a large model's first touches (page
    // faults) would be timed as the gradient's.
    let (model, loss) = (&*plan.model, &*plan.loss);
    let gradient = |ws: &mut GradientWorkspace, rows: &[u32], grad: &mut SparseGrad| {
        ws.minibatch(&data.train, rows, &weights, model, loss, l2, grad);
    };
    for b in (0..workers.max(ROUNDS)).flat_map(|b| [b, b]) {
        let rows = batch_rows(plan, rows, b);
        let mut grad = SparseGrad::default();
        if grads.len() == b {
            gradient(&mut workspace, &rows, &mut grad);
            grads.push(grad);
            continue;
        }
        let started = Instant::now();
        gradient(&mut workspace, &rows, &mut grad);
        gradient_ms.push(crate::metrics::ms(started));
        if b < workers {
            union.add_scaled(&grad, 1.0, &mut scratch);
        }
        grads[b] = grad;
    }
    let owners = Owners::new(plan.ownership, dim, workers as u32, plan.seed);
    let ctx = EncodeContext {
        seed: plan.seed,
        worker: me,
        ..Default::default()
    };
    let pairs = grads[0].len();
    let mut out = vec![median(gradient_ms), pairs as f64, union.len() as f64];
    let mut dense = vec![0f32; dim as usize];
    out.push(
        time(|| {
            for (&k, &v) in union.keys.iter().zip(&union.values) {
                dense[k as usize] += v;
            }
        }) * 1e6
            / union.len().max(1) as f64,
    );
    let mut rule = plan.update_rule(0, dim);
    let mut changes = Vec::new();
    let mut step = 0;
    out.push(
        time(|| {
            rule.step(step, &union.keys, &union.values, &mut changes);
            step += 1;
        }) * 1e6
            / union.len().max(1) as f64,
    );
    let mut pieces = Vec::new();
    owners.split(&union, &mut pieces);
    let change = &pieces[me as usize % pieces.len()];
    // The owner's change, with the residual the owner keeps for a lossy downlink.
    let changes = vec![change.clone(); ROUNDS];
    let change_cost = |name: String, spec: &CodecSpec| {
        let downlink = (name, spec.clone(), MemorySpec::Residual);
        rounds_of(&downlink, &changes, dim, ctx, None).map(|(e, d, b)| [b, e, d])
    };
    out.extend(change_cost("train.downlink".into(), &plan.downlink)?);
    out.extend([0.0, 0.0]);
    for c in codecs {
        let whole = rounds_of(c, &grads, dim, ctx, None)?;
        let split = rounds_of(c, &grads, dim, ctx, Some(&owners))?;
        out.extend([
            whole.0,
            whole.1,
            whole.2,
            split.0,
            split.1 / workers as f64,
            split.2,
        ]);
    }
    for (name, spec) in downlinks {
        out.extend(change_cost(format!("downlink {name}"), spec)?);
    }
    Ok((out, pairs * 8))
}

/// A codec to measure: its name, its spec and the memory beside it.
pub type Candidate = (String, CodecSpec, MemorySpec);

/// Rounds a codec runs with its memory before it is timed, and after: the memory's residual
/// grows over the first rounds, and with it the messages.
const ROUNDS: usize = 8;

/// A codec's rounds on `grads` with its memory, whole or split by `owners` as `sharded` sends
/// them: the median over the second half of the rounds of the ms to compensate, encode and
/// update the memory, the ms to decode every message, and the bytes.
fn rounds_of(
    (name, spec, memory): &Candidate,
    grads: &[SparseGrad],
    dim: u32,
    ctx: EncodeContext,
    owners: Option<&Owners>,
) -> Result<(f64, f64, f64), String> {
    let mut rounds = CodecRounds::new(name, spec, memory.build(dim), dim, ctx, owners)?;
    let (mut encode, mut decode, mut bytes) = (Vec::new(), Vec::new(), Vec::new());
    for (r, g) in grads.iter().enumerate() {
        let (e, d, b) = rounds.round(r as u64, g.clone())?;
        if r >= grads.len() / 2 {
            encode.push(e);
            decode.push(d);
            bytes.push(b as f64);
        }
    }
    Ok((median(encode), median(decode), median(bytes)))
}

/// A codec and its memory run round after round on one worker's gradients, as an exchange's
/// endpoint runs them (compensate, encode each piece, decode it, update), without a link.
struct CodecRounds<'a> {
    name: &'a str,
    codec: Box<dyn crate::codec::Codec>,
    memory: Box<dyn Memory>,
    dim: u32,
    ctx: EncodeContext,
    owners: Option<&'a Owners>,
    buf: Vec<u8>,
    decoded: SparseGrad,
    scratch: SparseGrad,
    sent: SparseGrad,
    pieces: Vec<SparseGrad>,
}

impl<'a> CodecRounds<'a> {
    fn new(
        name: &'a str,
        spec: &CodecSpec,
        memory: Box<dyn Memory>,
        dim: u32,
        ctx: EncodeContext,
        owners: Option<&'a Owners>,
    ) -> Result<Self, String> {
        Ok(CodecRounds {
            name,
            codec: build_codec(spec).map_err(|e| format!("{name}: {e}"))?,
            memory,
            dim,
            ctx,
            owners,
            buf: Vec::new(),
            decoded: SparseGrad::default(),
            scratch: SparseGrad::default(),
            sent: SparseGrad::default(),
            pieces: Vec::new(),
        })
    }

    /// Round `round` of gradient `g`: the ms to compensate, encode and update the memory, the
    /// ms to decode every message, and their bytes.
    fn round(&mut self, round: u64, mut g: SparseGrad) -> Result<(f64, f64, usize), String> {
        let name = self.name;
        let (mut e, mut d, mut b) = (0.0, 0.0, 0);
        let started = Instant::now();
        self.memory.compensate(&mut g, &mut self.scratch);
        e += crate::metrics::ms(started);
        match self.owners {
            Some(o) => o.split(&g, &mut self.pieces),
            None => self.pieces = vec![g.clone()],
        }
        self.sent.clear();
        for (i, piece) in self.pieces.iter().enumerate() {
            let ctx = EncodeContext {
                round,
                piece: i as u32 * self.owners.is_some() as u32,
                ..self.ctx
            };
            self.buf.clear();
            let started = Instant::now();
            self.codec
                .encode(&piece.keys, &piece.values, self.dim, ctx, &mut self.buf)
                .map_err(|e| format!("{name}: {e}"))?;
            e += crate::metrics::ms(started);
            let started = Instant::now();
            self.codec
                .decode(&self.buf, &mut self.decoded)
                .map_err(|e| format!("{name}: {e}"))?;
            d += crate::metrics::ms(started);
            b += self.buf.len();
            self.sent.add_scaled(&self.decoded, 1.0, &mut self.scratch);
        }
        let started = Instant::now();
        self.memory.update(&g, &self.sent);
        e += crate::metrics::ms(started);
        Ok((e, d, b))
    }
}

/// The error-feedback memory of `plan` (its codec, memory and exchange) on worker `me` of
/// `workers` after `rounds` rounds of this worker's batch gradients at the initial model, as
/// saved for a checkpoint (`None` for a memory that holds nothing or cannot be saved).
///
/// A memory's residual grows over many rounds on a large model (every key touched and not yet
/// sent), and with it the messages and the codec's work: a trial of a few rounds from an
/// empty memory would time the codec on messages smaller than training's ([`crate::auto`]).
pub fn warmed_memory(
    data: &WorkerData,
    plan: &TrainPlan,
    me: u32,
    workers: usize,
    rounds: u64,
) -> Result<Option<Vec<u8>>, String> {
    if plan.memory == MemorySpec::None || data.train.rows() == 0 {
        return Ok(None);
    }
    let dim = plan.dim;
    let owners = Owners::new(plan.ownership, dim, workers as u32, plan.seed);
    let split = (plan.exchange == ExchangeKind::Sharded).then_some(&owners);
    let ctx = EncodeContext {
        seed: plan.seed,
        worker: me,
        ..Default::default()
    };
    let name = plan.codec.name().to_string();
    let memory = plan.memory.build(dim);
    let mut codec = CodecRounds::new(&name, &plan.codec, memory, dim, ctx, split)?;
    let weights = initial_weights(plan);
    let mut workspace = GradientWorkspace::new(dim);
    for r in 0..rounds {
        codec.round(
            r,
            batch_gradient(data, plan, &weights, &mut workspace, r as usize),
        )?;
    }
    Ok(codec.memory.save())
}

/// The gradient of this worker's batch `b` ([`batch_rows`]) at `weights`.
fn batch_gradient(
    data: &WorkerData,
    plan: &TrainPlan,
    weights: &[f32],
    workspace: &mut GradientWorkspace,
    b: usize,
) -> SparseGrad {
    let rows = batch_rows(plan, data.train.rows(), b);
    let (model, loss) = (&*plan.model, &*plan.loss);
    let mut grad = SparseGrad::default();
    workspace.minibatch(
        &data.train,
        &rows,
        weights,
        model,
        loss,
        plan.l2(),
        &mut grad,
    );
    grad
}

/// The model a run starts from.
pub(crate) fn initial_weights(plan: &TrainPlan) -> Vec<f32> {
    match &plan.initial_weights {
        Some(init) => {
            let mut w = vec![0.0; plan.dim as usize];
            init.weights.fill(&mut w);
            w
        }
        None => {
            let mut w = vec![0.0; plan.dim as usize];
            plan.model.init(plan.seed, &mut w);
            w
        }
    }
}

/// The rows of a worker's batch `b` of its `rows` rows, a round's share of an epoch each
/// (consecutive, wrapping around).
fn batch_rows(plan: &TrainPlan, rows: usize, b: usize) -> Vec<u32> {
    let batch = rows.div_ceil(plan.rounds_per_epoch.max(1) as usize).max(1);
    (0..batch)
        .map(|i| ((b * batch + i) % rows.max(1)) as u32)
        .take(rows)
        .collect()
}

/// The median ms of [`REPEATS`] runs of `f`, after one to warm up.
fn time(mut f: impl FnMut()) -> f64 {
    f();
    median(
        (0..REPEATS)
            .map(|_| {
                let started = Instant::now();
                f();
                crate::metrics::ms(started)
            })
            .collect(),
    )
}

/// The upper median (0 for none).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Steps 1 to 3: after a first round that starts them together, `measure`s this worker's
/// numbers, probes the link (a hop's ms and the rate go into them) and returns every worker's
/// numbers averaged, in worker order.
fn probe(
    worker: &mut Worker,
    threads: usize,
    measure: impl FnOnce() -> Result<(Vec<f64>, usize), String>,
    supervisor: &Supervisor,
) -> Result<(Vec<f64>, u64), String> {
    let (me, workers) = (worker.index() as u32, worker.peers() as u32);
    let remote = (workers as usize).saturating_sub(threads);
    let mut sent = 0;
    // (to, payload)
    type Message = (u32, Vec<u8>);
    let mut input = InputHandle::<u64, CapacityContainerBuilder<Vec<Message>>>::new();
    let probe = worker.dataflow(|scope| {
        scope
            .input_from(&mut input)
            .container::<Vec<_>>()
            .exchange(|m: &Message| m.0 as u64)
            .probe()
            .0
    });
    let mut run_round = |worker: &mut Worker, payload: &[u8]| {
        sent += (remote * (MESSAGE_HEADER + payload.len())) as u64;
        let started = Instant::now();
        for to in (0..workers).filter(|&w| w != me) {
            input.send((to, payload.to_vec()));
        }
        input.advance_to(input.time() + 1);
        // Not parking (a parked worker wakes late and would add to the hop), but yielding the
        // core to the process's network threads.
        while probe.less_than(input.time()) {
            if supervisor.is_failed() {
                return Err(supervisor.message().unwrap_or_else(|| "failed".into()));
            }
            if !worker.step() {
                break;
            }
            std::thread::yield_now();
        }
        Ok(crate::metrics::ms(started))
    };
    // A first round is a barrier: every worker then measures at once, its processes sharing
    // the machine's cores as they will in training.
    run_round(worker, &[0; 8])?;
    let (mut local, gradient_bytes) = measure()?;
    let large = gradient_bytes.clamp(PROBE_BYTES.0, PROBE_BYTES.1);
    let small: Vec<f64> = (0..PROBE_ROUNDS)
        .map(|_| run_round(worker, &[0; 8]))
        .collect::<Result<_, String>>()?;
    let payload = vec![1; large];
    let big: Vec<f64> = (0..PROBE_ROUNDS)
        .map(|_| run_round(worker, &payload))
        .collect::<Result<_, String>>()?;
    let (hop, full) = (median(small), median(big));
    // Each of a process's `threads` workers sent `large` bytes to each remote worker.
    let bytes = (threads * remote * large) as f64;
    local[8] = hop;
    local[9] = match full > hop && remote > 0 {
        true => bytes / ((full - hop) * 1e-3),
        false => f64::MAX / 4.0,
    };
    drop(input);
    wait(worker, supervisor, |_| !probe.done())?;
    let sent = sent + agreement_bytes(local.len(), remote);
    Ok((agree(worker, &local, supervisor)?, sent))
}

/// A message's serialized bytes besides its payload (its fields and the payload's length).
const MESSAGE_HEADER: usize = 16;

/// Bytes a worker with `remote` workers in other processes sends to them to [`agree`] on
/// `numbers` numbers.
pub fn agreement_bytes(numbers: usize, remote: usize) -> u64 {
    (remote * (MESSAGE_HEADER + 8 * numbers)) as u64
}

/// Steps `worker` (parking, as training does) while `running`, or until the run fails.
pub(crate) fn wait(
    worker: &mut Worker,
    supervisor: &Supervisor,
    mut running: impl FnMut(&Worker) -> bool,
) -> Result<(), String> {
    while running(worker) {
        if supervisor.is_failed() {
            return Err(supervisor.message().unwrap_or_else(|| "failed".into()));
        }
        worker.step_or_park(Some(Duration::from_millis(1)));
    }
    Ok(())
}

/// The mean of every worker's `numbers`, summed in worker order (so every worker has the same
/// bits): a small dataflow that sends them to every other worker.
pub fn agree(
    worker: &mut Worker,
    numbers: &[f64],
    supervisor: &Supervisor,
) -> Result<Vec<f64>, String> {
    let (me, workers) = (worker.index() as u32, worker.peers() as u32);
    // (to, from, numbers)
    type Message = (u32, u32, Vec<u8>);
    let mut input = InputHandle::<u64, CapacityContainerBuilder<Vec<Message>>>::new();
    let received = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let sink = received.clone();
    let probe = worker.dataflow(|scope| {
        scope
            .input_from(&mut input)
            .container::<Vec<_>>()
            .exchange(|m: &Message| m.0 as u64)
            .inspect(move |m| sink.borrow_mut().push((m.1, m.2.clone())))
            .probe()
            .0
    });
    let mine: Vec<u8> = numbers.iter().flat_map(|x| x.to_le_bytes()).collect();
    for to in (0..workers).filter(|&w| w != me) {
        input.send((to, me, mine.clone()));
    }
    drop(input);
    wait(worker, supervisor, |_| !probe.done())?;
    let mut all = std::mem::take(&mut *received.borrow_mut());
    all.push((me, mine));
    all.sort_by_key(|m| m.0);
    let mut mean = vec![0.0; numbers.len()];
    for (from, bytes) in &all {
        if bytes.len() != numbers.len() * 8 {
            return Err(format!(
                "worker {from} shared {} numbers, this worker {}",
                bytes.len() / 8,
                numbers.len()
            ));
        }
        for (m, b) in mean.iter_mut().zip(bytes.chunks_exact(8)) {
            *m += f64::from_le_bytes(b.try_into().unwrap()) / all.len() as f64;
        }
    }
    Ok(mean)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::Job;

    /// Two workers measure their own rows and agree on one set of numbers: what each measured
    /// is the data's own (pairs of a real batch gradient, the union no smaller, uncompressed
    /// bytes of 8 a pair, a lossy codec's fewer).
    #[test]
    fn the_workers_agree_on_numbers_measured_on_their_own_gradients() {
        let text = "[data.synth]\nrows = 4000\ndim = 20000\n[train]\nbatch_fraction = 0.05";
        let job = Job::parse(text, std::path::Path::new("job.toml"), &[]).unwrap();
        let codecs: Vec<Candidate> = ["none", "logquant"]
            .iter()
            .map(|n| {
                let spec = CodecSpec::with_defaults(n).unwrap();
                (n.to_string(), spec, MemorySpec::None)
            })
            .collect();
        let results = timely::execute(timely::Config::process(2), move |worker| {
            let (data, dim, _, _) = job.load_on(worker).unwrap();
            let plan = job.plan(dim, 2);
            calibrate(worker, &data, &plan, &codecs, &[], &Supervisor::new())
                .unwrap()
                .0
        })
        .unwrap()
        .join()
        .into_iter()
        .map(|r| r.unwrap())
        .collect::<Vec<_>>();
        assert_eq!(results[0], results[1]);
        let c = &results[0];
        let r = &c.round;
        assert_eq!((r.workers, r.threads), (2, 2));
        assert!(r.pairs > 100.0 && r.union_keys >= r.pairs, "{r:?}");
        assert!(r.gradient_ms > 0.0 && r.update_ns > 0.0 && r.link.hop_ms > 0.0);
        let (none, logquant) = (&c.codecs[0], &c.codecs[1]);
        assert_eq!(
            (none.name.as_str(), logquant.name.as_str()),
            ("none", "logquant")
        );
        // Uncompressed: 8 bytes a pair of gradients of about the first one's size.
        let per_pair = none.whole_bytes / r.pairs;
        assert!((6.0..10.0).contains(&per_pair), "{per_pair}");
        assert!(none.pieces_bytes >= none.whole_bytes);
        assert!(
            logquant.whole_bytes < none.whole_bytes / 2.0,
            "{logquant:?}"
        );
    }

    /// Measured alone for 16 workers: the sum of 16 of its batches has more keys than one,
    /// the link costs nothing, and 16 owners' pieces weigh more than the whole message.
    #[test]
    fn measured_alone_a_round_of_many_workers_has_their_union_and_no_link() {
        let text = "[data.synth]\nrows = 4000\ndim = 20000\n[train]\nbatch_fraction = 0.01";
        let job = Job::parse(text, std::path::Path::new("job.toml"), &[]).unwrap();
        let codecs: Vec<Candidate> = vec![(
            "none".into(),
            CodecSpec::with_defaults("none").unwrap(),
            MemorySpec::None,
        )];
        let (alone, one) = timely::execute_directly(move |worker| {
            let (data, dim, _, _) = job.load_on(worker).unwrap();
            let plan = job.plan(dim, 1);
            let many = measure_alone(&data, &plan, 16, &codecs, &[]).unwrap();
            let one = measure_alone(&data, &plan, 1, &codecs, &[]).unwrap();
            (many, one)
        });
        let r = &alone.round;
        assert_eq!((r.workers, r.threads, r.link.hop_ms), (16, 1, 0.0));
        assert!(r.link.bytes_per_s > 1e300, "{r:?}");
        assert!(
            r.union_keys > 2.0 * one.round.union_keys,
            "{r:?} {:?}",
            one.round
        );
        assert!(alone.codecs[0].pieces_bytes > alone.codecs[0].whole_bytes);
    }

    /// A residual warmed over 32 rounds of top-k holds the keys those rounds touched and did
    /// not send, many more than one gradient's (what a trial from an empty memory misses); a
    /// job without memory has nothing to warm.
    #[test]
    fn a_warmed_residual_holds_the_keys_of_many_rounds() {
        let text = "[data.synth]\nrows = 4000\ndim = 20000\n[train]\nbatch_fraction = 0.01\n\
                    compressor = { name = \"topk\", ratio = 0.01 }\nmemory = \"residual\"";
        let job = Job::parse(text, std::path::Path::new("job.toml"), &[]).unwrap();
        let (warm, cold, pairs, none) = timely::execute_directly(move |worker| {
            let (data, dim, _, _) = job.load_on(worker).unwrap();
            let plan = job.plan(dim, 1);
            let saved = warmed_memory(&data, &plan, 0, 1, 32).unwrap().unwrap();
            let weights = initial_weights(&plan);
            let grad = batch_gradient(&data, &plan, &weights, &mut GradientWorkspace::new(dim), 0);
            let compensated = |saved: Option<&[u8]>| {
                let mut memory = plan.memory.build(dim);
                if let Some(s) = saved {
                    memory.restore(s).unwrap();
                }
                let mut g = grad.clone();
                memory.compensate(&mut g, &mut SparseGrad::default());
                g.len()
            };
            let without = TrainPlan {
                memory: MemorySpec::None,
                ..plan.clone()
            };
            let none = warmed_memory(&data, &without, 0, 1, 32).unwrap();
            (
                compensated(Some(&saved)),
                compensated(None),
                grad.len(),
                none,
            )
        });
        assert_eq!(cold, pairs);
        assert!(warm > 5 * pairs, "{warm} keys warmed, {pairs} a gradient");
        assert_eq!(none, None);
    }
}
