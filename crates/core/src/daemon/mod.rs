//! The `engram serve` daemon: one trusted server process per pool, clients in other
//! processes talking to it through shared memory (see docs/architecture.md).

mod client;
mod futex;
mod handshake;
mod idle;
mod scan;
mod serve;
pub mod shm;
mod wake;
mod watch;

pub use client::{MIN_FD, Remote};
pub use handshake::REFUSED_MESSAGE;
pub use serve::{
    SERVER_NICE, ServeOptions, Stop, raise_descriptor_limit, raise_priority, serve, serve_until,
};
