//! The metrics collector on worker 0.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::Stream;

use serde::{Deserialize, Serialize};

use super::checkpoint::{Checkpoints, RowsLog, RowsMark};
use super::{round_of, RoundStats, RoundTime, Supervisor, TrainPlan};
use crate::metrics::{MetricsRow, RowOutput, StageTimes, Traffic};
use crate::model::EvalPart;

/// Per-round accumulation on worker 0.
#[derive(Clone, Default, Serialize, Deserialize)]
struct RoundAcc {
    reports: u32,
    loss_sum: f64,
    rows: u64,
    grad_keys: u64,
    offered_keys: u64,
    sent_keys: u64,
    times: StageTimes,
    /// Traffic per process.
    traffic: Vec<Traffic>,
    eval: Option<EvalPart>,
    /// An online run's progressive scores of the round.
    progressive: Option<EvalPart>,
}

impl RoundAcc {
    fn traffic(&mut self, process: usize, processes: usize) -> &mut Traffic {
        self.traffic.resize(processes, Traffic::default());
        &mut self.traffic[process]
    }

    /// Total over processes and the most one process sent.
    fn traffic_summary(&self) -> (Traffic, u64) {
        let mut total = Traffic::default();
        self.traffic.iter().for_each(|t| total.add(t));
        let busiest = self.traffic.iter().map(Traffic::total_sent).max();
        (total, busiest.unwrap_or(0))
    }
}

/// What the collector keeps between rounds, and what a checkpoint saves of it.
#[derive(Default, Serialize, Deserialize)]
struct Collected {
    /// The rows so far, in the rows log.
    rows: RowsMark,
    /// Rounds folded in but not yet complete.
    pending: BTreeMap<u64, RoundAcc>,
    /// The epoch so far.
    epoch: RoundAcc,
    /// Traffic per process so far.
    per_process: Vec<Traffic>,
    /// Seconds of training so far (when saved).
    seconds: f64,
    /// An online run: the progressive scores of the window of rows so far.
    window: EvalPart,
}

/// The metrics collector: round statistics from every worker go to worker 0, which turns them
/// into one row per round and per epoch and hands each to `observer` and to `output` (the
/// metrics CSV); when the run ends it adds one `process` row per process with that process's
/// traffic. With checkpoints it also appends each row to the rows log
/// ([`super::checkpoint`]). A row that cannot be written stops the run through `supervisor`.
///
/// Reports are folded in round by round once every report of the round is in (the input
/// frontier has passed it), so the collector's state after round `q` does not depend on how
/// fast the workers run: a checkpoint at round `q + 1` saves it. Round `q`'s row is complete
/// once round `q + 1` is folded in (the statistics sent at round `q + 1` carry round `q`'s
/// downstream timings, traffic and, at epoch ends, its evaluation).
pub fn collect(
    stats: Stream<'_, RoundTime, Vec<RoundStats>>,
    plan: &TrainPlan,
    output: Rc<RefCell<RowOutput>>,
    mut observer: Box<dyn FnMut(&MetricsRow)>,
    supervisor: Supervisor,
) {
    let plan = plan.clone();
    let workers = stats.scope().peers();
    let processes = workers.div_ceil(plan.threads_per_process);
    let checkpoints = plan
        .checkpoints
        .clone()
        .filter(|_| stats.scope().index() == 0);
    let mut c = Collected {
        per_process: vec![Traffic::default(); processes],
        ..Default::default()
    };
    let mut start = Instant::now();
    let mut log = None;
    if let Some(ck) = &checkpoints {
        // Resumed: the sums of the run before the checkpoint, and its rows, handed to the
        // observer and the output again (the metrics file starts with them).
        let restored = ck.take_restored_metrics().map(|(dir, bytes)| {
            let saved = crate::snapshot::decode::<Collected>(&bytes, "metrics.bin");
            saved.map(|saved| (dir, saved))
        });
        let begun = restored.transpose().and_then(|restored| {
            let mark = restored
                .as_ref()
                .map(|(dir, saved)| (dir.as_path(), &saved.rows));
            let mut replayed = Ok(());
            let log = RowsLog::begin(ck.dir_if_any(), &ck.job(), mark, &mut |row| {
                observer(&row);
                if replayed.is_ok() {
                    replayed = output.borrow_mut().push_restored(row);
                }
            })?;
            replayed.map(|_| (log, restored))
        });
        match begun {
            Ok((l, restored)) => {
                log = l;
                if let Some((_, saved)) = restored {
                    start -= Duration::from_secs_f64(saved.seconds);
                    c = saved;
                }
            }
            Err(e) => supervisor.fail(e),
        }
    }
    // What choosing the configuration cost, before the first round (`"auto"` is never resumed).
    if let Some(choice) = plan.choice.filter(|_| stats.scope().index() == 0) {
        let row = MetricsRow {
            kind: "choice",
            seconds: choice.seconds,
            uplink_bytes: choice.sent_bytes,
            ..Default::default()
        };
        observer(&row);
        if let Err(e) = output.borrow_mut().push(row) {
            supervisor.fail(e);
        }
    }
    let mut stash: BTreeMap<u64, Vec<RoundStats>> = BTreeMap::new();
    let mut finished = false;
    stats.sink(
        Exchange::new(|_: &RoundStats| 0u64),
        "Collect",
        move |(input, frontier)| {
            input.for_each(|cap, batch| {
                if let Some(t) = cap.least() {
                    stash.entry(round_of(t)).or_default().append(batch);
                }
            });
            // Fold in every round whose reports are all in, in round order; each completes the
            // row of the round before it.
            while let Some((&r, _)) = stash.first_key_value() {
                if frontier.less_equal(&super::at(r)) {
                    break;
                }
                let reports = stash.pop_first().unwrap().1;
                fold(&mut c, r, reports, &plan, processes);
                if r > 0 {
                    let mut emit = |row: MetricsRow| {
                        observer(&row);
                        let logged = log.as_mut().map_or(Ok(()), |l| l.append(&row));
                        if let Err(e) = logged.and_then(|_| output.borrow_mut().push(row)) {
                            supervisor.fail(e);
                        }
                    };
                    complete(&mut c, r - 1, &plan, workers, processes, start, &mut emit);
                }
                let due = |k: &&Checkpoints| k.due(r + 1, &plan);
                if let (Some(ck), Some(log)) = (checkpoints.as_ref().filter(due), log.as_mut()) {
                    c.seconds = start.elapsed().as_secs_f64();
                    let saved = log.mark().and_then(|mark| {
                        c.rows = mark;
                        ck.save_metrics(r + 1, &crate::snapshot::encode(&c))
                    });
                    if let Err(e) = saved {
                        ck.fail(e);
                    }
                }
            }
            // When the run is over: one row per process with its totals.
            if frontier.is_empty() && !finished {
                finished = true;
                for (p, t) in c.per_process.iter().enumerate() {
                    let mut row = MetricsRow {
                        kind: "process",
                        process: Some(p as u32),
                        seconds: start.elapsed().as_secs_f64(),
                        ..Default::default()
                    };
                    row.set_traffic(t, t.total_sent());
                    if let Err(e) = output.borrow_mut().push(row) {
                        supervisor.fail(e);
                    }
                }
            }
        },
    );
}

/// Folds in the reports sent at round `r`: round `r`'s gradient part and round `r - 1`'s
/// downstream part.
fn fold(c: &mut Collected, r: u64, reports: Vec<RoundStats>, plan: &TrainPlan, processes: usize) {
    for s in reports {
        let p = plan.process_of(s.worker);
        if s.has_gradient {
            let acc = c.pending.entry(r).or_default();
            acc.reports += 1;
            acc.loss_sum += s.loss_sum;
            acc.rows += s.rows;
            acc.grad_keys += s.grad_keys;
            acc.offered_keys += s.offered_keys;
            acc.sent_keys += s.sent_keys;
            acc.times.gradient_ms += s.gradient_ms;
            acc.times.encode_ms += s.encode_ms;
            acc.traffic(p, processes).add(&s.traffic);
            if let Some(e) = &s.progressive {
                acc.progressive
                    .get_or_insert_with(EvalPart::default)
                    .merge(e);
            }
        }
        if r > 0 {
            let acc = c.pending.entry(r - 1).or_default();
            acc.times.wait_ms += s.prev_wait_ms;
            acc.times.aggregate_ms += s.prev_aggregate_ms;
            acc.times.update_ms += s.prev_update_ms;
            acc.times.eval_ms += s.prev_eval_ms;
            acc.traffic(p, processes).add(&s.prev_traffic);
            if let Some(e) = &s.eval {
                acc.eval.get_or_insert_with(EvalPart::default).merge(e);
            }
        }
    }
}

/// Emits round `q`'s row (and the `eval` or `epoch` row after it) through `emit`.
fn complete(
    c: &mut Collected,
    q: u64,
    plan: &TrainPlan,
    workers: usize,
    processes: usize,
    start: Instant,
    emit: &mut dyn FnMut(MetricsRow),
) {
    let Some(mut acc) = c.pending.remove(&q) else {
        return;
    };
    if acc.reports == 0 {
        return;
    }
    acc.times.scale(1.0 / workers as f64);
    let (traffic, busiest) = acc.traffic_summary();
    for (p, t) in acc.traffic.iter().enumerate() {
        c.per_process[p].add(t);
    }
    let mut row = MetricsRow {
        kind: "round",
        epoch: q / plan.rounds_per_epoch + 1,
        round: q,
        seconds: start.elapsed().as_secs_f64(),
        train_loss: mean_loss(acc.loss_sum, acc.rows),
        rows: acc.rows,
        gradient_keys: acc.grad_keys,
        ..Default::default()
    };
    row.set_kept(acc.offered_keys, acc.sent_keys);
    row.set_times(&acc.times);
    row.set_traffic(&traffic, busiest);
    // An online run's progressive AUC, once a window of rows is in.
    if let Some(p) = &acc.progressive {
        c.window.merge(p);
        if c.window.count >= plan.auc_window {
            let window = std::mem::take(&mut c.window);
            row.progressive_auc = window.summary(&*plan.loss).auc;
        }
    }
    let epoch = &mut c.epoch;
    epoch.loss_sum += acc.loss_sum;
    epoch.rows += acc.rows;
    epoch.grad_keys += acc.grad_keys;
    epoch.offered_keys += acc.offered_keys;
    epoch.sent_keys += acc.sent_keys;
    epoch.times.add(&acc.times);
    for (p, t) in acc.traffic.iter().enumerate() {
        epoch.traffic(p, processes).add(t);
    }
    let (epoch_number, seconds, train_loss) = (row.epoch, row.seconds, row.train_loss);
    emit(row);
    // The test metrics after this round: an `epoch` row at epoch ends, an `eval` row between
    // them (`train.eval_every`).
    let Some(eval) = acc.eval else { return };
    let s = eval.summary(&*plan.loss);
    if !(q + 1).is_multiple_of(plan.rounds_per_epoch) {
        emit(MetricsRow {
            kind: "eval",
            epoch: epoch_number,
            round: q,
            seconds,
            train_loss,
            test_loss: s.loss,
            test_accuracy: s.accuracy,
            test_auc: s.auc,
            test_rmse: s.rmse,
            ..Default::default()
        });
    } else {
        let epoch = std::mem::take(&mut c.epoch);
        let (traffic, busiest) = epoch.traffic_summary();
        let mut e = MetricsRow {
            kind: "epoch",
            epoch: epoch_number,
            round: q,
            seconds,
            train_loss: mean_loss(epoch.loss_sum, epoch.rows),
            rows: epoch.rows,
            test_loss: s.loss,
            test_accuracy: s.accuracy,
            test_auc: s.auc,
            test_rmse: s.rmse,
            gradient_keys: epoch.grad_keys,
            ..Default::default()
        };
        e.set_kept(epoch.offered_keys, epoch.sent_keys);
        e.set_times(&epoch.times);
        e.set_traffic(&traffic, busiest);
        emit(e);
    }
}
/// The mean loss of `rows` rows; NaN (no value, not a loss of 0) for a round without rows.
fn mean_loss(sum: f64, rows: u64) -> f64 {
    match rows {
        0 => f64::NAN,
        n => sum / n as f64,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::dataflow::tests::at_rounds;

    /// Worker `w`'s report at round `r` of a two-round run: rows 2, loss (r + 1)(w + 1), an
    /// uplink of 100(w + 1) bytes, and for the round before a downlink of 10 bytes and (after
    /// the last round) an evaluation.
    fn report(w: u32, r: u64) -> RoundStats {
        let mut s = RoundStats {
            worker: w,
            has_gradient: r < 2,
            ..Default::default()
        };
        if s.has_gradient {
            s.loss_sum = ((r + 1) * (w as u64 + 1)) as f64;
            s.rows = 2;
            s.traffic.sent(true, 100 * (w as usize + 1), true);
        }
        if r > 0 {
            s.prev_traffic.sent(false, 10, true);
        }
        if r == 2 {
            s.eval = Some(EvalPart::default());
        }
        s
    }

    /// Two workers' reports of a two-round epoch, each at its round, become exactly: one row
    /// per round (the rows-weighted mean loss of both workers, the round's uplink, and its
    /// downlink, which the next round's reports carry), the epoch's row over both rounds, and
    /// the process's totals.
    #[test]
    fn collect_turns_each_rounds_reports_into_its_row_and_the_epochs() {
        let text = "[train]\nepochs = 1\nbatch_fraction = 0.5\n";
        let job = crate::job::Job::parse(text, Path::new("job.toml"), &[]).unwrap();
        let plan = job.plan(4, 2);
        assert_eq!(plan.rounds(), 2);
        let results = timely::execute(timely::Config::process(2), move |worker| {
            let w = worker.index() as u32;
            let output = Rc::new(RefCell::new(RowOutput::new(None, true, None)));
            let (out, plan) = (output.clone(), plan.clone());
            worker.dataflow::<(), _, _>(|scope| {
                scope.iterative::<u64, _, _>(|inner| {
                    let reports = (0..=2).map(|r| (r, report(w, r))).collect();
                    let stats = at_rounds(inner, reports);
                    let observer = Box::new(|_: &MetricsRow| {});
                    collect(stats, &plan, out, observer, Supervisor::new());
                });
            });
            while worker.has_dataflows() {
                worker.step();
            }
            let rows = output.borrow_mut().finish().unwrap();
            rows
        })
        .unwrap()
        .join();
        let rows = results.into_iter().next().unwrap().unwrap();
        let seen: Vec<_> = rows
            .iter()
            .map(|r| {
                let bytes = (r.uplink_bytes, r.downlink_bytes);
                (r.kind, r.epoch, r.round, r.train_loss, bytes)
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("round", 1, 0, 0.75, (300, 20)),
                ("round", 1, 1, 1.5, (300, 20)),
                ("epoch", 1, 1, 1.125, (600, 40)),
                ("process", 0, 0, 0.0, (600, 40)),
            ]
        );
    }
}
