//! IDX files, the format of MNIST and of the datasets made in its image (Fashion-MNIST, KMNIST,
//! EMNIST): an images file of unsigned bytes, `n × rows × cols`, and a labels file of `n`
//! bytes, each plain, gzip or zstd. A row is an image's nonzero pixels scaled to `(0, 1]`
//! (value / 255), feature `r·cols + c`; its label is the class byte.
//!
//! Layout (LeCun et al., <http://yann.lecun.com/exdb/mnist/>): two zero bytes, the type code
//! (0x08: unsigned byte), the number of dimensions, each dimension as a big-endian u32, then
//! the values in row-major order.

use std::io::Read;
use std::path::Path;

use super::source::{open_error, open_stream};
use super::{not_a_class, DataError, Dataset};

/// Reads the images in `images` with their labels in `labels` into one dataset: `features =
/// rows × cols` at most `max_dim`. With `classes`, a label outside `0..classes` is an error
/// naming its file and byte offset. Memory grows with the bytes read, not with what a header
/// claims.
pub fn read_idx(
    images: &Path,
    labels: &Path,
    max_dim: u32,
    classes: Option<u32>,
) -> Result<Dataset, DataError> {
    let (mut image_bytes, mut label_bytes) = (open_stream(images)?, open_stream(labels)?);
    parse_idx(
        (&mut image_bytes, images),
        (&mut label_bytes, labels),
        max_dim,
        classes,
    )
}

/// As [`read_idx`], from the images' and labels' bytes (decompressed), each with the path its
/// errors name.
pub fn parse_idx(
    (image_bytes, images): (&mut dyn Read, &Path),
    (label_bytes, labels): (&mut dyn Read, &Path),
    max_dim: u32,
    classes: Option<u32>,
) -> Result<Dataset, DataError> {
    let image_dims = header(image_bytes, images, 3)?;
    let label_dims = header(label_bytes, labels, 1)?;
    let n = image_dims[0];
    if label_dims[0] != n {
        return Err(error(
            labels,
            4,
            format!(
                "{} labels for the {n} images of {}",
                label_dims[0],
                images.display()
            ),
        ));
    }
    let features = image_dims[1] as u64 * image_dims[2] as u64;
    if features == 0 || features > max_dim as u64 {
        return Err(error(
            images,
            8,
            format!(
                "images of {} × {} pixels: 1 to data.max_dim = {max_dim} features",
                image_dims[1], image_dims[2]
            ),
        ));
    }
    let mut data = Dataset::new(features as u32);
    // An image is read into a buffer that grows with the bytes that arrive.
    let (mut pixels, mut label) = (Vec::new(), [0u8; 1]);
    let (mut keys, mut vals) = (Vec::new(), Vec::new());
    let header = (values_offset(3), values_offset(1));
    for i in 0..n as u64 {
        let at = header.0 + i * features;
        pixels.clear();
        let got = (&mut *image_bytes)
            .take(features)
            .read_to_end(&mut pixels)
            .map_err(|e| {
                error(
                    images,
                    at,
                    format!("image {} of {n}: read error: {e}", i + 1),
                )
            })?;
        if got as u64 != features {
            return Err(error(
                images,
                at,
                format!("image {} of {n}: the file ends before it", i + 1),
            ));
        }
        label_bytes.read_exact(&mut label).map_err(|e| {
            let why = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                "the file ends before it".into()
            } else {
                format!("read error: {e}")
            };
            error(
                labels,
                header.1 + i,
                format!("label {} of {n}: {why}", i + 1),
            )
        })?;
        if let Some(k) = classes.filter(|&k| label[0] as u32 >= k) {
            let what = format!("{} of image {}", label[0], i + 1);
            return Err(error(labels, header.1 + i, not_a_class(&what, k)));
        }
        keys.clear();
        vals.clear();
        for (f, &p) in pixels.iter().enumerate().filter(|(_, &p)| p != 0) {
            keys.push(f as u32);
            vals.push(p as f32 / 255.0);
        }
        data.push_row(&keys, &vals, label[0] as f32);
    }
    let ends = |rest: &mut dyn Read, path: &Path, at: u64| match rest.read(&mut [0u8; 1]) {
        Ok(0) => Ok(()),
        Ok(_) => Err(error(
            path,
            at,
            format!("more bytes than the {n} items its header declares"),
        )),
        Err(e) => Err(open_error(path, e)),
    };
    ends(image_bytes, images, header.0 + n as u64 * features)?;
    ends(label_bytes, labels, header.1 + n as u64)?;
    Ok(data)
}

/// An error at byte `offset` of `path`.
fn error(path: &Path, offset: u64, message: String) -> DataError {
    DataError {
        file: path.to_path_buf(),
        line: 0,
        column: 0,
        message: format!("byte {offset}: {message}"),
    }
}

/// The byte offset of an IDX file's values after a header of `dims` dimensions.
fn values_offset(dims: u64) -> u64 {
    4 + 4 * dims
}

/// Reads the header of an IDX file of unsigned bytes with `dims` dimensions from `stream`,
/// returning its dimensions.
fn header(stream: &mut dyn Read, path: &Path, dims: usize) -> Result<Vec<u32>, DataError> {
    let bad = |offset: usize, message: String| error(path, offset as u64, message);
    let mut magic = [0u8; 4];
    stream
        .read_exact(&mut magic)
        .map_err(|_| bad(0, "not an IDX file: shorter than its 4-byte magic".into()))?;
    let expected = [0, 0, 0x08, dims as u8];
    if magic != expected {
        let what = if dims == 3 { "images" } else { "labels" };
        return Err(bad(
            0,
            format!(
                "not an IDX file of {what}: magic {magic:02x?}, expected {expected:02x?} \
                 (unsigned bytes, {dims} dimension(s))"
            ),
        ));
    }
    let mut shape = Vec::with_capacity(dims);
    for d in 0..dims {
        let mut b = [0u8; 4];
        stream
            .read_exact(&mut b)
            .map_err(|_| bad(4 + 4 * d, "the header ends before its dimensions".into()))?;
        shape.push(u32::from_be_bytes(b));
    }
    Ok(shape)
}

/// Writes `images` (each `rows × cols` bytes) and `labels` as two plain IDX files (tests).
pub fn write_idx(
    images: &Path,
    labels: &Path,
    rows: u32,
    cols: u32,
    pixels: &[Vec<u8>],
    classes: &[u8],
) -> std::io::Result<()> {
    let mut out = vec![0, 0, 8, 3];
    for d in [pixels.len() as u32, rows, cols] {
        out.extend_from_slice(&d.to_be_bytes());
    }
    for p in pixels {
        out.extend_from_slice(p);
    }
    crate::atomic::write(images, out)?;
    let mut out = vec![0, 0, 8, 1];
    out.extend_from_slice(&(classes.len() as u32).to_be_bytes());
    out.extend_from_slice(classes);
    crate::atomic::write(labels, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pixels_as_scaled_sparse_rows_and_rejects_malformed_files() {
        let dir = tempfile::tempdir().unwrap();
        let (img, lab) = (dir.path().join("i"), dir.path().join("l"));
        let pixels = vec![vec![0u8, 255, 0, 51], vec![0, 0, 0, 0], vec![1, 2, 3, 4]];
        write_idx(&img, &lab, 2, 2, &pixels, &[3, 0, 9]).unwrap();
        let d = read_idx(&img, &lab, 100, Some(10)).unwrap();
        assert_eq!((d.rows(), d.dim), (3, 4));
        assert_eq!(d.row(0), (&[1u32, 3][..], &[1.0f32, 0.2][..]));
        assert_eq!(d.row(1).0.len(), 0);
        assert_eq!(d.labels, vec![3.0, 0.0, 9.0]);

        // A label beyond the classes names the labels file and its byte.
        let e = read_idx(&img, &lab, 100, Some(9)).unwrap_err().to_string();
        assert!(e.contains("byte 10: label 9 of image 3"), "{e}");
        // More features than max_dim.
        let e = read_idx(&img, &lab, 3, None).unwrap_err().to_string();
        assert!(e.contains("data.max_dim = 3"), "{e}");
        // Images and labels of different counts.
        write_idx(&img, &lab, 2, 2, &pixels, &[3, 0]).unwrap();
        let e = read_idx(&img, &lab, 100, None).unwrap_err().to_string();
        assert!(e.contains("2 labels for the 3 images"), "{e}");
        // Swapped files: the magic says which is which.
        let e = read_idx(&lab, &img, 100, None).unwrap_err().to_string();
        assert!(e.contains("not an IDX file of images"), "{e}");
        // A header claiming 4·10^9 images of 1000×1000 pixels: an error at the first image
        // that is not there, without reserving what the header claims.
        let mut huge = vec![0u8, 0, 8, 3];
        for d in [u32::MAX, 1000, 1000] {
            huge.extend_from_slice(&d.to_be_bytes());
        }
        huge.extend_from_slice(&[7; 10]);
        std::fs::write(&img, huge).unwrap();
        let mut labels = vec![0u8, 0, 8, 1];
        labels.extend_from_slice(&u32::MAX.to_be_bytes());
        std::fs::write(&lab, labels).unwrap();
        let e = read_idx(&img, &lab, 1 << 27, None).unwrap_err().to_string();
        assert!(e.contains("image 1 of 4294967295: the file ends"), "{e}");
        // Trailing bytes.
        write_idx(&img, &lab, 2, 2, &pixels, &[3, 0, 9]).unwrap();
        let mut bytes = std::fs::read(&lab).unwrap();
        bytes.push(1);
        std::fs::write(&lab, bytes).unwrap();
        let e = read_idx(&img, &lab, 100, None).unwrap_err().to_string();
        assert!(e.contains("more bytes than the 3 items"), "{e}");
    }
}
