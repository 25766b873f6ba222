//! The CPU features EngramFS chooses instructions by, read with three CPUID instructions
//! on first use and cached for the process.
//!
//! `std::arch::is_x86_feature_detected!` reads every leaf it knows of the first time it is
//! asked (about eight CPUIDs), and it knows neither `clwb` nor `clflushopt`. Under a
//! hypervisor each CPUID is a trap: 3.7 µs on the virtual machine this was measured on, so
//! std's detection and a separate probe for the flush instructions cost every process that
//! opens a pool (a `cat` run by a shell) about 40 µs.

use std::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};
use std::sync::atomic::{AtomicU8, Ordering};

const DETECTED: u8 = 1;
const SSE42: u8 = 2;
const AVX: u8 = 4;
const CLWB: u8 = 8;
const CLFLUSHOPT: u8 = 16;

/// 0 until detected; then `DETECTED` and the bits of the features present.
static FEATURES: AtomicU8 = AtomicU8::new(0);

fn features() -> u8 {
    let f = FEATURES.load(Ordering::Relaxed);
    if f != 0 {
        return f;
    }
    let f = detect();
    FEATURES.store(f, Ordering::Relaxed);
    f
}

fn detect() -> u8 {
    let mut f = DETECTED;
    // CPUID exists on every x86_64 processor; leaf 0 gives the highest standard leaf.
    let max_leaf = __cpuid(0).eax;
    let leaf1 = __cpuid(1);
    if leaf1.ecx & (1 << 20) != 0 {
        f |= SSE42;
    }
    // AVX needs the CPU's support and the OS saving the YMM state (OSXSAVE, then XCR0's
    // SSE and AVX bits), as std checks it.
    if leaf1.ecx & (1 << 28) != 0 && leaf1.ecx & (1 << 27) != 0 {
        // SAFETY: OSXSAVE is set, so XGETBV is enabled; register 0 is XCR0.
        let xcr0 = unsafe { xgetbv0() };
        if xcr0 & 0b110 == 0b110 {
            f |= AVX;
        }
    }
    if max_leaf >= 7 {
        let leaf7 = __cpuid_count(7, 0);
        if leaf7.ebx & (1 << 24) != 0 {
            f |= CLWB;
        }
        if leaf7.ebx & (1 << 23) != 0 {
            f |= CLFLUSHOPT;
        }
    }
    f
}

#[target_feature(enable = "xsave")]
unsafe fn xgetbv0() -> u64 {
    // SAFETY: the caller checked OSXSAVE, so XGETBV does not fault.
    unsafe { _xgetbv(0) }
}

/// SSE4.2 (the `crc32` instruction).
pub fn has_sse42() -> bool {
    features() & SSE42 != 0
}

/// AVX usable (32-byte loads and non-temporal stores).
pub fn has_avx() -> bool {
    features() & AVX != 0
}

/// The `clwb` instruction.
pub fn has_clwb() -> bool {
    features() & CLWB != 0
}

/// The `clflushopt` instruction.
pub fn has_clflushopt() -> bool {
    features() & CLFLUSHOPT != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_features_agree_with_std_where_std_knows_them() {
        assert_eq!(has_sse42(), std::arch::is_x86_feature_detected!("sse4.2"));
        assert_eq!(has_avx(), std::arch::is_x86_feature_detected!("avx"));
        assert_eq!(features(), detect(), "cached as detected");
    }
}
