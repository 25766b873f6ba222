//! EngramFS core: the pool format, allocator, metadata, operation log, server and client.

pub mod alloc;
pub mod dir;
pub mod epoch;
pub mod error;
pub mod index;
pub mod inode;
pub mod layout;
pub mod oplog;
pub mod perm;

pub use error::{Error, Result};
