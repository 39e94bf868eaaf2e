//! What a job says about a table: the label rule, the features (categorical, numeric, date/time
//! parts, crosses; hashed or with a vocabulary) and the joins with dimension tables.
//!
//! A *slot* is one named group of features: a categorical column (`carrier`), a date part
//! (`sched_dep.hour`), a bucketised numeric column (`distance`), a cross (`origin*dest`), or a
//! numeric column kept as one number.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `[data.label]`: which column is the label, and how it becomes a number.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelSpec {
    /// The label's column.
    pub column: String,
    /// Binary label: +1 when the (numeric) value is above this, else -1.
    pub above: Option<f64>,
    /// Binary label: +1 when the value equals this string, else -1 (or, with `negative`, an
    /// error unless the value is one of those).
    pub equals: Option<String>,
    /// Binary label: +1 when the value is one of these strings (with `equals`, one more).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub positive: Vec<String>,
    /// Binary label with `equals` or `positive`: -1 for these strings, and any value in
    /// neither list is an error naming its row. Empty: every other value is -1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub negative: Vec<String>,
    /// Multiclass label by name: class `i` is the value `classes[i]` (softmax with
    /// `model.classes` = their number, which it sets when absent); any other value is an error
    /// naming its row. `predict` writes the names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<String>,
}

/// What a label value is, by the spec's names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NamedLabel {
    /// The label's number (±1, or the class).
    Known(f32),
    /// A value the spec does not name (an error).
    Unknown,
    /// The spec names no values: the label is a number.
    Unnamed,
}

impl LabelSpec {
    /// Whether the label is a binary one by string values.
    fn by_string(&self) -> bool {
        self.equals.is_some() || !self.positive.is_empty()
    }

    /// The number of value `v`, when the spec names label values.
    pub fn named(&self, v: &str) -> NamedLabel {
        if !self.classes.is_empty() {
            return match self.classes.iter().position(|c| c == v) {
                Some(i) => NamedLabel::Known(i as f32),
                None => NamedLabel::Unknown,
            };
        }
        if !self.by_string() {
            return NamedLabel::Unnamed;
        }
        if self.equals.as_deref() == Some(v) || self.positive.iter().any(|p| p == v) {
            NamedLabel::Known(1.0)
        } else if self.negative.is_empty() || self.negative.iter().any(|n| n == v) {
            NamedLabel::Known(-1.0)
        } else {
            NamedLabel::Unknown
        }
    }

    /// The values the spec names, for an error message.
    pub fn names(&self) -> String {
        let quoted = |v: &[String]| {
            let q: Vec<String> = v.iter().map(|s| format!("'{s}'")).collect();
            q.join(", ")
        };
        if !self.classes.is_empty() {
            return format!("the classes are {}", quoted(&self.classes));
        }
        let positive: Vec<String> = self.equals.iter().chain(&self.positive).cloned().collect();
        format!(
            "positive: {}; negative: {}",
            quoted(&positive),
            quoted(&self.negative)
        )
    }
}

/// How a numeric column becomes features.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transform {
    /// The value itself, one feature.
    #[default]
    Raw,
    /// `(x - mean) / std` over the training rows, one feature.
    Standardize,
    /// `ln(1 + x)`, one feature (x must be > -1).
    Log1p,
    /// One-hot over `buckets` quantile buckets of the training rows (a discrete slot).
    Bucket,
}

/// A numeric column.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumericSpec {
    /// The column.
    pub column: String,
    /// `raw` (default), `standardize`, `log1p` or `bucket`.
    #[serde(default)]
    pub transform: Transform,
    /// Number of quantile buckets (`bucket` only).
    #[serde(default = "default_buckets")]
    pub buckets: u32,
}

fn default_buckets() -> u32 {
    10
}

/// A part of a date/time value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DatePart {
    /// Hour of the day, 0-23.
    Hour,
    /// Day of the week, 0 (Monday) to 6.
    Dow,
    /// Month, 1-12.
    Month,
    /// Day of the month, 1-31.
    Day,
}

impl DatePart {
    /// The part's name in slot names (`sched_dep.hour`).
    pub fn name(self) -> &'static str {
        match self {
            DatePart::Hour => "hour",
            DatePart::Dow => "dow",
            DatePart::Month => "month",
            DatePart::Day => "day",
        }
    }
}

/// A date/time column (`YYYY-MM-DD`, optionally followed by `T` or a space and `HH:MM[:SS]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatetimeSpec {
    /// The column.
    pub column: String,
    /// The parts to derive, each a categorical slot named `column.part`.
    pub parts: Vec<DatePart>,
}

/// A free-text column: its words and word n-grams, hashed into a range of their own (Spark's
/// `Tokenizer` + `HashingTF`, Vowpal Wabbit's text namespaces).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextSpec {
    /// The column.
    pub column: String,
    /// Longest n-gram: 1 gives words, 2 words and pairs of adjacent words, and so on.
    #[serde(default = "one")]
    pub ngrams: u32,
    /// The column's range holds `2^hash_bits` features.
    #[serde(default = "default_text_bits")]
    pub hash_bits: u32,
    /// Lower-case the text before splitting it.
    #[serde(default = "yes")]
    pub lowercase: bool,
    /// A feature is 1 when its n-gram occurs, rather than its number of occurrences.
    #[serde(default)]
    pub binary: bool,
    /// Scale the column's features to unit Euclidean length (scikit-learn's `norm = "l2"`), so
    /// that a long text weighs no more than a short one.
    #[serde(default)]
    pub normalize: bool,
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

fn default_text_bits() -> u32 {
    18
}

impl TextSpec {
    /// A column's defaults: words, 2^18 features, lower-cased, counts.
    pub fn new(column: &str) -> TextSpec {
        TextSpec {
            column: column.into(),
            ngrams: 1,
            hash_bits: default_text_bits(),
            lowercase: true,
            binary: false,
            normalize: false,
        }
    }
}

/// `[data.features]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FeatureSpec {
    /// Categorical columns: one feature per value.
    pub categorical: Vec<String>,
    /// Numeric columns.
    pub numeric: Vec<NumericSpec>,
    /// Date/time columns and the parts derived from them.
    pub datetime: Vec<DatetimeSpec>,
    /// Free-text columns, each hashed into its own range after the other features.
    pub text: Vec<TextSpec>,
    /// Crosses of discrete slots, e.g. `[["origin", "dest"], ["carrier", "sched_dep.hour"]]`:
    /// one feature per combination of values.
    pub crosses: Vec<Vec<String>>,
    /// VW-style hashing into `2^hash_bits` features (xxh3, seeded with `hash_seed`); absent: a
    /// vocabulary built from the training rows.
    pub hash_bits: Option<u32>,
    /// Seed of the feature hash.
    pub hash_seed: u64,
    /// Vocabulary only: a value seen fewer times than this in the training rows folds into one
    /// "other" feature per slot (as do values never seen). With 1, unseen values are ignored
    /// and counted.
    pub min_count: u64,
}

impl FeatureSpec {
    /// The features of the hashed ranges: `2^hash_bits` (when given) and each text column's.
    pub fn hashed_width(&self) -> u64 {
        let text: u64 = self.text.iter().map(|t| 1u64 << t.hash_bits.min(63)).sum();
        self.hash_bits.map_or(0, |b| 1u64 << b.min(63)) + text
    }
}

impl Default for FeatureSpec {
    fn default() -> Self {
        FeatureSpec {
            categorical: Vec::new(),
            numeric: Vec::new(),
            datetime: Vec::new(),
            text: Vec::new(),
            crosses: Vec::new(),
            hash_bits: None,
            hash_seed: 0,
            min_count: 1,
        }
    }
}

/// `[[data.join]]`: a dimension table joined to every row on equal key columns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinSpec {
    /// The dimension table (CSV with a header; gzip or zstd allowed).
    pub file: PathBuf,
    /// Key columns: `{ row's column = "table's column" }`, e.g. `{ dest = "faa" }`.
    pub on: BTreeMap<String, String>,
    /// The table's columns to bring; they are then named `prefix + column`.
    pub columns: Vec<String>,
    /// Prefix of the brought columns' names (to tell `year` of a plane from `year` of a flight).
    #[serde(default)]
    pub prefix: String,
}

/// Everything about a table input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSpec {
    /// The label.
    pub label: LabelSpec,
    /// The features.
    pub features: FeatureSpec,
    /// Joins, applied in order.
    #[serde(default)]
    pub join: Vec<JoinSpec>,
    /// Strings that mean "missing" in any column: a missing label skips the row (counted); a
    /// missing feature value is no feature.
    pub missing: Vec<String>,
    /// Field delimiter (one ASCII character).
    pub delimiter: char,
}

impl Default for TableSpec {
    fn default() -> Self {
        TableSpec {
            label: LabelSpec::default(),
            features: FeatureSpec::default(),
            join: Vec::new(),
            missing: vec![String::new(), "NA".into()],
            delimiter: ',',
        }
    }
}

/// A discrete slot: where its tokens come from.
#[derive(Clone, Debug, PartialEq)]
pub enum SlotSource {
    /// A categorical column's value.
    Column(String),
    /// A part of a date/time column.
    Part(String, DatePart),
    /// The quantile bucket of numeric spec `i`.
    Bucket(usize),
    /// The combination of the tokens of these (earlier) slots.
    Cross(Vec<usize>),
}

/// A discrete slot of the layout.
#[derive(Clone, Debug, PartialEq)]
pub struct Slot {
    /// Its name (`carrier`, `sched_dep.hour`, `distance`, `origin*dest`).
    pub name: String,
    /// Where its tokens come from.
    pub source: SlotSource,
}

impl TableSpec {
    /// The discrete slots in layout order: categorical columns, date parts, bucketised
    /// numerics, then crosses.
    pub fn slots(&self) -> Result<Vec<Slot>, String> {
        let f = &self.features;
        let mut slots: Vec<Slot> = Vec::new();
        for c in &f.categorical {
            slots.push(Slot {
                name: c.clone(),
                source: SlotSource::Column(c.clone()),
            });
        }
        for d in &f.datetime {
            for &p in &d.parts {
                slots.push(Slot {
                    name: format!("{}.{}", d.column, p.name()),
                    source: SlotSource::Part(d.column.clone(), p),
                });
            }
        }
        for (i, n) in f.numeric.iter().enumerate() {
            if n.transform == Transform::Bucket {
                slots.push(Slot {
                    name: n.column.clone(),
                    source: SlotSource::Bucket(i),
                });
            }
        }
        for (i, cross) in f.crosses.iter().enumerate() {
            if cross.len() < 2 {
                return Err(format!(
                    "data.features.crosses[{i}]: a cross needs at least two slots"
                ));
            }
            let mut parts = Vec::new();
            for name in cross {
                let at = slots.iter().position(|s| &s.name == name).ok_or_else(|| {
                    format!(
                        "data.features.crosses[{i}]: '{name}' is not a categorical column, a \
                         date part (column.hour) or a bucketised numeric column; the slots \
                         are: {}",
                        slots
                            .iter()
                            .map(|s| s.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?;
                parts.push(at);
            }
            slots.push(Slot {
                name: cross.join("*"),
                source: SlotSource::Cross(parts),
            });
        }
        let mut names: Vec<&str> = slots.iter().map(|s| s.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("data.features: '{}' is listed twice", w[0]));
        }
        Ok(slots)
    }

    /// The numeric specs kept as one number each (every transform but `bucket`).
    pub fn scalars(&self) -> impl Iterator<Item = (usize, &NumericSpec)> {
        self.features
            .numeric
            .iter()
            .enumerate()
            .filter(|(_, n)| n.transform != Transform::Bucket)
    }

    /// Checks the spec; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.label.column.is_empty() {
            return Err("data.label.column: the label's column must be named".into());
        }
        let l = &self.label;
        let rules = [l.above.is_some(), l.by_string(), !l.classes.is_empty()];
        if rules.iter().filter(|r| **r).count() > 1 {
            return Err(
                "data.label: give one rule: `above`, `equals`/`positive` (with `negative`), or \
                 `classes`"
                    .into(),
            );
        }
        if let Some(x) = l.above.filter(|x| !x.is_finite()) {
            return Err(format!(
                "data.label.above: must be a finite number, got {x} (every value would be \
                 on one side)"
            ));
        }
        if !l.negative.is_empty() && !l.by_string() {
            return Err("data.label.negative: needs `equals` or `positive`".into());
        }
        let mut named: Vec<&String> = (l.equals.iter())
            .chain(&l.positive)
            .chain(&l.negative)
            .chain(&l.classes)
            .collect();
        named.sort_unstable();
        if let Some(w) = named.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("data.label: '{}' is named twice", w[0]));
        }
        if !self.delimiter.is_ascii() || self.delimiter == '"' || self.delimiter == '\n' {
            return Err(format!(
                "data.delimiter: must be one ASCII character other than a quote or newline, \
                 got {:?}",
                self.delimiter
            ));
        }
        let f = &self.features;
        let label = &self.label.column;
        let as_feature = (f.categorical.iter())
            .chain(f.numeric.iter().map(|n| &n.column))
            .chain(f.datetime.iter().map(|d| &d.column))
            .chain(f.text.iter().map(|t| &t.column))
            .any(|c| c == label);
        if as_feature {
            return Err(format!(
                "data.features: '{label}' is the label's column (data.label.column); a model \
                 given its own label as a feature learns nothing it can use on new rows"
            ));
        }
        if let Some(b) = f.hash_bits {
            if !(1..=31).contains(&b) {
                return Err(format!("data.features.hash_bits: must be 1 to 31, got {b}"));
            }
            if f.min_count != 1 {
                return Err(
                    "data.features.min_count: applies to a vocabulary, not to hashing".into(),
                );
            }
        }
        if f.min_count == 0 {
            return Err("data.features.min_count: must be at least 1".into());
        }
        for n in &f.numeric {
            if n.transform == Transform::Bucket && !(2..=1000).contains(&n.buckets) {
                return Err(format!(
                    "data.features.numeric '{}': buckets must be 2 to 1000, got {}",
                    n.column, n.buckets
                ));
            }
        }
        for d in &f.datetime {
            if d.parts.is_empty() {
                return Err(format!(
                    "data.features.datetime '{}': name at least one part",
                    d.column
                ));
            }
        }
        for t in &f.text {
            let at = format!("data.features.text '{}'", t.column);
            if !(1..=8).contains(&t.ngrams) {
                return Err(format!("{at}: ngrams must be 1 to 8, got {}", t.ngrams));
            }
            if !(1..=31).contains(&t.hash_bits) {
                return Err(format!(
                    "{at}: hash_bits must be 1 to 31, got {}",
                    t.hash_bits
                ));
            }
        }
        let mut texts: Vec<&String> = f.text.iter().map(|t| &t.column).collect();
        texts.sort_unstable();
        if let Some(w) = texts.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("data.features.text: '{}' is listed twice", w[0]));
        }
        if f.hashed_width() > 1 << 31 {
            return Err(
                "data.features: the hashed ranges (hash_bits and each text column's) add up to \
                 more than 2^31 features; lower some hash_bits"
                    .into(),
            );
        }
        for (i, j) in self.join.iter().enumerate() {
            if j.on.is_empty() || j.columns.is_empty() {
                return Err(format!(
                    "data.join[{i}] ({}): `on` and `columns` must not be empty",
                    j.file.display()
                ));
            }
        }
        let slots = self.slots()?;
        if slots.is_empty() && self.scalars().next().is_none() && f.text.is_empty() {
            return Err(
                "data.features: no features (list categorical, numeric, datetime or text \
                        columns)"
                    .into(),
            );
        }
        Ok(())
    }

    /// The columns the rows must provide (the label's, the features', the join keys'), each
    /// once, in a fixed order; joined columns are not among them.
    pub fn row_columns(&self) -> Vec<String> {
        let joined: Vec<String> = self.joined_columns();
        let f = &self.features;
        let mut cols = vec![self.label.column.clone()];
        cols.extend(f.categorical.iter().cloned());
        cols.extend(f.numeric.iter().map(|n| n.column.clone()));
        cols.extend(f.datetime.iter().map(|d| d.column.clone()));
        cols.extend(f.text.iter().map(|t| t.column.clone()));
        for j in &self.join {
            cols.extend(j.on.keys().cloned());
        }
        let mut seen = std::collections::BTreeSet::new();
        cols.retain(|c| !joined.contains(c) && seen.insert(c.clone()));
        cols
    }

    /// The names of the columns the joins bring (`prefix + column`).
    pub fn joined_columns(&self) -> Vec<String> {
        self.join
            .iter()
            .flat_map(|j| j.columns.iter().map(move |c| format!("{}{c}", j.prefix)))
            .collect()
    }
}
