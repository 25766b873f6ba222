//! Persistence primitives for EngramFS: pool mapping with media detection,
//! cache-line flushes, fences, non-temporal copies and a recording mode for
//! the crash harness. This crate is the only code that flushes or fences.
//!
//! Durability protocol: store → [`Pool::flush`] (or [`Pool::copy_nt`] /
//! [`Pool::zero_nt`]) → [`Pool::fence`]. Nothing is durable before the fence.

#[cfg(not(target_arch = "x86_64"))]
compile_error!("engram-pmem supports only x86_64 (clwb/clflushopt/clflush, sfence)");

pub mod cpu;
mod device;
mod flush;
mod map;
mod pool;
mod record;
mod sync;

pub use device::{Backing, device_size};
pub use flush::{CACHE_LINE, FlushKind, flush_kind};
pub use map::Media;
pub use pool::{Pool, fd_at_or_above};
pub use record::{Event, Recording};

#[cfg(test)]
mod map_tests;
#[cfg(test)]
mod tests;
