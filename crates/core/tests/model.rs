//! Model-based property test: random sequences of operations run against EngramFS and
//! against an in-memory model of the POSIX semantics Linux (ext4, tmpfs) gives; every
//! result (value or errno) and the final tree must agree, also after unmount and reopen,
//! and fsck must stay clean.
//!
//! The model follows fs/namei.c closely: `walk_parent` is link_path_walk (every component
//! but the last, symlinks followed, ELOOP after 40 links), and each operation then treats
//! the last component the way its system call does (filename_create for mkdir, symlink
//! and link; do_unlinkat; do_rmdir; do_renameat2 with lock_rename's "trap"; path_openat
//! for O_CREAT, which follows a final symlink and may create its target).
//!
//! Generated paths are literals (".", "..", repeated and trailing slashes, names of 250 to
//! 260 bytes, deep paths for the 40-link limit) or picks of paths that exist when the
//! operation runs, so that operations often hit something.
//!
//! Knobs: `PROPTEST_CASES` (default 256), `ENGRAM_MODEL_MAX_OPS` (operations per case,
//! default 60), `ENGRAM_MODEL_PARANOID=1` (compare the whole tree after every operation),
//! e.g. `PROPTEST_CASES=5000 cargo test --release -p engram-core --test model`.
//!
//! Operations that would hit a known engine bug (`Model::known_bug`) are skipped by the
//! random test so that it keeps finding other problems; each bug has an ignored regression
//! case (`regression_cases`). `ENGRAM_MODEL_NO_SKIP=1` runs them anyway. The model itself was checked against the Linux kernel (tmpfs) by running the
//! same generated sequences and regression cases through system calls.

#[path = "model/engine.rs"]
mod engine;
#[path = "model/generate.rs"]
mod generate;
#[path = "model/namei.rs"]
mod namei;
#[path = "model/ops.rs"]
mod ops;
#[path = "model/posix_model.rs"]
mod posix_model;
#[path = "model/regressions.rs"]
mod regressions;
#[path = "model/run.rs"]
mod run;
#[path = "model/syscalls.rs"]
mod syscalls;
#[path = "model/tree.rs"]
mod tree;
#[path = "model/values.rs"]
mod values;

use generate::op;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use run::{run_ops, skip_known};

pub type Errno = i32;

const ROOT: u64 = 1;
const NAME_MAX: usize = 255;
const PATH_MAX: usize = 4096;
const MAXSYMLINKS: u32 = 40;
const POOL_SIZE: u64 = 32 << 20;
/// Slot the compound "open, unlink, use" operation keeps its handle in.
const TEMP_SLOT: u8 = u8::MAX;

/// Operations per case: up to 60, or `ENGRAM_MODEL_MAX_OPS`.
fn max_ops() -> usize {
    std::env::var("ENGRAM_MODEL_MAX_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
        .max(1)
}

fn config() -> ProptestConfig {
    let mut c = ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 256;
    }
    c
}

proptest! {
    #![proptest_config(config())]

    #[test]
        fn engram_matches_linux_model(ops in prop::collection::vec(op(), 1..=max_ops())) {
        run_ops(&ops, skip_known()).map_err(TestCaseError::fail)?;
    }
}
