//! EngramFS core: the pool format, allocator, metadata, operation log, server and client.

pub mod alloc;
pub mod dir;
pub mod epoch;
pub mod error;
pub(crate) mod fasthash;
pub mod index;
pub mod inode;
pub mod inode_bits;
pub mod layout;
pub mod oplog;
pub mod perm;

pub use error::{Error, Result};
pub mod census;
pub mod daemon;
pub mod fs;
pub mod mkfs;
pub mod range_lock;
pub mod recovery;
pub mod request;
pub mod server;
pub mod sidefiles;
pub mod wire;

pub use fs::{
    DirEntry, File, Fs, Metadata, MountInfo, OpenOptions, Opened, Options, ReadDir, Written,
};
pub use perm::Creds;
pub use request::{
    Clear, Fallocate, Handle, RENAME_EXCHANGE, RENAME_NOREPLACE, SetAttr, SetTime, StatFs,
};
pub use server::{FsckReport, ServerStats};
