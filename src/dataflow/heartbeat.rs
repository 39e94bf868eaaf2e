//! Heartbeats between the processes of a cluster, so that a peer that stops (SIGSTOP, a frozen
//! machine, a cut link that TCP has not noticed) stops the job with an error naming it instead
//! of leaving every other process waiting for ever.
//!
//! A small dataflow of its own, built on every worker before anything else: a source that,
//! every `period`, sends its process's index to every worker (timely's `broadcast`), and that
//! checks when it last heard from each other process. Any step of the worker runs it (also the
//! data pipeline's), and a delayed activation wakes a parked worker for it. A process that
//! has not been heard from for `timeout` is reported to the [`Supervisor`] as the cause.
//!
//! Silence is measured per process, not per connection: a healthy process waiting on a stuck
//! one still beats, so only the stuck one is named. A process that was itself stopped (SIGSTOP
//! then SIGCONT) finds, when it runs again, that it has not run for longer than the timeout:
//! it names itself, not the peers it could not hear while it was stopped.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::generic::operator::source;
use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::Inspect;
use timely::worker::Worker;

use super::supervisor::stalled_message;
use super::Supervisor;

/// The heartbeat dataflow of one worker; [`Heartbeat::stop`] removes it.
pub struct Heartbeat {
    dataflow: usize,
}

impl Heartbeat {
    /// Starts beating on `worker`, one of `processes` processes of equally many workers, and
    /// reports to `supervisor` any other process silent for `timeout`.
    pub fn start(
        worker: &mut Worker,
        processes: usize,
        timeout: Duration,
        supervisor: Supervisor,
    ) -> Heartbeat {
        let me = worker.index() / (worker.peers() / processes).max(1);
        let period = (timeout / 4).min(Duration::from_secs(1));
        let dataflow = worker.next_dataflow_index();
        worker.dataflow::<u64, _, _>(|scope| {
            let heard: Rc<RefCell<Vec<Instant>>> =
                Rc::new(RefCell::new(vec![Instant::now(); processes]));
            let record = heard.clone();
            source::<_, CapacityContainerBuilder<Vec<u32>>, _, _>(
                scope,
                "Heartbeat",
                |cap, info| {
                    let activator = scope.activator_for(info.address);
                    let (mut next, mut last_run) = (Instant::now(), Instant::now());
                    move |output| {
                        let now = Instant::now();
                        let paused = now.duration_since(last_run);
                        last_run = now;
                        if paused > timeout {
                            supervisor.fail(stalled_message(me, paused, timeout));
                            activator.activate_after(period);
                            return;
                        }
                        if now >= next {
                            output.session(&cap).give(me as u32);
                            next = now + period;
                        }
                        if let Some((p, _)) = heard
                            .borrow()
                            .iter()
                            .enumerate()
                            .find(|&(p, t)| p != me && now.duration_since(*t) > timeout)
                        {
                            supervisor.fail_because_of(
                                p,
                                format!(
                                "process {p} made no progress for {} s (no heartbeat: stopped, \
                                 frozen or cut off; --peer-timeout sets the limit)",
                                timeout.as_secs_f64()
                            ),
                            );
                        }
                        activator.activate_after(period);
                    }
                },
            )
            .broadcast()
            .inspect(move |&p| {
                if let Some(t) = record.borrow_mut().get_mut(p as usize) {
                    *t = Instant::now();
                }
            });
        });
        Heartbeat { dataflow }
    }

    /// Removes the heartbeat dataflow (its capability is never released, so it would never
    /// complete by itself). Beats that peers still send to it are discarded.
    pub fn stop(self, worker: &mut Worker) {
        worker.drop_dataflow(self.dataflow);
    }

    /// Whether `worker` has a dataflow other than this one.
    pub fn others_installed(&self, worker: &Worker) -> bool {
        worker
            .installed_dataflows()
            .iter()
            .any(|&d| d != self.dataflow)
    }
}
