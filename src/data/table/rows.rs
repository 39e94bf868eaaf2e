//! The prepared rows' binary format (`gradflow data prepare`): little-endian, loaded with one
//! read and no parsing of text.
//!
//! ```text
//! "GFROWS2\n"  dim u32  rows u64
//! per row: id u64  test u8  label f32  nnz u32  keys [u32; nnz]  values [f32; nnz]
//! xxh3-64 of every byte before, u64
//! ```
//!
//! A file is written whole or not at all ([`crate::atomic`]); a cut or damaged one is an error.
//! Version 1 files (`GFROWS1`, no checksum) are still read.

use std::path::Path;

/// One prepared row: what `gradflow data prepare` writes, and what a program's dataflow hands
/// the training loop ([`crate::dataflow::Training::gradient_on`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PreparedRow {
    /// Its id: the byte offset of its record in the (decompressed) source file.
    pub id: u64,
    /// A test row.
    pub test: bool,
    /// Its label.
    pub label: f32,
    /// Sorted feature keys.
    pub keys: Vec<u32>,
    /// Their values.
    pub values: Vec<f32>,
}

const MAGIC: &[u8; 8] = b"GFROWS2\n";
const MAGIC_V1: &[u8; 8] = b"GFROWS1\n";

/// Writes `rows` (of a map of dimension `dim`) to `path`.
pub fn write_rows(path: &Path, dim: u32, rows: &[PreparedRow]) -> std::io::Result<()> {
    let mut b = Vec::new();
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&dim.to_le_bytes());
    b.extend_from_slice(&(rows.len() as u64).to_le_bytes());
    for r in rows {
        b.extend_from_slice(&r.id.to_le_bytes());
        b.push(r.test as u8);
        b.extend_from_slice(&r.label.to_le_bytes());
        b.extend_from_slice(&(r.keys.len() as u32).to_le_bytes());
        r.keys
            .iter()
            .for_each(|k| b.extend_from_slice(&k.to_le_bytes()));
        r.values
            .iter()
            .for_each(|v| b.extend_from_slice(&v.to_le_bytes()));
    }
    let sum = xxhash_rust::xxh3::xxh3_64(&b);
    b.extend_from_slice(&sum.to_le_bytes());
    crate::atomic::write(path, b)
}

/// Reads a file written by [`write_rows`]: `(dim, rows)`. Every count is checked against the
/// bytes that remain, and every key against `dim`.
pub fn read_rows(path: &Path) -> Result<(u32, Vec<PreparedRow>), String> {
    let bytes =
        crate::data::source::read_input(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_rows(&bytes, path)
}

/// Parses the bytes of a rows file; `path` names it in errors.
pub fn parse_rows(bytes: &[u8], path: &Path) -> Result<(u32, Vec<PreparedRow>), String> {
    let err = |at: usize, m: &str| format!("{}: byte {at}: {m}", path.display());
    let bytes = match bytes.get(..8) {
        Some(m) if m == MAGIC => {
            let Some(body) = bytes.len().checked_sub(8).map(|n| &bytes[..n]) else {
                return Err(err(0, "truncated"));
            };
            let sum = u64::from_le_bytes(bytes[body.len()..].try_into().expect("8 bytes"));
            if xxhash_rust::xxh3::xxh3_64(body) != sum {
                let m = "the checksum does not match: the file was cut short or damaged";
                return Err(err(body.len(), m));
            }
            body
        }
        Some(m) if m == MAGIC_V1 => bytes,
        _ => return Err(err(0, "not a gradflow rows file")),
    };
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], String> {
        let s = bytes.get(at..at + n).ok_or_else(|| err(at, "truncated"))?;
        at += n;
        Ok(s)
    };
    take(8)?; // the magic, checked above
    let u32_ = |s: &[u8]| u32::from_le_bytes(s.try_into().unwrap());
    let dim = u32_(take(4)?);
    let n = u64::from_le_bytes(take(8)?.try_into().unwrap());
    // A row takes at least 17 bytes: no more rows than the bytes can hold.
    let mut rows = Vec::with_capacity((n as usize).min(bytes.len() / 17));
    for _ in 0..n {
        let id = u64::from_le_bytes(take(8)?.try_into().unwrap());
        let test = match take(1)?[0] {
            0 => false,
            1 => true,
            _ => return Err(err(0, "bad test flag")),
        };
        let label = f32::from_le_bytes(take(4)?.try_into().unwrap());
        let nnz = u32_(take(4)?) as usize;
        let keys: Vec<u32> = take(nnz.checked_mul(4).ok_or_else(|| err(0, "bad count"))?)?
            .chunks_exact(4)
            .map(u32_)
            .collect();
        if keys.iter().any(|&k| k >= dim) || keys.windows(2).any(|w| w[0] >= w[1]) {
            return Err(err(0, "keys must be increasing and below the dimension"));
        }
        let values = take(nnz * 4)?
            .chunks_exact(4)
            .map(|s| f32::from_le_bytes(s.try_into().unwrap()))
            .collect();
        rows.push(PreparedRow {
            id,
            test,
            label,
            keys,
            values,
        });
    }
    if at != bytes.len() {
        return Err(err(at, "trailing bytes"));
    }
    Ok((dim, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_and_damage_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.bin");
        let rows = vec![
            PreparedRow {
                id: 7,
                test: false,
                label: 1.0,
                keys: vec![0, 5],
                values: vec![1.0, -2.5],
            },
            PreparedRow {
                id: 90,
                test: true,
                label: -1.0,
                keys: vec![],
                values: vec![],
            },
        ];
        write_rows(&p, 6, &rows).unwrap();
        assert_eq!(read_rows(&p).unwrap(), (6, rows.clone()));
        let good = std::fs::read(&p).unwrap();
        for cut in 0..good.len() {
            std::fs::write(&p, &good[..cut]).unwrap();
            assert!(read_rows(&p).is_err(), "cut at {cut}");
        }
        for at in 0..good.len() {
            let mut flipped = good.clone();
            flipped[at] ^= 0x10;
            std::fs::write(&p, &flipped).unwrap();
            assert!(read_rows(&p).is_err(), "byte {at} changed");
        }
        write_rows(&p, 5, &rows).unwrap();
        assert!(read_rows(&p).unwrap_err().contains("below the dimension"));
    }
}
