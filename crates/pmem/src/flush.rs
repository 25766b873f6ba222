//! Cache-line write-back, store fence and non-temporal copies: the only
//! place in EngramFS that issues these instructions.

use crate::cpu::has_avx;
use std::arch::asm;
use std::arch::x86_64::{
    __m128i, __m256i, _mm_loadu_si128, _mm_setzero_si128, _mm_stream_si128, _mm256_loadu_si256,
    _mm256_stream_si256,
};
use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};

/// Size of a CPU cache line in bytes: the unit of write-back.
pub const CACHE_LINE: u64 = 64;

/// The instruction used to write a cache line back to memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushKind {
    /// `clwb`: write back, keep the line cached.
    Clwb,
    /// `clflushopt`: write back and invalidate, weakly ordered.
    Clflushopt,
    /// `clflush`: write back and invalidate, strongly ordered (always present on x86_64).
    Clflush,
}

impl fmt::Display for FlushKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FlushKind::Clwb => "clwb",
            FlushKind::Clflushopt => "clflushopt",
            FlushKind::Clflush => "clflush",
        })
    }
}

/// 0 = not detected yet, otherwise `1 + FlushKind as u8`.
static DETECTED: AtomicU8 = AtomicU8::new(0);

/// The best flush instruction this CPU supports, detected once and cached.
pub fn flush_kind() -> FlushKind {
    match DETECTED.load(Ordering::Relaxed) {
        1 => FlushKind::Clwb,
        2 => FlushKind::Clflushopt,
        3 => FlushKind::Clflush,
        _ => {
            let kind = detect();
            DETECTED.store(kind as u8 + 1, Ordering::Relaxed);
            kind
        }
    }
}

fn detect() -> FlushKind {
    [FlushKind::Clwb, FlushKind::Clflushopt]
        .into_iter()
        .find(|&k| supports(k))
        .unwrap_or(FlushKind::Clflush)
}

/// Whether the CPU implements `kind` (`clflush` is part of x86_64).
pub(crate) fn supports(kind: FlushKind) -> bool {
    match kind {
        FlushKind::Clflush => true,
        FlushKind::Clwb => crate::cpu::has_clwb(),
        FlushKind::Clflushopt => crate::cpu::has_clflushopt(),
    }
}

/// Write back the cache line containing `p` with instruction `kind`.
///
/// # Safety
/// `p` must point into a mapping that stays valid for the duration of the call,
/// and `kind` must be supported by the CPU (see [`flush_kind`]).
#[inline]
pub(crate) unsafe fn flush_line(kind: FlushKind, p: *const u8) {
    // SAFETY: the caller guarantees `p` is mapped and the instruction exists;
    // these instructions only write back cache contents and change no
    // architectural state visible to Rust. No `nomem`: they must not be
    // reordered with the stores they make durable.
    unsafe {
        match kind {
            FlushKind::Clwb => asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags)),
            FlushKind::Clflushopt => {
                asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags))
            }
            FlushKind::Clflush => {
                asm!("clflush [{0}]", in(reg) p, options(nostack, preserves_flags))
            }
        }
    }
}

/// Write back every cache line overlapping `[p, p + len)`.
///
/// # Safety
/// The whole range must be mapped and `kind` supported.
#[inline]
pub(crate) unsafe fn flush_range(kind: FlushKind, p: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let line = CACHE_LINE as usize;
    let start = p as usize & !(line - 1);
    let end = p as usize + len;
    let mut a = start;
    while a < end {
        // SAFETY: `a` lies in a cache line overlapping the caller's mapped
        // range; mappings are page-granular so the whole line is mapped.
        unsafe { flush_line(kind, a as *const u8) };
        a += line;
    }
}

/// Store fence: orders all earlier flushes and non-temporal stores before later stores.
#[inline]
pub(crate) fn sfence() {
    // SAFETY: `sfence` has no operands and only orders memory operations.
    unsafe { asm!("sfence", options(nostack, preserves_flags)) };
}

/// Copy `len` bytes from `src` to 64-byte aligned `dst` with non-temporal
/// stores, a whole cache line per step (32-byte stores where the CPU has AVX).
/// `len` must be a multiple of 64.
///
/// # Safety
/// `dst` must be 64-byte aligned and valid for `len` bytes of writes, `src`
/// valid for `len` bytes of reads, and the ranges must not overlap.
pub(crate) unsafe fn stream_copy(dst: *mut u8, src: *const u8, len: usize) {
    debug_assert!(
        (dst as usize).is_multiple_of(CACHE_LINE as usize)
            && len.is_multiple_of(CACHE_LINE as usize)
    );
    if has_avx() {
        // SAFETY: the caller's contract, and AVX was detected.
        unsafe { stream_copy_avx(dst, src, len) }
    } else {
        // SAFETY: the caller's contract.
        unsafe { stream_copy_sse2(dst, src, len) }
    }
}

/// `stream_copy` with 16-byte loads and stores (the x86_64 baseline).
///
/// # Safety
/// As `stream_copy`.
unsafe fn stream_copy_sse2(dst: *mut u8, src: *const u8, len: usize) {
    let mut i = 0;
    while i < len {
        // SAFETY: `i + 64 <= len` (`len` is a multiple of 64); `dst + i + k` is
        // 16-byte aligned because `dst` is 64-byte aligned; `src` may be
        // unaligned, hence `loadu`. SSE2 is part of the x86_64 baseline.
        unsafe {
            let s = src.add(i).cast::<__m128i>();
            let d = dst.add(i).cast::<__m128i>();
            let (a, b) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)));
            let (c, e) = (_mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
        i += 64;
    }
}

/// `stream_copy` with 32-byte loads and stores, four cache lines per step while
/// they last. Written as one `asm!` block per step: the intrinsic non-temporal store
/// takes its address in a register, which costs an address computation per store.
///
/// # Safety
/// As `stream_copy`; the CPU must support AVX.
#[target_feature(enable = "avx")]
unsafe fn stream_copy_avx(dst: *mut u8, src: *const u8, len: usize) {
    let mut i = 0;
    while i + 256 <= len {
        // SAFETY: `i + 256 <= len`, so all 256 bytes read and written are in the
        // caller's ranges; `dst + i` is 64-byte aligned, so every store is 32-byte
        // aligned as `vmovntdq` needs; `vmovdqu` loads need no alignment. The block
        // touches no other memory and no stack.
        unsafe {
            asm!(
                "vmovdqu {a}, [{s}]",
                "vmovdqu {b}, [{s} + 32]",
                "vmovdqu {c}, [{s} + 64]",
                "vmovdqu {e}, [{s} + 96]",
                "vmovntdq [{d}], {a}",
                "vmovntdq [{d} + 32], {b}",
                "vmovntdq [{d} + 64], {c}",
                "vmovntdq [{d} + 96], {e}",
                "vmovdqu {a}, [{s} + 128]",
                "vmovdqu {b}, [{s} + 160]",
                "vmovdqu {c}, [{s} + 192]",
                "vmovdqu {e}, [{s} + 224]",
                "vmovntdq [{d} + 128], {a}",
                "vmovntdq [{d} + 160], {b}",
                "vmovntdq [{d} + 192], {c}",
                "vmovntdq [{d} + 224], {e}",
                s = in(reg) src.add(i),
                d = in(reg) dst.add(i),
                a = out(ymm_reg) _,
                b = out(ymm_reg) _,
                c = out(ymm_reg) _,
                e = out(ymm_reg) _,
                options(nostack, preserves_flags),
            );
        }
        i += 256;
    }
    while i < len {
        // SAFETY: as above, with `i + 64 <= len` (`len` is a multiple of 64).
        unsafe {
            let s = src.add(i).cast::<__m256i>();
            let d = dst.add(i).cast::<__m256i>();
            let (a, b) = (_mm256_loadu_si256(s), _mm256_loadu_si256(s.add(1)));
            _mm256_stream_si256(d, a);
            _mm256_stream_si256(d.add(1), b);
        }
        i += 64;
    }
}

/// Zero `len` bytes at 64-byte aligned `dst` with non-temporal stores.
///
/// # Safety
/// `dst` must be 64-byte aligned and valid for `len` bytes of writes; `len` a multiple of 64.
pub(crate) unsafe fn stream_zero(dst: *mut u8, len: usize) {
    debug_assert!(
        (dst as usize).is_multiple_of(CACHE_LINE as usize)
            && len.is_multiple_of(CACHE_LINE as usize)
    );
    let mut i = 0;
    while i < len {
        // SAFETY: as in `stream_copy`: in bounds and 16-byte aligned.
        unsafe {
            let d = dst.add(i).cast::<__m128i>();
            for k in 0..4 {
                _mm_stream_si128(d.add(k), _mm_setzero_si128());
            }
        }
        i += 64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_is_cached_and_named() {
        let k = flush_kind();
        assert_eq!(k, flush_kind());
        assert_eq!(k, detect());
        assert!(["clwb", "clflushopt", "clflush"].contains(&k.to_string().as_str()));
    }

    /// A 64-byte aligned buffer of `len` bytes (and the allocation keeping it).
    fn aligned(len: usize) -> (Vec<u8>, usize) {
        let v = vec![0xeeu8; len + 64];
        let at = v.as_ptr().align_offset(64);
        (v, at)
    }

    #[test]
    fn stream_copy_and_zero_write_exactly_their_range() {
        type Copy = unsafe fn(*mut u8, *const u8, usize);
        let mut copies: Vec<Copy> = vec![stream_copy, stream_copy_sse2];
        if has_avx() {
            copies.push(|d, s, n| {
                // SAFETY: the test's arguments, and AVX was detected.
                unsafe { stream_copy_avx(d, s, n) }
            });
        }
        for (copy, len) in copies
            .into_iter()
            .flat_map(|c| [64, 128, 192, 256, 320, 4096, 4096 + 192].map(|n| (c, n)))
        {
            let (mut dst, at) = aligned(len + 128);
            // An unaligned source: the loads must not care.
            let src: Vec<u8> = (0..len + 1).map(|i| (i * 13 + 1) as u8).collect();
            // SAFETY: `dst[at + 64..]` is 64-byte aligned with room for `len` bytes, and
            // `src[1..]` holds `len` bytes of another allocation.
            unsafe { copy(dst.as_mut_ptr().add(at + 64), src.as_ptr().add(1), len) };
            sfence();
            assert!(dst[at..at + 64].iter().all(|&b| b == 0xee));
            assert_eq!(&dst[at + 64..at + 64 + len], &src[1..]);
            assert!(
                dst[at + 64 + len..at + 128 + len]
                    .iter()
                    .all(|&b| b == 0xee)
            );
            // SAFETY: as above.
            unsafe { stream_zero(dst.as_mut_ptr().add(at + 64), len) };
            sfence();
            assert!(dst[at + 64..at + 64 + len].iter().all(|&b| b == 0));
            assert!(
                dst[at + 64 + len..at + 128 + len]
                    .iter()
                    .all(|&b| b == 0xee)
            );
        }
    }

    #[test]
    fn every_supported_instruction_runs() {
        let buf = vec![7u8; 256];
        for kind in [FlushKind::Clwb, FlushKind::Clflushopt, FlushKind::Clflush] {
            if supports(kind) {
                // SAFETY: `buf` is live and `kind` is supported by this CPU.
                unsafe { flush_range(kind, buf.as_ptr().add(3), 200) };
            }
        }
        sfence();
        assert!(buf.iter().all(|&b| b == 7));
    }
}
