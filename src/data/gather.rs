//! Small all-to-all computations on the training workers: a differential dataflow over a few
//! records per worker whose result every worker receives. The readers use it to agree on what
//! needs every worker's part (errors, row counts, dimensions, statistics).

use std::cell::RefCell;
use std::rc::Rc;

use differential_dataflow::consolidation::consolidate;
use differential_dataflow::input::Input;
use differential_dataflow::VecCollection;
use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::{Inspect, Probe};
use timely::worker::Worker;

/// Runs a differential dataflow over `local` updates on every worker and returns its output,
/// which every worker receives whole (consolidated, positive records, sorted).
pub fn gather<K, O>(
    worker: &mut Worker,
    local: Vec<(K, isize)>,
    logic: impl for<'s> FnOnce(VecCollection<'s, u64, K, isize>) -> VecCollection<'s, u64, O, isize>,
) -> Vec<O>
where
    K: differential_dataflow::ExchangeData,
    O: differential_dataflow::ExchangeData,
{
    let out: Rc<RefCell<Vec<(O, isize)>>> = Rc::default();
    let sink = out.clone();
    let dataflow = worker.next_dataflow_index();
    let (mut input, probe) = worker.dataflow::<u64, _, _>(|scope| {
        let (input, collection) = scope.new_collection::<K, isize>();
        let (probe, _) = logic(collection)
            .inner
            .broadcast()
            .inspect(move |(o, _, r)| sink.borrow_mut().push((o.clone(), *r)))
            .probe();
        (input, probe)
    });
    for (k, r) in local {
        input.update(k, r);
    }
    input.advance_to(1);
    input.flush();
    worker.step_while(|| probe.less_than(input.time()));
    drop(input);
    // (the worker may run other dataflows, e.g. the runtime's heartbeats: wait for this one)
    while worker.installed_dataflows().contains(&dataflow) {
        worker.step();
    }
    let mut v = std::mem::take(&mut *out.borrow_mut());
    consolidate(&mut v);
    v.into_iter()
        .filter(|(_, r)| *r > 0)
        .map(|(o, _)| o)
        .collect()
}
