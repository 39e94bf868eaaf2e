//! Data preparation and training in one dataflow: a program reads a raw CSV table, joins it
//! with a dimension table, derives and hashes its features and splits the rows in timely and
//! differential-dataflow operators of its own, and the training loop starts on those rows in
//! the same dataflow, on the same workers and processes.
//!
//!   cargo run --release --example prepare_and_train -- train jobs/prepare_and_train.toml -w 2
//!   cargo run --release --example prepare_and_train -- cluster jobs/prepare_and_train.toml -n 2
//!
//! The job (`data.format = "program"`) names the files (`data.files.flights`,
//! `data.files.airports`) and the model's size (`data.dim`, the hashed feature space). Per
//! worker, in named steps:
//!
//! 1. `read`: its part of each file (every `W`-th record of a compressed file), the flights
//!    that have a label (cancelled flights have none);
//! 2. `join`: each flight with its destination airport's time zone and altitude, as a broadcast
//!    hash join (the airport table is small): the destinations the flights use (a differential
//!    `distinct`) `join` the airport rows, every worker receives the matches, and an operator
//!    attaches them to the worker's own flights once all are in; flights stay where they were
//!    read, and a flight whose airport the table lacks keeps empty values (a left join);
//! 3. `features`: the label (arrival more than 15 minutes late), categorical features, date
//!    parts, crosses and the log distance, hashed into `data.dim` slots (VW's hashing trick),
//!    and the split (a seeded hash of the row id, `data.test_fraction` held out);
//! 4. the training loop, whose gradient step waits until every row of its worker has arrived.

use std::sync::Arc;

use std::collections::HashMap;

use differential_dataflow::AsCollection;
use gradflow::data::partition::unit_hash;
use gradflow::data::table::features::{sum_duplicates, Date};
use gradflow::data::table::read::{read_cells, Cut, Part};
use gradflow::data::table::{DatePart, PreparedRow, TableSpec};
use gradflow::dataflow::{RoundTime, Supervisor, Training};
use gradflow::exchange::Envelope;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::operator::source;
use timely::dataflow::operators::vec::{Broadcast, Filter, Map};
use timely::dataflow::operators::{ConnectLoop, Enter, LoopVariable, Operator};
use timely::dataflow::{Scope, Stream};

/// The flights' columns this program reads.
const FLIGHT_COLUMNS: [&str; 7] = [
    "sched_dep",
    "carrier",
    "tailnum",
    "origin",
    "dest",
    "distance",
    "arr_delay",
];

/// Positions of the flights' columns in `FLIGHT_COLUMNS`.
const SCHED_DEP: usize = 0;
const CARRIER: usize = 1;
const TAILNUM: usize = 2;
const ORIGIN: usize = 3;
const DEST: usize = 4;
const DISTANCE: usize = 5;
const ARR_DELAY: usize = 6;

/// A record: its id (the byte offset of its start in the file) and its cells (missing values
/// empty). A flight's are in `FLIGHT_COLUMNS` order.
type Record = (u64, Vec<String>);
type Flight = Record;
/// An airport's joined values: time zone and altitude.
type Airport = (String, String);

fn main() -> std::process::ExitCode {
    gradflow::cli::main_with(Arc::new(|scope, mut training: Training| {
        let sup = training.supervisor().clone();
        let (seed, held_out) = (training.plan().seed, training.test_fraction());
        let dim = training.plan().data_dim();
        let files = training.file("flights").and_then(|f| {
            let a = training.file("airports")?;
            Ok((f.to_path_buf(), a.to_path_buf()))
        });
        let (flights_file, airports_file) = files.unwrap_or_else(|e| {
            sup.fail(e);
            Default::default()
        });

        // 1. read
        let flights = read(scope, &flights_file, &FLIGHT_COLUMNS, sup.clone())
            .filter(|(_, cells)| !cells[ARR_DELAY].is_empty());
        let airports = read(scope, &airports_file, &["faa", "tz", "alt"], sup.clone());

        // 2. join
        let joined = join(flights, airports, sup);

        // 3. features
        let rows = joined.flat_map(move |(flight, airport)| {
            let mut row = features(&flight, &airport, dim, seed)?;
            row.test = unit_hash(seed, row.id) < held_out;
            Some(row)
        });

        // 4. train on them
        scope.iterative::<u64, _, _>(|inner| {
            let (feedback, changes) =
                inner.loop_variable::<Vec<Envelope>>(training.plan().feedback_delay());
            let rows: Stream<'_, RoundTime, Vec<PreparedRow>> = rows.enter(inner);
            let (grads, stats) = training.gradient_on(rows, changes);
            training.exchange(grads).connect_loop(feedback);
            training.collect(stats);
        });
        training.handle()
    }))
}

/// Step 1: an operator that reads this worker's part of `file` (the columns `names`) when it
/// first runs; a bad file stops the run with the reader's message (file, line, column).
fn read<'s>(
    scope: Scope<'s, ()>,
    file: &std::path::Path,
    names: &[&str],
    sup: Supervisor,
) -> Stream<'s, (), Vec<Record>> {
    let file = file.to_path_buf();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let part = Part {
        index: scope.index(),
        count: scope.peers(),
    };
    source(scope, "Read", move |cap, _info| {
        let mut cap = Some(cap);
        move |output| {
            let Some(cap) = cap.take() else { return };
            if sup.is_failed() {
                return;
            }
            // (cut at line breaks: these tables quote no line breaks; the standard pipeline
            // counts quotes first, `data::table::pipeline`)
            let missing = &TableSpec::default().missing;
            match read_cells(&file, &names, part, b',', missing, Cut::Lines) {
                Ok(cells) => {
                    let mut session = output.session(&cap);
                    for (row, &id) in cells.ids.iter().enumerate() {
                        let values = (0..names.len())
                            .map(|c| cells.value(row, c).unwrap_or("").to_string())
                            .collect();
                        session.give((id, values));
                    }
                }
                Err(e) => sup.fail(e.to_string()),
            }
        }
    })
}

/// Step 2: every flight with its destination's airport (empty values when the table lacks
/// it), by a broadcast hash join. An airport code on two rows of the table stops the run.
fn join<'s>(
    flights: Stream<'s, (), Vec<Flight>>,
    airports: Stream<'s, (), Vec<Record>>,
    sup: Supervisor,
) -> Stream<'s, (), Vec<(Flight, Airport)>> {
    let used = flights
        .clone()
        .map(|(_, c)| (c[DEST].clone(), (), 1isize))
        .as_collection()
        .distinct();
    let rows = airports
        .map(|(_, c)| ((c[0].clone(), (c[1].clone(), c[2].clone())), (), 1isize))
        .as_collection();
    let table = used
        .map(|faa| (faa, ()))
        .join_map(rows, |faa, _, airport| (faa.clone(), airport.clone()))
        .inner
        .broadcast();
    flights.binary_frontier(table, Pipeline, Pipeline, "Attach", move |_, _| {
        let mut held = Vec::new();
        let mut cap = None;
        let mut known: HashMap<String, Airport> = HashMap::new();
        move |(flights, flights_done), (table, table_done), output| {
            flights.for_each(|time, batch| {
                if cap.is_none() {
                    cap = time.retain_least(0);
                }
                held.append(batch);
            });
            table.for_each(|_, batch| {
                for ((faa, airport), (), n) in batch.drain(..) {
                    if n != 1 || known.insert(faa.clone(), airport).is_some() {
                        sup.fail(format!("airports: the code {faa} is on more than one row"));
                    }
                }
            });
            if table_done.is_empty() && flights_done.is_empty() {
                if let Some(cap) = cap.take() {
                    let mut session = output.session(&cap);
                    for flight in held.drain(..) {
                        let airport = known.get(&flight.1[DEST]).cloned().unwrap_or_default();
                        session.give((flight, airport));
                    }
                }
            }
        }
    })
}

/// Step 3: a flight's row: label, hashed features (`dim` slots), no split yet. `None` for a
/// flight without a label or with a value that does not parse (none in the embedded table).
fn features(flight: &Flight, airport: &Airport, dim: u32, seed: u64) -> Option<PreparedRow> {
    let (id, c) = flight;
    let delay: f64 = c[ARR_DELAY].parse().ok()?;
    let when = Date::parse("sched_dep", &c[SCHED_DEP]).ok()?;
    let distance: f64 = c[DISTANCE].parse().ok()?;
    let part = |p: DatePart| when.part(p).to_string();
    let [hour, dow, month, day] = [
        DatePart::Hour,
        DatePart::Dow,
        DatePart::Month,
        DatePart::Day,
    ]
    .map(part);
    let (carrier, tailnum, origin) = (&*c[CARRIER], &*c[TAILNUM], &*c[ORIGIN]);
    let (dest, tz, alt) = (&*c[DEST], &*airport.0, &*airport.1);
    let (hour, dow, month, day) = (&*hour, &*dow, &*month, &*day);
    let named: [(&str, &[&str]); 13] = [
        ("carrier", &[carrier]),
        ("tailnum", &[tailnum]),
        ("origin", &[origin]),
        ("dest", &[dest]),
        ("hour", &[hour]),
        ("dow", &[dow]),
        ("month", &[month]),
        ("dest_tz", &[tz]),
        ("dest_alt", &[alt]),
        ("origin*dest", &[origin, dest]),
        ("carrier*hour", &[carrier, hour]),
        ("month*day", &[month, day]),
        ("origin*month*day*hour", &[origin, month, day, hour]),
    ];
    let mut text = String::new();
    let mut pairs: Vec<(u32, f32)> = named
        .iter()
        .map(|(name, values)| (slot(&mut text, name, values, dim, seed), 1.0))
        .collect();
    let log_distance = (distance.ln_1p() / 8.0) as f32;
    pairs.push((
        slot(&mut text, "log_distance", &[], dim, seed),
        log_distance,
    ));
    sum_duplicates(&mut pairs);
    let (keys, values) = pairs.into_iter().unzip();
    Some(PreparedRow {
        id: *id,
        test: false,
        label: if delay > 15.0 { 1.0 } else { -1.0 },
        keys,
        values,
    })
}

/// The hashed slot of feature `name` with `values` (VW's hashing trick, seeded by the job).
/// `text` is a buffer, reused.
fn slot(text: &mut String, name: &str, values: &[&str], dim: u32, seed: u64) -> u32 {
    text.clear();
    text.push_str(name);
    for v in values {
        text.push('=');
        text.push_str(v);
    }
    (xxhash_rust::xxh3::xxh3_64_with_seed(text.as_bytes(), seed) % dim as u64) as u32
}
