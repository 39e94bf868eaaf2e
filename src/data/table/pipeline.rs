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
//! Rows never move: each worker encodes its own rows with the map and trains on them. Before
//! stage 5 a worker interns its rows' discrete values in a per-slot dictionary (each value is
//! tokenised and hashed once); the stage receives one record per distinct value and its local
//! count (a combiner), and encoding maps value ids to keys through a table.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use differential_dataflow::consolidation::consolidate;
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use timely::worker::Worker;

use super::features::{
    label_value, numeric_input, sum_duplicates, BadValue, Date, FeatureMap, NumericStats,
    RowValues, TokenKey,
};
use super::read::{count_quotes, read_cells, Cells, Cut, Part};
use super::spec::{TableSpec, Transform};
use crate::data::gather::gather;
use crate::data::partition::unit_hash;
use crate::data::source::compression;
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

/// A worker's parts: training cells and labels, test cells and labels, dimension tables.
type Parts = (
    Cells,
    Vec<Option<f32>>,
    Option<(Cells, Vec<Option<f32>>)>,
    Vec<Cells>,
);

/// A worker's parts of the files as read, before their values are checked: training, test,
/// dimension tables.
type Files = (Cells, Option<Cells>, Vec<Cells>);

/// A worker's rows of one file with their joined values.
struct Rows<'a> {
    cells: Cells,
    spec: &'a TableSpec,
    /// Per join, per row: the index of its matched dimension row in `joined[j]`.
    matches: Vec<Vec<Option<u32>>>,
    joined: Rc<Vec<DimRows>>,
    /// Per joined column (in [`TableSpec::joined_columns`] order): its join and its position
    /// among the join's columns.
    brought: Vec<(usize, usize)>,
}

/// A dimension table's rows as `(key, brought values)`, sorted by key.
pub(super) type DimRows = Vec<(String, Vec<String>)>;

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
            crate::data::clip(&w[0].0.replace('\u{1f}', ", "))
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

/// One row, as the encoder reads it: the columns of [`Rows::columns`].
struct RowView<'r, 'a> {
    rows: &'r Rows<'a>,
    row: usize,
}

impl RowValues for RowView<'_, '_> {
    #[inline]
    fn value(&self, i: usize) -> Option<&str> {
        let r = self.rows;
        let n = r.cells.names.len();
        if i < n {
            return r.cells.value(self.row, i);
        }
        let (j, c) = r.brought[i - n];
        let m = r.matches[j][self.row]?;
        let v = r.joined[j][m as usize].1[c].as_str();
        (!r.spec.missing.iter().any(|m| m == v)).then_some(v)
    }
}

impl<'a> Rows<'a> {
    fn new(cells: Cells, spec: &'a TableSpec) -> Rows<'a> {
        let brought = spec
            .join
            .iter()
            .enumerate()
            .flat_map(|(j, js)| (0..js.columns.len()).map(move |c| (j, c)))
            .collect();
        Rows {
            cells,
            spec,
            matches: vec![],
            joined: Rc::default(),
            brought,
        }
    }

    /// The columns a row provides: its own, then the joined ones (`prefix + column`).
    fn columns(&self) -> Vec<String> {
        let mut names = self.cells.names.clone();
        names.extend(self.spec.joined_columns());
        names
    }

    /// Row `row`'s key of join `j` in `key` (cleared first); `false` when a value is missing.
    fn key(&self, j: usize, row: usize, key: &mut String) -> bool {
        key.clear();
        for (i, c) in self.spec.join[j].on.keys().enumerate() {
            let Some(at) = self.cells.names.iter().position(|n| n == c) else {
                return false;
            };
            let Some(v) = self.cells.value(row, at) else {
                return false;
            };
            if i > 0 {
                key.push('\u{1f}');
            }
            key.push_str(v);
        }
        true
    }

    fn view(&self, row: usize) -> RowView<'_, 'a> {
        RowView { rows: self, row }
    }

    /// Matches every row with its dimension row in `tables` (one table per join).
    fn attach(&mut self, tables: &Rc<Vec<DimRows>>) {
        let mut key = String::new();
        self.matches = (0..self.spec.join.len())
            .map(|j| {
                let index: HashMap<&str, u32> = tables[j]
                    .iter()
                    .enumerate()
                    .map(|(i, (k, _))| (k.as_str(), i as u32))
                    .collect();
                (0..self.cells.len())
                    .map(|row| {
                        if !self.key(j, row, &mut key) {
                            return None;
                        }
                        index.get(key.as_str()).copied()
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
            let Some(v) = cells.value(row, c) else {
                continue;
            };
            let name = &cells.names[c];
            let r = match role {
                Role::Number(t) => numeric_input(name, *t, v).map(drop),
                Role::Date => Date::parse(name, v).map(drop),
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
            let Some(v) = cells.value(row, c) else {
                return Ok(None);
            };
            label_value(l, v, classification)
                .map(Some)
                .map_err(|m| cells.error(row, c, m))
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

/// Slot `s`'s value of a row: an id in the [`Dictionary`], or [`Dictionary::MISSING`].
type ValueId = u32;

/// The discrete values of a worker's rows, interned per slot (dictionary encoding): each value
/// is tokenised and hashed once; the vocabulary stage sends one record per distinct value; rows
/// are encoded through a table from value id to key.
struct Dictionary {
    /// Per slot: value -> id (ids in first-seen order).
    ids: Vec<HashMap<Box<[u8]>, ValueId>>,
    /// Per slot, per id: training rows with the value.
    counts: Vec<Vec<isize>>,
}

impl Dictionary {
    const MISSING: ValueId = ValueId::MAX;

    fn new(slots: usize) -> Dictionary {
        Dictionary {
            ids: (0..slots).map(|_| HashMap::new()).collect(),
            counts: vec![Vec::new(); slots],
        }
    }

    /// The value ids of rows `idx` of `rows`, `slots` per row; `count`: they are training rows.
    fn intern(
        &mut self,
        unlearned: &FeatureMap,
        rows: &Rows,
        idx: &[usize],
        count: bool,
    ) -> Result<Vec<ValueId>, String> {
        let mut encoder = unlearned.encoder(&rows.columns())?;
        let mut values = Vec::with_capacity(idx.len() * self.ids.len());
        for &r in idx {
            let tokens = encoder
                .tokens(&rows.view(r))
                .map_err(|e| bad_value(rows, r, e))?;
            for (s, (ids, counts)) in self.ids.iter_mut().zip(&mut self.counts).enumerate() {
                let Some(t) = tokens.get(s) else {
                    values.push(Self::MISSING);
                    continue;
                };
                let id = match ids.get(t) {
                    Some(&id) => id,
                    None => {
                        let id = ids.len() as ValueId;
                        ids.insert(t.into(), id);
                        counts.push(0);
                        id
                    }
                };
                counts[id as usize] += count as isize;
                values.push(id);
            }
        }
        Ok(values)
    }

    /// `((slot, value), training rows)` of every value some training row has.
    fn counts(&self) -> Vec<((u32, String), isize)> {
        let mut out = Vec::new();
        for (s, (ids, counts)) in self.ids.iter().zip(&self.counts).enumerate() {
            for (t, &id) in ids {
                let n = counts[id as usize];
                if n > 0 {
                    out.push(((s as u32, String::from_utf8_lossy(t).into_owned()), n));
                }
            }
        }
        out
    }

    /// Per slot, per value id: its feature under `map`.
    fn keys(&self, map: &FeatureMap, columns: &[String]) -> Result<Vec<Vec<TokenKey>>, String> {
        let mut encoder = map.encoder(columns)?;
        Ok(self
            .ids
            .iter()
            .enumerate()
            .map(|(s, ids)| {
                let mut keys = vec![TokenKey::Unknown(None); ids.len()];
                for (t, &id) in ids {
                    keys[id as usize] = encoder.token_key(s, t);
                }
                keys
            })
            .collect())
    }
}

/// A bad value of row `r`, located in its file.
fn bad_value(rows: &Rows, r: usize, e: BadValue) -> String {
    let c = rows.cells.names.iter().position(|n| *n == e.column);
    rows.cells.error(r, c.unwrap_or(0), e.message).to_string()
}

/// Encodes rows `idx` of `rows`, whose value ids are `values`, with `map` and its value keys
/// (a missing label becomes NaN): the dataset, the rows' ids and the number of values not in
/// the vocabulary.
fn encode_rows(
    map: &FeatureMap,
    keys: &[Vec<TokenKey>],
    (rows, idx, values): (&Rows, &[usize], &[ValueId]),
    labels: &[Option<f32>],
) -> Result<(Dataset, Vec<u64>, u64), String> {
    let mut data = Dataset::new(map.dim);
    let mut encoder = map.encoder(&rows.columns())?;
    data.reserve(idx.len(), idx.len() * encoder.max_features());
    let (mut features, mut unknown) = (Vec::new(), 0u64);
    let width = keys.len();
    for (i, &r) in idx.iter().enumerate() {
        let values = &values[i * width..(i + 1) * width];
        features.clear();
        encoder
            .scalars(&rows.view(r), &mut features)
            .map_err(|e| bad_value(rows, r, e))?;
        encoder.text(&rows.view(r), &mut features);
        for (keys, &v) in keys.iter().zip(values) {
            if v != Dictionary::MISSING {
                unknown += keys[v as usize].push(&mut features) as u64;
            }
        }
        sum_duplicates(&mut features);
        data.push_pairs(&features, labels[r].unwrap_or(f32::NAN));
    }
    Ok((
        data,
        idx.iter().map(|&r| rows.cells.ids[r]).collect(),
        unknown,
    ))
}

/// Encodes rows `idx` of `rows` with `map`, one row at a time (for `predict`): the dataset and
/// the number of values not in the vocabulary.
fn encode_each(
    map: &FeatureMap,
    rows: &Rows,
    idx: &[usize],
    labels: &[Option<f32>],
) -> Result<(Dataset, u64), String> {
    let mut data = Dataset::new(map.dim);
    let mut encoder = map.encoder(&rows.columns())?;
    data.reserve(idx.len(), idx.len() * encoder.max_features());
    let (mut features, mut unknown) = (Vec::new(), 0u64);
    for &r in idx {
        unknown += encoder
            .encode(&rows.view(r), &mut features)
            .map_err(|e| bad_value(rows, r, e))?;
        data.push_pairs(&features, labels[r].unwrap_or(f32::NAN));
    }
    Ok((data, unknown))
}

/// How each of `files` is cut into the workers' parts: by the quotes before each part's range
/// ([`Cut::Quotes`]) when every worker could count its range's quotes, at line breaks
/// otherwise (one worker, or a compressed file, reads whole streams and ignores the cut).
fn quote_cuts(worker: &mut Worker, files: &[&Path], part: Part) -> Vec<Cut> {
    if part.count == 1 {
        return vec![Cut::Lines; files.len()];
    }
    let counted = files.iter().enumerate().filter_map(|(f, path)| {
        let plain = !super::read::is_parquet(path) && matches!(compression(path), Ok(None));
        let quotes = plain.then(|| count_quotes(path, part).ok()).flatten()?;
        Some(((f as u64, part.index as u64, quotes), 1))
    });
    let counts = gather(worker, counted.collect(), |c| c);
    (0..files.len() as u64)
        .map(|f| {
            let parts: Vec<&(u64, u64, u64)> = counts.iter().filter(|c| c.0 == f).collect();
            if parts.len() != part.count {
                return Cut::Lines;
            }
            let before: u64 = parts
                .iter()
                .filter(|c| c.1 < part.index as u64)
                .map(|c| c.2)
                .sum();
            Cut::Quotes {
                inside: before % 2 == 1,
            }
        })
        .collect()
}

/// The records of the parts before `part` of a file, of which `part` holds `records`.
fn rows_before(worker: &mut Worker, part: Part, records: usize) -> u64 {
    let me = part.index as u64;
    let counts = gather(worker, vec![((me, records as u64), 1)], |c| c);
    counts.iter().filter(|c| c.0 < me).map(|c| c.1).sum()
}

/// Whether every worker read its parts without error and the parts of every file cut by
/// quotes chain (each part's first record is where the part before stopped): then the parts
/// hold exactly the records of the whole file.
fn parts_chain(
    worker: &mut Worker,
    parts: &Result<Files, DataError>,
    cuts: &[Cut],
    part: Part,
) -> bool {
    let me = part.index as u64;
    let local: Vec<((u64, u64, u64, u64), isize)> = match parts {
        Err(_) => vec![((u64::MAX, me, 0, 0), 1)],
        Ok((train, test, dims)) => [Some(train), test.as_ref()]
            .into_iter()
            .flatten()
            .chain(dims)
            .enumerate()
            .filter(|(f, _)| cuts[*f] != Cut::Lines)
            .map(|(f, c)| ((f as u64, me, c.first, c.next), 1))
            .collect(),
    };
    let all = gather(worker, local, |c| c);
    if all.iter().any(|r| r.0 == u64::MAX) {
        return false;
    }
    (0..cuts.len() as u64).all(|f| {
        let mut file: Vec<&(u64, u64, u64, u64)> = all.iter().filter(|r| r.0 == f).collect();
        file.sort_by_key(|r| r.1);
        let cut = cuts[f as usize] != Cut::Lines;
        !cut || (file.first().is_some_and(|r| r.2 == 0)
            && file.windows(2).all(|w| w[0].3 == w[1].2))
    })
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
    let (train_cells, train_labels, test, dims) = read_parts(worker, input, part)?;
    let (test_cells, test_labels) = match test {
        Some((c, l)) => (Some(c), Some(l)),
        None => (None, None),
    };

    // Joins: distinct used keys join the dimension rows; a key on two rows is an error.
    let mut train_rows = Rows::new(train_cells, spec);
    let mut test_rows = test_cells.map(|cells| Rows::new(cells, spec));
    join_dimensions(worker, spec, &dims, &mut train_rows, test_rows.as_mut())?;

    // The split: a seeded hash of the row's number, or the last rows in file order.
    let held_out = if test_rows.is_some() {
        0.0
    } else {
        input.test_fraction
    };
    let (labelled, train_idx, test_idx) =
        split(worker, input, part, &train_rows, &train_labels, held_out);

    // Numeric statistics over the training rows.
    let numeric = numeric_statistics(worker, spec, &train_rows, &train_idx)?;
    // Every discrete value, interned per slot on this worker: each value is hashed once.
    let unlearned = FeatureMap::new(spec.clone(), numeric.clone(), vec![]);
    let mut dictionary = Dictionary::new(slots.len());
    let train_values = dictionary.intern(&unlearned, &train_rows, &train_idx, true)?;
    let test_values = match (&test_rows, &test_labels) {
        (Some(rows), Some(labels)) => {
            let labelled: Vec<usize> = (0..rows.cells.len())
                .filter(|&r| labels[r].is_some())
                .collect();
            let values = dictionary.intern(&unlearned, rows, &labelled, false)?;
            (rows, labelled, labels, values)
        }
        _ => {
            let values = dictionary.intern(&unlearned, &train_rows, &test_idx, false)?;
            (&train_rows, test_idx, &train_labels, values)
        }
    };

    // Vocabularies over the training rows (not with hashing): the local counts of the
    // distinct values (a combiner) are summed across workers by `count`.
    let vocabulary = vocabularies(worker, spec, &dictionary, slots.len());
    let map = FeatureMap::new(spec.clone(), numeric, vocabulary);

    // Encode this worker's rows: value ids to keys through one table per slot.
    let keys = dictionary.keys(&map, &train_rows.columns())?;
    let (train, train_ids, _) = encode_rows(
        &map,
        &keys,
        (&train_rows, &train_idx, &train_values),
        &train_labels,
    )?;
    let (rows, idx, labels, values) = test_values;
    let (test, test_ids, unknown) = encode_rows(&map, &keys, (rows, &idx, &values), labels)?;
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
    let (rows, positives) = add_notes(worker, input, &mut out, skipped, unknown)?;
    let one_class = (positives == 0 || positives == rows).then_some(positives > 0);
    check_classes(
        worker,
        input,
        &mut out,
        one_class,
        &train_rows.cells,
        &train_idx,
    )?;
    Ok(out)
}

/// Refuses binary training rows of one class: a label value named with another spelling
/// (`equals = "Spam"` where the file says `spam`), a threshold above every value, or a file of
/// one class trains a constant model that scores perfect accuracy on rows of that class alone.
/// The error names the column, the values the training rows have (the most frequent first,
/// with counts) and the field or flag that sets the label. Every worker decides on the same
/// totals and gathers the values together. A named class (`data.label.classes`) that no
/// training row has is a note naming it.
fn check_classes(
    worker: &mut Worker,
    input: &TableInput,
    out: &mut Prepared,
    one_class: Option<bool>,
    cells: &Cells,
    rows: &[usize],
) -> Result<(), String> {
    let label = &input.spec.label;
    if !label.classes.is_empty() {
        let mut has = vec![false; label.classes.len()];
        for &y in &out.train.labels {
            has[y as usize] = true;
        }
        let local: Vec<(u32, isize)> = (0..has.len() as u32)
            .filter(|&k| has[k as usize])
            .map(|k| (k, 1))
            .collect();
        let seen = gather(worker, local, |c| c.distinct());
        let unseen: Vec<String> = (0..label.classes.len() as u32)
            .filter(|k| seen.binary_search(k).is_err())
            .map(|k| format!("'{}'", crate::data::clip(&label.classes[k as usize])))
            .collect();
        if !unseen.is_empty() {
            out.notes.push(format!(
                "no training row has the class{} {} (data.label.classes): the model cannot \
                 learn to predict {}",
                if unseen.len() > 1 { "es" } else { "" },
                unseen.join(", "),
                if unseen.len() > 1 { "them" } else { "it" }
            ));
        }
    }
    if !input.classification {
        return Ok(());
    }
    // Every worker has the same totals ([`add_notes`]), so all decide alike.
    let Some(positive) = one_class else {
        return Ok(());
    };
    let class = if positive { "positive" } else { "negative" };
    let c = cells.names.iter().position(|n| n == &label.column);
    let values = rows.iter().filter_map(|&r| cells.value(r, c?));
    let (seen, how) = match label.above {
        Some(t) => {
            // A threshold: the range of the values (the label parsed them all as numbers).
            let local: Vec<(u64, isize)> = values
                .filter_map(|v| v.trim().parse::<f64>().ok())
                .fold(None, |r: Option<(f64, f64)>, x| {
                    Some(r.map_or((x, x), |(lo, hi)| (lo.min(x), hi.max(x))))
                })
                .map_or_else(Vec::new, |(lo, hi)| {
                    vec![(ordered(lo), 1), (ordered(hi), 1)]
                });
            let ends = gather(worker, local, |c| c.distinct());
            let range = match (ends.first(), ends.last()) {
                (Some(&lo), Some(&hi)) => {
                    format!("values from {} to {}", unordered(lo), unordered(hi))
                }
                _ => "no values".to_string(),
            };
            let how = format!(
                "data.label.above = {t} puts {} of them above: choose a threshold inside their \
                 range (--label {}>X)",
                if positive { "all" } else { "none" },
                label.column
            );
            (range, how)
        }
        None => {
            // Named values or numbers: the distinct values with their counts (the first 64 a
            // worker meets).
            let mut counts: Vec<(String, isize)> = Vec::new();
            for v in values {
                match counts.iter().position(|x| x.0 == v) {
                    Some(i) => counts[i].1 += 1,
                    None if counts.len() < 64 => counts.push((v.to_string(), 1)),
                    None => {}
                }
            }
            let mut counts = gather(worker, counts, |c| c.count());
            counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let mut shown: Vec<String> = counts
                .iter()
                .take(5)
                .map(|(v, n)| format!("'{}' ({n} rows)", crate::data::clip(v)))
                .collect();
            if counts.len() > 5 {
                shown.push("and other values".to_string());
            }
            let named: Vec<String> = label
                .equals
                .iter()
                .chain(&label.positive)
                .map(|v| format!("'{}'", crate::data::clip(v)))
                .collect();
            let how = if !named.is_empty() {
                format!(
                    "the job names the positive value{} {} (data.label; values are compared \
                     exactly): name it as the file writes it (--label {}=VALUE)",
                    if named.len() > 1 { "s" } else { "" },
                    named.join(", "),
                    label.column
                )
            } else {
                format!(
                    "name the positive value (--label {c}=VALUE) or a threshold \
                     (--label {c}>X)",
                    c = label.column
                )
            };
            (shown.join(", "), how)
        }
    };
    Err(format!(
        "{}: every training row's label is {class}: column '{}' has {seen}; {how}",
        input.train.display(),
        label.column,
    ))
}

/// Reads and checks this worker's parts of every file and their labels (training, test,
/// dimension tables), where their parts start after quotes counted by every worker, checked
/// after reading; the first error anywhere stops every worker.
fn read_parts(worker: &mut Worker, input: &TableInput, part: Part) -> Result<Parts, String> {
    let spec = &input.spec;
    let delimiter = spec.delimiter as u8;
    let columns = spec.row_columns();

    // The files this worker reads a part of, in order (training, test, dimension tables), and
    // where their parts start: after quotes counted by every worker, checked after reading.
    let files: Vec<&Path> = [&input.train]
        .into_iter()
        .chain(&input.test)
        .chain(spec.join.iter().map(|j| &j.file))
        .map(PathBuf::as_path)
        .collect();
    let joins_from = files.len() - spec.join.len();
    let mut cuts = quote_cuts(worker, &files, part);

    // Read this worker's parts; when they do not chain (a quote inside an unquoted field made
    // the quote count lie), read them again cut at line breaks. Only then check their values,
    // so that a bad value is named where it is, as one worker names it.
    let read = |cuts: &[Cut]| -> Result<Files, DataError> {
        let cells = |path: &Path, names: &[String], cut: Cut| {
            read_cells(path, names, part, delimiter, &spec.missing, cut)
        };
        let train = cells(&input.train, &columns, cuts[0])?;
        let test = match &input.test {
            Some(p) => Some(cells(p, &columns, cuts[1])?),
            None => None,
        };
        let mut dims = Vec::new();
        for (i, j) in spec.join.iter().enumerate() {
            let mut names: Vec<String> = j.on.values().cloned().collect();
            names.extend(j.columns.iter().cloned());
            dims.push(cells(&j.file, &names, cuts[joins_from + i])?);
        }
        Ok((train, test, dims))
    };
    let mut files = read(&cuts);
    if cuts.iter().any(|c| *c != Cut::Lines) && !parts_chain(worker, &files, &cuts, part) {
        cuts.fill(Cut::Lines);
        files = read(&cuts);
    }
    let parts = files.and_then(|files| check_values(files, input));
    let parts = parts.map_err(|e| e.to_string());
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
    parts
}

/// Checks the values of a worker's parts (numbers, dates, labels) and reads their labels.
fn check_values(files: Files, input: &TableInput) -> Result<Parts, DataError> {
    let spec = &input.spec;
    let (train, test, mut dims) = files;
    check(&train, spec)?;
    let train_labels = labels(&train, spec, input.classification)?;
    let test = match test {
        Some(t) => {
            check(&t, spec)?;
            let l = labels(&t, spec, input.classification)?;
            Some((t, l))
        }
        None => None,
    };
    for (d, j) in dims.iter_mut().zip(&spec.join) {
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
        let checked = check(d, spec);
        d.names = original;
        checked?;
    }
    Ok((train, train_labels, test, dims))
}

/// Joins the dimension tables to the rows: distinct used keys join the dimension rows; a key
/// on two rows is an error.
fn join_dimensions<'a>(
    worker: &mut Worker,
    spec: &TableSpec,
    dims: &[Cells],
    train_rows: &mut Rows<'a>,
    test_rows: Option<&mut Rows<'a>>,
) -> Result<(), String> {
    if spec.join.is_empty() {
        return Ok(());
    }
    let mut local: Vec<(JoinRecord, isize)> = Vec::new();
    for (j, d) in dims.iter().enumerate() {
        let dim = dim_rows(d, spec.join[j].on.len());
        local.extend(dim.map(|(k, v)| ((1u8, j as u32, k, v), 1)));
    }
    for j in 0..spec.join.len() {
        let (mut used, mut key) = (HashSet::new(), String::new());
        for rows in std::iter::once(&*train_rows).chain(test_rows.as_deref()) {
            for row in 0..rows.cells.len() {
                if rows.key(j, row, &mut key) && !used.contains(key.as_str()) {
                    used.insert(key.clone());
                }
            }
        }
        local.extend(used.into_iter().map(|k| ((0u8, j as u32, k, vec![]), 1)));
    }
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
    for rows in std::iter::once(train_rows).chain(test_rows) {
        rows.attach(&per_join);
    }
    Ok(())
}

/// The labelled training rows, and which of them train and which test: `held_out` of them
/// by a seeded hash of the row's number, or the last ones in file order.
fn split(
    worker: &mut Worker,
    input: &TableInput,
    part: Part,
    train_rows: &Rows<'_>,
    train_labels: &[Option<f32>],
    held_out: f64,
) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let labelled: Vec<usize> = (0..train_rows.cells.len())
        .filter(|&r| train_labels[r].is_some())
        .collect();
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
    // The hash split hashes each row's number in the file, so that reformatting the file
    // (line endings, a longer value in an unused column) moves no row between the sides.
    let hashed = cut.is_none() && held_out > 0.0;
    let cells = &train_rows.cells;
    let before = match hashed && !cells.numbered {
        true => rows_before(worker, part, cells.len()),
        false => 0,
    };
    let is_test = |r: usize| match cut {
        Some(c) => cells.ids[r] >= c,
        None => hashed && unit_hash(input.seed, before + cells.number(r)) < held_out,
    };
    let (train_idx, test_idx): (Vec<usize>, Vec<usize>) =
        labelled.iter().partition(|&&r| !is_test(r));

    (labelled, train_idx, test_idx)
}

/// The statistics of the numeric columns that standardize or bucket, over the training rows
/// of every worker.
fn numeric_statistics(
    worker: &mut Worker,
    spec: &TableSpec,
    train_rows: &Rows<'_>,
    train_idx: &[usize],
) -> Result<Vec<NumericStats>, String> {
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
        let columns = train_rows.columns();
        for &i in &needs_stats {
            let n = &spec.features.numeric[i];
            let c = columns
                .iter()
                .position(|x| *x == n.column)
                .ok_or_else(|| format!("no column '{}'", n.column))?;
            for &r in train_idx {
                if let Some(v) = train_rows.view(r).value(c) {
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

    Ok(numeric)
}

/// Each slot's vocabulary, from every worker's counts of its distinct values (none with
/// hashing).
fn vocabularies(
    worker: &mut Worker,
    spec: &TableSpec,
    dictionary: &Dictionary,
    slots: usize,
) -> Vec<Vec<String>> {
    let mut vocabulary = vec![Vec::new(); slots];
    if spec.features.hash_bits.is_none() {
        let min = spec.features.min_count as isize;
        for (s, t) in gather(worker, dictionary.counts(), move |c| {
            c.count().filter(move |(_, n)| *n >= min).map(|(k, _)| k)
        }) {
            vocabulary[s as usize].push(t);
        }
    }
    vocabulary
}

/// Totals for the notes (the best constant's loss, skipped rows, unknown values), and the
/// check that there is something to train and test on. Returns the training rows and their
/// positives, over all workers.
fn add_notes(
    worker: &mut Worker,
    input: &TableInput,
    out: &mut Prepared,
    skipped: usize,
    unknown: u64,
) -> Result<(u64, u64), String> {
    let spec = &input.spec;
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
    if let (Some(test), 0) = (&input.test, total(1)) {
        return Err(format!(
            "{}: no rows to test on (every row has a missing label, or the file has no rows)",
            test.display()
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
    Ok((total(0) as u64, total(4) as u64))
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

/// Every join's dimension table, read whole on one thread: its rows as `(key, brought values)`,
/// sorted by key, each key once.
pub(super) fn dimension_tables(spec: &TableSpec) -> Result<Vec<DimRows>, String> {
    let mut per_join = Vec::new();
    for j in &spec.join {
        let mut names: Vec<String> = j.on.values().cloned().collect();
        names.extend(j.columns.iter().cloned());
        let d = read_cells(
            &j.file,
            &names,
            Part::WHOLE,
            spec.delimiter as u8,
            &spec.missing,
            Cut::Lines,
        )
        .map_err(|e| e.to_string())?;
        let mut list: DimRows = dim_rows(&d, j.on.len()).collect();
        list.sort();
        unique_keys(spec, per_join.len(), &list)?;
        per_join.push(list);
    }
    Ok(per_join)
}

/// Encodes every row of `path` with a saved feature map, on one thread (for `predict`); the
/// label's column is optional. `id_column` names a column to carry through as each row's id.
pub fn encode_file(
    map: &FeatureMap,
    path: &Path,
    id_column: Option<&str>,
) -> Result<Encoded, String> {
    let spec = &map.spec;
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
    let cells = read_cells(
        path,
        &columns,
        Part::WHOLE,
        delimiter,
        &spec.missing,
        Cut::Lines,
    )
    .map_err(|e| e.to_string())?;
    check(&cells, spec).map_err(|e| e.to_string())?;
    let labels = if with_labels {
        labels(&cells, spec, false).map_err(|e| e.to_string())?
    } else {
        vec![None; cells.len()]
    };
    let mut rows = Rows::new(cells, spec);
    if !spec.join.is_empty() {
        rows.attach(&Rc::new(dimension_tables(spec)?));
    }
    let all: Vec<usize> = (0..rows.cells.len()).collect();
    let (data, unknown) = encode_each(map, &rows, &all, &labels)?;
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
