//! Calls on a name that another thread replaces by rename again and again (the safe-save
//! pattern) never fail: they act on the old object or on the new one, as in Linux.

mod common;

use common::replace::{Kind, race};
use common::{assert_clean, new_fs};

/// Calls on the name, at least. In one process the window between a walk and its request
/// is short: many rounds, which take little time.
const ROUNDS: u64 = 200_000;

#[test]
fn calls_on_a_file_replaced_by_rename_never_fail() {
    let (_p, fs) = new_fs("replace-file", 64);
    race(&fs, &fs.clone(), Kind::File, ROUNDS);
    assert_clean(&fs);
}

#[test]
fn calls_on_a_symlink_replaced_by_rename_never_fail() {
    let (_p, fs) = new_fs("replace-link", 64);
    race(&fs, &fs.clone(), Kind::Symlink, ROUNDS);
    assert_clean(&fs);
}

#[test]
fn calls_on_a_directory_replaced_by_rename_never_fail() {
    let (_p, fs) = new_fs("replace-dir", 64);
    race(&fs, &fs.clone(), Kind::Dir, ROUNDS);
    assert_clean(&fs);
}
