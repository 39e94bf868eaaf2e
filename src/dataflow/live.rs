//! Rows from a stream as they arrive: the source of an online run's rounds.
//!
//! One worker (the first) reads the stream ([`crate::data::stream::Records`], whose thread
//! parses the lines) and cuts its rows into rounds: a round closes once it holds
//! `train.batch_rows` rows, or once rows have waited `train.batch_ms` for more. Row `n` of the
//! stream goes to worker `n mod peers`, so the rounds' rows, and the model, do not depend on
//! how the workers are split into processes. With a reader per process
//! ([`LiveSpec::per_process`]), each process's first worker reads its own stream for its own
//! workers, and each reader's rounds hold its share of the rows.
//!
//! Every worker receives one [`LiveBatch`] a round from every reader (empty if no row is its);
//! once a reader's stream has ended, its batches are marked `end`, and the first round in which
//! every reader's are is the run's last on every worker (a reader that ended early sends such
//! rounds until the loop is over). A reader runs at most [`AHEAD`] rounds ahead of the
//! exchange: the rest waits in the stream's bounded queue, and then in the pipe (back-pressure,
//! not memory).
//!
//! The stream ends at its end (the writer closed it), after `train.max_rows` rows or
//! `train.max_seconds`, or on SIGINT or SIGTERM ([`stop_on_signals`]); the run then applies
//! the last changes and writes its model as after the last epoch of a file.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::Stream;
use timely::progress::Antichain;

use super::checkpoint::StreamPosition;
use super::{at, round_of, RoundTime, Supervisor};
pub use crate::data::stream::OnBadRow;
use crate::data::stream::{Event, Origin, Records, RowFormat, Rows};
use crate::data::Dataset;
use crate::exchange::Envelope;

/// Rounds the reader may run ahead of the last round whose changes are in.
pub const AHEAD: u64 = 2;

/// How an online run reads its stream and cuts it into rounds.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveSpec {
    /// The stream.
    pub origin: Origin,
    /// How its lines become rows (LibSVM, of the job's declared dimension; `data.on_bad_row`).
    pub format: RowFormat,
    /// Rows a round, all workers together (`train.batch_rows`).
    pub batch_rows: u64,
    /// The longest a row waits for its round to fill (`train.batch_ms`).
    pub batch_wait: Duration,
    /// Stop after this many rows (`train.max_rows`).
    pub max_rows: Option<u64>,
    /// Stop after this long (`train.max_seconds`).
    pub max_time: Option<Duration>,
    /// Say so when no row has come for this long (`train.stall_seconds`).
    pub stall_after: Duration,
    /// The intercept's key, added to every row (`model.intercept`).
    pub intercept: Option<u32>,
    /// With `Some(t)`, every process of `t` workers reads a stream of its own, whose rows go to
    /// its workers, and `batch_rows` and `max_rows` are shared among the readers
    /// (`data.each_process_reads`); with `None`, the first worker reads for all.
    pub per_process: Option<u32>,
    /// Where reading starts: the start, or where a resumed run's checkpoint had read to.
    pub start: StreamPosition,
    /// Live snapshots of the model, if the job asks for them.
    pub snapshots: Option<Snapshots>,
}

/// An online run's live snapshots: the model file (`output.model`) rewritten every so many
/// rows or seconds while training goes on, by the first worker, whole or not at all
/// ([`crate::atomic`]), so that `predict` (or a server) can read it at any time.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshots {
    /// The model file.
    pub path: std::path::PathBuf,
    /// Every this many rows (`output.snapshot_rows`).
    pub every_rows: Option<u64>,
    /// Every this long (`output.snapshot_seconds`).
    pub every: Option<Duration>,
    /// A table stream's feature map (TOML), which the model file carries for `predict`.
    pub features: Option<String>,
}

impl Snapshots {
    /// Whether a snapshot is due with `rows` trained on, the last one at `last` (rows, time).
    pub fn due(&self, rows: u64, last: (u64, Instant)) -> bool {
        self.every_rows.is_some_and(|n| rows >= last.0 + n)
            || self.every.is_some_and(|d| last.1.elapsed() >= d)
    }
}

impl LiveSpec {
    /// The reader whose rows worker `w` trains on (a process's first worker, or worker 0).
    pub fn reader_of(&self, w: u32) -> u32 {
        self.per_process.map_or(0, |t| w / t * t)
    }

    /// Whether worker `w` reads a stream.
    pub fn reads(&self, w: u32) -> bool {
        self.reader_of(w) == w
    }

    /// The number of readers among `peers` workers.
    pub fn readers(&self, peers: u32) -> u32 {
        self.per_process.map_or(1, |t| peers / t)
    }

    /// A resumed run reads on from `at` (standard input cannot be resumed: an error).
    pub fn resume_at(&mut self, at: StreamPosition) -> Result<(), String> {
        self.origin.resume_at(at.offset)?;
        self.start = at;
        Ok(())
    }
}

/// One worker's rows of one round, as they cross to it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveBatch {
    /// The worker the rows are for.
    pub dest: u32,
    /// Each row's label.
    pub labels: Vec<f32>,
    /// Each row's number of features.
    pub lens: Vec<u32>,
    /// The rows' keys, row after row.
    pub keys: Vec<u32>,
    /// Their values.
    pub values: Vec<f32>,
    /// The reader (a worker index) whose stream the rows come from.
    pub reader: u32,
    /// The reader's stream has ended: it sends no more rows, and the first round in which every
    /// reader's has is the run's last.
    pub end: bool,
    /// Where the stream stands after the round's rows.
    pub at: StreamPosition,
}

impl LiveBatch {
    /// Appends the batch's rows to `data`.
    pub fn append_to(&self, data: &mut Dataset) {
        let mut at = 0;
        for (&len, &label) in self.lens.iter().zip(&self.labels) {
            let end = at + len as usize;
            data.push_row(&self.keys[at..end], &self.values[at..end], label);
            at = end;
        }
    }
}

/// Set by SIGINT or SIGTERM once [`stop_on_signals`] is installed: ends the stream.
static SIGNALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SIGNALLED.store(true, Ordering::Relaxed);
}

/// From now on SIGINT and SIGTERM end an online run's stream (the run then writes its model)
/// instead of killing the process; a second signal still kills it.
pub fn stop_on_signals() {
    extern "C" fn second(sig: libc::c_int) {
        // SAFETY: restoring the default action and raising again are async-signal-safe.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
    extern "C" fn first(sig: libc::c_int) {
        on_signal(sig);
        // SAFETY: installing a handler is async-signal-safe.
        unsafe {
            libc::signal(sig, second as *const () as libc::sighandler_t);
        }
    }
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic and reinstalls a handler.
        unsafe {
            libc::signal(sig, first as *const () as libc::sighandler_t);
        }
    }
}

/// The rows of an online run, each at its round. `spec` is the reading worker's (the others
/// pass `None` and only receive); `progress` is the loop's feedback edge (the model changes),
/// whose frontier tells how far training has got.
pub fn live_rows<'s>(
    progress: &Stream<'s, RoundTime, Vec<Envelope>>,
    spec: Option<LiveSpec>,
    start_round: u64,
    supervisor: Supervisor,
) -> Stream<'s, RoundTime, Vec<LiveBatch>> {
    let scope = progress.scope();
    let (peers, me) = (scope.peers() as u32, scope.index() as u32);
    let mut builder = OperatorBuilder::new("LiveRows".to_owned(), scope);
    // The progress input only paces the reader: no output waits for it.
    let mut paced = builder.new_input_connection(
        progress.clone(),
        Pipeline,
        Vec::<(usize, Antichain<_>)>::new(),
    );
    let (out, rows) =
        builder.new_output_connection::<Vec<LiveBatch>, _>(Vec::<(usize, Antichain<_>)>::new());
    let mut out: OutputBuilder<RoundTime, CapacityContainerBuilder<Vec<LiveBatch>>> =
        OutputBuilder::from(out);
    let activator = scope.activator_for(builder.operator_info().address);
    // With a reader per process, a reader whose stream has ended sends empty rounds, marked
    // ended, until every reader's has (the run's last round), and the loop is over.
    let lingers = spec.as_ref().is_some_and(|s| s.readers(peers) > 1);
    let mut reader = match spec.map(|s| Reader::open(s, peers, me)) {
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => {
            supervisor.fail(e);
            None
        }
        None => None,
    };
    builder.build(move |mut caps| {
        let mut cap = caps.pop().filter(|_| reader.is_some());
        if let Some(c) = cap.as_mut() {
            c.downgrade(&at(start_round));
        }
        move |frontiers| {
            paced.for_each(|_, _| {});
            let (Some(c), Some(reader)) = (cap.as_mut(), reader.as_mut()) else {
                return;
            };
            if supervisor.is_failed() {
                cap = None;
                return;
            }
            loop {
                let r = round_of(c.time());
                if reader.ended && frontiers[0].is_empty() {
                    cap = None; // the loop is over
                    return;
                }
                // At most AHEAD rounds beyond the changes that are in.
                if r >= AHEAD && frontiers[0].less_equal(&at(r - AHEAD)) {
                    return;
                }
                match reader.next_round(peers) {
                    Ok(Cut::Round(batches)) => {
                        out.activate()
                            .session(&*c)
                            .give_iterator(batches.into_iter());
                        c.downgrade(&at(r + 1));
                    }
                    Ok(Cut::Wait(wait)) => {
                        activator.activate_after(wait);
                        return;
                    }
                    Ok(Cut::End(batches)) => {
                        out.activate()
                            .session(&*c)
                            .give_iterator(batches.into_iter());
                        reader.report_end();
                        if !lingers {
                            cap = None;
                            return;
                        }
                        c.downgrade(&at(r + 1));
                    }
                    Err(e) => {
                        supervisor.fail(e);
                        cap = None;
                        return;
                    }
                }
            }
        }
    });
    rows
}

/// What the reader has for the next round.
enum Cut {
    /// The round's batches, one per worker.
    Round(Vec<LiveBatch>),
    /// Nothing yet: look again after this long.
    Wait(Duration),
    /// The stream has ended: the end markers, one per worker.
    End(Vec<LiveBatch>),
}

/// The reading worker's state: the stream, the rows not yet cut, the round being filled.
struct Reader {
    /// The job's spec, with this reader's shares of `batch_rows` and `max_rows`.
    spec: LiveSpec,
    /// This reader (a worker index), and the workers its rows go to, row `n` to the
    /// `n mod len`-th.
    me: u32,
    dests: Vec<u32>,
    records: Records,
    started: Instant,
    /// Rows parsed but not yet in a round, from row `next` (at `key` in its keys).
    block: Rows,
    next: usize,
    key: usize,
    /// The stream's offset after the last row taken.
    offset: u64,
    /// The round being filled, by worker; its row count; when its first row came.
    batches: Vec<LiveBatch>,
    pending: u64,
    first_at: Option<Instant>,
    /// Rows taken so far; malformed rows skipped and bytes of a cut last line (at the end).
    rows: u64,
    skipped: u64,
    cut: u64,
    /// The stream has ended (its end, a limit, a signal), and that was reported.
    ended: bool,
    reported: bool,
    /// When the last rows came, and whether their absence since was reported.
    last_rows_at: Instant,
    stall_reported: bool,
}

impl Reader {
    fn open(mut spec: LiveSpec, peers: u32, me: u32) -> Result<Reader, String> {
        let records = Records::open(spec.origin.clone(), spec.format.clone())?;
        let (offset, rows) = (spec.start.offset, spec.start.rows);
        let readers = spec.readers(peers) as u64;
        spec.batch_rows = spec.batch_rows.div_ceil(readers);
        spec.max_rows = spec.max_rows.map(|m| m.div_ceil(readers));
        let dests = match spec.per_process {
            Some(t) => (me..me + t).collect(),
            None => (0..peers).collect(),
        };
        Ok(Reader {
            spec,
            me,
            dests,
            records,
            started: Instant::now(),
            block: Rows::default(),
            next: 0,
            key: 0,
            offset,
            batches: empty_batches(peers, me),
            pending: 0,
            first_at: None,
            rows,
            skipped: 0,
            cut: 0,
            ended: false,
            reported: false,
            last_rows_at: Instant::now(),
            stall_reported: false,
        })
    }

    /// Takes what has arrived into the round being filled, and says whether it is complete.
    fn next_round(&mut self, peers: u32) -> Result<Cut, String> {
        loop {
            if self.pending >= self.spec.batch_rows {
                return Ok(Cut::Round(self.close(peers)));
            }
            if self.ended || self.limit_reached() {
                self.ended = true;
                if self.pending > 0 {
                    return Ok(Cut::Round(self.close(peers)));
                }
                let mut end = self.close(peers);
                end.iter_mut().for_each(|b| b.end = true);
                return Ok(Cut::End(end));
            }
            if self.next < self.block.len() {
                self.take_row();
                continue;
            }
            match self.records.try_next() {
                Some(Event::Rows(rows)) => {
                    (self.block, self.next, self.key) = (rows, 0, 0);
                    self.last_rows_at = Instant::now();
                    self.stall_reported = false;
                }
                Some(Event::End { cut, skipped, .. }) => {
                    (self.cut, self.skipped) = (cut, skipped);
                    self.ended = true;
                }
                Some(Event::Failed(e)) => return Err(e),
                None => {
                    self.report_stall();
                    let waited = self.first_at.map(|t| t.elapsed());
                    match waited {
                        Some(w) if w >= self.spec.batch_wait => {
                            return Ok(Cut::Round(self.close(peers)))
                        }
                        Some(w) => return Ok(Cut::Wait((self.spec.batch_wait - w).min(POLL))),
                        None => return Ok(Cut::Wait(POLL)),
                    }
                }
            }
        }
    }

    /// Whether `train.max_rows`, `train.max_seconds` or a signal ends the stream here.
    fn limit_reached(&mut self) -> bool {
        let rows = self.spec.max_rows.is_some_and(|m| self.rows >= m);
        let time = self
            .spec
            .max_time
            .is_some_and(|m| self.started.elapsed() >= m);
        let signal = SIGNALLED.load(Ordering::Relaxed);
        if rows || time || signal {
            self.records.stop();
        }
        rows || time || signal
    }

    /// Moves the next parsed row into its worker's batch (row `n` of the stream to the
    /// `n mod len`-th of its workers), with the intercept.
    fn take_row(&mut self) {
        let (i, block) = (self.next, &self.block);
        let keys = self.key..self.key + block.lens[i] as usize;
        let dest = self.dests[(self.rows % self.dests.len() as u64) as usize];
        let b = &mut self.batches[dest as usize];
        b.keys.extend_from_slice(&block.keys[keys.clone()]);
        b.values.extend_from_slice(&block.values[keys.clone()]);
        if let Some(k) = self.spec.intercept {
            b.keys.push(k);
            b.values.push(1.0);
        }
        b.lens
            .push((keys.len() + self.spec.intercept.is_some() as usize) as u32);
        b.labels.push(block.labels[i]);
        (self.next, self.key, self.offset) = (i + 1, keys.end, block.ends[i]);
        self.rows += 1;
        self.pending += 1;
        self.first_at.get_or_insert_with(Instant::now);
        if self.spec.max_rows.is_some_and(|m| self.rows >= m) {
            self.ended = true;
            self.records.stop();
        }
    }

    /// Closes the round being filled: its batches, with the offset after its last row.
    fn close(&mut self, peers: u32) -> Vec<LiveBatch> {
        let mut batches = std::mem::replace(&mut self.batches, empty_batches(peers, self.me));
        let at = StreamPosition {
            offset: self.offset,
            rows: self.rows,
        };
        batches.iter_mut().for_each(|b| b.at = at);
        (self.pending, self.first_at) = (0, None);
        batches
    }

    /// Says once per stall that no row has come for `train.stall_seconds` (the run waits on).
    fn report_stall(&mut self) {
        let quiet = self.last_rows_at.elapsed();
        if self.stall_reported || quiet < self.spec.stall_after {
            return;
        }
        self.stall_reported = true;
        eprintln!(
            "warning: {}: no rows for {:.0} s after {} rows (train.stall_seconds); waiting",
            self.spec.origin.name(),
            quiet.as_secs_f64(),
            self.rows
        );
    }

    /// What the stream's end leaves to say (once): rows skipped, a cut last line.
    fn report_end(&mut self) {
        if std::mem::replace(&mut self.reported, true) {
            return;
        }
        if self.skipped > 0 {
            eprintln!(
                "warning: {}: skipped {} malformed rows (data.on_bad_row = \"skip\")",
                self.spec.origin.name(),
                self.skipped
            );
        }
        if self.cut > 0 {
            eprintln!(
                "warning: {}: the stream ended inside a line ({} bytes without a newline); \
                 that line was not trained on",
                self.spec.origin.name(),
                self.cut
            );
        }
    }
}

/// How often the reader looks at an idle stream.
const POLL: Duration = Duration::from_millis(2);

/// A round's batches of reader `reader`, one for every worker (those its rows do not go to
/// learn from theirs how far its stream is).
fn empty_batches(peers: u32, reader: u32) -> Vec<LiveBatch> {
    (0..peers)
        .map(|dest| LiveBatch {
            dest,
            reader,
            ..LiveBatch::default()
        })
        .collect()
}
