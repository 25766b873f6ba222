//! Deterministic regression cases, each with its own #[test].

use super::PATH_MAX;
use super::ops::{Op, OpT};
use super::run::run_ops;
use super::values::{Mode, P};
use engram_core::{RENAME_EXCHANGE, RENAME_NOREPLACE};

// ---------------------------------------------------------------------------------------
// Deterministic regression cases
// ---------------------------------------------------------------------------------------

pub fn create(path: &str) -> Op {
    OpT::Create {
        path: P::new(path),
        excl: false,
        trunc: false,
        write: true,
        perm: Mode(0o644),
    }
}

pub fn create_excl(path: &str) -> Op {
    OpT::Create {
        path: P::new(path),
        excl: true,
        trunc: false,
        write: true,
        perm: Mode(0o644),
    }
}

pub fn mkdir(path: &str) -> Op {
    OpT::Mkdir {
        path: P::new(path),
        perm: Mode(0o755),
    }
}

pub fn symlink(target: &str, path: &str) -> Op {
    OpT::Symlink {
        target: P::new(target),
        path: P::new(path),
    }
}

pub fn link(from: &str, to: &str) -> Op {
    OpT::Link {
        from: P::new(from),
        to: P::new(to),
    }
}

pub fn rename(from: &str, to: &str, flags: u32) -> Op {
    OpT::Rename {
        from: P::new(from),
        to: P::new(to),
        flags,
    }
}

pub fn stat(path: &str) -> Op {
    OpT::Stat { path: P::new(path) }
}

pub fn write(path: &str, off: u64, len: usize) -> Op {
    OpT::Write {
        path: P::new(path),
        off,
        len,
        seed: 7,
    }
}

/// A named sequence of operations; `bug` names the engine bug it shows, if it does.
pub struct Case {
    pub name: &'static str,
    pub bug: Option<&'static str>,
    pub ops: Vec<Op>,
}

/// Every regression case (the Linux check harness runs these against the kernel too).
pub fn regression_cases() -> Vec<Case> {
    // "/l" -> "." so that every "/l" component costs one link.
    let deep = |n: usize| "/l".repeat(n) + "/f";
    vec![
        Case {
            name: "symlink_limit_is_40",
            bug: None,
            ops: vec![
                symlink(".", "/l"),
                create("/f"),
                stat(&deep(40)),
                stat(&deep(41)),
                create(&deep(40)),
                create(&deep(41)),
            ],
        },
        Case {
            name: "bug_new_name_with_slash_exists",
            bug: Some(
                "symlink and link onto an existing name followed by a slash give ENOENT, not EEXIST",
            ),
            ops: vec![
                create("/f"),
                mkdir("/d"),
                symlink("x", "/f/"),
                symlink("x", "/d/"),
                link("/f", "/d/"),
            ],
        },
        Case {
            name: "bug_create_excl_dot",
            bug: Some("open(\"/.\", O_CREAT|O_EXCL) gives EISDIR, not EEXIST"),
            ops: vec![
                mkdir("/d"),
                create_excl("/."),
                create_excl("/d/.."),
                create_excl("/"),
            ],
        },
        Case {
            name: "bug_link_dir_onto_existing",
            bug: Some(
                "link(dir, existing) gives EPERM, not EEXIST (Linux looks at the new name first)",
            ),
            ops: vec![mkdir("/d"), create("/f"), link("/d", "/f"), link("/", "/d")],
        },
        Case {
            name: "bug_rename_noreplace_onto_dot",
            bug: Some("rename(f, \"/\", RENAME_NOREPLACE) gives EBUSY, not EEXIST"),
            ops: vec![
                create("/f"),
                mkdir("/d"),
                rename("/f", "/", RENAME_NOREPLACE),
                rename("/f", "/d/.", RENAME_NOREPLACE),
            ],
        },
        Case {
            name: "bug_rename_bad_flags_checked_late",
            bug: Some(
                "rename with RENAME_NOREPLACE|RENAME_EXCHANGE fails on the paths before EINVAL",
            ),
            ops: vec![
                rename("/missing/x", "/y", RENAME_NOREPLACE | RENAME_EXCHANGE),
                rename("/", "/y", RENAME_NOREPLACE | RENAME_EXCHANGE),
            ],
        },
        Case {
            name: "bug_rename_slash_checked_early",
            bug: Some(
                "rename checks \"a source with slashes must be a directory\" before the target: \
                 rename(f, \"f/\", NOREPLACE) gives ENOTDIR, not EEXIST; rename(f, \"d/\", EXCHANGE) \
                 fails with ENOTDIR but Linux exchanges; rename(d, \"f/\", EXCHANGE) exchanges but Linux \
                 says ENOTDIR",
            ),
            ops: vec![
                create("/f"),
                mkdir("/d"),
                rename("/f", "/f/", RENAME_NOREPLACE),
                rename("/f/", "/missing", RENAME_EXCHANGE),
                rename("/d", "/f/", RENAME_EXCHANGE),
                rename("/f", "/d/", RENAME_EXCHANGE),
            ],
        },
        Case {
            name: "bug_creat_through_symlink",
            bug: Some(
                "open(O_CREAT) through a symlink: a dangling symlink to \"a/b/\" creates the regular \
                 file a/b (Linux: EISDIR); a symlink to a dangling symlink opens the second symlink \
                 itself (Linux creates the final target); a symlink \"c\" -> \"c/\" gives ELOOP \
                 (Linux: EISDIR); O_CREAT|O_RDONLY through a symlink to a directory succeeds \
                 (Linux: EISDIR)",
            ),
            ops: vec![
                mkdir("/a"),
                symlink("/a/b/", "/c"),
                create("/c"),
                stat("/a/b"),
                symlink("x", "/s"),
                symlink("y", "/x"),
                create("/s"),
                stat("/y"),
                write("/s", 0, 10),
                symlink("l/", "/l"),
                create("/l"),
                symlink("/a", "/sa"),
                OpT::Create {
                    path: P::new("/sa"),
                    excl: false,
                    trunc: false,
                    write: false,
                    perm: Mode(0o644),
                },
            ],
        },
        Case {
            name: "bug_creat_symlink_chain_counts_all_links",
            bug: Some(
                "open(O_CREAT) through a symlink counted the links of the path, of the chain and \
                 inside each target separately (40 each), where Linux's limit of 40 is for the \
                 whole resolution: a link to \"/b\"x40 with \"/b\" -> \"/\" gave EISDIR \
                 (Linux: ELOOP), and \"/l\"x40 + \"/s\" created s's target",
            ),
            ops: vec![
                symlink("/", "/b"),
                symlink(&"/b".repeat(40), "/a40"),
                symlink(&"/b".repeat(39), "/a39"),
                create("/a40"),
                create("/a39"),
                symlink(".", "/l"),
                symlink("t", "/s"),
                create(&("/l".repeat(40) + "/s")),
                stat("/t"),
                create(&("/l".repeat(39) + "/s")),
                stat("/t"),
            ],
        },
        Case {
            name: "bug_rename_file_onto_ancestor",
            bug: Some(
                "rename(\"/a/f\", \"/a\") gives EISDIR (Linux: ENOTEMPTY, the target is an ancestor)",
            ),
            ops: vec![mkdir("/a"), create("/a/f"), rename("/a/f", "/a", 0)],
        },
        Case {
            name: "bug_long_last_name_checked_early",
            bug: Some(
                "a last component longer than 255 bytes fails with ENAMETOOLONG before the other \
                 checks: rename(\"/<256 bytes>\", \"/missing/x\") (Linux: ENOENT), \
                 open(\"/<256 bytes>/\", O_CREAT) (Linux: EISDIR)",
            ),
            ops: vec![
                rename(&format!("/{}", "x".repeat(256)), "/missing/x", 0),
                rename("/missing", &format!("/{}", "x".repeat(256)), 0),
                create(&format!("/{}/", "x".repeat(256))),
            ],
        },
        Case {
            name: "bug_symlink_target_checked_late",
            bug: Some(
                "the target of symlink() is checked after the link path: symlink(\"\", \"/\") gives \
                 EEXIST (Linux: ENOENT), symlink(<4096 bytes>, \"/missing/x\") gives ENOENT \
                 (Linux: ENAMETOOLONG)",
            ),
            ops: vec![
                symlink("", "/"),
                symlink(&"y".repeat(PATH_MAX), "/missing/x"),
            ],
        },
        Case {
            // rmdir of "..", "." and "/" (once an engine bug: errno from the last byte).
            name: "rmdir_dot_errnos",
            bug: None,
            ops: vec![
                mkdir("/a"),
                OpT::Rmdir {
                    path: P::new("/a/.."),
                },
                OpT::Rmdir {
                    path: P::new("/a/./"),
                },
                OpT::Rmdir {
                    path: P::new("/.."),
                },
                OpT::Rmdir { path: P::new("//") },
            ],
        },
        Case {
            // Once an engine bug: open("/d", O_CREAT|O_RDONLY) of a directory succeeded.
            name: "creat_rdonly_dir_is_eisdir",
            bug: None,
            ops: vec![
                mkdir("/d"),
                OpT::Create {
                    path: P::new("/d"),
                    excl: false,
                    trunc: false,
                    write: false,
                    perm: Mode(0o644),
                },
            ],
        },
        Case {
            name: "bug_symlink_path_concat_too_long",
            bug: Some(
                "a path through a symlink fails with ENAMETOOLONG when the target plus the rest of \
                 the path exceed PATH_MAX, though both are shorter (Linux resolves it)",
            ),
            ops: vec![
                mkdir("/d"),
                create("/d/f"),
                symlink(&("./".repeat(2000) + "d"), "/s"),
                stat(&("/s/".to_string() + &"./".repeat(100) + "f")),
                symlink(&format!("/l/{}", "x".repeat(250)), "/l"),
                stat("/l/x"),
            ],
        },
        Case {
            // Once an engine bug: zero_range_beyond_eof zeroed page 0 of a one-page file with
            // a length of -1 (a panic) when the file grew from 4096 bytes or more.
            name: "grow_one_page_file",
            bug: None,
            ops: vec![
                create("/f"),
                OpT::Truncate {
                    path: P::new("/f"),
                    size: 4097,
                },
                write("/f", 0, 1),
                write("/f", 4098, 1),
                OpT::Read { path: P::new("/f") },
                create("/g"),
                write("/g", 0, 1),
                OpT::Truncate {
                    path: P::new("/g"),
                    size: 5000,
                },
                OpT::Truncate {
                    path: P::new("/g"),
                    size: 9000,
                },
            ],
        },
        Case {
            name: "bug_mkdir_keeps_setid_bits",
            bug: Some(
                "mkdir(\"/d\", 0o2755) makes a directory with mode 0o2755 (Linux drops S_ISUID and \
                 S_ISGID from mkdir's mode: 0o755)",
            ),
            ops: vec![
                OpT::Mkdir {
                    path: P::new("/d"),
                    perm: Mode(0o2755),
                },
                OpT::Mkdir {
                    path: P::new("/e"),
                    perm: Mode(0o4755),
                },
                stat("/d"),
                stat("/e"),
            ],
        },
        Case {
            name: "setgid_directory_is_inherited",
            bug: None,
            ops: vec![
                mkdir("/d"),
                OpT::Chmod {
                    path: P::new("/d"),
                    perm: Mode(0o2755),
                },
                mkdir("/d/e"),
                create("/d/f"),
                stat("/d/e"),
                stat("/d/f"),
            ],
        },
    ]
}

fn run_case(name: &str) {
    let case = regression_cases()
        .into_iter()
        .find(|c| c.name == name)
        .expect("no such case");
    if let Err(e) = run_ops(&case.ops, false) {
        panic!(
            "{}{e}",
            case.bug
                .map(|b| format!("engine bug: {b}\n"))
                .unwrap_or_default()
        );
    }
}

#[test]
fn bug_creat_symlink_chain_counts_all_links() {
    run_case("bug_creat_symlink_chain_counts_all_links");
}

#[test]
fn symlink_limit_is_40() {
    run_case("symlink_limit_is_40");
}

#[test]
fn bug_new_name_with_slash_exists() {
    run_case("bug_new_name_with_slash_exists");
}

#[test]
fn bug_create_excl_dot() {
    run_case("bug_create_excl_dot");
}

#[test]
fn bug_link_dir_onto_existing() {
    run_case("bug_link_dir_onto_existing");
}

#[test]
fn bug_rename_noreplace_onto_dot() {
    run_case("bug_rename_noreplace_onto_dot");
}

#[test]
fn bug_rename_bad_flags_checked_late() {
    run_case("bug_rename_bad_flags_checked_late");
}

#[test]
fn bug_rename_slash_checked_early() {
    run_case("bug_rename_slash_checked_early");
}

#[test]
fn bug_creat_through_symlink() {
    run_case("bug_creat_through_symlink");
}

#[test]
fn bug_rename_file_onto_ancestor() {
    run_case("bug_rename_file_onto_ancestor");
}

#[test]
fn bug_long_last_name_checked_early() {
    run_case("bug_long_last_name_checked_early");
}

#[test]
fn bug_symlink_target_checked_late() {
    run_case("bug_symlink_target_checked_late");
}

#[test]
fn rmdir_dot_errnos() {
    run_case("rmdir_dot_errnos");
}

#[test]
fn creat_rdonly_dir_is_eisdir() {
    run_case("creat_rdonly_dir_is_eisdir");
}

#[test]
fn bug_symlink_path_concat_too_long() {
    run_case("bug_symlink_path_concat_too_long");
}

#[test]
fn grow_one_page_file() {
    run_case("grow_one_page_file");
}

#[test]
fn bug_mkdir_keeps_setid_bits() {
    run_case("bug_mkdir_keeps_setid_bits");
}

#[test]
fn setgid_directory_is_inherited() {
    run_case("setgid_directory_is_inherited");
}

/// Every case has its test.
#[test]
fn every_case_has_a_test() {
    let src = include_str!("regressions.rs");
    for c in regression_cases() {
        assert!(
            src.contains(&format!("fn {}()", c.name)),
            "regression case {} has no #[test]",
            c.name
        );
        assert_eq!(
            c.bug.is_some(),
            c.name.starts_with("bug_"),
            "{}: name bug cases bug_*",
            c.name
        );
    }
}
