//! A per-process failure flag. An operator that meets an error it cannot recover from (a corrupt
//! message, a NaN gradient) records it here and stops; workers poll the flag between steps and
//! drop their dataflows, so the process stops with the error instead of waiting forever on a
//! peer that will never make progress. A panic anywhere in the process (including timely's
//! communication threads when a peer's connection breaks) sets it too, through
//! [`Supervisor::install_panic_hook`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Shared failure state of one process.
#[derive(Clone, Default)]
pub struct Supervisor {
    failed: Arc<AtomicBool>,
    /// The first failure: its message, and the peer that caused it if another process did.
    first: Arc<Mutex<Option<Failure>>>,
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

    /// Chains a panic hook that records any panic of this process as a failure (then prints it as
    /// the default hook does). Meant for the command-line program, which owns its process.
    pub fn install_panic_hook(&self) {
        let me = self.clone();
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
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
