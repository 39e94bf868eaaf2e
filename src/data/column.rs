//! [`Column`]: one array of a [`super::Dataset`], held in memory or read in place from a
//! memory-mapped file (the row cache, [`super::cache`]), so that loading a cached dataset
//! copies nothing: the arrays are the page cache's pages.
//!
//! A mapped column is read-only; changing it (pushing, resizing, writing through `&mut`)
//! first copies it into memory, once. Nothing that trains changes a dataset's arrays, so a
//! cached dataset stays mapped for the whole run.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use memmap2::Mmap;

/// The element types a column can read in place from a file: plain words for which every bit
/// pattern is a value.
pub trait Word: Copy + Default + 'static + private::Sealed {}
impl Word for u32 {}
impl Word for f32 {}
impl Word for usize {}

mod private {
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for f32 {}
    impl Sealed for usize {}
}

/// An array of `T`: a vector, or a stretch of a memory-mapped file (see the module docs).
///
/// It keeps a pointer to its first element beside what owns the elements, so reading one
/// (the training loop's every row) costs no branch on where they live.
pub struct Column<T: Word> {
    /// The first element, of `len`, in `owner`.
    ptr: *const T,
    len: usize,
    owner: Owner<T>,
}

enum Owner<T> {
    Vec(Vec<T>),
    Map(Arc<Mmap>),
}

// SAFETY: a column is an immutable view of memory it owns (a vector, or a shared read-only
// map), changed only through `&mut self`: it is as thread-safe as a `Vec<T>`.
unsafe impl<T: Word + Send> Send for Column<T> {}
unsafe impl<T: Word + Sync> Sync for Column<T> {}

impl<T: Word> Column<T> {
    /// An empty column.
    pub fn new() -> Self {
        Vec::new().into()
    }

    /// The `len` `T`s of `map` from byte `at`, read in place as this target stores them;
    /// `None` if they are not within the map or not aligned for `T`. Whether the file's words
    /// are this target's `T`s (their width and byte order) is the caller's to know.
    ///
    /// The file must not change while it is mapped: the cache writes a new file and renames
    /// it over the old one, which leaves a mapped file as it was.
    pub fn mapped(map: &Arc<Mmap>, at: usize, len: usize) -> Option<Self> {
        let end = len.checked_mul(std::mem::size_of::<T>())?.checked_add(at)?;
        let aligned = (map.as_ptr() as usize)
            .wrapping_add(at)
            .is_multiple_of(std::mem::align_of::<T>());
        (end <= map.len() && aligned).then(|| Column {
            // (`at` is within the map: `at + len·size <= map.len()`)
            ptr: map[at..].as_ptr() as *const T,
            len,
            owner: Owner::Map(map.clone()),
        })
    }

    /// Whether the column is read in place from a file.
    pub fn is_mapped(&self) -> bool {
        matches!(self.owner, Owner::Map(_))
    }

    /// Changes the column as a vector (copied into memory first if it is mapped), then
    /// points at the vector's elements again.
    #[inline]
    fn change<R>(&mut self, f: impl FnOnce(&mut Vec<T>) -> R) -> R {
        let v = match &mut self.owner {
            Owner::Vec(v) => v,
            Owner::Map(_) => self.copy_out(),
        };
        let out = f(v);
        (self.ptr, self.len) = (v.as_ptr(), v.len());
        out
    }

    /// Copies a mapped column into memory (once: nothing that trains changes a column).
    #[cold]
    fn copy_out(&mut self) -> &mut Vec<T> {
        self.owner = Owner::Vec(self.deref().to_vec());
        match &mut self.owner {
            Owner::Vec(v) => v,
            Owner::Map(_) => unreachable!("copied above"),
        }
    }

    /// Appends `x`.
    #[inline]
    pub fn push(&mut self, x: T) {
        self.change(|v| v.push(x))
    }

    /// Appends `xs`.
    #[inline]
    pub fn extend_from_slice(&mut self, xs: &[T]) {
        self.change(|v| v.extend_from_slice(xs))
    }

    /// Reserves room for `n` more elements.
    pub fn reserve(&mut self, n: usize) {
        self.change(|v| v.reserve(n))
    }

    /// Resizes to `n` elements, filling with `x`.
    pub fn resize(&mut self, n: usize, x: T) {
        self.change(|v| v.resize(n, x))
    }

    /// Keeps the first `n` elements.
    pub fn truncate(&mut self, n: usize) {
        self.change(|v| v.truncate(n))
    }

    /// Removes every element.
    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// The elements as a vector (copied if the column is mapped).
    pub fn into_vec(mut self) -> Vec<T> {
        self.change(std::mem::take)
    }
}

impl<T: Word> Deref for Column<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points at `len` initialised, aligned elements that `owner` holds and
        // nobody writes while `self` is borrowed: a vector's (reset by every change through
        // `change`), or a read-only map's that `mapped` checked.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: Word> DerefMut for Column<T> {
    /// The elements, copied into memory first if the column is mapped.
    fn deref_mut(&mut self) -> &mut [T] {
        let (ptr, len) = self.change(|v| (v.as_mut_ptr(), v.len()));
        // SAFETY: the vector's own elements, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(ptr, len) }
    }
}

impl<T: Word> From<Vec<T>> for Column<T> {
    fn from(v: Vec<T>) -> Self {
        Column {
            ptr: v.as_ptr(),
            len: v.len(),
            owner: Owner::Vec(v),
        }
    }
}

impl<T: Word> FromIterator<T> for Column<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        Vec::from_iter(items).into()
    }
}

impl<T: Word> Extend<T> for Column<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, items: I) {
        self.change(|v| v.extend(items))
    }
}

impl<'a, T: Word> IntoIterator for &'a Column<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T: Word> Default for Column<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Word> Clone for Column<T> {
    /// A mapped column's clone shares the map.
    fn clone(&self) -> Self {
        match &self.owner {
            Owner::Vec(v) => v.clone().into(),
            Owner::Map(map) => Column {
                ptr: self.ptr,
                len: self.len,
                owner: Owner::Map(map.clone()),
            },
        }
    }
}

impl<T: Word + PartialEq> PartialEq for Column<T> {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}

impl<T: Word + PartialEq> PartialEq<Vec<T>> for Column<T> {
    fn eq(&self, other: &Vec<T>) -> bool {
        self[..] == other[..]
    }
}

impl<T: Word + fmt::Debug> fmt::Debug for Column<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self[..].fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn map_of(bytes: &[u8]) -> Arc<Mmap> {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        // SAFETY: a private temporary file nobody else writes.
        Arc::new(unsafe { Mmap::map(&f).unwrap() })
    }

    #[test]
    fn a_mapped_column_reads_the_file_and_copies_once_when_changed() {
        let words: Vec<u8> = [7u32, 8, 9].iter().flat_map(|w| w.to_le_bytes()).collect();
        let map = map_of(&[&[0u8; 4][..], &words].concat());
        let mut c = Column::<u32>::mapped(&map, 4, 3).expect("aligned and within the map");
        assert!(c.is_mapped());
        assert_eq!(c, vec![7, 8, 9]);
        assert_eq!(c.clone(), c);
        c[1] = 80;
        assert!(!c.is_mapped(), "writing copies");
        c.push(10);
        assert_eq!(c, vec![7, 80, 9, 10]);
        c.extend([11, 12]);
        c.truncate(5);
        assert_eq!(c.clone().into_vec(), vec![7, 80, 9, 10, 11]);
        assert_eq!(
            &map[4..8],
            &7u32.to_le_bytes(),
            "the file is left as it was"
        );
    }

    #[test]
    fn words_outside_the_map_or_misaligned_are_not_mapped() {
        let map = map_of(&[0u8; 16]);
        assert!(Column::<u32>::mapped(&map, 0, 4).is_some());
        assert!(Column::<u32>::mapped(&map, 0, 5).is_none(), "past the end");
        assert!(Column::<u32>::mapped(&map, 2, 1).is_none(), "misaligned");
        assert!(
            Column::<u32>::mapped(&map, usize::MAX, 1).is_none(),
            "overflow"
        );
        assert!(Column::<usize>::mapped(&map, 8, 1).is_some());
        assert!(Column::<usize>::mapped(&map, 4, 1).is_none(), "misaligned");
    }
}
