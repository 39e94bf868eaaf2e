//! The test evaluations of a training loop, for operators of a program (early stopping, custom
//! logging): one record per evaluation, over all workers, without the metrics' bookkeeping.

use std::collections::BTreeMap;

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::Capability;
use timely::dataflow::Stream;

use super::{at, round_of, RoundStats, RoundTime, TrainPlan};
use crate::model::{EvalPart, EvalSummary};

/// The model evaluated on every worker's test rows after one round.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// The round after which the model was evaluated.
    pub round: u64,
    /// Its epoch, counted from 1 as in the metrics.
    pub epoch: u64,
    /// Whether it ends an epoch (an `epoch` metrics row; otherwise a `train.eval_every` or final
    /// `eval` row).
    pub end_of_epoch: bool,
    /// The test metrics over all workers.
    pub test: EvalSummary,
}

/// The evaluations carried by a training loop's round statistics, on worker 0 (the other
/// workers' streams stay empty). An evaluation of the model after round `q` travels in the
/// statistics of round `q + 1`, and is given at that round's timestamp once every worker's
/// part is in.
pub fn evaluations<'s>(
    stats: &Stream<'s, RoundTime, Vec<RoundStats>>,
    plan: &TrainPlan,
) -> Stream<'s, RoundTime, Vec<Evaluation>> {
    let (loss, per_epoch) = (plan.loss.clone(), plan.rounds_per_epoch);
    stats
        .clone()
        .unary_frontier::<CapacityContainerBuilder<Vec<Evaluation>>, _, _, _>(
            Exchange::new(|_: &RoundStats| 0u64),
            "Evaluations",
            move |_cap, _info| {
                let mut parts: BTreeMap<u64, (Capability<RoundTime>, EvalPart)> = BTreeMap::new();
                move |(input, frontier), output| {
                    input.for_each(|cap, batch| {
                        let Some(t) = cap.least() else { return };
                        for part in batch.iter().filter_map(|s| s.eval.as_ref()) {
                            let entry = parts
                                .entry(round_of(t))
                                .or_insert_with(|| (cap.delayed(t, 0), EvalPart::default()));
                            entry.1.merge(part);
                        }
                    });
                    while let Some((&r, _)) = parts.first_key_value() {
                        if frontier.less_equal(&at(r)) {
                            break;
                        }
                        let (cap, part) = parts.pop_first().unwrap().1;
                        let q = r - 1;
                        output.session(&cap).give(Evaluation {
                            round: q,
                            epoch: q / per_epoch + 1,
                            end_of_epoch: (q + 1) % per_epoch == 0,
                            test: part.summary(&*loss),
                        });
                    }
                }
            },
        )
}
