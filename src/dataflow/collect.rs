//! The metrics collector on worker 0.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::Stream;

use super::{at, round_of, RoundStats, RoundTime, TrainPlan};
use crate::metrics::{MetricsRow, StageTimes, Traffic};
use crate::model::EvalPart;

/// Per-round accumulation on worker 0.
#[derive(Default)]
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

/// The metrics collector: round statistics from every worker go to worker 0, which turns them
/// into one row per round and per epoch and hands each to `observer`; when the run ends it adds
/// one `process` row per process with that process's traffic.
///
/// Round `q`'s row is complete when the frontier has passed `q + 1` (the statistics sent at
/// round `q + 1` carry round `q`'s downstream timings, traffic and, at epoch ends, its
/// evaluation).
pub fn collect(
    stats: Stream<'_, RoundTime, Vec<RoundStats>>,
    plan: &TrainPlan,
    rows: Rc<RefCell<Vec<MetricsRow>>>,
    mut observer: Box<dyn FnMut(&MetricsRow)>,
) {
    let plan = plan.clone();
    let workers = stats.scope().peers();
    let processes = workers.div_ceil(plan.threads_per_process);
    let mut pending: BTreeMap<u64, RoundAcc> = BTreeMap::new();
    let mut epoch = RoundAcc::default();
    let mut per_process = vec![Traffic::default(); processes];
    let mut finished = false;
    let start = Instant::now();
    stats.sink(
        Exchange::new(|_: &RoundStats| 0u64),
        "Collect",
        move |(input, frontier)| {
            // Gather each worker's report into its round (and the previous round's parts).
            input.for_each(|cap, batch| {
                let Some(t) = cap.least() else { return };
                let r = round_of(t);
                for s in batch.drain(..) {
                    let p = plan.process_of(s.worker);
                    if s.has_gradient {
                        let acc = pending.entry(r).or_default();
                        acc.reports += 1;
                        acc.loss_sum += s.loss_sum;
                        acc.rows += s.rows;
                        acc.grad_keys += s.grad_keys;
                        acc.offered_keys += s.offered_keys;
                        acc.sent_keys += s.sent_keys;
                        acc.times.gradient_ms += s.gradient_ms;
                        acc.times.encode_ms += s.encode_ms;
                        acc.traffic(p, processes).add(&s.traffic);
                    }
                    if r > 0 {
                        let acc = pending.entry(r - 1).or_default();
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
            });
            // Emit every complete round, and the epoch it ends.
            while let Some((&q, _)) = pending.first_key_value() {
                if frontier.less_equal(&at(q + 1)) {
                    break;
                }
                let mut acc = pending.pop_first().unwrap().1;
                if acc.reports == 0 {
                    continue;
                }
                acc.times.scale(1.0 / workers as f64);
                let (traffic, busiest) = acc.traffic_summary();
                for (p, t) in acc.traffic.iter().enumerate() {
                    per_process[p].add(t);
                }
                let mut row = MetricsRow {
                    kind: "round",
                    epoch: q / plan.rounds_per_epoch + 1,
                    round: q,
                    seconds: start.elapsed().as_secs_f64(),
                    train_loss: acc.loss_sum / acc.rows.max(1) as f64,
                    gradient_keys: acc.grad_keys,
                    ..Default::default()
                };
                row.set_kept(acc.offered_keys, acc.sent_keys);
                row.set_times(&acc.times);
                row.set_traffic(&traffic, busiest);
                epoch.loss_sum += acc.loss_sum;
                epoch.rows += acc.rows;
                epoch.grad_keys += acc.grad_keys;
                epoch.offered_keys += acc.offered_keys;
                epoch.sent_keys += acc.sent_keys;
                epoch.times.add(&acc.times);
                for (p, t) in acc.traffic.iter().enumerate() {
                    epoch.traffic(p, processes).add(t);
                }
                observer(&row);
                rows.borrow_mut().push(row.clone());
                // The test metrics after this round: an `epoch` row at epoch ends, an `eval`
                // row between them (`train.eval_every`).
                if let Some(eval) = acc.eval {
                    let s = eval.summary(&*plan.loss);
                    if (q + 1) % plan.rounds_per_epoch != 0 {
                        let e = MetricsRow {
                            kind: "eval",
                            epoch: row.epoch,
                            round: q,
                            seconds: row.seconds,
                            train_loss: row.train_loss,
                            test_loss: s.loss,
                            test_accuracy: s.accuracy,
                            test_auc: s.auc,
                            test_rmse: s.rmse,
                            ..Default::default()
                        };
                        observer(&e);
                        rows.borrow_mut().push(e);
                    } else {
                        let (traffic, busiest) = epoch.traffic_summary();
                        let mut e = MetricsRow {
                            kind: "epoch",
                            epoch: row.epoch,
                            round: q,
                            seconds: row.seconds,
                            train_loss: epoch.loss_sum / epoch.rows.max(1) as f64,
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
                        observer(&e);
                        rows.borrow_mut().push(e);
                        epoch = RoundAcc::default();
                    }
                }
            }
            // When the run is over: one row per process with its totals.
            if frontier.is_empty() && !finished {
                finished = true;
                for (p, t) in per_process.iter().enumerate() {
                    let mut row = MetricsRow {
                        kind: "process",
                        process: Some(p as u32),
                        seconds: start.elapsed().as_secs_f64(),
                        ..Default::default()
                    };
                    row.set_traffic(t, t.total_sent());
                    rows.borrow_mut().push(row);
                }
            }
        },
    );
}
