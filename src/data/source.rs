//! Where a reader's bytes come from: compression, a worker's byte range of a file, and line
//! numbers for errors.
//!
//! A plain file is cut into `W` byte ranges; worker `i` reads the lines that *start* in its
//! range (it skips the partial line at its range's start and reads past its end to finish its
//! last line), as Hadoop's text input does. No worker reads the whole file. A compressed file
//! cannot be cut: every worker decompresses it whole.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use super::DataError;

/// Which part of a file a worker reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    /// This worker's index.
    pub index: usize,
    /// Number of workers.
    pub count: usize,
}

impl Part {
    /// The whole file.
    pub const WHOLE: Part = Part { index: 0, count: 1 };

    /// This part's byte range `[start, end)` of a file of `size` bytes.
    pub fn range(&self, size: u64) -> (u64, u64) {
        let (i, n) = (self.index as u64, self.count.max(1) as u64);
        (size * i / n, size * (i + 1) / n)
    }
}

/// Opens the input file `path` for reading; anything but a regular file (a FIFO, a pipe such
/// as `<(cat x)`, a directory, a device) is an error at once. Opening a FIFO without a writer
/// would block forever, and inputs are read by byte ranges and more than once, which a stream
/// cannot give: such data must be saved to a file first. The open itself does not block (it
/// is non-blocking, and the type is checked on what was opened).
/// The files an input is made of: the file itself, or a directory's files (a table's part
/// files), in name order, hidden ones skipped.
pub fn input_parts(path: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut parts = Vec::new();
    for entry in std::fs::read_dir(path)? {
        let p = entry?.path();
        let hidden = p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if !hidden && p.is_file() {
            parts.push(p);
        }
    }
    parts.sort();
    Ok(parts)
}

pub fn open_input(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if kind.is_file() {
        // Regular files ignore O_NONBLOCK; clear it all the same, for what reads the file.
        // SAFETY: fcntl on a descriptor this function owns, with plain integer arguments.
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
        return Ok(file);
    }
    let what = crate::atomic::kind_name(kind);
    Err(std::io::Error::other(format!(
        "{what}, not a regular file: gradflow reads its inputs by byte ranges and more than \
         once, so a stream must be saved to a file first"
    )))
}

/// The whole of the input file `path` ([`open_input`]).
pub fn read_input(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open_input(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The whole of the input file `path` ([`open_input`]) as UTF-8 text.
pub fn read_input_text(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read_input(path)?)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// An error opening or reading `path`.
pub fn open_error(path: &Path, e: impl std::fmt::Display) -> DataError {
    DataError {
        file: path.to_path_buf(),
        line: 0,
        column: 0,
        message: format!("cannot read: {e}"),
    }
}

/// Whether `path` is gzip or zstd (by its first bytes).
pub fn compression(path: &Path) -> Result<Option<&'static str>, DataError> {
    let mut magic = [0u8; 4];
    let mut f = open_input(path).map_err(|e| open_error(path, e))?;
    let n = f.read(&mut magic).map_err(|e| open_error(path, e))?;
    Ok(match &magic[..n] {
        [0x1f, 0x8b, ..] => Some("gzip"),
        [0x28, 0xb5, 0x2f, 0xfd] => Some("zstd"),
        _ => None,
    })
}

/// The file's bytes from the start, decompressed.
pub fn open_stream(path: &Path) -> Result<Box<dyn BufRead>, DataError> {
    let file = open_input(path).map_err(|e| open_error(path, e))?;
    let raw = BufReader::with_capacity(1 << 16, file);
    Ok(match compression(path)? {
        Some("gzip") => Box::new(BufReader::with_capacity(
            1 << 16,
            flate2::bufread::MultiGzDecoder::new(raw),
        )),
        Some(_) => Box::new(BufReader::with_capacity(
            1 << 16,
            ruzstd::decoding::StreamingDecoder::new(raw).map_err(|e| open_error(path, e))?,
        )),
        None => Box::new(raw),
    })
}

/// The 1-based line on which byte `offset` of the (decompressed) file lies; only errors pay
/// for counting.
pub fn line_of(path: &Path, offset: u64) -> Result<usize, DataError> {
    let breaks = count_byte(open_stream(path)?.take(offset), b'\n', path)?;
    Ok(1 + breaks as usize)
}

/// How many times `byte` occurs in what `from` (reading `path`) yields.
pub fn count_byte(mut from: impl Read, byte: u8, path: &Path) -> Result<u64, DataError> {
    let mut buf = vec![0u8; 1 << 16];
    let mut count = 0u64;
    loop {
        let n = from.read(&mut buf).map_err(|e| open_error(path, e))?;
        if n == 0 {
            return Ok(count);
        }
        count += buf[..n].iter().filter(|&&b| b == byte).count() as u64;
    }
}

/// A plain file opened at the first line that starts at or after `start`, and that line's
/// offset.
pub fn open_at_line(path: &Path, start: u64) -> Result<(BufReader<File>, u64), DataError> {
    let file = open_input(path).map_err(|e| open_error(path, e))?;
    let mut file = BufReader::with_capacity(1 << 16, file);
    if start == 0 {
        return Ok((file, 0));
    }
    // A line starts right after a line break.
    file.seek(SeekFrom::Start(start - 1))
        .map_err(|e| open_error(path, e))?;
    let mut skipped = Vec::new();
    let n = file
        .read_until(b'\n', &mut skipped)
        .map_err(|e| open_error(path, e))?;
    Ok((file, start - 1 + n as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_a_file_once_and_lines_start_in_one_part() {
        for size in [0u64, 1, 7, 100, 1001] {
            for count in 1..5 {
                let ranges: Vec<_> = (0..count)
                    .map(|index| Part { index, count }.range(size))
                    .collect();
                assert_eq!(ranges[0].0, 0);
                assert_eq!(ranges[count - 1].1, size);
                assert!(ranges.windows(2).all(|w| w[0].1 == w[1].0));
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, "ab\ncd\n\nefg").unwrap();
        // From inside a line: the next line; from a line's first byte: that line.
        let at = |s| open_at_line(&path, s).unwrap().1;
        assert_eq!(
            [at(0), at(1), at(3), at(4), at(6), at(7), at(9)],
            [0, 3, 3, 6, 6, 7, 10]
        );
        assert_eq!(line_of(&path, 7).unwrap(), 4);
    }
}
