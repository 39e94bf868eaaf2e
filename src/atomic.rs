//! Outputs that are whole or absent, and that respect what they replace. Every file gradflow
//! writes (model files, feature maps, prepared parts, checkpoints, generated data, predictions,
//! metrics) goes through [`target`]: the name must be missing or a regular file (a symlink is
//! followed to the regular file it names, which is replaced; the link stays). A device node, a
//! FIFO, a socket or a directory is refused, so `--model-out /dev/null` can never turn
//! `/dev/null` into a file. Files a later run reads are written to a temporary file in the
//! same directory (created exclusively, never through a link), synced, and renamed over the
//! target, and the directory is synced: a full disk or a kill leaves either the old file or
//! the new one, never a fragment, and the temporary file (`.NAME.PID.tmp`) is removed on every
//! failure. [`refuse_inputs`] keeps an output from naming one of the run's own inputs.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

fn invalid(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, why)
}

/// What `path` names when it is written: `path` itself when it is missing or a regular file,
/// the regular file a symlink leads to; an error for anything else.
pub fn target(path: &Path) -> std::io::Result<PathBuf> {
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(path.to_path_buf()),
        other => other?,
    };
    let (resolved, meta) = if meta.file_type().is_symlink() {
        let real = std::fs::canonicalize(path).map_err(|e| {
            invalid(format!(
                "a symbolic link to nothing that can be written ({e})"
            ))
        })?;
        let meta = std::fs::metadata(&real)?;
        (real, meta)
    } else {
        (path.to_path_buf(), meta)
    };
    if meta.file_type().is_file() {
        return Ok(resolved);
    }
    Err(invalid(format!(
        "is {}{}: gradflow writes only regular files (or new ones), so that an output \
         never replaces what is not a file",
        kind_name(meta.file_type()),
        if resolved != path {
            format!(" (through the link to {})", resolved.display())
        } else {
            String::new()
        }
    )))
}

/// Refuses an output that is one of the run's inputs (the same file, by device and inode,
/// whatever the names): `--model-out` naming the training data would overwrite it.
/// `output` is named by `field` in the error.
pub fn refuse_inputs<'a>(
    field: &str,
    output: &Path,
    inputs: impl IntoIterator<Item = &'a Path>,
) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let Ok(out) = std::fs::metadata(output) else {
        return Ok(());
    };
    for input in inputs {
        if let Ok(inp) = std::fs::metadata(input) {
            if (inp.dev(), inp.ino()) == (out.dev(), out.ino()) {
                return Err(format!(
                    "{field}: {} is an input of this run ({}): an output never replaces an input",
                    output.display(),
                    input.display()
                ));
            }
        }
    }
    Ok(())
}

/// A file being written; it appears under its name at [`AtomicFile::commit`].
pub struct AtomicFile {
    path: PathBuf,
    tmp: PathBuf,
    file: Option<BufWriter<File>>,
}

impl AtomicFile {
    /// Starts writing `path` (its directory must exist; see [`target`] for what it may be).
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let path = target(path)?;
        let name = path
            .file_name()
            .ok_or_else(|| invalid("not a file name".into()))?;
        let tmp = path.with_file_name(format!(
            ".{}.{}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        // A stale temporary file of a dead process with our pid, or a link planted there, is
        // removed, never written through.
        let _ = std::fs::remove_file(&tmp);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        Ok(AtomicFile {
            path,
            tmp,
            file: Some(BufWriter::with_capacity(1 << 16, file)),
        })
    }

    /// Flushes, syncs and renames the file into place, then syncs its directory. On failure
    /// the temporary file is removed and the old file, if any, stays.
    pub fn commit(mut self) -> std::io::Result<()> {
        let file = self.file.take().expect("committed once");
        let placed = file
            .into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_all())
            .and_then(|()| std::fs::rename(&self.tmp, &self.path));
        if let Err(e) = placed {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(e);
        }
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        File::open(dir).and_then(|d| d.sync_all())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.as_mut().expect("not committed").write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.as_mut().expect("not committed").flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Writes `bytes` to `path` whole or not at all.
pub fn write(path: &Path, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes.as_ref())?;
    f.commit()
}

/// Creates `path`'s directory if it is missing.
pub fn create_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir),
        _ => Ok(()),
    }
}

/// What a file that is not a regular file is, for an error message.
pub fn kind_name(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_file() {
        "a regular file"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a pipe or FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else {
        "a device"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    #[test]
    fn a_file_appears_only_when_committed_and_no_temporary_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.txt");
        std::fs::write(&p, "old").unwrap();
        let mut f = AtomicFile::create(&p).unwrap();
        f.write_all(b"new, half").unwrap();
        drop(f); // a failure before the commit
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old");
        write(&p, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file is left");
    }

    #[test]
    fn outputs_refuse_what_is_not_a_regular_file_and_follow_links_to_one() {
        let dir = tempfile::tempdir().unwrap();
        // A device (checked, never opened), a directory and a FIFO are refused by name.
        let e = AtomicFile::create(Path::new("/dev/null")).err().unwrap();
        assert!(e.to_string().contains("is a device"), "{e}");
        assert!(std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device());
        let e = AtomicFile::create(dir.path()).err().unwrap();
        assert!(e.to_string().contains("is a directory"), "{e}");
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        assert!(write(&fifo, "x")
            .unwrap_err()
            .to_string()
            .contains("is a pipe or FIFO"));
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        // A link to a FIFO is refused too; a link to a regular file replaces the file, and
        // the link stays a link.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        let e = write(&link, "x").unwrap_err().to_string();
        assert!(e.contains("is a pipe or FIFO (through the link to"), "{e}");
        let real = dir.path().join("real.txt");
        std::fs::write(&real, "old").unwrap();
        let to_real = dir.path().join("to-real");
        std::os::unix::fs::symlink(&real, &to_real).unwrap();
        write(&to_real, "new").unwrap();
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
        assert!(std::fs::symlink_metadata(&to_real)
            .unwrap()
            .file_type()
            .is_symlink());
        // A dangling link is refused, and nothing is left behind by any refusal.
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("missing/x"), &dangling).unwrap();
        assert!(write(&dangling, "x").is_err());
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["dangling", "fifo", "link", "real.txt", "to-real"]);
    }

    #[test]
    fn an_output_that_is_an_input_is_refused_whatever_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("train.svm");
        std::fs::write(&data, "1 1:1\n").unwrap();
        let other_name = dir.path().join("alias");
        std::fs::hard_link(&data, &other_name).unwrap();
        let e = refuse_inputs("output.model", &other_name, [data.as_path()]).unwrap_err();
        assert!(
            e.starts_with("output.model: ") && e.contains("is an input of this run"),
            "{e}"
        );
        let fresh = dir.path().join("model.txt");
        assert!(refuse_inputs("output.model", &fresh, [data.as_path()]).is_ok());
    }
}
