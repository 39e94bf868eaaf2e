//! Command-line overrides of a job's fields (`--set section.field=value`) and the shape of
//! job errors.

use super::*;

/// A message listing the exchanges, with `auto` beside them (it is taken out of the job
/// before the exchange's name is read, so the registry does not list it).
pub(super) fn with_auto(message: &str) -> String {
    let names = crate::exchange::EXCHANGES.names().join(", ");
    message.replace(
        &format!("(expected {names})"),
        &format!("(expected {names}, auto)"),
    )
}

/// `message` with each line cut to [`ERROR_LINE_CHARS`] characters and control characters
/// escaped: a 10 MB value in a job file is not echoed whole.
pub(super) fn clip_lines(message: &str) -> String {
    let lines: Vec<_> = message
        .lines()
        .map(|l| crate::data::clip_to(l, ERROR_LINE_CHARS))
        .collect();
    lines.join("\n")
}

/// The longest line of a job error.
pub(super) const ERROR_LINE_CHARS: usize = 400;

/// Sets `a.b.c = value` in `table`; the value is parsed as TOML, else taken as a string.
pub(super) fn apply_override(table: &mut toml::Table, o: &str) -> Result<(), JobError> {
    let shape = || JobError::Override(o.into(), "expected section.field=value".into());
    let (key, raw) = o.split_once('=').ok_or_else(shape)?;
    let path: Vec<&str> = key.trim().split('.').collect();
    if path.iter().any(|p| p.is_empty()) {
        return Err(shape());
    }
    let raw = raw.trim();
    let value = match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").unwrap(),
        // A number TOML cannot hold (past 2^63 - 1, a float that overflows) is not a string.
        Err(e) if raw.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c)) => {
            let why = e.message().trim_end().to_string();
            return Err(JobError::Override(o.into(), format!("`{raw}`: {why}")));
        }
        Err(_) => toml::Value::String(raw.to_string()),
    };
    let mut cur = table;
    for part in &path[..path.len() - 1] {
        let entry = cur
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = entry
            .as_table_mut()
            .ok_or_else(|| JobError::Override(o.into(), format!("{part} is not a table")))?;
    }
    cur.insert(path[path.len() - 1].to_string(), value);
    Ok(())
}

/// Writes every float of `table` that is an `f32` widened (`lr = 0.01` serializes as
/// 0.009999999776482582) as that `f32`'s shortest decimal, which reads back as the same `f32`.
pub(super) fn shortest_floats(table: &mut toml::Table) {
    fn fix(v: &mut toml::Value) {
        match v {
            toml::Value::Float(x) if (*x as f32) as f64 == *x && x.is_finite() => {
                *x = (*x as f32).to_string().parse().unwrap_or(*x);
            }
            toml::Value::Array(a) => a.iter_mut().for_each(fix),
            toml::Value::Table(t) => t.iter_mut().for_each(|(_, v)| fix(v)),
            _ => {}
        }
    }
    table.iter_mut().for_each(|(_, v)| fix(v));
}
