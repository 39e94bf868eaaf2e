//! Which vector instructions the hot loops may use, decided once at run time.
//!
//! The build targets baseline x86-64; the hot loops that gain from AVX-512 (the SketchML
//! sketches' inserts and queries, the rANS coder's long streams, the split of a gradient
//! between two owners and the merge of two sparse vectors) have a second version compiled for
//! it and taken when the CPU has it; the SketchML sketches' hashing and the bucketing of values
//! also have an AVX2 version, for CPUs without AVX-512. Both versions give the same results, and the tests compare them
//! where the CPU can run both.

/// Whether the CPU has AVX-512F ([`avx512_available`]) and the environment does not set
/// `GRADFLOW_NO_AVX512` (which forces the scalar loops: for benchmarks side by side). Read
/// once.
#[cfg(target_arch = "x86_64")]
pub fn avx512() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| avx512_available() && std::env::var_os("GRADFLOW_NO_AVX512").is_none())
}

/// Whether the CPU has AVX-512F (and POPCNT, which every such CPU has), whatever the
/// environment says: what the vector loops need, for the tests that compare them with the
/// scalar ones.
#[cfg(target_arch = "x86_64")]
pub fn avx512_available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("popcnt")
}

/// Whether the CPU has AVX2 and the environment sets neither `GRADFLOW_NO_AVX2` nor
/// `GRADFLOW_NO_AVX512` (either forces the scalar loops). Read once.
#[cfg(target_arch = "x86_64")]
pub fn avx2() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        avx2_available()
            && std::env::var_os("GRADFLOW_NO_AVX2").is_none()
            && std::env::var_os("GRADFLOW_NO_AVX512").is_none()
    })
}

/// Whether the CPU has AVX2, whatever the environment says (for the tests).
#[cfg(target_arch = "x86_64")]
pub fn avx2_available() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// No AVX-512 off x86-64.
#[cfg(not(target_arch = "x86_64"))]
pub fn avx512() -> bool {
    false
}
