//! Bytes on the wire, from timely's communication layer.
//!
//! The communication configuration is built with a log hook ([`WireCounters::hooks`]): every
//! message a send thread writes to a TCP stream is logged by timely with its header and a
//! timestamp, and the hook records `header + length` bytes for the message's channel. Progress
//! channels are told apart from data channels by timely's own `CommChannels` log events
//! ([`WireCounters::register_worker`]). Only bytes that cross processes exist here: within a
//! process nothing is serialized.
//!
//! timely buffers log events (about a hundred per batch) and hands a batch over when it fills
//! or its thread ends, with a time before which that thread logs nothing more. Each message is
//! added to its round (by its timestamp against the round start times recorded with
//! [`mark_round`]) as its batch arrives. A round's count is complete once every send thread
//! has handed over events past the next round's start: [`take_round`] hands it out then and
//! forgets it, so memory holds only the rounds whose batches are still on their way (tens of
//! rounds), not one entry per round or per message. A round can also be taken before it is
//! complete (a row that cannot wait longer): bytes logged for it later count for the next
//! round taken, so the rounds always add up to the total. [`totals`] is exact once the run
//! has finished.
//!
//! [`totals`]: WireCounters::totals
//! [`take_round`]: WireCounters::take_round
//! [`mark_round`]: WireCounters::mark_round

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use timely::communication::initialize::Hooks;
use timely::communication::logging::CommunicationEvent;
use timely::logging::{CommChannelKind, TimelyEvent, TimelyEventBuilder};

/// Bytes sent between processes, split by channel kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WireBytes {
    /// Bytes on data channels (the dataflow's exchanges), framing included.
    pub data: u64,
    /// Bytes on progress-tracking channels.
    pub progress: u64,
    /// Number of data-channel messages.
    pub data_messages: u64,
}

/// A message whose channel's kind is not known yet.
struct Sent {
    at: Duration,
    channel: usize,
    bytes: u64,
}

/// Messages held back at most, waiting for their channel's kind; beyond it a message of an
/// unknown channel counts as data.
const MAX_UNCLASSIFIED: usize = 1 << 16;

#[derive(Default)]
struct Inner {
    /// Channel id to whether it carries progress, from timely's `CommChannels` events.
    kinds: BTreeMap<usize, bool>,
    /// Messages of channels whose kind has not arrived yet.
    unclassified: Vec<Sent>,
    /// The rounds not yet taken: start time and bytes so far, rounds increasing (a message
    /// counts for the last round that had started when it was sent).
    rounds: VecDeque<(u64, Duration, WireBytes)>,
    /// Bytes sent before the first round started or during rounds already taken: they count
    /// for the next round taken.
    carry: WireBytes,
    /// Per send thread, a time before which it logs nothing more (`Duration::MAX` once it has
    /// ended).
    senders: Vec<Duration>,
    totals: WireBytes,
    /// Keep no per-round figures.
    totals_only: bool,
}

impl Inner {
    /// Counts a message for its round and the totals.
    fn count(&mut self, at: Duration, progress: bool, bytes: u64) {
        WireCounters::add(&mut self.totals, progress, bytes);
        if self.totals_only {
            return;
        }
        let i = self.rounds.partition_point(|&(_, t, _)| t <= at);
        let bucket = match i.checked_sub(1) {
            Some(i) => &mut self.rounds[i].2,
            None => &mut self.carry,
        };
        WireCounters::add(bucket, progress, bytes);
    }

    /// Whether every message sent before `t` has been counted.
    fn counted_until(&self, t: Duration) -> bool {
        self.unclassified.is_empty() && self.senders.iter().all(|&w| w >= t)
    }

    fn sent(&mut self, s: Sent) {
        match self.kinds.get(&s.channel) {
            Some(&progress) => self.count(s.at, progress, s.bytes),
            None if self.unclassified.len() >= MAX_UNCLASSIFIED => self.count(s.at, false, s.bytes),
            None => self.unclassified.push(s),
        }
    }

    /// At the end: messages of channels never classified count as data.
    fn settle(&mut self) {
        for s in std::mem::take(&mut self.unclassified) {
            self.count(s.at, false, s.bytes);
        }
    }

    fn classify(&mut self, channel: usize, progress: bool) {
        self.kinds.insert(channel, progress);
        let waiting = std::mem::take(&mut self.unclassified);
        for s in waiting {
            self.sent(s);
        }
    }
}

/// Per-process record of bytes sent, fed by timely's communication log.
#[derive(Clone)]
pub struct WireCounters {
    start: Instant,
    inner: Arc<Mutex<Inner>>,
}

impl Default for WireCounters {
    fn default() -> Self {
        Self::new()
    }
}

impl WireCounters {
    /// New, empty counters; timestamps count from now.
    pub fn new() -> Self {
        WireCounters {
            start: Instant::now(),
            inner: Arc::default(),
        }
    }

    /// Counters that keep totals only ([`WireCounters::per_round`] is all zeros): for a
    /// process that writes no metrics rows.
    pub fn totals_only() -> Self {
        let counters = Self::new();
        counters.lock().totals_only = true;
        counters
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Communication hooks whose logger records every message this process sends.
    pub fn hooks(&self) -> Hooks {
        let counters = self.clone();
        Hooks {
            log_fn: Arc::new(move |setup| {
                if !setup.sender {
                    return None; // each byte is counted once, by its sender
                }
                let counters = counters.clone();
                let sender = {
                    let mut inner = counters.lock();
                    inner.senders.push(Duration::ZERO);
                    inner.senders.len() - 1
                };
                Some(timely::logging_core::Logger::new(
                    counters.start,
                    Duration::ZERO,
                    move |time, batch: &mut Option<Vec<(Duration, CommunicationEvent)>>| {
                        let mut inner = counters.lock();
                        // Later events of this thread come at `time` or after; no batch: the
                        // thread has flushed its last (it ends).
                        inner.senders[sender] = match batch {
                            Some(_) => *time,
                            None => Duration::MAX,
                        };
                        if let Some(events) = batch {
                            for (at, event) in events.iter() {
                                if let CommunicationEvent::Message(m) = event {
                                    if m.is_send && m.header.length > 0 {
                                        inner.sent(Sent {
                                            at: *at,
                                            channel: m.header.channel,
                                            bytes: m.header.required_bytes() as u64,
                                        });
                                    }
                                }
                            }
                        }
                    },
                ))
            }),
            ..Hooks::default()
        }
    }

    /// Installs a timely logger on `worker` that records which channels carry progress traffic.
    /// Call before building dataflows. The logger stays for the worker's life, and timely then
    /// records every operator's schedule and every message through it: install it only where
    /// bytes cross a network (a cluster of processes).
    pub fn register_worker(&self, worker: &mut timely::worker::Worker) {
        let counters = self.clone();
        if let Some(mut registry) = worker.log_register() {
            registry.insert::<TimelyEventBuilder, _>("timely", move |_time, batch| {
                if let Some(events) = batch {
                    for (_, event) in events.iter() {
                        if let TimelyEvent::CommChannels(c) = event {
                            let progress = c.kind == CommChannelKind::Progress;
                            counters.lock().classify(c.identifier, progress);
                        }
                    }
                }
            });
        }
    }

    /// Records that `round` starts now (called by one worker per process, rounds increasing).
    pub fn mark_round(&self, round: u64) {
        let at = self.start.elapsed();
        let mut inner = self.lock();
        if !inner.totals_only {
            inner.rounds.push_back((round, at, WireBytes::default()));
        }
    }

    fn add(out: &mut WireBytes, progress: bool, bytes: u64) {
        if progress {
            out.progress += bytes;
        } else {
            out.data += bytes;
            out.data_messages += 1;
        }
    }

    /// Everything this process has sent (complete once its communication threads have ended).
    pub fn totals(&self) -> WireBytes {
        let mut inner = self.lock();
        inner.settle();
        inner.totals
    }

    /// The bytes sent during `round`, once they are all counted: the next round has started
    /// and every send thread has logged past its start. `None` while the count may still
    /// grow, unless `now`: then what is counted so far (bytes logged for it later count for
    /// the next round taken). Forgets `round` and every round before it; the bytes of rounds
    /// never taken, before the first round, or logged after their round was taken are added to
    /// the round taken next. A round never marked, or already taken, has only those.
    pub fn take_round(&self, round: u64, now: bool) -> Option<WireBytes> {
        let mut inner = self.lock();
        if !now {
            let next = inner.rounds.iter().find(|&&(r, _, _)| r > round);
            let next_start = next.map(|&(_, t, _)| t)?;
            if !inner.counted_until(next_start) {
                return None;
            }
        }
        let mut out = std::mem::take(&mut inner.carry);
        while let Some(&(r, _, b)) = inner.rounds.front() {
            if r > round {
                break;
            }
            out.data += b.data;
            out.progress += b.progress;
            out.data_messages += b.data_messages;
            inner.rounds.pop_front();
        }
        Some(out)
    }

    /// Once the run is over: messages of channels never classified count as data (call it
    /// before taking the last rounds).
    pub fn settle(&self) {
        self.lock().settle();
    }

    /// Rounds whose bytes are still held (for tests of the memory bound).
    pub fn held_rounds(&self) -> usize {
        self.lock().rounds.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use timely::communication::logging::{CommunicationSetup, MessageEvent};
    use timely::communication::networking::MessageHeader;

    fn message(channel: usize, length: usize) -> CommunicationEvent {
        let header = MessageHeader {
            channel,
            source: 0,
            target_lower: 1,
            target_upper: 2,
            length,
            seqno: 0,
        };
        CommunicationEvent::Message(MessageEvent {
            is_send: true,
            header,
        })
    }

    #[test]
    fn a_round_is_handed_out_once_every_send_thread_has_logged_past_it() {
        let counters = WireCounters::new();
        let setup = |remote| CommunicationSetup {
            sender: true,
            process: 0,
            remote: Some(remote),
        };
        let (one, two) = (
            (counters.hooks().log_fn)(setup(1)).unwrap(),
            (counters.hooks().log_fn)(setup(2)).unwrap(),
        );
        counters.lock().classify(7, false);
        let header = 48; // timely's message header: six u64 fields
        one.log(message(7, 100)); // before round 0: counts for the first round taken
        counters.mark_round(0);
        one.log(message(7, 200));
        counters.mark_round(1);
        two.log(message(7, 300));
        assert_eq!(
            counters.take_round(0, false),
            None,
            "no batch handed over yet"
        );
        one.flush();
        assert_eq!(
            counters.take_round(0, false),
            None,
            "the second thread may still log round 0"
        );
        two.flush();
        let round0 = counters
            .take_round(0, false)
            .expect("both threads are past round 1");
        assert_eq!(round0.data, (100 + 200 + 2 * header) as u64);
        assert_eq!(round0.data_messages, 2);
        assert_eq!(counters.held_rounds(), 1, "round 0 is forgotten");
        // Round 1 has no next round yet: it waits, unless taken now.
        assert_eq!(counters.take_round(1, false), None);
        let round1 = counters.take_round(1, true).unwrap();
        assert_eq!(round1.data, (300 + header) as u64);
        assert_eq!(round0.data + round1.data, counters.totals().data);
        assert_eq!(counters.held_rounds(), 0);
    }
}
