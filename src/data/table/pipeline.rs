//! The table pipeline: a differential-dataflow program on the training workers.
//!
//! Each worker reads its own part of every file ([`super::read`]) and checks every value it
//! will use. The statistics that need every worker's rows are then computed by small
//! differential dataflows whose results every worker receives (a broadcast), so that all
//! workers build the same [`FeatureMap`]:
//!
//! 1. errors: the first bad value of any worker fails every worker with the same message;
//! 2. joins: the distinct keys the rows use `join` the dimension tables' rows (a broadcast hash
//!    join: only matched dimension rows move); a key on two dimension rows is an error;
//! 3. the ordered split: a `reduce` over the row ids finds the first test row;
//! 4. numeric statistics: a `reduce` per column over its sorted values gives count, mean,
//!    standard deviation and quantile edges;
//! 5. vocabularies: `count` per (slot, value), filtered by `min_count`;
//! 6. totals for the notes (`count`).
//!
//! Rows never move: each worker encodes its own rows with the map and trains on them.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use differential_dataflow::consolidation::consolidate;
use differential_dataflow::input::Input;
use differential_dataflow::VecCollection;
use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::{Inspect, Probe};
use timely::worker::Worker;

use super::features::{
    date_part, number, numeric_input, tokens, BadValue, FeatureMap, NumericStats, RowValues,
};
use super::read::{read_cells, Cells, Part};
use super::spec::{Slot, TableSpec, Transform};
use crate::data::partition::unit_hash;
use crate::data::{DataError, Dataset, RowFilter};

/// What the pipeline needs besides the spec.
#[derive(Clone, Debug)]
pub struct TableInput {
    /// The table spec.
    pub spec: TableSpec,
    /// The training table.
    pub train: PathBuf,
    /// A separate test table (then every training row trains).
    pub test: Option<PathBuf>,
    /// Fraction of the training table held out when there is no test table.
    pub test_fraction: f64,
    /// Hold out the last rows (in file order) instead of a seeded hash of the row id.
    pub tail: bool,
    /// Seed of the hash split.
    pub seed: u64,
    /// The loss takes classes (-1/+1 or 0/1): any other label is an error.
    pub classification: bool,
}

/// A worker's prepared rows.
#[derive(Clone, Debug, Default)]
pub struct Prepared {
    /// Training rows (no intercept).
    pub train: Dataset,
    /// Test rows (no intercept).
    pub test: Dataset,
    /// The ids (byte offsets in their file) of the training and test rows.
    pub train_ids: Vec<u64>,
    /// Ids of the test rows.
    pub test_ids: Vec<u64>,
    /// The feature map, the same on every worker.
    pub map: FeatureMap,
    /// What the user should know (skipped rows, unknown values), the same on every worker.
    pub notes: Vec<String>,
}

/// Runs a differential dataflow over `local` updates on every worker and returns its output,
/// which every worker receives whole (consolidated, positive records, sorted).
fn gather<K, O>(
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
    while worker.has_dataflows() {
        worker.step();
    }
    let mut v = std::mem::take(&mut *out.borrow_mut());
    consolidate(&mut v);
    v.into_iter()
        .filter(|(_, r)| *r > 0)
        .map(|(o, _)| o)
        .collect()
}

/// A worker's parts: training cells and labels, test cells and labels, dimension tables.
type Parts = (
    Cells,
    Vec<Option<f32>>,
    Option<(Cells, Vec<Option<f32>>)>,
    Vec<Cells>,
);

/// A worker's rows of one file with their joined values.
struct Rows<'a> {
    cells: Cells,
    spec: &'a TableSpec,
    /// Per join, per row: the index of its matched dimension row in `joined[j]`.
    matches: Vec<Vec<Option<u32>>>,
    joined: Rc<Vec<DimRows>>,
}

/// A dimension table's rows as `(key, brought values)`, sorted by key.
type DimRows = Vec<(String, Vec<String>)>;

/// A record of the join dataflow: `(0, join, key, [])` for a key the rows use, `(1, join, key,
/// values)` for a dimension row.
type JoinRecord = (u8, u32, String, Vec<String>);

/// A key on two rows of join `j`'s table is an error.
fn unique_keys(spec: &TableSpec, j: usize, rows: &DimRows) -> Result<(), String> {
    match rows.windows(2).find(|w| w[0].0 == w[1].0) {
        Some(w) => Err(format!(
            "{}: the key {} = '{}' is on more than one row",
            spec.join[j].file.display(),
            spec.join[j]
                .on
                .values()
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            w[0].0.replace('\u{1f}', ", ")
        )),
        None => Ok(()),
    }
}

/// The `(key, values)` of every row of dimension table `d` whose first `keys` columns are its
/// key columns.
fn dim_rows(d: &Cells, keys: usize) -> impl Iterator<Item = (String, Vec<String>)> + '_ {
    (0..d.len()).map(move |r| {
        (
            join_key((0..keys).map(|c| Some(d.get(r, c)))).unwrap_or_default(),
            (keys..d.names.len())
                .map(|c| d.get(r, c).to_string())
                .collect(),
        )
    })
}

/// One row, as the encoder reads it.
struct RowView<'r, 'a> {
    rows: &'r Rows<'a>,
    row: usize,
}

impl RowValues for RowView<'_, '_> {
    fn value(&self, column: &str) -> Option<&str> {
        let r = self.rows;
        let v = match r.cells.names.iter().position(|n| n == column) {
            Some(c) => r.cells.get(self.row, c),
            None => {
                let (j, i) = r.spec.join.iter().enumerate().find_map(|(j, js)| {
                    let c = column.strip_prefix(js.prefix.as_str())?;
                    js.columns.iter().position(|x| x == c).map(|i| (j, i))
                })?;
                let m = r.matches[j][self.row]?;
                r.joined[j][m as usize].1[i].as_str()
            }
        };
        (!r.spec.missing.iter().any(|m| m == v)).then_some(v)
    }
}

impl<'a> Rows<'a> {
    fn key(&self, j: usize, row: usize) -> Option<String> {
        join_key(self.spec.join[j].on.keys().map(|c| {
            let at = self.cells.names.iter().position(|n| n == c)?;
            let v = self.cells.get(row, at);
            (!self.spec.missing.iter().any(|m| m == v)).then_some(v)
        }))
    }

    fn view(&self, row: usize) -> RowView<'_, 'a> {
        RowView { rows: self, row }
    }

    /// Matches every row with its dimension row in `tables` (one table per join).
    fn attach(&mut self, tables: &Rc<Vec<DimRows>>) {
        self.matches = (0..self.spec.join.len())
            .map(|j| {
                (0..self.cells.len())
                    .map(|row| {
                        let k = self.key(j, row)?;
                        tables[j]
                            .binary_search_by(|(x, _)| x.as_str().cmp(&k))
                            .ok()
                            .map(|i| i as u32)
                    })
                    .collect()
            })
            .collect();
        self.joined = tables.clone();
    }
}

/// The key of a join: its columns' values joined by 0x1f; `None` when one is missing.
fn join_key<'v>(values: impl Iterator<Item = Option<&'v str>>) -> Option<String> {
    let mut key = String::new();
    for (i, v) in values.enumerate() {
        if i > 0 {
            key.push('\u{1f}');
        }
        key.push_str(v?);
    }
    Some(key)
}

/// How a column is used, to check its values once at reading.
#[derive(Clone, Copy, PartialEq)]
enum Role {
    Number(Transform),
    Date,
    Text,
}

fn roles(spec: &TableSpec, names: &[String]) -> Vec<Role> {
    let f = &spec.features;
    names
        .iter()
        .map(|n| {
            if let Some(s) = f.numeric.iter().find(|s| &s.column == n) {
                Role::Number(s.transform)
            } else if f.datetime.iter().any(|d| &d.column == n) {
                Role::Date
            } else {
                Role::Text
            }
        })
        .collect()
}

/// Checks every used value of `cells` (numbers, dates); the first bad one is an error.
fn check(cells: &Cells, spec: &TableSpec) -> Result<(), DataError> {
    let roles = roles(spec, &cells.names);
    for row in 0..cells.len() {
        for (c, role) in roles.iter().enumerate() {
            let v = cells.get(row, c);
            if spec.missing.iter().any(|m| m == v) {
                continue;
            }
            let name = &cells.names[c];
            let r = match role {
                Role::Number(t) => numeric_input(name, *t, v).map(drop),
                Role::Date => date_part(name, v, super::spec::DatePart::Day).map(drop),
                Role::Text => Ok(()),
            };
            r.map_err(|e: BadValue| cells.error(row, c, e.message))?;
        }
    }
    Ok(())
}

/// The label of each row (`None`: missing, the row is skipped).
fn labels(
    cells: &Cells,
    spec: &TableSpec,
    classification: bool,
) -> Result<Vec<Option<f32>>, DataError> {
    let l = &spec.label;
    let c = cells
        .names
        .iter()
        .position(|n| n == &l.column)
        .expect("the label column is read");
    (0..cells.len())
        .map(|row| {
            let v = cells.get(row, c);
            if spec.missing.iter().any(|m| m == v) {
                return Ok(None);
            }
            let y = if let Some(t) = &l.equals {
                if v == t {
                    1.0
                } else {
                    -1.0
                }
            } else {
                let x = number(&l.column, v).map_err(|e| cells.error(row, c, e.message))?;
                match l.above {
                    Some(t) => {
                        if x > t {
                            1.0
                        } else {
                            -1.0
                        }
                    }
                    None => x,
                }
            };
            if classification && ![-1.0, 0.0, 1.0].contains(&y) {
                return Err(cells.error(
                    row,
                    c,
                    format!(
                        "label {v} is not a class: logistic and hinge losses take -1/+1 or \
                         0/1 (or set data.label.above or data.label.equals)"
                    ),
                ));
            }
            Ok(Some(y as f32))
        })
        .collect()
}

/// Ordered bits of a finite f64 (their `u64` order is the numbers' order).
fn ordered(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | 1 << 63
    }
}

fn unordered(b: u64) -> f64 {
    f64::from_bits(if b >> 63 == 1 { b & !(1 << 63) } else { !b })
}

/// Count, mean, std and `buckets` quantile edges of sorted `(value, count)`.
fn numeric_stats(sorted: &[(f64, u64)], buckets: u32) -> NumericStats {
    let count: u64 = sorted.iter().map(|v| v.1).sum();
    if count == 0 {
        return NumericStats {
            std: 1.0,
            ..Default::default()
        };
    }
    let mean = sorted.iter().map(|&(x, n)| x * n as f64).sum::<f64>() / count as f64;
    let var = sorted
        .iter()
        .map(|&(x, n)| (x - mean).powi(2) * n as f64)
        .sum::<f64>()
        / count as f64;
    let std = if var > 0.0 { var.sqrt() } else { 1.0 };
    let mut edges = Vec::new();
    if buckets >= 2 {
        let (mut seen, mut j) = (0u64, 1u64);
        for &(x, n) in sorted {
            seen += n;
            while j < buckets as u64 && seen * buckets as u64 >= j * count {
                if edges.last() != Some(&x) {
                    edges.push(x);
                }
                j += 1;
            }
        }
        // The largest value is no edge: it would leave the last bucket empty.
        if edges.last() == sorted.last().map(|v| &v.0) {
            edges.pop();
        }
    }
    NumericStats {
        count,
        mean,
        std,
        edges,
    }
}

/// Encodes rows `idx` of `rows` with `map` (a missing label becomes NaN): the dataset, the rows'
/// ids and the number of values not in the vocabulary.
fn encode_rows(
    map: &FeatureMap,
    slots: &[Slot],
    rows: &Rows,
    idx: &[usize],
    labels: &[Option<f32>],
) -> Result<(Dataset, Vec<u64>, u64), String> {
    let mut data = Dataset::new(map.dim);
    let (mut features, mut unknown) = (Vec::new(), 0u64);
    for &r in idx {
        unknown += map
            .encode(slots, &rows.view(r), &mut features)
            .map_err(|e| {
                let c = rows.cells.names.iter().position(|n| *n == e.column);
                rows.cells.error(r, c.unwrap_or(0), e.message).to_string()
            })?;
        data.push_pairs(&features, labels[r].unwrap_or(f32::NAN));
    }
    Ok((
        data,
        idx.iter().map(|&r| rows.cells.ids[r]).collect(),
        unknown,
    ))
}

/// Reads, joins, splits and encodes this worker's rows; every worker gets the same map.
pub fn prepare(worker: &mut Worker, input: &TableInput) -> Result<Prepared, String> {
    let spec = &input.spec;
    spec.validate()?;
    let slots = spec.slots()?;
    let part = Part {
        index: worker.index(),
        count: worker.peers(),
    };
    let delimiter = spec.delimiter as u8;
    let columns = spec.row_columns();

    // Read and check this worker's parts and labels; the first error anywhere stops every
    // worker.
    let read = || -> Result<Parts, DataError> {
        let train = read_cells(&input.train, &columns, part, delimiter)?;
        check(&train, spec)?;
        let train_labels = labels(&train, spec, input.classification)?;
        let test = match &input.test {
            Some(p) => {
                let t = read_cells(p, &columns, part, delimiter)?;
                check(&t, spec)?;
                let l = labels(&t, spec, input.classification)?;
                Some((t, l))
            }
            None => None,
        };
        let mut dims = Vec::new();
        for j in &spec.join {
            let mut names: Vec<String> = j.on.values().cloned().collect();
            names.extend(j.columns.iter().cloned());
            let mut d = read_cells(&j.file, &names, part, delimiter)?;
            // Check the brought columns under their new names.
            let keys = j.on.len();
            let renamed: Vec<String> = d
                .names
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    if i < keys {
                        format!("\u{1f}key:{n}")
                    } else {
                        format!("{}{n}", j.prefix)
                    }
                })
                .collect();
            let original = std::mem::replace(&mut d.names, renamed);
            check(&d, spec)?;
            d.names = original;
            dims.push(d);
        }
        Ok((train, train_labels, test, dims))
    };
    let parts = read().map_err(|e| e.to_string());
    let errors: Vec<((u64, String), isize)> = parts
        .as_ref()
        .err()
        .map(|e| ((part.index as u64, e.clone()), 1))
        .into_iter()
        .collect();
    // Every worker takes part in the stage, so none waits for a worker that failed.
    if let Some((_, first)) = gather(worker, errors, |c| c).first() {
        return Err(first.clone());
    }
    let (train_cells, train_labels, test, dims) = parts?;
    let (test_cells, test_labels) = match test {
        Some((c, l)) => (Some(c), Some(l)),
        None => (None, None),
    };

    // Joins: distinct used keys join the dimension rows; a key on two rows is an error.
    let mut train_rows = Rows {
        cells: train_cells,
        spec,
        matches: vec![],
        joined: Rc::default(),
    };
    let mut test_rows = test_cells.map(|cells| Rows {
        cells,
        spec,
        matches: vec![],
        joined: Rc::default(),
    });
    if !spec.join.is_empty() {
        let mut local: Vec<(JoinRecord, isize)> = Vec::new();
        for (j, d) in dims.iter().enumerate() {
            let dim = dim_rows(d, spec.join[j].on.len());
            local.extend(dim.map(|(k, v)| ((1u8, j as u32, k, v), 1)));
        }
        let mut used: Vec<((u32, String), isize)> = Vec::new();
        for rows in std::iter::once(&train_rows).chain(test_rows.as_ref()) {
            for j in 0..spec.join.len() {
                for row in 0..rows.cells.len() {
                    if let Some(k) = rows.key(j, row) {
                        used.push(((j as u32, k), 1));
                    }
                }
            }
        }
        consolidate(&mut used);
        local.extend(used.into_iter().map(|((j, k), _)| ((0u8, j, k, vec![]), 1)));
        let joined = gather(worker, local, |c| {
            let keys = c
                .clone()
                .filter(|x| x.0 == 0)
                .map(|(_, j, k, _)| (j, k))
                .distinct();
            let dims = c.filter(|x| x.0 == 1).map(|(_, j, k, v)| ((j, k), v));
            keys.map(|k| (k, ()))
                .join_map(dims, |(j, k), _, v| (*j, k.clone(), v.clone()))
        });
        let mut per_join: Vec<Vec<(String, Vec<String>)>> = vec![Vec::new(); spec.join.len()];
        for (j, k, v) in joined {
            per_join[j as usize].push((k, v));
        }
        for (j, list) in per_join.iter().enumerate() {
            unique_keys(spec, j, list)?;
        }
        let per_join = Rc::new(per_join);
        for rows in std::iter::once(&mut train_rows).chain(test_rows.as_mut()) {
            rows.attach(&per_join);
        }
    }

    // The split: a seeded hash of the row id, or the last rows in file order.
    let labelled: Vec<usize> = (0..train_rows.cells.len())
        .filter(|&r| train_labels[r].is_some())
        .collect();
    let held_out = if test_rows.is_some() {
        0.0
    } else {
        input.test_fraction
    };
    let cut = if input.tail && held_out > 0.0 {
        let local: Vec<(u64, isize)> = labelled
            .iter()
            .map(|&r| (train_rows.cells.ids[r], 1))
            .collect();
        let cut = gather(worker, local, move |c| {
            c.map(|id| ((), id)).reduce(move |_, ids, out| {
                let n = ids.len();
                let first = RowFilter::tail_start(n, held_out);
                out.push((ids.get(first).map_or(u64::MAX, |x| *x.0), 1));
            })
        });
        Some(cut.first().map_or(u64::MAX, |x| x.1))
    } else {
        None
    };
    let is_test = |id: u64| match cut {
        Some(c) => id >= c,
        None => held_out > 0.0 && unit_hash(input.seed, id) < held_out,
    };
    let (train_idx, test_idx): (Vec<usize>, Vec<usize>) = labelled
        .iter()
        .partition(|&&r| !is_test(train_rows.cells.ids[r]));

    // Numeric statistics over the training rows.
    let needs_stats: Vec<usize> = spec
        .features
        .numeric
        .iter()
        .enumerate()
        .filter(|(_, n)| matches!(n.transform, Transform::Standardize | Transform::Bucket))
        .map(|(i, _)| i)
        .collect();
    let mut numeric = vec![NumericStats::default(); spec.features.numeric.len()];
    if !needs_stats.is_empty() {
        let mut local: Vec<((u32, u64), isize)> = Vec::new();
        for &i in &needs_stats {
            let n = &spec.features.numeric[i];
            for &r in &train_idx {
                if let Some(v) = train_rows.view(r).value(&n.column) {
                    let x = numeric_input(&n.column, n.transform, v)
                        .map_err(|e| format!("{}: {}", e.column, e.message))?;
                    local.push(((i as u32, ordered(x)), 1));
                }
            }
        }
        consolidate(&mut local);
        let buckets: Vec<u32> = spec.features.numeric.iter().map(|n| n.buckets).collect();
        let stats = gather(worker, local, move |c| {
            c.reduce(move |i, values, out| {
                let sorted: Vec<(f64, u64)> = values
                    .iter()
                    .map(|(b, n)| (unordered(**b), *n as u64))
                    .collect();
                let s = numeric_stats(&sorted, buckets[*i as usize]);
                let mut v = vec![s.count, s.mean.to_bits(), s.std.to_bits()];
                v.extend(s.edges.iter().map(|e| e.to_bits()));
                out.push((v, 1));
            })
        });
        for (i, v) in stats {
            numeric[i as usize] = NumericStats {
                count: v[0],
                mean: f64::from_bits(v[1]),
                std: f64::from_bits(v[2]),
                edges: v[3..].iter().map(|b| f64::from_bits(*b)).collect(),
            };
        }
        for &i in &needs_stats {
            if numeric[i].count == 0 {
                numeric[i].std = 1.0;
            }
        }
    }

    // Vocabularies over the training rows (not with hashing).
    let mut vocabulary = vec![Vec::new(); slots.len()];
    if spec.features.hash_bits.is_none() {
        let mut local: Vec<((u32, String), isize)> = Vec::new();
        for &r in &train_idx {
            let t = tokens(&slots, spec, &numeric, &train_rows.view(r))
                .map_err(|e| format!("{}: {}", e.column, e.message))?;
            for (s, t) in t.into_iter().enumerate() {
                if let Some(t) = t {
                    local.push(((s as u32, t), 1));
                }
            }
        }
        consolidate(&mut local);
        let min = spec.features.min_count as isize;
        for (s, t) in gather(worker, local, move |c| {
            c.count().filter(move |(_, n)| *n >= min).map(|(k, _)| k)
        }) {
            vocabulary[s as usize].push(t);
        }
    }
    let map = FeatureMap::new(spec.clone(), numeric, vocabulary);

    // Encode this worker's rows.
    let (train, train_ids, _) = encode_rows(&map, &slots, &train_rows, &train_idx, &train_labels)?;
    let (test, test_ids, unknown) = match (&test_rows, &test_labels) {
        (Some(rows), Some(labels)) => {
            let labelled: Vec<usize> = (0..rows.cells.len())
                .filter(|&r| labels[r].is_some())
                .collect();
            encode_rows(&map, &slots, rows, &labelled, labels)?
        }
        _ => encode_rows(&map, &slots, &train_rows, &test_idx, &train_labels)?,
    };
    let mut out = Prepared {
        train,
        test,
        train_ids,
        test_ids,
        map,
        notes: Vec::new(),
    };

    // Totals for the notes, and the check that there is something to train on.
    let skipped = (train_rows.cells.len() - labelled.len())
        + test_rows
            .as_ref()
            .zip(test_labels.as_ref())
            .map_or(0, |(_, l)| l.iter().filter(|x| x.is_none()).count());
    let positives = |d: &Dataset| d.labels.iter().filter(|&&y| y > 0.0).count();
    let local: Vec<(u8, isize)> = [
        (0u8, out.train.rows()),
        (1, out.test.rows()),
        (2, skipped),
        (3, unknown as usize),
        (4, positives(&out.train)),
        (5, positives(&out.test)),
    ]
    .into_iter()
    .filter(|x| x.1 > 0)
    .map(|(k, n)| (k, n as isize))
    .collect();
    let totals = gather(worker, local, |c| c.count());
    let total = |k: u8| totals.iter().find(|t| t.0 == k).map_or(0, |t| t.1);
    if total(0) == 0 {
        return Err(format!(
            "{}: no training rows (every row has a missing label, or the file has no rows)",
            input.train.display()
        ));
    }
    if input.classification && total(1) > 0 {
        // The best constant: predict the training rows' positive rate for every test row.
        let p = (total(4) as f64 / total(0) as f64).clamp(1e-6, 1.0 - 1e-6);
        let q = total(5) as f64 / total(1) as f64;
        let loss = -(q * p.ln() + (1.0 - q) * (1.0 - p).ln());
        out.notes.push(format!(
            "baseline: the best constant (the training rows' positive rate {p:.4}) has test \
             log loss {loss:.4}, accuracy {:.4} and AUC 0.5",
            q.max(1.0 - q)
        ));
    }
    if total(2) > 0 {
        out.notes.push(format!(
            "{} rows with a missing label ({}) were skipped",
            total(2),
            spec.label.column
        ));
    }
    if total(3) > 0 {
        out.notes.push(format!(
            "{} values of the test rows are not in the training vocabulary; {}",
            total(3),
            if spec.features.min_count > 1 {
                "they count as their column's \"other\" value"
            } else {
                "they were ignored"
            }
        ));
    }
    Ok(out)
}

/// A table encoded with a saved feature map.
#[derive(Clone, Debug, Default)]
pub struct Encoded {
    /// Every row of the file, in order (label NaN where it is missing or the file has no label
    /// column).
    pub data: Dataset,
    /// Whether the file has the label's column.
    pub labelled: bool,
    /// Each row's value of the id column, if one was asked for.
    pub ids: Vec<String>,
    /// Values not in the vocabulary (ignored, or counted as their column's "other").
    pub unknown: u64,
}

/// Encodes every row of `path` with a saved feature map, on one thread (for `predict`); the
/// label's column is optional. `id_column` names a column to carry through as each row's id.
pub fn encode_file(
    map: &FeatureMap,
    path: &Path,
    id_column: Option<&str>,
) -> Result<Encoded, String> {
    let spec = &map.spec;
    let slots = spec.slots()?;
    let delimiter = spec.delimiter as u8;
    let header = super::read::header(path, delimiter).map_err(|e| e.to_string())?;
    let with_labels = header.contains(&spec.label.column);
    let mut columns = spec.row_columns();
    if !with_labels {
        columns.retain(|c| c != &spec.label.column);
    }
    if let Some(c) = id_column {
        if !columns.iter().any(|x| x == c) {
            columns.push(c.to_string());
        }
    }
    let cells = read_cells(path, &columns, Part::WHOLE, delimiter).map_err(|e| e.to_string())?;
    check(&cells, spec).map_err(|e| e.to_string())?;
    let labels = if with_labels {
        labels(&cells, spec, false).map_err(|e| e.to_string())?
    } else {
        vec![None; cells.len()]
    };
    let mut rows = Rows {
        cells,
        spec,
        matches: vec![],
        joined: Rc::default(),
    };
    if !spec.join.is_empty() {
        let mut per_join = Vec::new();
        for j in &spec.join {
            let mut names: Vec<String> = j.on.values().cloned().collect();
            names.extend(j.columns.iter().cloned());
            let d =
                read_cells(&j.file, &names, Part::WHOLE, delimiter).map_err(|e| e.to_string())?;
            let mut list: DimRows = dim_rows(&d, j.on.len()).collect();
            list.sort();
            unique_keys(spec, per_join.len(), &list)?;
            per_join.push(list);
        }
        rows.attach(&Rc::new(per_join));
    }
    let all: Vec<usize> = (0..rows.cells.len()).collect();
    let (data, _, unknown) = encode_rows(map, &slots, &rows, &all, &labels)?;
    let ids = match id_column {
        Some(c) => {
            let at = rows.cells.names.iter().position(|n| n == c).expect("read");
            (0..rows.cells.len())
                .map(|r| rows.cells.get(r, at).to_string())
                .collect()
        }
        None => Vec::new(),
    };
    Ok(Encoded {
        data,
        labelled: with_labels,
        ids,
        unknown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_bits_keep_the_order_of_numbers() {
        let xs = [-1e300, -2.5, -0.0, 0.0, 1e-300, 3.0, 7.5e10];
        for w in xs.windows(2) {
            assert!(ordered(w[0]) <= ordered(w[1]), "{w:?}");
        }
        for x in xs {
            assert_eq!(unordered(ordered(x)).to_bits(), x.to_bits());
        }
    }

    #[test]
    fn quantile_edges_split_the_rows_evenly() {
        let sorted: Vec<(f64, u64)> = (1..=100).map(|x| (x as f64, 1)).collect();
        let s = numeric_stats(&sorted, 4);
        assert_eq!(s.edges, vec![25.0, 50.0, 75.0]);
        assert_eq!(s.count, 100);
        assert!((s.mean - 50.5).abs() < 1e-12);
        // Heavy ties: no repeated edge, and the largest value is no edge.
        let ties = [(0.0, 90u64), (1.0, 10)];
        assert_eq!(numeric_stats(&ties, 10).edges, vec![0.0]);
        assert_eq!(numeric_stats(&[(5.0, 3)], 4).edges, Vec::<f64>::new());
        assert_eq!(numeric_stats(&[(5.0, 3)], 4).std, 1.0);
    }
}
