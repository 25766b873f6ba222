//! EngramFS through FUSE: mount an open pool as a directory that any program can use.
//!
//! ```no_run
//! use engram_core::{Fs, Options};
//! use engram_fuse::{MountOptions, mount};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let fs = Fs::open("/dev/shm/pool", &Options::default())?; // EBUSY if the pool is in use
//! mount(fs, "/mnt/engram".as_ref(), &MountOptions::default())?; // until unmounted
//! # Ok(())
//! # }
//! ```
//!
//! The kernel talks to this process through `/dev/fuse` (the fuser crate's pure-Rust
//! mount: mount(2) as root, else the `fusermount3` helper from the fuse3 package; libfuse
//! itself is not linked). FUSE node ids are EngramFS inode numbers, so they are stable
//! across remounts. How permissions are checked is explained in `state.rs`, what the kernel
//! may cache and why in `ops.rs`.

mod data;
mod error;
mod fileattr;
mod mount;
mod namespace;
mod ops;
mod signals;
mod state;

pub use error::MountError;
pub use mount::{MountHandle, MountOptions, check_mount_point, mount, mount_with, spawn_mount};
pub use state::IoStats;
