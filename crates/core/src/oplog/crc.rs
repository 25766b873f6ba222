//! CRC32C of log records: the SSE4.2 `crc32` instruction, 8 bytes a step.
//!
//! The `crc32c` crate also uses that instruction, but its interleaved three-stream loop and
//! table merge are made for long buffers; a log record is usually one or two cache lines,
//! where a plain loop costs a third of the instructions.

/// CRC32C (Castagnoli) of `bytes`, equal to `crc32c::crc32c(bytes)`.
pub(crate) fn crc32c(bytes: &[u8]) -> u32 {
    if engram_pmem::cpu::has_sse42() {
        // SAFETY: the CPU has SSE4.2, the only requirement of `crc32c_sse42`.
        unsafe { crc32c_sse42(bytes) }
    } else {
        crc32c::crc32c(bytes)
    }
}

#[target_feature(enable = "sse4.2")]
fn crc32c_sse42(bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u8, _mm_crc32_u64};
    let mut crc = u64::from(u32::MAX);
    let words = bytes.chunks_exact(8);
    let rest = words.remainder();
    for w in words {
        crc = _mm_crc32_u64(crc, u64::from_le_bytes(w.try_into().unwrap()));
    }
    let mut crc = crc as u32;
    for &b in rest {
        crc = _mm_crc32_u8(crc, b);
    }
    !crc
}

#[cfg(test)]
mod tests {
    #[test]
    fn equals_the_crc32c_crate() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 37 + i / 7) as u8).collect();
        for len in [0, 1, 7, 8, 9, 31, 32, 64, 128, 999, 1000] {
            for start in [0, 1, 3] {
                let b = &data[start..len.max(start)];
                assert_eq!(
                    super::crc32c(b),
                    crc32c::crc32c(b),
                    "len {len} start {start}"
                );
            }
        }
    }
}
