//! A per-process failure flag. An operator that meets an error it cannot recover from (a corrupt
//! message, a NaN gradient) records it here and stops; workers poll the flag between steps and
//! drop their dataflows, so the process stops with the error instead of waiting forever on a
//! peer that will never make progress. A panic anywhere in the process (including timely's
//! communication threads when a peer's connection breaks) sets it too, through
//! [`Supervisor::install_panic_hook`].
//!
//! A process that was itself stopped (SIGSTOP, a frozen machine) finds, when it runs again,
//! broken connections and silent peers: those are consequences of its own stop, which
//! [`Supervisor::watch_own_progress`] tells apart, so the error names this process, not a peer.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Shared failure state of one process.
#[derive(Clone, Default)]
pub struct Supervisor {
    failed: Arc<AtomicBool>,
    /// The first failure: its message, and the peer that caused it if another process did.
    first: Arc<Mutex<Option<Failure>>>,
    /// This process's own progress, once [`Supervisor::watch_own_progress`] started watching.
    watch: Arc<Mutex<Option<Arc<StallWatch>>>>,
}

/// A failure's message, and the peer that caused it if another process did.
type Failure = (String, Option<usize>);

impl Supervisor {
    /// A fresh, healthy supervisor.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `message` (the first failure wins) and raises the flag.
    pub fn fail(&self, message: impl Into<String>) {
        self.record(message.into(), None);
    }

    /// Records a failure caused by process `peer` (its connection broke, it went silent): the
    /// first failure wins, as for [`Supervisor::fail`]. A consequence of that peer's failure,
    /// not this process's own.
    pub fn fail_because_of(&self, peer: usize, message: impl Into<String>) {
        self.record(message.into(), Some(peer));
    }

    fn record(&self, message: String, peer: Option<usize>) {
        // A peer's failure seen by a process that was itself stopped is that stop's consequence.
        let watch = self.watch.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let (message, peer) = match (peer, watch.and_then(|w| w.stalled())) {
            (Some(_), Some(stall)) => (stall, None),
            _ => (message, peer),
        };
        self.first().get_or_insert((message, peer));
        self.failed.store(true, Ordering::SeqCst);
    }

    fn first(&self) -> std::sync::MutexGuard<'_, Option<Failure>> {
        self.first.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The peer that caused this process's first failure, if another process did.
    pub fn lost_peer(&self) -> Option<usize> {
        self.first().as_ref().and_then(|f| f.1)
    }

    /// Whether anything failed.
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// The first failure message.
    pub fn message(&self) -> Option<String> {
        self.first().as_ref().map(|f| f.0.clone())
    }

    /// Watches, from a thread of its own, that this process (process `me`) keeps running: a
    /// gap longer than `timeout` between two ticks means the whole process was stopped. A peer's
    /// failure recorded after such a gap (a connection that broke, a peer not heard while
    /// stopped) is recorded as this process's own stop instead. The thread ends with the
    /// supervisor.
    pub fn watch_own_progress(&self, me: usize, timeout: Duration) {
        let watch = Arc::new(StallWatch {
            me,
            timeout,
            base: Instant::now(),
            last_tick_ns: AtomicU64::new(0),
            longest_gap_ns: AtomicU64::new(0),
        });
        let weak: Weak<StallWatch> = Arc::downgrade(&watch);
        *self.watch.lock().unwrap_or_else(|p| p.into_inner()) = Some(watch);
        let tick = (timeout / 8).clamp(Duration::from_millis(10), Duration::from_millis(250));
        let _ = std::thread::Builder::new()
            .name("gradflow:stall-watch".into())
            .spawn(move || {
                while let Some(watch) = weak.upgrade() {
                    watch.tick();
                    drop(watch);
                    std::thread::sleep(tick);
                }
            });
    }

    /// Chains a panic hook that records any panic of this process as a failure (then prints it as
    /// the default hook does). Meant for the command-line program, which owns its process.
    pub fn install_panic_hook(&self) {
        let me = self.clone();
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // The Parquet reader turns the `parquet` crate's panics on a malformed file into
            // an error naming the file.
            #[cfg(feature = "parquet")]
            if crate::data::table::parquet::panic_is_contained() {
                return;
            }
            let what = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into());
            let thread = std::thread::current()
                .name()
                .unwrap_or("unnamed")
                .to_string();
            // timely names its communication threads `timely:send-N` / `timely:recv-N` after the
            // remote process N; their panics mean that the connection to N broke, which the
            // error line says: no backtrace for those.
            // Panics after the first failure are its consequences (poisoned queues, guards that
            // join panicked threads): recorded, not printed.
            let consequence = me.is_failed();
            match thread
                .strip_prefix("timely:send-")
                .or_else(|| thread.strip_prefix("timely:recv-"))
            {
                Some(peer) => match peer.parse() {
                    Ok(peer) => me.fail_because_of(
                        peer,
                        format!("lost the connection to process {peer} ({what})"),
                    ),
                    Err(_) => me.fail(format!("lost the connection to process {peer} ({what})")),
                },
                None => {
                    me.fail(format!("thread '{thread}' failed: {what}"));
                    if !consequence {
                        previous(info);
                    }
                }
            }
        }));
    }
}

/// When a process last ran, and the longest time it did not: see
/// [`Supervisor::watch_own_progress`].
struct StallWatch {
    me: usize,
    timeout: Duration,
    base: Instant,
    last_tick_ns: AtomicU64,
    longest_gap_ns: AtomicU64,
}

impl StallWatch {
    fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    fn tick(&self) {
        let now = self.now_ns();
        let gap = now.saturating_sub(self.last_tick_ns.swap(now, Ordering::SeqCst));
        self.longest_gap_ns.fetch_max(gap, Ordering::SeqCst);
    }

    /// The message naming this process, if it went longer than the timeout without running:
    /// between two ticks, or since the last one (the watch thread may not have run yet after
    /// a stop).
    fn stalled(&self) -> Option<String> {
        let since_tick = self
            .now_ns()
            .saturating_sub(self.last_tick_ns.load(Ordering::SeqCst));
        let gap = since_tick.max(self.longest_gap_ns.load(Ordering::SeqCst));
        let gap = Duration::from_nanos(gap);
        (gap > self.timeout).then(|| stalled_message(self.me, gap, self.timeout))
    }
}

/// The error of a process that did not run for `gap`, longer than its peers wait (`timeout`).
pub(crate) fn stalled_message(me: usize, gap: Duration, timeout: Duration) -> String {
    format!(
        "this process (process {me}) made no progress for {:.0} s (stopped, frozen or starved \
         of CPU), longer than --peer-timeout {} s: its peers stop waiting for it",
        gap.as_secs_f64(),
        timeout.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_failure_after_this_process_stalled_names_this_process() {
        let sup = Supervisor::new();
        sup.watch_own_progress(1, Duration::from_millis(50));
        std::thread::sleep(Duration::from_millis(30));
        // A stop of 3 s, as the watch thread measures it when the process runs again.
        let watch = sup.watch.lock().unwrap().clone().unwrap();
        watch
            .longest_gap_ns
            .fetch_max(Duration::from_secs(3).as_nanos() as u64, Ordering::SeqCst);
        sup.fail_because_of(0, "lost the connection to process 0");
        assert_eq!(sup.lost_peer(), None);
        let m = sup.message().unwrap();
        assert!(
            m.starts_with("this process (process 1) made no progress for 3 s"),
            "{m}"
        );
    }

    #[test]
    fn a_peer_failure_of_a_running_process_names_the_peer() {
        let sup = Supervisor::new();
        sup.watch_own_progress(1, Duration::from_secs(2));
        std::thread::sleep(Duration::from_millis(30));
        sup.fail_because_of(0, "lost the connection to process 0");
        assert_eq!(sup.lost_peer(), Some(0));
        assert_eq!(sup.message().unwrap(), "lost the connection to process 0");
    }

    #[test]
    fn the_watch_measures_a_gap_between_ticks() {
        let watch = StallWatch {
            me: 0,
            timeout: Duration::from_millis(20),
            base: Instant::now(),
            last_tick_ns: AtomicU64::new(0),
            longest_gap_ns: AtomicU64::new(0),
        };
        watch.tick();
        std::thread::sleep(Duration::from_millis(40));
        watch.tick();
        assert!(watch.stalled().is_some());
        let quick = StallWatch {
            timeout: Duration::from_secs(5),
            ..watch
        };
        quick.tick();
        assert!(quick.stalled().is_none());
    }
}
