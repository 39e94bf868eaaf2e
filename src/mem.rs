//! Large zeroed arrays for model-sized state (weights, gradient accumulator, optimizer moments).
//!
//! They are read and written at random positions (one per feature of every row), so on a
//! virtual machine much of the cost of a sparse gradient is TLB misses. On Linux an array of
//! 4 MiB or more is an anonymous mapping aligned to 2 MiB and marked for transparent huge pages
//! (`madvise(MADV_HUGEPAGE)`, honoured in the kernel's default `madvise` mode) before its first
//! touch; the kernel hands out zeroed pages lazily, so creating one costs nothing up front.
//! Elsewhere, or if the mapping fails, it is an ordinary vector, whose every page is written
//! once when it is created ([`ZeroedArray::new`]).
//!
//! Why write them: a fresh page that is first read is backed by the kernel's shared zero page,
//! and its first write then replaces that mapping, which in a process whose threads run on
//! several cores flushes every one of those cores' TLBs (an inter-processor interrupt, dear on
//! a virtual machine). The optimizer's moments and the weights are read before they are
//! written, key by key, so left lazy they took one such fault per page in the first epoch (`perf`:
//! `do_wp_page` → `flush_tlb_mm_range`). A page written first takes one ordinary fault and no
//! flush. Arrays wholly on huge pages train faster per epoch than half-aligned ones
//! (figures: `docs/results.md`, "Design measurements").

use std::ops::{Deref, DerefMut};

/// The process's peak resident memory so far (Linux: `VmHWM` of `/proc/self/status`), bytes.
pub fn peak_resident() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The memory this process may use, and what sets it: the address-space limit
/// (`RLIMIT_AS`: `ulimit -v`, `prlimit --as`), or the cgroup's `memory.max` (cgroup v2: a
/// container's or a systemd unit's limit), whichever is lower; `None` without either.
pub fn limit() -> Option<(u64, &'static str)> {
    let mut found: Option<(u64, &'static str)> = None;
    let mut consider = |bytes: u64, what| {
        if found.is_none_or(|(b, _)| bytes < b) {
            found = Some((bytes, what));
        }
    };
    #[cfg(target_os = "linux")]
    {
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `rl` is a valid rlimit to write into.
        if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut rl) } == 0
            && rl.rlim_cur != libc::RLIM_INFINITY
        {
            consider(
                rl.rlim_cur,
                "the address-space limit (ulimit -v, prlimit --as)",
            );
        }
    }
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok();
    let path = cgroup
        .as_deref()
        .and_then(|c| c.lines().find_map(|l| l.strip_prefix("0::")));
    if let Some(path) = path {
        let file = format!("/sys/fs/cgroup{}/memory.max", path.trim_end_matches('/'));
        let max = std::fs::read_to_string(file).ok();
        if let Some(bytes) = max.and_then(|m| m.trim().parse::<u64>().ok()) {
            consider(bytes, "the cgroup's memory.max");
        }
    }
    found
}

/// Element types for which all-zero bytes are a valid value.
///
/// # Safety
/// Implement only for plain numeric types whose all-zero bit pattern is a valid value.
pub unsafe trait Zeroable: Copy + Default {}
// SAFETY: all-zero bytes are 0 for these types.
unsafe impl Zeroable for f32 {}
// SAFETY: as above.
unsafe impl Zeroable for f64 {}
// SAFETY: as above.
unsafe impl Zeroable for u32 {}
// SAFETY: as above.
unsafe impl Zeroable for u64 {}

/// `len` zeros in a vector, or `None` when the allocation fails: a size read from a file may
/// be more than the process can hold, which must be an error, not an abort. The memory comes
/// zeroed from the allocator (untouched pages stay shared zero pages until written).
pub fn try_zeroed_vec<T: Zeroable>(len: usize) -> Option<Vec<T>> {
    if len == 0 || std::mem::size_of::<T>() == 0 {
        return Some(vec![T::default(); len]);
    }
    let layout = std::alloc::Layout::array::<T>(len).ok()?;
    // SAFETY: the layout has a nonzero size; a non-null result is an allocation of `len`
    // elements of `T` from the global allocator, zeroed, which is a valid `T` (`Zeroable`),
    // so it may become a `Vec` of that length and capacity.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout) as *mut T;
        (!ptr.is_null()).then(|| Vec::from_raw_parts(ptr, len, len))
    }
}

/// A fixed-length zero-initialised array, huge-page backed when large (see the module docs).
pub struct ZeroedArray<T: Zeroable> {
    backing: Backing<T>,
}

enum Backing<T> {
    Heap(Vec<T>),
    #[cfg(target_os = "linux")]
    Mapped {
        base: *mut libc::c_void,
        map_len: usize,
        ptr: *mut T,
        len: usize,
    },
}

// SAFETY: the mapping is owned exclusively by the array, like a Vec's buffer.
unsafe impl<T: Zeroable + Send> Send for ZeroedArray<T> {}
// SAFETY: shared access only hands out `&[T]`.
unsafe impl<T: Zeroable + Sync> Sync for ZeroedArray<T> {}

const HUGE_PAGE: usize = 2 << 20;

impl<T: Zeroable> ZeroedArray<T> {
    /// `len` zeros.
    pub fn new(len: usize) -> Self {
        #[cfg(target_os = "linux")]
        {
            let bytes = len * std::mem::size_of::<T>();
            if bytes >= 2 * HUGE_PAGE {
                if let Some(a) = Self::mapped(len, bytes) {
                    return a;
                }
            }
        }
        let mut v = vec![T::default(); len];
        write_every_page(&mut v);
        ZeroedArray {
            backing: Backing::Heap(v),
        }
    }

    #[cfg(target_os = "linux")]
    fn mapped(len: usize, bytes: usize) -> Option<Self> {
        let map_len = bytes + HUGE_PAGE;
        // SAFETY: a fresh private anonymous mapping; the kernel zero-fills it. We check for
        // failure and only ever access `[ptr, ptr + bytes)`, which lies inside it.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return None;
            }
            let aligned = (base as usize).div_ceil(HUGE_PAGE) * HUGE_PAGE;
            libc::madvise(
                aligned as *mut libc::c_void,
                bytes.div_ceil(HUGE_PAGE) * HUGE_PAGE,
                libc::MADV_HUGEPAGE,
            );
            Some(ZeroedArray {
                backing: Backing::Mapped {
                    base,
                    map_len,
                    ptr: aligned as *mut T,
                    len,
                },
            })
        }
    }
}

/// Writes a zero into every page of `v` (see the module docs). Volatile, so that the compiler,
/// which knows the memory is already zero, keeps the writes.
fn write_every_page<T: Zeroable>(v: &mut [T]) {
    const PAGE: usize = 4096;
    let step = (PAGE / std::mem::size_of::<T>().max(1)).max(1);
    for x in v.iter_mut().step_by(step) {
        // SAFETY: `x` is a valid, aligned, exclusive reference.
        unsafe { std::ptr::write_volatile(x, T::default()) };
    }
}

impl<T: Zeroable> Default for ZeroedArray<T> {
    fn default() -> Self {
        ZeroedArray {
            backing: Backing::Heap(Vec::new()),
        }
    }
}

impl<T: Zeroable> Deref for ZeroedArray<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.backing {
            Backing::Heap(v) => v,
            // SAFETY: `ptr` is aligned for T and points at `len` initialised (zero or written) Ts
            // inside our mapping, alive as long as `self`.
            #[cfg(target_os = "linux")]
            Backing::Mapped { ptr, len, .. } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
        }
    }
}

impl<T: Zeroable> DerefMut for ZeroedArray<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.backing {
            Backing::Heap(v) => v,
            // SAFETY: as in `deref`, and `&mut self` guarantees exclusive access.
            #[cfg(target_os = "linux")]
            Backing::Mapped { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts_mut(*ptr, *len)
            },
        }
    }
}

impl<T: Zeroable> Drop for ZeroedArray<T> {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Backing::Mapped { base, map_len, .. } = self.backing {
            // SAFETY: unmapping exactly the mapping created in `mapped`, once.
            unsafe {
                libc::munmap(base, map_len);
            }
        }
    }
}

impl<T: Zeroable + std::fmt::Debug> std::fmt::Debug for ZeroedArray<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ZeroedArray(len {})", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This thread's minor page faults so far.
    #[cfg(target_os = "linux")]
    fn minor_faults() -> i64 {
        // SAFETY: `getrusage` fills the struct it is given.
        unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
            usage.ru_minflt
        }
    }

    /// A heap array's pages are backed when it is made: reading it and then writing it takes
    /// no page faults (a page first read would be the shared zero page, and its first write a
    /// second fault). 3 MiB: 768 pages, below the mapped arrays' size.
    #[cfg(target_os = "linux")]
    #[test]
    fn heap_arrays_are_backed_before_they_are_read() {
        let mut a: ZeroedArray<f32> = ZeroedArray::new(3 << 18);
        let before = minor_faults();
        let sum: f32 = a.iter().step_by(1024).sum();
        a.iter_mut().step_by(1024).for_each(|x| *x += 1.0);
        let faults = minor_faults() - before;
        assert_eq!(sum, 0.0);
        assert!(
            faults < 32,
            "{faults} page faults reading and writing 768 pages"
        );
    }

    #[test]
    fn small_and_large_arrays_are_zero_and_writable() {
        for len in [0usize, 10, 3 << 20] {
            let mut a: ZeroedArray<f32> = ZeroedArray::new(len);
            assert_eq!(a.len(), len);
            assert!(a.iter().all(|&x| x == 0.0));
            if len > 0 {
                a[len - 1] = 2.5;
                a[0] = 1.0;
                assert_eq!((a[0], a[len - 1]), (1.0, 2.5));
            }
        }
        let big: ZeroedArray<u64> = ZeroedArray::new(1 << 20);
        assert_eq!(
            big.as_ptr() as usize % HUGE_PAGE,
            0,
            "large arrays are 2 MiB aligned"
        );
    }
}
