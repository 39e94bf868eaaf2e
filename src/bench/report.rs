//! What a suite's report says, computed from the cells' metrics CSVs: one result row per cell
//! and evaluation (`results.csv`), and per link a summary table (`summary.md`): seconds per
//! epoch, bytes per process, final test loss and AUC, time to the target loss and speed-up
//! against the baseline cell (uncompressed `sharded` unless the suite says otherwise).

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Cell, Suite, TargetOf};
use crate::metrics::StageTimes;

/// The columns of a metrics CSV the report reads. (The stage-time columns are listed again
/// here and in [`ResultRow`] rather than flattened from [`StageTimes`]: the csv crate does not
/// support `#[serde(flatten)]`.)
#[derive(Clone, Debug, Default, Deserialize)]
pub struct MetricsRecord {
    /// `choice`, `round`, `epoch`, `eval` or `process`.
    pub kind: String,
    /// Epoch.
    pub epoch: u64,
    /// Round.
    pub round: u64,
    /// Seconds since training started.
    pub seconds: f64,
    /// Test loss (evaluations).
    pub test_loss: Option<f64>,
    /// Test accuracy (classification evaluations; absent in CSVs written before it).
    #[serde(default)]
    pub test_accuracy: Option<f64>,
    /// Test AUC (two-class evaluations).
    pub test_auc: Option<f64>,
    /// Uplink payload bytes sent to other processes.
    pub uplink_bytes: u64,
    /// Downlink payload bytes sent to other processes.
    pub downlink_bytes: u64,
    /// Round statistics and evaluation bytes sent to process 0 (absent in CSVs written before
    /// the column existed).
    #[serde(default)]
    pub eval_bytes: u64,
    /// Bytes timely sent on progress channels to other processes, by process 0 (absent in CSVs
    /// written before the column existed).
    #[serde(default)]
    pub wire_progress_bytes: u64,
    /// Stage times, ms (mean over workers).
    pub gradient_ms: f64,
    /// Encode time, ms.
    pub encode_ms: f64,
    /// Waiting time, ms.
    pub wait_ms: f64,
    /// Decode and sum time, ms.
    pub aggregate_ms: f64,
    /// Update time, ms.
    pub update_ms: f64,
    /// Test evaluation time, ms (absent in CSVs written before the column existed).
    #[serde(default)]
    pub eval_ms: f64,
}

/// Reads a metrics CSV written by `gradflow train`.
pub fn read_metrics(path: &Path) -> Result<Vec<MetricsRecord>, String> {
    let mut r = csv::Reader::from_path(path).map_err(|e| format!("{}: {e}", path.display()))?;
    r.deserialize()
        .enumerate()
        .map(|(i, row)| row.map_err(|e| format!("{}: row {}: {e}", path.display(), i + 2)))
        .collect()
}

/// One finished cell.
#[derive(Clone, Debug)]
pub struct CellRun {
    /// The cell.
    pub cell: Cell,
    /// Its metrics rows (every process writes the same rows; process 0's are read).
    pub rows: Vec<MetricsRecord>,
    /// Wall-clock seconds of the whole cluster run (start-up included).
    pub wall_seconds: f64,
}

/// A row of `results.csv`: a cell at one evaluation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResultRow {
    /// Cell id.
    pub cell: String,
    /// Link name.
    pub link: String,
    /// Processes.
    pub processes: usize,
    /// Model label.
    pub model: String,
    /// Exchange label.
    pub exchange: String,
    /// Compressor label.
    pub compressor: String,
    /// Repeat.
    pub repeat: usize,
    /// `epoch` or `eval`.
    pub kind: String,
    /// Epoch.
    pub epoch: u64,
    /// Rounds done (the evaluation follows round `rounds - 1`).
    pub rounds: u64,
    /// Seconds since training started.
    pub seconds: f64,
    /// Seconds `auto` took to choose the configuration before training (0 without).
    pub choice_seconds: f64,
    /// Payload bytes the choice sent to other processes, per process.
    pub choice_bytes_per_process: f64,
    /// Test loss.
    pub test_loss: Option<f64>,
    /// Test accuracy.
    pub test_accuracy: Option<f64>,
    /// Test AUC.
    pub test_auc: Option<f64>,
    /// Uplink bytes sent to other processes so far, per process.
    pub up_bytes_per_process: f64,
    /// Downlink bytes so far, per process.
    pub down_bytes_per_process: f64,
    /// Round statistics and evaluation bytes sent to process 0 so far, per process.
    pub eval_bytes_per_process: f64,
    /// Stage times so far, ms (mean over workers).
    pub gradient_ms: f64,
    /// Encode ms so far.
    pub encode_ms: f64,
    /// Waiting ms so far.
    pub wait_ms: f64,
    /// Decode and sum ms so far.
    pub aggregate_ms: f64,
    /// Update ms so far.
    pub update_ms: f64,
    /// Test evaluation ms so far.
    pub eval_ms: f64,
}

impl MetricsRecord {
    /// The row's stage times.
    pub fn times(&self) -> StageTimes {
        StageTimes {
            gradient_ms: self.gradient_ms,
            encode_ms: self.encode_ms,
            wait_ms: self.wait_ms,
            aggregate_ms: self.aggregate_ms,
            update_ms: self.update_ms,
            eval_ms: self.eval_ms,
        }
    }
}

impl ResultRow {
    /// The stage times so far.
    pub fn times(&self) -> StageTimes {
        StageTimes {
            gradient_ms: self.gradient_ms,
            encode_ms: self.encode_ms,
            wait_ms: self.wait_ms,
            aggregate_ms: self.aggregate_ms,
            update_ms: self.update_ms,
            eval_ms: self.eval_ms,
        }
    }
}

/// The result rows of one cell: every evaluation, with bytes and stage times accumulated over
/// the rounds up to it.
pub fn result_rows(run: &CellRun) -> Vec<ResultRow> {
    let c = &run.cell;
    let per = c.processes.max(1) as f64;
    let (mut up, mut down, mut eval) = (0u64, 0u64, 0u64);
    let (mut choice_seconds, mut choice_bytes) = (0.0, 0u64);
    let mut times = StageTimes::default();
    let mut out = Vec::new();
    for r in &run.rows {
        match r.kind.as_str() {
            "choice" => (choice_seconds, choice_bytes) = (r.seconds, r.uplink_bytes),
            "round" => {
                up += r.uplink_bytes;
                down += r.downlink_bytes;
                eval += r.eval_bytes;
                times.add(&r.times());
            }
            "epoch" | "eval" => out.push(ResultRow {
                cell: c.id.clone(),
                link: c.link.name.clone(),
                processes: c.processes,
                model: c.model.clone(),
                exchange: c.exchange.clone(),
                compressor: c.compressor.clone(),
                repeat: c.repeat,
                kind: r.kind.clone(),
                epoch: r.epoch,
                rounds: r.round + 1,
                seconds: r.seconds,
                choice_seconds,
                choice_bytes_per_process: choice_bytes as f64 / per,
                test_loss: r.test_loss,
                test_accuracy: r.test_accuracy,
                test_auc: r.test_auc,
                up_bytes_per_process: up as f64 / per,
                down_bytes_per_process: down as f64 / per,
                eval_bytes_per_process: eval as f64 / per,
                gradient_ms: times.gradient_ms,
                encode_ms: times.encode_ms,
                wait_ms: times.wait_ms,
                aggregate_ms: times.aggregate_ms,
                update_ms: times.update_ms,
                eval_ms: times.eval_ms,
            }),
            _ => {}
        }
    }
    out
}

/// A cell's line in the summary.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// The cell.
    pub cell: Cell,
    /// Training seconds per epoch (to the last evaluation).
    pub seconds_per_epoch: f64,
    /// Uplink and downlink bytes per process over the run.
    pub up_bytes: f64,
    /// Downlink bytes per process.
    pub down_bytes: f64,
    /// Round statistics and evaluation bytes per process (sent to process 0).
    pub eval_bytes: f64,
    /// Final test loss.
    pub final_loss: Option<f64>,
    /// Final accuracy.
    pub final_accuracy: Option<f64>,
    /// Final AUC.
    pub final_auc: Option<f64>,
    /// The lowest test loss of any evaluation and when it came (SketchML Table 2's and FastSGD
    /// Table VII's measure).
    pub min_loss: Option<(f64, f64)>,
    /// The loss that counts as reached: the baseline's final loss times (1 + target).
    pub target_loss: Option<f64>,
    /// Seconds to the first evaluation at or below the target loss (None: never reached).
    pub time_to_target: Option<f64>,
    /// Seconds `auto` took to choose before training (0 without), counted in the time to
    /// target.
    pub choice_seconds: f64,
    /// Baseline's time to target over this cell's.
    pub speedup: Option<f64>,
    /// On a shaped link, the speed-up this cell would have if its own traffic cost nothing:
    /// the baseline's time to target on this link over the same cell's time to target on the
    /// suite's unshaped link (same processes, model and repeat), plus the time its evaluation
    /// bytes to that point take on this link (they all cross process 0's link, and are not the
    /// exchange's to save). A speed-up close to it is not limited by the link; a target above
    /// it needs a faster round, not fewer bytes.
    pub free_link_bound: Option<f64>,
}

/// The summary of every run: the baseline of a cell is the run with the suite's baseline
/// labels and the cell's link, processes, model and repeat.
pub fn summarize(suite: &Suite, runs: &[CellRun]) -> Vec<Summary> {
    let results: Vec<Vec<ResultRow>> = runs.iter().map(result_rows).collect();
    let final_loss = |i: usize| results[i].last().and_then(|r| r.test_loss);
    let base_loss = |i: usize| match suite.target_of {
        TargetOf::Final => final_loss(i),
        TargetOf::Lowest => results[i]
            .iter()
            .filter_map(|r| r.test_loss)
            .reduce(f64::min),
    };
    let reached = |i: usize, loss: f64| {
        results[i]
            .iter()
            .find(|r| r.test_loss.is_some_and(|l| l <= loss))
    };
    // From the start of the choice, when `auto` chose: it is part of the run.
    let time_to = |i: usize, loss: f64| reached(i, loss).map(|r| r.choice_seconds + r.seconds);
    let unshaped = suite.unshaped_link();
    runs.iter()
        .enumerate()
        .map(|(i, run)| {
            let c = &run.cell;
            let base = runs.iter().position(|b| {
                let bc = &b.cell;
                bc.is_baseline(suite)
                    && (&bc.link.name, bc.processes, &bc.model, bc.repeat)
                        == (&c.link.name, c.processes, &c.model, c.repeat)
            });
            let target_loss = base.and_then(base_loss).map(|l| l * (1.0 + suite.target));
            let time_to_target = target_loss.and_then(|t| time_to(i, t));
            let base_time = base.zip(target_loss).and_then(|(b, t)| time_to(b, t));
            // The same cell on the unshaped link, to the same target loss, and its evaluation
            // bytes to there at this link's rate.
            let free_link_time = unshaped.filter(|_| c.link.shaped()).and_then(|free| {
                let j = runs.iter().position(|r| {
                    let d = &r.cell;
                    d.link.name == free.name
                        && (d.processes, &d.model, &d.exchange, &d.compressor, d.repeat)
                            == (c.processes, &c.model, &c.exchange, &c.compressor, c.repeat)
                })?;
                let at = reached(j, target_loss?)?;
                let eval_bits = 8.0 * at.eval_bytes_per_process * c.processes as f64;
                let eval_seconds = match c.link.rate_bits() {
                    Some(Ok(rate)) => eval_bits / rate as f64,
                    _ => 0.0,
                };
                Some(at.choice_seconds + at.seconds + eval_seconds)
            });
            let last = results[i].last();
            let epochs = results[i]
                .iter()
                .filter(|r| r.kind == "epoch")
                .count()
                .max(1);
            Summary {
                cell: c.clone(),
                seconds_per_epoch: last.map_or(0.0, |r| r.seconds / epochs as f64),
                up_bytes: last.map_or(0.0, |r| r.up_bytes_per_process),
                down_bytes: last.map_or(0.0, |r| r.down_bytes_per_process),
                eval_bytes: last.map_or(0.0, |r| r.eval_bytes_per_process),
                final_loss: final_loss(i),
                final_accuracy: last.and_then(|r| r.test_accuracy),
                final_auc: last.and_then(|r| r.test_auc),
                min_loss: results[i]
                    .iter()
                    .filter_map(|r| r.test_loss.map(|l| (l, r.seconds)))
                    .min_by(|a, b| a.0.total_cmp(&b.0)),
                target_loss,
                time_to_target,
                choice_seconds: last.map_or(0.0, |r| r.choice_seconds),
                speedup: base_time.zip(time_to_target).map(|(b, t)| b / t.max(1e-9)),
                free_link_bound: base_time.zip(free_link_time).map(|(b, t)| b / t.max(1e-9)),
            }
        })
        .collect()
}

/// `summary.md`: per link, a table of every cell (the median of its repeats, each speed-up
/// taken against the baseline of the same repeat); `notes` are printed under the title (the
/// machine, each link's measured throughput, what could not be emulated).
pub fn summary_markdown(suite: &Suite, summaries: &[Summary], notes: &[String]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Suite `{}`\n", suite.name);
    for n in notes {
        let _ = writeln!(md, "- {n}");
    }
    let (be, bc) = &suite.baseline;
    let _ = writeln!(
        md,
        "\nTime to target: first evaluation within {:.1}% of the {} test loss of `{be}` / \
         `{bc}` on the same link, processes, model and repeat; speed-up: its time over the \
         cell's, both counted from the start of the run's choice when `auto` chose (choice: \
         its seconds). Bytes are payload sent to other processes, per process, both directions; \
         eval: round statistics and test evaluations sent to process 0, per process.",
        100.0 * suite.target,
        suite.target_of.word()
    );
    if let Some(free) = suite.unshaped_link() {
        let _ = writeln!(
            md,
            "\nBound, free link (shaped links): the baseline's time to target on the link over \
             the same cell's on `{}` plus its evaluation bytes at the link's rate, the speed-up \
             the cell would have if its gradient traffic cost nothing. A speed-up near it is \
             limited by the rest of the round, not by the link.",
            free.name
        );
    }
    let fmt =
        |x: Option<f64>, digits: usize| x.map_or("–".to_string(), |v| format!("{v:.digits$}"));
    for link in &suite.links {
        let _ = writeln!(md, "\n## Link `{}`\n", link.name);
        let _ = writeln!(
            md,
            "| W | model | exchange | compressor | runs | s/epoch | up MB/proc | down MB/proc | \
             eval MB/proc | final loss | final acc | final AUC | min loss @ s | choice s | time to target s | \
             speed-up | bound, free link |"
        );
        let _ = writeln!(
            md,
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        // One line per cell with its repeats folded in: medians, and how many runs reached
        // the target when not all did.
        let of_link: Vec<&Summary> = summaries
            .iter()
            .filter(|s| s.cell.link.name == link.name)
            .collect();
        let mut seen: Vec<(usize, &str, &str, &str)> = Vec::new();
        for s in &of_link {
            let c = &s.cell;
            let key = (
                c.processes,
                c.model.as_str(),
                c.exchange.as_str(),
                c.compressor.as_str(),
            );
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            let runs: Vec<&&Summary> = of_link
                .iter()
                .filter(|t| {
                    let d = &t.cell;
                    (
                        d.processes,
                        d.model.as_str(),
                        d.exchange.as_str(),
                        d.compressor.as_str(),
                    ) == key
                })
                .collect();
            let med = |f: &dyn Fn(&Summary) -> Option<f64>| {
                median(runs.iter().filter_map(|r| f(r)).collect())
            };
            let reached = runs.iter().filter(|r| r.time_to_target.is_some()).count();
            let ttt = match (med(&|r| r.time_to_target), s.target_loss) {
                (Some(t), _) if reached == runs.len() => format!("{t:.2}"),
                (Some(t), _) => format!("{t:.2} ({reached} of {} runs)", runs.len()),
                (None, Some(_)) => "not reached".into(),
                (None, None) => "–".into(),
            };
            let min_loss = med(&|r| r.min_loss.map(|m| m.0))
                .zip(med(&|r| r.min_loss.map(|m| m.1)))
                .map_or("–".into(), |(l, t)| format!("{l:.4} @ {t:.2}"));
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.3} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c.processes,
                c.model,
                c.exchange,
                c.compressor,
                runs.len(),
                med(&|r| Some(r.seconds_per_epoch)).unwrap_or(0.0),
                med(&|r| Some(r.up_bytes)).unwrap_or(0.0) / 1e6,
                med(&|r| Some(r.down_bytes)).unwrap_or(0.0) / 1e6,
                med(&|r| Some(r.eval_bytes)).unwrap_or(0.0) / 1e6,
                fmt(med(&|r| r.final_loss), 4),
                fmt(med(&|r| r.final_accuracy), 4),
                fmt(med(&|r| r.final_auc), 4),
                min_loss,
                match med(&|r| Some(r.choice_seconds)).unwrap_or(0.0) {
                    0.0 => "–".to_string(),
                    x => format!("{x:.2}"),
                },
                ttt,
                med(&|r| r.speedup).map_or("–".into(), |x| format!("{x:.2}x")),
                med(&|r| r.free_link_bound).map_or("–".into(), |x| format!("{x:.2}x")),
            );
        }
    }
    md
}

/// The median (the mean of the middle two for an even count); None for no values.
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    })
}

#[cfg(test)]
mod tests {
    use super::super::{AxisValue, Link};
    use super::*;

    fn suite() -> Suite {
        let v = |l: &str| AxisValue {
            label: l.into(),
            sets: vec![],
        };
        Suite {
            name: "t".into(),
            job: "j.toml".into(),
            repeats: 1,
            target: 0.01,
            target_of: TargetOf::Final,
            processes: vec![2],
            workers: 1,
            links: vec![Link::loopback()],
            models: vec![v("job")],
            exchanges: vec![v("sharded")],
            compressors: vec![v("none"), v("topk")],
            sets: vec![],
            baseline: ("sharded".into(), "none".into()),
        }
    }

    /// [`suite`] on a 10 Mbit link and loopback.
    fn suite_on_slow_and_loopback() -> Suite {
        let slow = Link {
            name: "slow".into(),
            rate: Some("10mbit".into()),
            delay: None,
            burst: None,
        };
        Suite {
            links: vec![slow, Link::loopback()],
            ..suite()
        }
    }

    fn record(kind: &str, round: u64, seconds: f64, loss: Option<f64>, up: u64) -> MetricsRecord {
        MetricsRecord {
            kind: kind.into(),
            epoch: round / 10 + 1,
            round,
            seconds,
            test_loss: loss,
            uplink_bytes: up,
            encode_ms: 1.0,
            ..Default::default()
        }
    }

    fn run(cell: Cell, losses: &[(u64, f64, f64)], up_per_round: u64) -> CellRun {
        let mut rows = Vec::new();
        for round in 0..20 {
            rows.push(record(
                "round",
                round,
                round as f64 * 0.1,
                None,
                up_per_round,
            ));
            if let Some(&(_, s, l)) = losses.iter().find(|x| x.0 == round) {
                let kind = if (round + 1) % 10 == 0 {
                    "epoch"
                } else {
                    "eval"
                };
                rows.push(record(kind, round, s, Some(l), 0));
            }
        }
        CellRun {
            cell,
            rows,
            wall_seconds: 3.0,
        }
    }

    /// With `target_of = "lowest"` the target is relative to the baseline's lowest loss: a
    /// baseline whose curve dips and rises again (0.40, then 0.45 at the end) sets 0.404, which
    /// a cell that only gets to 0.43 never reaches; relative to the final loss it would have.
    #[test]
    fn the_target_of_the_lowest_loss_ignores_where_the_baseline_ended() {
        let curves = |s: &Suite| {
            let cells = s.cells();
            let runs = vec![
                run(
                    cells[0].clone(),
                    &[(4, 1.0, 0.50), (9, 2.0, 0.40), (14, 3.0, 0.45)],
                    1000,
                ),
                run(
                    cells[1].clone(),
                    &[(4, 0.5, 0.43), (9, 1.0, 0.44), (14, 1.5, 0.46)],
                    100,
                ),
            ];
            summarize(s, &runs)
        };
        let final_ = curves(&suite());
        assert!((final_[0].target_loss.unwrap() - 0.4545).abs() < 1e-12);
        assert_eq!(final_[1].time_to_target, Some(0.5));
        assert!((final_[1].speedup.unwrap() - 4.0).abs() < 1e-9);
        let lowest = curves(&Suite {
            target_of: TargetOf::Lowest,
            ..suite()
        });
        assert!((lowest[0].target_loss.unwrap() - 0.404).abs() < 1e-12);
        assert_eq!(lowest[0].time_to_target, Some(2.0));
        assert_eq!((lowest[1].time_to_target, lowest[1].speedup), (None, None));
        let md = summary_markdown(
            &Suite {
                target_of: TargetOf::Lowest,
                ..suite()
            },
            &lowest,
            &[],
        );
        assert!(md.contains("within 1.0% of the lowest test loss"), "{md}");
    }

    #[test]
    fn time_to_target_and_speedup_come_from_the_baselines_final_loss() {
        let s = suite();
        let cells = s.cells();
        let runs = vec![
            // Baseline: final loss 0.40 at 2.0 s; the target is 0.404, first reached at 1.5 s.
            run(
                cells[0].clone(),
                &[
                    (4, 0.5, 0.50),
                    (9, 1.0, 0.45),
                    (14, 1.5, 0.403),
                    (19, 2.0, 0.40),
                ],
                1000,
            ),
            // Compressed: reaches 0.404 at its second evaluation (0.5 s), ends above it.
            run(
                cells[1].clone(),
                &[
                    (4, 0.3, 0.41),
                    (9, 0.5, 0.404),
                    (14, 0.8, 0.405),
                    (19, 1.0, 0.406),
                ],
                100,
            ),
        ];
        let sum = summarize(&s, &runs);
        assert!((sum[0].target_loss.unwrap() - 0.404).abs() < 1e-12);
        assert_eq!(sum[0].time_to_target, Some(1.5));
        assert_eq!(sum[0].speedup, Some(1.0));
        assert_eq!(sum[1].time_to_target, Some(0.5));
        assert!((sum[1].speedup.unwrap() - 3.0).abs() < 1e-9);
        assert_eq!(sum[1].final_loss, Some(0.406));
        assert_eq!(sum[1].min_loss, Some((0.404, 0.5)));
        assert_eq!(
            sum[0].up_bytes,
            20.0 * 1000.0 / 2.0,
            "per process, over the run"
        );
        // The same compressed run after 0.25 s of `auto` choosing: its time to target counts
        // the choice, and the summary shows it.
        let mut chose = runs.clone();
        let choice = MetricsRecord {
            kind: "choice".into(),
            seconds: 0.25,
            uplink_bytes: 4000,
            ..Default::default()
        };
        chose[1].rows.insert(0, choice);
        let with_choice = summarize(&s, &chose);
        assert_eq!(with_choice[1].time_to_target, Some(0.75));
        assert_eq!(with_choice[1].choice_seconds, 0.25);
        assert!((with_choice[1].speedup.unwrap() - 2.0).abs() < 1e-9);
        assert_eq!(with_choice[0].choice_seconds, 0.0);
        assert_eq!(result_rows(&chose[1])[0].choice_bytes_per_process, 2000.0);
        let md = summary_markdown(&s, &with_choice, &[]);
        assert!(md.contains("| 0.25 | 0.75 |"), "{md}");
        let rows = result_rows(&runs[1]);
        assert_eq!(rows.len(), 4);
        assert_eq!((rows[0].kind.as_str(), rows[0].rounds), ("eval", 5));
        assert_eq!(
            rows[0].up_bytes_per_process,
            5.0 * 100.0 / 2.0,
            "cumulative"
        );
        assert_eq!(rows[1].encode_ms, 10.0);
        let md = summary_markdown(&s, &sum, &["machine: test".into()]);
        assert!(md.contains("| 2 | job | sharded | topk | 1 |"), "{md}");
        assert!(
            md.contains("3.00x") && md.contains("- machine: test"),
            "{md}"
        );
        // A cell that never gets there says so; without a baseline there is no target.
        let never = run(cells[1].clone(), &[(9, 0.5, 0.5), (19, 1.0, 0.45)], 1);
        let sum = summarize(&s, &[runs[0].clone(), never.clone()]);
        assert_eq!((sum[1].time_to_target, sum[1].speedup), (None, None));
        assert!(summary_markdown(&s, &sum, &[]).contains("not reached"));
        assert_eq!(summarize(&s, &[never])[0].target_loss, None);
    }

    #[test]
    fn the_free_link_bound_divides_the_shaped_baseline_by_the_same_cell_on_loopback() {
        let mut s = suite_on_slow_and_loopback();
        let cells = s.cells(); // slow: none, topk; loopback: none, topk
        let id = |link: &str, comp: &str| {
            cells
                .iter()
                .position(|c| c.link.name == link && c.compressor == comp)
                .unwrap()
        };
        // Every cell ends at the same loss (0.40, the target 0.404); what differs is when.
        let at = |i: usize, t: f64| run(cells[i].clone(), &[(9, t / 2.0, 0.45), (19, t, 0.40)], 1);
        let runs = vec![
            at(id("slow", "none"), 4.0),
            at(id("slow", "topk"), 2.0),
            at(id("loopback", "none"), 1.0),
            at(id("loopback", "topk"), 0.5),
        ];
        let sum = summarize(&s, &runs);
        let of = |link: &str, comp: &str| {
            sum.iter()
                .find(|x| x.cell.link.name == link && x.cell.compressor == comp)
                .unwrap()
        };
        assert!((of("slow", "topk").speedup.unwrap() - 2.0).abs() < 1e-9);
        // 4.0 s on the slow link against the same topk cell's 0.5 s without one: 8x.
        assert!((of("slow", "topk").free_link_bound.unwrap() - 8.0).abs() < 1e-9);
        assert!((of("slow", "none").free_link_bound.unwrap() - 4.0).abs() < 1e-9);
        assert_eq!(of("loopback", "topk").free_link_bound, None, "unshaped");
        let md = summary_markdown(&s, &sum, &[]);
        assert!(md.contains("Bound, free link"), "{md}");
        let line = md
            .lines()
            .find(|l| l.contains("| topk |") && l.contains("2.00x"))
            .unwrap();
        assert!(line.ends_with("| 8.00x |"), "{line}");
        // Without an unshaped link there is nothing to bound by.
        s.links.pop();
        let only_slow: Vec<CellRun> = runs[..2].to_vec();
        assert!(summarize(&s, &only_slow)
            .iter()
            .all(|x| x.free_link_bound.is_none()));
        assert!(!summary_markdown(&s, &summarize(&s, &only_slow), &[]).contains("Bound, free"));
    }

    /// Evaluation bytes are not free on a shaped link: the bound adds their time at the
    /// link's rate to the same cell's time on the unshaped link.
    #[test]
    fn the_free_link_bound_counts_evaluation_bytes_at_the_links_rate() {
        let mut s = suite_on_slow_and_loopback();
        s.compressors.pop();
        let cells = s.cells(); // slow: none; loopback: none
        let at = |i: usize, t: f64| run(cells[i].clone(), &[(9, t / 2.0, 0.45), (19, t, 0.40)], 1);
        let mut free = at(1, 1.0);
        // 20 rounds of 31,250 bytes: 5 Mbit, half a second at 10 Mbit/s.
        for r in free.rows.iter_mut().filter(|r| r.kind == "round") {
            r.eval_bytes = 31_250;
        }
        let sum = summarize(&s, &[at(0, 3.0), free.clone()]);
        assert!(
            (sum[0].free_link_bound.unwrap() - 2.0).abs() < 1e-9,
            "3 s / (1 s + 0.5 s)"
        );
        assert_eq!(sum[1].eval_bytes, 20.0 * 31_250.0 / 2.0, "per process");
        let rows = result_rows(&free);
        assert_eq!(rows[0].eval_bytes_per_process, 10.0 * 31_250.0 / 2.0);
        let md = summary_markdown(&s, &sum, &[]);
        assert!(md.contains("| eval MB/proc |"), "{md}");
        assert!(md.contains("| 0.312 |"), "{md}");
    }

    #[test]
    fn repeats_fold_into_medians_and_count_the_runs_that_reached_the_target() {
        let mut s = suite();
        s.repeats = 3;
        let (none, topk): (Vec<Cell>, Vec<Cell>) =
            s.cells().into_iter().partition(|c| c.compressor == "none");
        let base = [(9, 1.0, 0.45), (19, 2.0, 0.40)];
        let mut runs: Vec<CellRun> = none.iter().map(|c| run(c.clone(), &base, 10)).collect();
        // topk: 0.5 s and 1.0 s to the target in two repeats; the third never gets there.
        runs.push(run(topk[0].clone(), &[(9, 0.5, 0.40), (19, 1.0, 0.39)], 1));
        runs.push(run(topk[1].clone(), &[(9, 0.7, 0.42), (19, 1.0, 0.40)], 1));
        runs.push(run(topk[2].clone(), &[(9, 0.6, 0.50), (19, 1.2, 0.45)], 1));
        let md = summary_markdown(&s, &summarize(&s, &runs), &[]);
        let topk = md.lines().find(|l| l.contains("| topk |")).unwrap();
        assert!(topk.contains("| 3 |"), "{topk}");
        assert!(topk.contains("0.75 (2 of 3 runs)"), "{topk}");
        assert!(topk.contains("3.00x"), "median of 4x and 2x: {topk}");
        assert_eq!(md.lines().filter(|l| l.contains("| none |")).count(), 1);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![]), None);
    }
}
