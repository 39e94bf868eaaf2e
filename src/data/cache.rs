//! A cache of each worker's loaded rows (`data.cache = "DIR"`), as Vowpal Wabbit keeps one:
//! the first run parses the text and writes what every worker loaded in a binary form; later
//! runs of the same job read it back at memory speed instead of parsing again.
//!
//! One file per worker (`worker-III-of-NNN.gfcache`), little-endian:
//!
//! ```text
//! "GFCACHE2"  key u64  dim u32  ignored_test_features u64
//! features: len u64 (u64::MAX: none), UTF-8 bytes
//! notes:    count u32, then per note len u32, UTF-8 bytes
//! train, then test:  dim u32  rows u64  nnz u64  zeros up to a multiple of 8 bytes
//!                    row_ptr [u64; rows + 1]  indices [u32; nnz]  values [f32; nnz]
//!                    labels [f32; rows]
//! xxh3-64 of every byte before it (u64)
//! ```
//!
//! The key is the caller's fingerprint of everything the rows depend on (the job's data
//! section, the input files' sizes and times, the worker's place); a file with another key is
//! stale. A cache file is input like any other: every count is checked against the bytes left
//! before anything is allocated, and every row against the dimension (keys ascending and
//! below it, values and labels finite), and the whole file against its checksum, so a damaged
//! file (a flipped bit in a value included) is an error naming it, never a panic or a model
//! trained on garbage; the run then loads its inputs again and rewrites the cache.
//!
//! A file is read in place: it is memory-mapped and the arrays are aligned in it, so the
//! datasets' [`Column`]s are the page cache's pages and loading copies nothing. The check
//! reads every page once, and training reads them again. One-hot rows' values (all 1) are
//! stored all the same: leaving them out made the files 43% smaller (74 instead of 130 MB per
//! worker for a 2M-row set with two workers), but they then had to be made in fresh memory at
//! every load, which took longer than all the rest (0.06 instead of 0.02 s with one worker).
//!
//! A cache file must not be changed while a run reads it: [`write`] never does (it renames a
//! new file over the old one, which leaves a mapped file as it was), but another program
//! writing into it in place could make the run fail (a truncated map is a bus error) or,
//! after the check, read keys the check never saw (an index beyond the model stops the run
//! with a panic, never a read outside it).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use super::column::Word;
use super::{Column, Dataset};
use crate::le::{get_le, put_le};

const MAGIC: &[u8; 8] = b"GFCACHE3";

/// Arrays move through a buffer of this many bytes (a multiple of every word size).
const CHUNK: usize = 1 << 20;

/// What one worker loaded: its rows and what the run reports about them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedRows {
    /// The model's number of features (the intercept included).
    pub dim: u32,
    /// Training rows.
    pub train: Dataset,
    /// Test rows.
    pub test: Dataset,
    /// Features of a separate test file beyond the training dimension, ignored.
    pub ignored_test_features: u64,
    /// The feature map of a table job (TOML).
    pub features: Option<String>,
    /// Notes for the user.
    pub notes: Vec<String>,
}

/// Why a cache file was not used.
#[derive(Clone, Debug, PartialEq)]
pub enum Miss {
    /// There is no file.
    Absent,
    /// The file was written for another job, other input files or another worker layout.
    Stale,
    /// The file cannot be read or is damaged: the error, naming the file.
    Damaged(String),
}

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Miss::Absent => write!(f, "no cache yet"),
            Miss::Stale => write!(
                f,
                "the cache was written for another job, other input files or another build of \
                 gradflow"
            ),
            Miss::Damaged(e) => write!(f, "{e}"),
        }
    }
}

/// The cache file of worker `worker` of `workers` in `dir`.
pub fn path(dir: &Path, worker: usize, workers: usize) -> PathBuf {
    dir.join(format!("worker-{worker:03}-of-{workers:03}.gfcache"))
}

/// Writes `rows` under `key` to `path`, through a temporary file renamed into place (a reader
/// never sees half a file). Returns the bytes written.
pub fn write(path: &Path, key: u64, rows: &CachedRows) -> std::io::Result<u64> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut out = Writer {
        file: File::create(&tmp)?,
        buf: Vec::with_capacity(CHUNK + 64),
        written: 0,
        hash: xxhash_rust::xxh3::Xxh3::new(),
    };
    out.put(MAGIC)?;
    out.put(&key.to_le_bytes())?;
    out.put(&rows.dim.to_le_bytes())?;
    out.put(&rows.ignored_test_features.to_le_bytes())?;
    match &rows.features {
        Some(f) => {
            out.put(&(f.len() as u64).to_le_bytes())?;
            out.put(f.as_bytes())?;
        }
        None => out.put(&u64::MAX.to_le_bytes())?,
    }
    out.put(&(rows.notes.len() as u32).to_le_bytes())?;
    for note in &rows.notes {
        out.put(&(note.len() as u32).to_le_bytes())?;
        out.put(note.as_bytes())?;
    }
    for d in [&rows.train, &rows.test] {
        out.put(&d.dim.to_le_bytes())?;
        out.put(&(d.rows() as u64).to_le_bytes())?;
        out.put(&(d.nnz() as u64).to_le_bytes())?;
        out.align(8)?;
        out.words(&d.row_ptr, |p| (p as u64).to_le_bytes())?;
        out.words(&d.indices, u32::to_le_bytes)?;
        out.words(&d.values, f32::to_le_bytes)?;
        out.words(&d.labels, f32::to_le_bytes)?;
    }
    out.flush()?;
    let digest = out.hash.digest();
    out.file.write_all(&digest.to_le_bytes())?;
    let written = out.written + 8;
    drop(out);
    std::fs::rename(&tmp, path).inspect_err(|_| {
        std::fs::remove_file(&tmp).ok();
    })?;
    Ok(written)
}

/// Reads the cache file `path` if it was written under `key`, in place (see the module docs).
pub fn read(path: &Path, key: u64) -> Result<CachedRows, Miss> {
    let damaged = |e: std::io::Error| Miss::Damaged(format!("{}: {e}", path.display()));
    // A FIFO or a device in the cache's place would block `open` or be no file to map.
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Miss::Absent),
        Err(e) => return Err(damaged(e)),
        Ok(m) if !m.is_file() => {
            return Err(Miss::Damaged(format!(
                "{}: not a regular file",
                path.display()
            )))
        }
        Ok(_) => {}
    }
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Miss::Absent),
        Err(e) => return Err(damaged(e)),
    };
    // SAFETY: the map is only read, and cache files are replaced by renaming, never written
    // in place (the module docs say what another program writing into one can do).
    let map = Arc::new(unsafe { Mmap::map(&file) }.map_err(damaged)?);
    let end = map.len().saturating_sub(8);
    let mut r = Reader {
        map,
        path,
        at: 0,
        end,
    };
    if r.bytes(8).map_err(Miss::Damaged)? != MAGIC {
        return Err(Miss::Damaged(r.error(0, "not a gradflow cache file")));
    }
    if r.u64().map_err(Miss::Damaged)? != key {
        return Err(Miss::Stale);
    }
    let stored = u64::from_le_bytes(r.map[end..].try_into().expect("8 bytes"));
    if xxhash_rust::xxh3::xxh3_64(&r.map[..end]) != stored {
        return Err(Miss::Damaged(r.error(
            end,
            "the checksum does not match the content (the file was changed or damaged)",
        )));
    }
    read_body(&mut r).map_err(Miss::Damaged)
}

fn read_body(r: &mut Reader) -> Result<CachedRows, String> {
    let dim = r.u32()?;
    let ignored_test_features = r.u64()?;
    let features = match r.u64()? {
        u64::MAX => None,
        n => Some(r.text(n)?),
    };
    let count = r.u32()?;
    let mut notes = Vec::new();
    for _ in 0..count {
        let n = r.u32()?;
        notes.push(r.text(n as u64)?);
    }
    let train = r.dataset(dim)?;
    let test = r.dataset(dim)?;
    if r.at != r.end {
        return Err(r.error(r.at, "trailing bytes"));
    }
    Ok(CachedRows {
        dim,
        train,
        test,
        ignored_test_features,
        features,
        notes,
    })
}

/// Whether every row `row_ptr` delimits in `indices` has ascending keys below `dim`.
///
/// A branch-free fold over the whole array instead of a loop per row: the keys descend (or
/// repeat) exactly where a row starts and the previous row's last key is not below its
/// first, so the rows ascend when the descents counted over the whole array are those counted
/// at row starts; then each row's last key is its largest.
fn rows_hold(row_ptr: &[usize], indices: &[u32], dim: u32) -> bool {
    let (first, last) = (row_ptr[0], row_ptr[row_ptr.len() - 1]);
    let keys = &indices[first..last];
    // (counted in u32 lanes, 64k pairs at a time: four compares per SSE2 instruction)
    let (before, after) = (
        keys.get(..keys.len().saturating_sub(1)).unwrap_or(&[]),
        keys.get(1..).unwrap_or(&[]),
    );
    let descents: u64 = before
        .chunks(1 << 16)
        .zip(after.chunks(1 << 16))
        .map(|(a, b)| a.iter().zip(b).fold(0u32, |n, (x, y)| n + (x >= y) as u32) as u64)
        .sum();
    // Per nonempty row: a descent at its start, and its last key (its largest, once the rows
    // ascend) at or beyond the dimension.
    let (mut at_starts, mut beyond) = (0u64, 0u64);
    for w in row_ptr.windows(2).filter(|w| w[0] < w[1]) {
        at_starts += (w[0] > first && indices[w[0] - 1] >= indices[w[0]]) as u64;
        beyond += (indices[w[1] - 1] >= dim) as u64;
    }
    descents == at_starts && beyond == 0
}

struct Writer {
    file: File,
    buf: Vec<u8>,
    written: u64,
    /// The checksum of every byte written so far.
    hash: xxhash_rust::xxh3::Xxh3,
}

impl Writer {
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes `items` as little-endian words, a chunk at a time.
    fn words<T: Copy, const N: usize>(
        &mut self,
        items: &[T],
        bytes: impl Fn(T) -> [u8; N] + Copy,
    ) -> std::io::Result<()> {
        for chunk in items.chunks(CHUNK / N) {
            put_le(&mut self.buf, chunk, bytes);
            self.flush()?;
        }
        Ok(())
    }

    /// Zeros up to the next multiple of `n` bytes, so that the words after are aligned in
    /// the file (and in its memory map, which starts on a page).
    fn align(&mut self, n: u64) -> std::io::Result<()> {
        let at = self.written + self.buf.len() as u64;
        let pad = (n - at % n) % n;
        self.put(&vec![0; pad as usize])
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.write_all(&self.buf)?;
        self.hash.update(&self.buf);
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }
}

struct Reader<'a> {
    map: Arc<Mmap>,
    path: &'a Path,
    /// Bytes read so far.
    at: usize,
    /// Where the content ends and its checksum starts.
    end: usize,
}

impl Reader<'_> {
    fn error(&self, at: usize, what: &str) -> String {
        format!("{}: byte {at}: {what}", self.path.display())
    }

    /// The next `n` bytes, if they are there.
    fn take(&mut self, n: Option<usize>, what: &str) -> Result<std::ops::Range<usize>, String> {
        match n {
            Some(n) if n <= self.end - self.at => {
                self.at += n;
                Ok(self.at - n..self.at)
            }
            _ => Err(self.error(self.at, &format!("{what} runs past the end of the file"))),
        }
    }

    fn bytes(&mut self, n: usize) -> Result<&[u8], String> {
        let at = self.take(Some(n), "a field")?;
        Ok(&self.map[at])
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().expect("4")))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().expect("8")))
    }

    fn text(&mut self, n: u64) -> Result<String, String> {
        let at = self.at;
        let range = self.take(usize::try_from(n).ok(), "a text")?;
        String::from_utf8(self.map[range].to_vec())
            .map_err(|_| self.error(at, "a text is not UTF-8"))
    }

    /// Zeros up to a multiple of `n` bytes (see [`Writer::align`]).
    fn align(&mut self, n: usize) -> Result<(), String> {
        let at = self.at;
        match self.bytes((n - at % n) % n)?.iter().all(|&b| b == 0) {
            true => Ok(()),
            false => Err(self.error(at, "padding that is not zeros")),
        }
    }

    /// `count` little-endian words of `N` bytes, read in place where they are this target's
    /// `T`s (a little-endian target; `N` bytes wide, as a `usize` row offset is only where it
    /// is 64 bits), converted by `read` into a vector otherwise.
    fn words<T: Word, const N: usize>(
        &mut self,
        count: u64,
        read: impl Fn([u8; N]) -> T,
        what: &str,
    ) -> Result<Column<T>, String> {
        let n = usize::try_from(count).ok().and_then(|c| c.checked_mul(N));
        let range = self.take(n, what)?;
        let count = range.len() / N;
        let native = cfg!(target_endian = "little") && std::mem::size_of::<T>() == N;
        let mapped = native.then(|| Column::mapped(&self.map, range.start, count));
        Ok(match mapped.flatten() {
            Some(c) => c,
            None => {
                let mut v = Vec::with_capacity(count);
                get_le(&self.map[range], &mut v, read);
                v.into()
            }
        })
    }

    /// One dataset of dimension `dim`, every row checked.
    fn dataset(&mut self, dim: u32) -> Result<Dataset, String> {
        let at = self.at;
        let (d, rows, nnz) = (self.u32()?, self.u64()?, self.u64()?);
        if d != dim {
            return Err(self.error(at, &format!("a dimension of {d} in a cache of {dim}")));
        }
        self.align(8)?;
        let ptr_at = self.at;
        let offset = |b| usize::try_from(u64::from_le_bytes(b)).unwrap_or(usize::MAX);
        let row_ptr = self.words(rows.saturating_add(1), offset, "row offsets")?;
        let rises = row_ptr.windows(2).fold(true, |ok, w| ok & (w[0] <= w[1]));
        if row_ptr[0] != 0 || row_ptr.last() != usize::try_from(nnz).ok().as_ref() || !rises {
            return Err(self.error(ptr_at, "row offsets must rise from 0 to the nonzeros"));
        }
        let keys_at = self.at;
        let indices: Column<u32> = self.words(nnz, u32::from_le_bytes, "keys")?;
        let values = self.words(nnz, f32::from_le_bytes, "values")?;
        let labels: Column<f32> = self.words(rows, f32::from_le_bytes, "labels")?;
        if !rows_hold(&row_ptr, &indices, dim) {
            let bad = row_ptr
                .windows(2)
                .position(|w| !rows_hold(w, &indices, dim));
            let i = bad.expect("a row that does not hold");
            return Err(self.error(
                keys_at + 4 * row_ptr[i],
                &format!("row {i}: keys must ascend and be below the dimension {dim}"),
            ));
        }
        let finite = |v: &[f32]| v.iter().fold(true, |ok, x| ok & x.is_finite());
        if !finite(&values) || !finite(&labels) {
            return Err(self.error(keys_at, "a value or label is not finite"));
        }
        Ok(Dataset {
            dim,
            row_ptr,
            indices,
            values,
            labels,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(ones: bool) -> CachedRows {
        let mut train = Dataset::new(9);
        train.push_row(&[1, 4, 8], &[1.0, if ones { 1.0 } else { -2.5 }, 1.0], 1.0);
        train.push_row(&[], &[], 0.0);
        train.push_row(&[0, 8], &[1.0, 1.0], 1.0);
        let mut test = Dataset::new(9);
        test.push_row(&[3, 8], &[1.0, 1.0], 0.0);
        CachedRows {
            dim: 9,
            train,
            test,
            ignored_test_features: 3,
            features: Some("dim = 9\n".into()),
            notes: vec!["a note".into(), String::new()],
        }
    }

    #[test]
    fn rows_round_trip_read_in_place() {
        let dir = tempfile::tempdir().unwrap();
        for ones in [true, false] {
            let p = path(dir.path(), 1, 2);
            let rows = sample(ones);
            let written = write(&p, 42, &rows).unwrap();
            assert_eq!(written, std::fs::metadata(&p).unwrap().len());
            let read = read(&p, 42).unwrap();
            assert_eq!(read, rows);
            if cfg!(target_endian = "little") && usize::BITS == 64 {
                for d in [&read.train, &read.test] {
                    assert!(d.row_ptr.is_mapped() && d.indices.is_mapped());
                    assert!(d.values.is_mapped() && d.labels.is_mapped());
                }
            }
        }
        let mut none = sample(true);
        none.features = None;
        none.notes.clear();
        let p = dir.path().join("none");
        write(&p, 1, &none).unwrap();
        assert_eq!(read(&p, 1), Ok(none));
    }

    #[test]
    fn a_fifo_or_a_directory_in_the_cache_s_place_is_damaged_and_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string naming a path in our own temporary directory.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for p in [fifo, dir.path().to_path_buf()] {
            assert!(
                matches!(read(&p, 1), Err(Miss::Damaged(e)) if e.contains("not a regular file"))
            );
        }
    }

    #[test]
    fn rows_read_in_place_outlive_a_rewrite_of_their_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), 0, 1);
        write(&p, 1, &sample(false)).unwrap();
        let before = read(&p, 1).unwrap();
        let mut other = sample(false);
        other.train.indices[0] = 2;
        write(&p, 1, &other).unwrap();
        assert_eq!(before, sample(false), "renamed over, not written in place");
        assert_eq!(read(&p, 1), Ok(other));
    }

    #[test]
    fn padding_that_is_not_zeros_is_damage() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c");
        write(&p, 1, &sample(false)).unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        // magic, key, dim, ignored (28); features (8 + 8); notes (4 + 4 + 6 + 4); the training
        // set's dim, rows and nonzeros (20): 82, then zeros up to 88.
        assert_eq!(&bytes[82..88], &[0; 6]);
        bytes[85] = 1;
        // (the checksum made right again, to reach the padding's own check)
        let end = bytes.len() - 8;
        let sum = xxhash_rust::xxh3::xxh3_64(&bytes[..end]);
        bytes[end..].copy_from_slice(&sum.to_le_bytes());
        std::fs::write(&p, &bytes).unwrap();
        assert!(
            matches!(read(&p, 1), Err(Miss::Damaged(e)) if e.contains("byte 82: padding")),
            "{:?}",
            read(&p, 1)
        );
    }

    #[test]
    fn another_key_is_stale_and_no_file_is_absent() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), 0, 1);
        assert_eq!(read(&p, 1), Err(Miss::Absent));
        write(&p, 1, &sample(false)).unwrap();
        assert_eq!(read(&p, 2), Err(Miss::Stale));
        // no temporary file is left behind
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_key_beyond_the_dimension_or_out_of_order_names_its_row_and_byte() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c");
        for (keys, row) in [([1u32, 4, 9], "row 0"), ([4, 1, 8], "row 0")] {
            let mut rows = sample(false);
            rows.train.indices[..3].copy_from_slice(&keys);
            write(&p, 5, &rows).unwrap();
            let Err(Miss::Damaged(e)) = read(&p, 5) else {
                panic!("accepted keys {keys:?}")
            };
            assert!(
                e.contains(row) && e.contains("byte ") && e.contains("c:"),
                "{e}"
            );
        }
        let mut rows = sample(false);
        rows.test.labels[0] = f32::NAN;
        write(&p, 5, &rows).unwrap();
        assert!(matches!(read(&p, 5), Err(Miss::Damaged(e)) if e.contains("not finite")));
    }

    /// Every single flipped bit after the key (in a value, a label, an offset, the checksum)
    /// is refused: a damaged cache is never trained on.
    #[test]
    fn every_single_bit_flip_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c");
        write(&p, 7, &sample(false)).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        for bit in 16 * 8..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            std::fs::write(&p, &flipped).unwrap();
            assert!(matches!(read(&p, 7), Err(Miss::Damaged(_))), "bit {bit}");
        }
    }

    proptest! {
        /// Any truncation and any flipped bit after the key is an error (the checksum catches
        /// a flipped value or offset that would give other valid rows): never a panic, never
        /// a huge allocation (the counts are checked against the bytes left).
        #[test]
        fn damage_is_an_error_not_a_panic(cut in 0usize..400, flip in 16usize..400, bit in 0u8..8) {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("c");
            write(&p, 7, &sample(false)).unwrap();
            let bytes = std::fs::read(&p).unwrap();
            let cut = cut % bytes.len();
            std::fs::write(&p, &bytes[..cut]).unwrap();
            prop_assert!(matches!(read(&p, 7), Err(Miss::Damaged(_))));
            let mut flipped = bytes.clone();
            flipped[16 + flip % (bytes.len() - 16)] ^= 1 << bit;
            std::fs::write(&p, &flipped).unwrap();
            prop_assert!(matches!(read(&p, 7), Err(Miss::Damaged(_))));
        }
    }
}
