//! A configuration tried for a few real rounds: the standard training loop on the worker's own
//! rows, stopped after `rounds` rounds, its model discarded, each round's time kept. `auto`
//! tries the configurations the cost model ranks first ([`crate::auto`]), because a model of a
//! round misses what only a real round shows: processes sharing cores, caches that the other
//! processes' rounds have emptied, a parked worker's wake-up. The model a trial ends with can
//! be scored on rows held out of its training rows: `auto`'s loss check.

use std::time::Instant;

use timely::dataflow::operators::generic::operator::source;
use timely::dataflow::operators::{ConnectLoop, LoopVariable, Probe};
use timely::order::Product;
use timely::worker::Worker;

use super::calibrate::wait;
use crate::data::Dataset;
use crate::dataflow::{Supervisor, TrainPlan, Training, WorkerData};
use crate::exchange::Envelope;
use crate::model::EvalPart;

/// What a trial measured on one worker.
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    /// Each round's time, ms, round 0 first: from the moment the worker's previous round's
    /// model changes were out (for round 0, the dataflow's start) to the moment this round's
    /// were.
    pub round_ms: Vec<f64>,
    /// The model the trial ended with, scored on the `validation` rows (when given).
    pub validation: Option<EvalPart>,
    /// Payload bytes this worker sent to other processes, both directions.
    pub sent_bytes: u64,
}

/// `rounds` rounds of `plan` on `data`, timed on this worker, with the model they end with
/// scored on `validation`. Every worker of the run calls it with the same plan. The uplink
/// memory starts from `memory` (what [`super::calibrate::warmed_memory`] saved), or empty.
pub fn trial(
    worker: &mut Worker,
    plan: &TrainPlan,
    data: &WorkerData,
    rounds: u64,
    memory: Option<&[u8]>,
    validation: Option<&Dataset>,
    supervisor: &Supervisor,
) -> Result<Trial, String> {
    let data = WorkerData {
        train: data.train.clone(),
        test: Dataset::new(data.test.dim),
        ignored_test_features: 0,
        shares: Vec::new(),
    };
    let mut t = Training::new(plan, data, supervisor.clone(), None, Box::new(|_| {}));
    if let Some(saved) = memory {
        t.state().borrow_mut().model.memory.restore(saved)?;
    }
    let state = t.state();
    let delay = plan.feedback_delay();
    let id = worker.next_dataflow_index();
    let started = Instant::now();
    let out = worker.dataflow::<(), _, _>(|scope| {
        scope.iterative::<u64, _, _>(|inner| {
            // One decision, at round `rounds`: it makes that round the last on every worker.
            let stop = source(inner, "StopTrial", move |start, _| {
                let mut at = Some(start.delayed(&Product::new((), rounds)));
                move |output| {
                    if let Some(at) = at.take() {
                        output.session(&at).give(String::from("trial"));
                    }
                }
            })
            .container::<Vec<String>>();
            let (handle, changes) = inner.loop_variable::<Vec<Envelope>>(delay);
            let (grads, stats) = t.gradient_until(changes, stop);
            let (out, changes) = t.exchange(grads).probe();
            changes.connect_loop(handle);
            t.collect(stats);
            out
        })
    });
    let mut done = Vec::new();
    wait(worker, supervisor, |w| {
        while (done.len() as u64) < rounds && !out.less_equal(&Product::new((), done.len() as u64))
        {
            done.push(crate::metrics::ms(started));
        }
        w.installed_dataflows().contains(&id)
    })?;
    let round_ms = done
        .iter()
        .scan(0.0, |previous, &at| {
            Some(at - std::mem::replace(previous, at))
        })
        .collect();
    let st = state.borrow();
    let (model, loss) = (&*plan.model, &*plan.loss);
    let validation = validation.map(|rows| {
        st.model
            .weights
            .read(|w| EvalPart::evaluate(rows, w, model, loss, plan.auc_bits))
    });
    Ok(Trial {
        round_ms,
        validation,
        sent_bytes: st.model.traffic_total.total_sent(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::Job;

    /// Two workers try a plan for a few rounds: each times every round, and the trial leaves
    /// nothing behind (a second one, of another plan, runs after it on the same workers).
    #[test]
    fn a_trial_times_each_of_its_rounds_and_ends() {
        let text = "[data.synth]\nrows = 2000\ndim = 5000\n[train]\nbatch_fraction = 0.05";
        let job = Job::parse(text, std::path::Path::new("job.toml"), &[]).unwrap();
        let results = timely::execute(timely::Config::process(2), move |worker| {
            let (data, dim, _, _) = job.load_on(worker).unwrap();
            let plan = job.plan(dim, 2);
            let sup = Supervisor::new();
            let first = trial(worker, &plan, &data, 6, None, None, &sup).unwrap();
            let allgather = TrainPlan {
                exchange: crate::exchange::ExchangeKind::Allgather,
                ..plan
            };
            let second =
                trial(worker, &allgather, &data, 3, None, Some(&data.train), &sup).unwrap();
            (first, second, worker.installed_dataflows().len())
        })
        .unwrap()
        .join();
        for r in results {
            let (first, second, left) = r.unwrap();
            let (a, b) = (&first.round_ms, &second.round_ms);
            assert_eq!((a.len(), b.len(), left), (6, 3, 0));
            assert!(a.iter().chain(b).all(|&ms| ms > 0.0), "{a:?}");
            // Scored only when asked, on every row given, and below the initial log loss
            // (ln 2) after three rounds of training.
            assert_eq!(first.validation, None);
            let v = second.validation.unwrap();
            assert!(v.count > 500, "{v:?}");
            assert!(
                v.loss_sum / (v.count as f64) < std::f64::consts::LN_2,
                "{v:?}"
            );
            // One process: nothing crosses to another.
            assert_eq!(first.sent_bytes, 0);
        }
    }
}
