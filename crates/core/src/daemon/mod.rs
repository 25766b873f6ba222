//! The `engram serve` daemon: one trusted server process per pool, clients in other
//! processes talking to it through shared memory (see docs/architecture.md).

mod client;
mod handshake;
mod serve;
pub mod shm;

pub use client::Remote;
pub use serve::{ServeOptions, serve};
