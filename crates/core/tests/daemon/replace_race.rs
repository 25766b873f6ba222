//! Calls on a name that another client of the daemon replaces by rename again and again
//! never fail (`common::replace`): the handle a client found can be freed before its
//! request reaches the daemon.

use super::{Daemon, assert_fsck_clean};
use crate::common::replace::{Kind, race};
use engram_core::Fs;

/// Calls on the name, at least: each is a round trip or more.
const ROUNDS: u64 = 3000;

fn through_the_daemon(name: &str, kind: Kind) {
    let d = Daemon::start(name, 64 << 20);
    let reader = Fs::connect(&d.socket).unwrap();
    let writer = Fs::connect(&d.socket).unwrap();
    race(&reader, &writer, kind, ROUNDS);
    assert_fsck_clean(&reader);
}

#[test]
fn calls_on_a_file_replaced_by_another_client_never_fail() {
    through_the_daemon("replace-file", Kind::File);
}

#[test]
fn calls_on_a_symlink_replaced_by_another_client_never_fail() {
    through_the_daemon("replace-link", Kind::Symlink);
}

#[test]
fn calls_on_a_directory_replaced_by_another_client_never_fail() {
    through_the_daemon("replace-dir", Kind::Dir);
}
