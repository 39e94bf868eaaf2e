//! The feature map: how a table's row becomes a sparse feature vector, given the statistics of
//! the training rows (vocabularies, numeric moments and bucket edges).
//!
//! Layout without hashing: one key per scalar numeric column, then per discrete slot its
//! vocabulary in sorted order, preceded by its "other" key when `min_count > 1`. With
//! `hash_bits = b`, every feature's key is `xxh3(slot, 0x1f, token; hash_seed) mod 2^b`
//! (Weinberger et al., "Feature hashing for large scale multitask learning"), and colliding
//! features add up. Text columns follow, each in a hashed range of its own ([`super::text`]).

use foldhash::HashMap;
use serde::{Deserialize, Serialize};

use super::spec::{DatePart, FeatureSpec, LabelSpec, NamedLabel, SlotSource, TableSpec, Transform};
use super::text::TextColumn;

/// Statistics of one numeric column over the training rows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NumericStats {
    /// Rows with a value.
    pub count: u64,
    /// Mean of the values.
    pub mean: f64,
    /// Standard deviation (population); 1 when the column is constant.
    pub std: f64,
    /// Upper edges of the quantile buckets but the last (`bucket` only): a value `x` is in
    /// bucket `edges.partition_point(|e| *e < x)`.
    pub edges: Vec<f64>,
}

/// How rows become features: the spec and what the training rows taught it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FeatureMap {
    /// The table spec.
    pub spec: TableSpec,
    /// Per numeric spec (in order), its statistics.
    pub numeric: Vec<NumericStats>,
    /// Per discrete slot (in layout order), its sorted vocabulary (empty with hashing).
    pub vocabulary: Vec<Vec<String>>,
    /// Number of features (the intercept not included).
    pub dim: u32,
}

/// A value the encoder could not use, with its column.
#[derive(Clone, Debug, PartialEq)]
pub struct BadValue {
    /// The column.
    pub column: String,
    /// What is wrong.
    pub message: String,
}

/// The label of value `v` by the label rule `l` (named values, `above`, or the number itself);
/// with `classification`, a label that is not a class is an error.
pub fn label_value(l: &LabelSpec, v: &str, classification: bool) -> Result<f32, String> {
    let y = match l.named(v) {
        NamedLabel::Known(y) => y as f64,
        NamedLabel::Unknown => {
            return Err(format!(
                "label '{}' is not one the job names ({})",
                crate::data::clip(v),
                l.names()
            ))
        }
        NamedLabel::Unnamed => {
            let x = number(&l.column, v).map_err(|e| e.message)?;
            match l.above {
                Some(t) if x > t => 1.0,
                Some(_) => -1.0,
                None => x,
            }
        }
    };
    if classification && !crate::data::is_binary_label(y as f32) {
        return Err(format!(
            "label {} is not a class: logistic and hinge losses take -1/+1 or 0/1 (or set \
             data.label.above or data.label.equals)",
            crate::data::clip(v)
        ));
    }
    Ok(y as f32)
}

/// Parses a number; `column` names it in the error.
pub fn number(column: &str, s: &str) -> Result<f64, BadValue> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => Err(BadValue {
            column: column.into(),
            message: format!("'{}' is not a finite number", crate::data::clip(s)),
        }),
    }
}

/// The number a scalar or bucketised numeric spec is computed from (`log1p` applied).
pub fn numeric_input(column: &str, t: Transform, s: &str) -> Result<f64, BadValue> {
    let x = number(column, s)?;
    if t == Transform::Log1p {
        if x <= -1.0 {
            return Err(BadValue {
                column: column.into(),
                message: format!("log1p needs a value above -1, got {x}"),
            });
        }
        return Ok(x.ln_1p());
    }
    Ok(x)
}

/// A calendar date and hour.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Date {
    year: u32,
    month: u32,
    day: u32,
    hour: u32,
}

impl Date {
    /// Parses `YYYY-MM-DD[(T| )HH:MM[:SS][Z]]`; `column` names it in the error.
    pub fn parse(column: &str, s: &str) -> Result<Date, BadValue> {
        let bad = || BadValue {
            column: column.into(),
            message: format!(
                "'{}' is not a date (YYYY-MM-DD, optionally THH:MM[:SS])",
                crate::data::clip(s)
            ),
        };
        let b = s.as_bytes();
        let digits = |r: std::ops::Range<usize>| -> Result<u32, BadValue> {
            let t = b.get(r).ok_or_else(bad)?;
            if !t.iter().all(u8::is_ascii_digit) {
                return Err(bad());
            }
            Ok(t.iter().fold(0, |a, d| a * 10 + (d - b'0') as u32))
        };
        if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
            return Err(bad());
        }
        let (y, m, d) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
        let days_in_month = [
            31,
            28 + leap(y) as u32,
            31,
            30,
            31,
            30,
            31,
            31,
            30,
            31,
            30,
            31,
        ];
        if !(1..=12).contains(&m) || d == 0 || d > days_in_month[m as usize - 1] {
            return Err(bad());
        }
        let hour = if b.len() > 10 {
            if !(b[10] == b'T' || b[10] == b' ') || b.len() < 16 || b[13] != b':' {
                return Err(bad());
            }
            let (h, min) = (digits(11..13)?, digits(14..16)?);
            if h > 23 || min > 59 {
                return Err(bad());
            }
            h
        } else {
            0
        };
        Ok(Date {
            year: y,
            month: m,
            day: d,
            hour,
        })
    }

    /// One part of the date (day of week: 0 is Monday).
    pub fn part(&self, part: DatePart) -> u32 {
        match part {
            DatePart::Hour => self.hour,
            DatePart::Month => self.month,
            DatePart::Day => self.day,
            DatePart::Dow => {
                ((days_from_civil(self.year as i64, self.month, self.day) + 3).rem_euclid(7)) as u32
            }
        }
    }
}

/// Parses `YYYY-MM-DD[(T| )HH:MM[:SS][Z]]` and returns the part.
pub fn date_part(column: &str, s: &str, part: DatePart) -> Result<u32, BadValue> {
    Ok(Date::parse(column, s)?.part(part))
}

fn leap(y: u32) -> bool {
    (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400)
}

/// Days since 1970-01-01 (a Thursday) of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (H. Hinnant's algorithm, the
/// inverse of [`days_from_civil`]).
#[cfg(feature = "parquet")]
pub(super) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + (m <= 2) as i64, m, d)
}

/// The separator of a cross's component tokens.
const CROSS: u8 = 0x1f;

/// A row's values by position, as an [`Encoder`] reads them.
pub trait RowValues {
    /// The value of column `i` of the columns the encoder was made for, or `None` when it is
    /// missing.
    fn value(&self, i: usize) -> Option<&str>;
}

/// The tokens of one row's discrete slots, in one buffer reused from row to row.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    text: Vec<u8>,
    spans: Vec<Option<(u32, u32)>>,
}

impl Tokens {
    /// Slot `s`'s token, `None` where a value it needs is missing.
    #[inline]
    pub fn get(&self, s: usize) -> Option<&[u8]> {
        self.spans[s].map(|(a, b)| &self.text[a as usize..b as usize])
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether there are no slots.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    fn push(&mut self, from: usize) {
        self.spans.push(Some((from as u32, self.text.len() as u32)));
    }
}

/// Appends `n` in decimal.
fn push_decimal(out: &mut Vec<u8>, n: u32) {
    let mut digits = [0u8; 10];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Where a slot's token comes from, with column positions resolved.
#[derive(Clone, Debug)]
enum Source {
    Column(usize),
    Part(usize, DatePart),
    /// Numeric spec `i`, read from column `c`.
    Bucket(usize, usize),
    Cross(Vec<usize>),
}

/// A [`FeatureMap`] made ready for rows that provide `columns` (by position): column names
/// resolved once, a hash table per slot's vocabulary, and buffers reused from row to row, so
/// that encoding a row allocates nothing.
pub struct Encoder<'m> {
    map: &'m FeatureMap,
    columns: Vec<String>,
    /// Per scalar numeric spec: its index and its column's position.
    scalars: Vec<(usize, usize)>,
    sources: Vec<Source>,
    /// Per text column: its position and its hasher.
    texts: Vec<(usize, TextColumn)>,
    keys: Keys<'m>,
    tokens: Tokens,
}

/// Tokens to keys.
struct Keys<'m> {
    map: &'m FeatureMap,
    /// Per slot: its name (hashing) and its first key (without hashing: its "other" key when
    /// `min_count > 1`, else its vocabulary's first).
    names: Vec<String>,
    bases: Vec<u32>,
    /// Per slot: token -> position in its vocabulary (foldhash, randomly seeded per process:
    /// values read from a file cannot be chosen to collide).
    lookup: Vec<HashMap<Box<[u8]>, u32>>,
    scratch: Vec<u8>,
}

/// `xxh3(name, 0x1f, token; hash_seed) mod 2^hash_bits`, built in `scratch`.
fn hashed(scratch: &mut Vec<u8>, f: &FeatureSpec, name: &str, token: &[u8]) -> u32 {
    let bits = f.hash_bits.unwrap_or(31);
    scratch.clear();
    scratch.extend_from_slice(name.as_bytes());
    scratch.push(CROSS);
    scratch.extend_from_slice(token);
    let h = xxhash_rust::xxh3::xxh3_64_with_seed(scratch, f.hash_seed);
    (h & ((1u64 << bits) - 1)) as u32
}

impl Keys<'_> {
    fn get(&mut self, s: usize, token: &[u8]) -> TokenKey {
        let f = &self.map.spec.features;
        if f.hash_bits.is_some() {
            return TokenKey::Known(hashed(&mut self.scratch, f, &self.names[s], token));
        }
        let other = f.min_count > 1;
        match self.lookup[s].get(token) {
            Some(&at) => TokenKey::Known(self.bases[s] + other as u32 + at),
            None => TokenKey::Unknown(other.then_some(self.bases[s])),
        }
    }
}

impl<'m> Encoder<'m> {
    /// An encoder of `map` for rows whose values are `columns`; a column the map needs and
    /// `columns` lacks is an error.
    pub fn new(map: &'m FeatureMap, columns: &[String]) -> Result<Encoder<'m>, String> {
        let at = |c: &str| {
            columns
                .iter()
                .position(|x| x == c)
                .ok_or_else(|| format!("the feature map needs column '{c}', which rows lack"))
        };
        let spec = &map.spec;
        let scalars = spec
            .scalars()
            .map(|(i, n)| Ok((i, at(&n.column)?)))
            .collect::<Result<Vec<_>, String>>()?;
        let slots = spec.slots()?;
        let sources = slots
            .iter()
            .map(|s| {
                Ok(match &s.source {
                    SlotSource::Column(c) => Source::Column(at(c)?),
                    SlotSource::Part(c, p) => Source::Part(at(c)?, *p),
                    SlotSource::Bucket(i) => {
                        Source::Bucket(*i, at(&spec.features.numeric[*i].column)?)
                    }
                    SlotSource::Cross(parts) => Source::Cross(parts.clone()),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let mut base = map.text_base();
        let mut texts = Vec::with_capacity(spec.features.text.len());
        for t in &spec.features.text {
            texts.push((
                at(&t.column)?,
                TextColumn::new(t, base, spec.features.hash_seed),
            ));
            base += TextColumn::width(t);
        }
        let other = (spec.features.min_count > 1) as u32;
        let mut bases = Vec::with_capacity(slots.len());
        let mut key = scalars.len() as u32;
        for s in 0..slots.len() {
            bases.push(key);
            key += map.vocabulary.get(s).map_or(0, |v| v.len() as u32) + other;
        }
        let lookup = (0..slots.len())
            .map(|s| {
                let vocab = map.vocabulary.get(s).map_or(&[][..], |v| &v[..]);
                vocab
                    .iter()
                    .enumerate()
                    .map(|(i, t)| (t.as_bytes().into(), i as u32))
                    .collect()
            })
            .collect();
        Ok(Encoder {
            map,
            columns: columns.to_vec(),
            scalars,
            sources,
            texts,
            keys: Keys {
                map,
                names: slots.into_iter().map(|s| s.name).collect(),
                bases,
                lookup,
                scratch: Vec::new(),
            },
            tokens: Tokens::default(),
        })
    }

    /// The features a row has without text: one per scalar and per slot at most.
    pub fn max_features(&self) -> usize {
        self.scalars.len() + self.sources.len()
    }

    /// The columns rows provide, by position.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// The tokens of `row`'s discrete slots, in layout order.
    pub fn tokens(&mut self, row: &impl RowValues) -> Result<&Tokens, BadValue> {
        let t = &mut self.tokens;
        t.text.clear();
        t.spans.clear();
        let spec = &self.map.spec;
        // A date column with several parts is parsed once per row.
        let mut date: Option<(usize, Date)> = None;
        for source in &self.sources {
            let from = t.text.len();
            match source {
                Source::Column(c) => match row.value(*c) {
                    Some(v) => {
                        t.text.extend_from_slice(v.as_bytes());
                        t.push(from);
                    }
                    None => t.spans.push(None),
                },
                Source::Part(c, p) => match row.value(*c) {
                    Some(v) => {
                        let d = match date {
                            Some((at, d)) if at == *c => d,
                            _ => Date::parse(&self.columns[*c], v)?,
                        };
                        date = Some((*c, d));
                        push_decimal(&mut t.text, d.part(*p));
                        t.push(from);
                    }
                    None => t.spans.push(None),
                },
                Source::Bucket(i, c) => match row.value(*c) {
                    Some(v) => {
                        let n = &spec.features.numeric[*i];
                        let x = numeric_input(&n.column, n.transform, v)?;
                        let bucket = self.map.numeric[*i].edges.partition_point(|e| *e < x);
                        push_decimal(&mut t.text, bucket as u32);
                        t.push(from);
                    }
                    None => t.spans.push(None),
                },
                Source::Cross(parts) => {
                    if parts.iter().all(|&p| t.spans[p].is_some()) {
                        for (k, &p) in parts.iter().enumerate() {
                            if k > 0 {
                                t.text.push(CROSS);
                            }
                            let (a, b) = t.spans[p].expect("checked");
                            t.text.extend_from_within(a as usize..b as usize);
                        }
                        t.push(from);
                    } else {
                        t.spans.push(None);
                    }
                }
            }
        }
        Ok(&self.tokens)
    }

    /// Pushes `row`'s scalar numeric features onto `out`.
    pub fn scalars(
        &mut self,
        row: &impl RowValues,
        out: &mut Vec<(u32, f32)>,
    ) -> Result<(), BadValue> {
        let map = self.map;
        let spec = &map.spec;
        for (key, &(i, c)) in self.scalars.iter().enumerate() {
            let n = &spec.features.numeric[i];
            if let Some(v) = row.value(c) {
                let mut x = numeric_input(&n.column, n.transform, v)?;
                if n.transform == Transform::Standardize {
                    let s = &map.numeric[i];
                    x = (x - s.mean) / s.std;
                }
                let k = if spec.features.hash_bits.is_some() {
                    hashed(&mut self.keys.scratch, &spec.features, &n.column, b"")
                } else {
                    key as u32
                };
                out.push((k, x as f32));
            }
        }
        Ok(())
    }

    /// Pushes `row`'s text features onto `out`, each column's sorted within its range.
    pub fn text(&mut self, row: &impl RowValues, out: &mut Vec<(u32, f32)>) {
        for (c, column) in &mut self.texts {
            if let Some(v) = row.value(*c) {
                column.push(v, out);
            }
        }
    }

    /// The feature of token `token` of slot `s`: its key, or for a value not in the
    /// vocabulary `Unknown` with its slot's "other" key when `min_count > 1`.
    pub fn token_key(&mut self, s: usize, token: &[u8]) -> TokenKey {
        self.keys.get(s, token)
    }

    /// Encodes `row` into sorted `(key, value)` features (colliding hashed features summed).
    /// Returns the number of values not in the vocabulary that were ignored (`min_count` 1) or
    /// folded into their slot's "other" feature.
    pub fn encode(
        &mut self,
        row: &impl RowValues,
        out: &mut Vec<(u32, f32)>,
    ) -> Result<u64, BadValue> {
        out.clear();
        self.scalars(row, out)?;
        self.text(row, out);
        self.tokens(row)?;
        let mut unknown = 0;
        for s in 0..self.tokens.len() {
            if let Some(t) = self.tokens.get(s) {
                unknown += self.keys.get(s, t).push(out) as u64;
            }
        }
        sum_duplicates(out);
        Ok(unknown)
    }
}

/// The feature a token becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKey {
    /// A value of the vocabulary (or any value, with hashing): its key.
    Known(u32),
    /// A value not in the vocabulary: its slot's "other" key, if it has one.
    Unknown(Option<u32>),
}

impl TokenKey {
    /// Pushes the feature (if any) onto `out`; returns whether the value was unknown.
    #[inline]
    pub fn push(self, out: &mut Vec<(u32, f32)>) -> bool {
        match self {
            TokenKey::Known(k) => {
                out.push((k, 1.0));
                false
            }
            TokenKey::Unknown(other) => {
                if let Some(k) = other {
                    out.push((k, 1.0));
                }
                true
            }
        }
    }
}

/// Sorts features by key and sums the values of equal keys (hash collisions).
pub fn sum_duplicates(out: &mut Vec<(u32, f32)>) {
    out.sort_unstable_by_key(|f| f.0);
    out.dedup_by(|b, a| {
        if a.0 == b.0 {
            a.1 += b.1;
            true
        } else {
            false
        }
    });
}

impl FeatureMap {
    /// Builds the layout from the statistics; `vocabulary` is per slot, sorted.
    pub fn new(
        spec: TableSpec,
        numeric: Vec<NumericStats>,
        vocabulary: Vec<Vec<String>>,
    ) -> FeatureMap {
        let dim = Self::layout_dim(&spec, &vocabulary)
            + (spec.features.text.iter())
                .map(TextColumn::width)
                .sum::<u32>();
        FeatureMap {
            spec,
            numeric,
            vocabulary,
            dim,
        }
    }

    /// Checks a map read from a file (a model file's, which may be damaged or hand-edited):
    /// finite statistics, with a positive spread for a standardized column, ascending bucket edges, each vocabulary
    /// sorted without repeats (a repeated entry made values silently unknown), hash bits that
    /// fit, and a `dim` that is what the layout makes (a disagreeing one let keys run past the
    /// weights).
    pub fn check(&self) -> Result<(), String> {
        if let Some(b) = self
            .spec
            .features
            .hash_bits
            .filter(|&b| !(1..=31).contains(&b))
        {
            return Err(format!("features.hash_bits = {b}: must be 1 to 31"));
        }
        for (i, n) in self.numeric.iter().enumerate() {
            // Only standardizing divides by the spread; other transforms keep no statistics.
            let divides = self.spec.features.numeric.get(i).map(|c| c.transform)
                == Some(Transform::Standardize);
            if !n.mean.is_finite() || !n.std.is_finite() || (divides && n.std <= 0.0) {
                return Err(format!(
                    "numeric statistics {}: mean {} and std {} (finite, and std positive for \
                     a standardized column)",
                    i + 1,
                    n.mean,
                    n.std
                ));
            }
            if n.edges.iter().any(|e| !e.is_finite()) || n.edges.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!(
                    "numeric statistics {}: bucket edges must be finite and ascending",
                    i + 1
                ));
            }
        }
        for (slot, words) in self.vocabulary.iter().enumerate() {
            if let Some(w) = words.windows(2).find(|w| w[0] >= w[1]) {
                return Err(format!(
                    "vocabulary {}: `{}` then `{}`: entries must be sorted and each once",
                    slot + 1,
                    crate::data::clip(&w[0]),
                    crate::data::clip(&w[1])
                ));
            }
        }
        if let Some(t) = self
            .spec
            .features
            .text
            .iter()
            .find(|t| !(1..=31).contains(&t.hash_bits))
        {
            return Err(format!(
                "a text column's hash_bits = {}: must be 1 to 31",
                t.hash_bits
            ));
        }
        let text: u64 = self
            .spec
            .features
            .text
            .iter()
            .map(|t| TextColumn::width(t) as u64)
            .sum();
        let layout = match self.spec.features.hash_bits {
            Some(b) => 1u64 << b,
            None => {
                let other = (self.spec.features.min_count > 1) as u64;
                let scalars = self.spec.scalars().count() as u64;
                scalars
                    + self
                        .vocabulary
                        .iter()
                        .map(|v| v.len() as u64 + other)
                        .sum::<u64>()
            }
        };
        if layout + text != self.dim as u64 {
            return Err(format!(
                "dim = {}, but its columns make {} features",
                self.dim,
                layout + text
            ));
        }
        Ok(())
    }

    /// Number of keys before the text columns' ranges.
    fn layout_dim(spec: &TableSpec, vocabulary: &[Vec<String>]) -> u32 {
        match spec.features.hash_bits {
            Some(b) => 1u32 << b,
            None => {
                let other = (spec.features.min_count > 1) as usize;
                let scalars = spec.scalars().count();
                (scalars + vocabulary.iter().map(|v| v.len() + other).sum::<usize>()) as u32
            }
        }
    }

    /// The first key of the first text column's range.
    pub fn text_base(&self) -> u32 {
        Self::layout_dim(&self.spec, &self.vocabulary)
    }

    /// An [`Encoder`] of this map for rows that provide `columns`.
    pub fn encoder(&self, columns: &[String]) -> Result<Encoder<'_>, String> {
        Encoder::new(self, columns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::table::spec::{FeatureSpec, NumericSpec};

    /// Values of the columns a, b, x.
    struct Row([Option<&'static str>; 3]);

    impl RowValues for Row {
        fn value(&self, i: usize) -> Option<&str> {
            self.0[i]
        }
    }

    fn columns() -> Vec<String> {
        ["a", "b", "x"].map(String::from).to_vec()
    }

    fn spec(min_count: u64, hash_bits: Option<u32>) -> TableSpec {
        TableSpec {
            features: FeatureSpec {
                categorical: vec!["a".into(), "b".into()],
                numeric: vec![NumericSpec {
                    column: "x".into(),
                    transform: Transform::Standardize,
                    buckets: 10,
                }],
                crosses: vec![vec!["a".into(), "b".into()]],
                min_count,
                hash_bits,
                ..FeatureSpec::default()
            },
            ..TableSpec::default()
        }
    }

    #[test]
    fn vocabulary_layout_folds_unknown_values_into_other_or_ignores_them() {
        let stats = vec![NumericStats {
            count: 4,
            mean: 2.0,
            std: 4.0,
            edges: vec![],
        }];
        let vocab = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let vocabulary = vec![vocab(&["p", "q"]), vocab(&["u"]), vocab(&["p\u{1f}u"])];
        let row = Row([Some("q"), Some("u"), Some("10")]);
        let unseen = Row([Some("zz"), Some("u"), None]);
        let mut out = Vec::new();

        // min_count 2: key 0 is x; then a: other 1, p 2, q 3; b: other 4, u 5; a*b: other 6,
        // p*u 7.
        let s = spec(2, None);
        let map = FeatureMap::new(s, stats.clone(), vocabulary.clone());
        let mut e = map.encoder(&columns()).unwrap();
        assert_eq!(map.dim, 8);
        assert_eq!(e.encode(&row, &mut out), Ok(1)); // q*u is not in a*b's vocabulary
        assert_eq!(out, vec![(0, 2.0), (3, 1.0), (5, 1.0), (6, 1.0)]);
        assert_eq!(e.encode(&unseen, &mut out), Ok(2));
        assert_eq!(out, vec![(1, 1.0), (5, 1.0), (6, 1.0)]);

        // min_count 1: no "other" keys; unknown values are ignored and counted.
        let s = spec(1, None);
        let map = FeatureMap::new(s, stats.clone(), vocabulary);
        let mut e = map.encoder(&columns()).unwrap();
        assert_eq!(map.dim, 5);
        assert_eq!(e.encode(&unseen, &mut out), Ok(2));
        assert_eq!(out, vec![(3, 1.0)]);

        // Hashing: keys below 2^bits, sorted, colliding features summed (1 bit: 2 keys).
        let s = spec(1, Some(1));
        let map = FeatureMap::new(s, stats, vec![vec![]; 3]);
        let mut e = map.encoder(&columns()).unwrap();
        assert_eq!(map.dim, 2);
        assert_eq!(e.encode(&row, &mut out), Ok(0));
        assert!(out.len() <= 2 && out.windows(2).all(|w| w[0].0 < w[1].0));
        let total: f32 = out.iter().map(|f| f.1).sum();
        assert_eq!(
            total,
            2.0 + 3.0,
            "x standardised (2) and three one-hot features"
        );
    }

    #[test]
    fn an_encoder_needs_every_column_the_map_reads() {
        let map = FeatureMap::new(
            spec(1, None),
            vec![NumericStats::default()],
            vec![vec![]; 3],
        );
        let e = map.encoder(&["a".to_string(), "x".to_string()]);
        assert_eq!(
            e.err().as_deref(),
            Some("the feature map needs column 'b', which rows lack")
        );
    }

    #[test]
    fn date_parts_follow_the_calendar() {
        let p = |s: &str, part| date_part("d", s, part);
        assert_eq!(p("1970-01-01", DatePart::Dow), Ok(3)); // a Thursday (0 = Monday)
        #[cfg(feature = "parquet")]
        for (y, m, d) in [
            (1970, 1, 1),
            (2000, 2, 29),
            (1969, 12, 31),
            (2013, 3, 1),
            (1600, 1, 1),
        ] {
            assert_eq!(civil_from_days(days_from_civil(y, m, d)), (y, m, d));
        }
        assert_eq!(p("2013-01-01T05:15", DatePart::Dow), Ok(1)); // a Tuesday
        assert_eq!(p("2024-02-29 23:59:10", DatePart::Hour), Ok(23));
        assert_eq!(p("2000-03-01", DatePart::Dow), Ok(2)); // a Wednesday
        assert_eq!(p("2013-12-31T07:00Z", DatePart::Month), Ok(12));
        for bad in [
            "2013-02-29",
            "2013-13-01",
            "2013-1-01",
            "2013-01-01T24:00",
            "2013-01-01X",
            "yesterday",
            "",
        ] {
            assert!(p(bad, DatePart::Day).is_err(), "{bad}");
        }
    }
}
