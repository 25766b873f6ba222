//! A name replaced by rename over and over (write a temporary, rename it over the name: the
//! safe-save pattern) while another client looks the name up and acts on what it finds.
//! Linux never fails such a call: it acts on the old object or on the new one. A client
//! here finds the object lock-free and then asks the server to act on its handle, which
//! the rename may have freed in between.

use engram_core::{Error, Fs, OpenOptions, SetTime};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Replacements the other client makes meanwhile, at least: the calls really raced.
const MIN_REPLACED: u64 = 300;

#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// "/target", a regular file.
    File,
    /// "/link", a symlink to "/file".
    Symlink,
    /// "/dir", an empty directory.
    Dir,
}

/// The contents of the file's version `i`: all the same length.
fn version(i: u64) -> Vec<u8> {
    format!("v{i:07}").into_bytes()
}

fn setup(fs: &Fs, kind: Kind) {
    match kind {
        Kind::File => fs.write_file("/target", &version(0)).unwrap(),
        Kind::Symlink => {
            fs.write_file("/file", b"data").unwrap();
            fs.symlink("file", "/link").unwrap();
        }
        Kind::Dir => fs.mkdir("/dir", 0o755).unwrap(),
    }
}

/// Replace the name with a new object, the `i`th.
fn replace(fs: &Fs, kind: Kind, i: u64) {
    match kind {
        Kind::File => {
            fs.write_file("/target.tmp", &version(i)).unwrap();
            fs.rename("/target.tmp", "/target").unwrap();
        }
        Kind::Symlink => {
            let target = if i.is_multiple_of(2) { "file" } else { "/file" };
            fs.symlink(target, "/link.tmp").unwrap();
            fs.rename("/link.tmp", "/link").unwrap();
        }
        Kind::Dir => {
            fs.mkdir("/dir.tmp", 0o755).unwrap();
            // The other client may have made an entry in "/dir" for a moment.
            match fs.rename("/dir.tmp", "/dir") {
                Ok(()) => {}
                Err(e) if e.errno() == libc::ENOTEMPTY => fs.rmdir("/dir.tmp").unwrap(),
                Err(e) => panic!("rename of the directory: {e}"),
            }
        }
    }
}

type Outcome = Result<(), (&'static str, Error)>;

fn named<T>(what: &'static str, r: Result<T, Error>) -> Result<T, (&'static str, Error)> {
    r.map_err(|e| (what, e))
}

fn open(fs: &Fs, what: &'static str, path: &str, opts: OpenOptions) -> Outcome {
    named(what, fs.open_file(path, &opts)).map(drop)
}

/// One call (or a call and its undoing) on the name being replaced.
fn act(fs: &Fs, kind: Kind, round: u64) -> Outcome {
    let ro = OpenOptions::new().read(true);
    let wo = OpenOptions::new().write(true);
    let now = Some(SetTime::Now);
    match kind {
        Kind::File => match round % 12 {
            0 => {
                let data = named("read", fs.read_file("/target"))?;
                // Empty when one of this client's truncations came last.
                assert!(
                    data.is_empty() || (data.len() == 8 && data[0] == b'v'),
                    "read {data:?}"
                );
                Ok(())
            }
            1 => open(fs, "O_RDONLY|O_NOFOLLOW", "/target", ro.nofollow(true)),
            2 => open(fs, "O_WRONLY|O_CREAT", "/target", wo.create(true)),
            3 => open(
                fs,
                "O_RDWR|O_CREAT|O_TRUNC",
                "/target",
                ro.write(true).create(true).truncate(true),
            ),
            4 => open(fs, "O_WRONLY|O_TRUNC", "/target", wo.truncate(true)),
            5 => named("chmod", fs.chmod("/target", 0o644)),
            6 => named("chown", fs.chown("/target", Some(0), Some(0))),
            7 => named("utimens", fs.utimens("/target", now, now)),
            8 => named("truncate", fs.truncate("/target", 0)),
            9 => {
                named("link", fs.link("/target", "/hard"))?;
                named("unlink of the link", fs.unlink("/hard"))
            }
            10 => named("access", fs.access_at(None, b"/target", 6, true)),
            _ => open(fs, "O_RDONLY", "/target", ro),
        },
        Kind::Symlink => match round % 8 {
            0 => {
                let t = named("readlink", fs.readlink("/link"))?;
                assert!(t == b"file" || t == b"/file", "readlink {t:?}");
                Ok(())
            }
            1 => named("lstat", fs.lstat("/link")).map(drop),
            2 => open(fs, "O_RDONLY through the link", "/link", ro),
            3 => named("lchown", fs.chown_at(None, b"/link", Some(0), None, false)),
            4 => named(
                "utimens, not following",
                fs.utimens_at(None, b"/link", now, now, false),
            ),
            5 => {
                named("link of the link", fs.link("/link", "/hard"))?;
                named("unlink of the link", fs.unlink("/hard"))
            }
            6 => match fs.open_file("/link", &ro.nofollow(true)) {
                Err(e) if e.errno() == libc::ELOOP => Ok(()),
                Err(e) => Err(("O_NOFOLLOW on the link", e)),
                Ok(_) => panic!("O_NOFOLLOW opened a symlink"),
            },
            _ => named("access", fs.access_at(None, b"/link", 4, true)),
        },
        Kind::Dir => match round % 9 {
            0 => open(fs, "O_DIRECTORY", "/dir", ro.directory(true)),
            1 => {
                let names: Vec<_> = named("opendir", fs.read_dir("/dir"))?
                    .collect::<Result<_, _>>()
                    .map_err(|e| ("readdir", e))?;
                assert!(names.len() >= 2, "readdir {names:?}");
                Ok(())
            }
            2 => named("chmod", fs.chmod("/dir", 0o755)),
            3 => {
                named("mkdir in it", fs.mkdir("/dir/sub", 0o755))?;
                named("rmdir in it", fs.rmdir("/dir/sub"))
            }
            4 => {
                named("create in it", fs.write_file("/dir/f", b"f"))?;
                named("unlink in it", fs.unlink("/dir/f"))
            }
            5 => {
                named("symlink in it", fs.symlink("x", "/dir/s"))?;
                named("unlink in it", fs.unlink("/dir/s"))
            }
            6 => {
                named("create in it", fs.write_file("/dir/a", b"a"))?;
                named("rename in it", fs.rename("/dir/a", "/dir/b"))?;
                named("unlink in it", fs.unlink("/dir/b"))
            }
            7 => named("stat", fs.stat("/dir/.")).map(drop),
            _ => named("utimens", fs.utimens("/dir", now, now)),
        },
    }
}

/// Stops the other thread when dropped, also when an assertion fails, so that the scope
/// can join it.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// `writer` replaces the name of `kind` again and again while `reader` acts on it `rounds`
/// times at least: no call may fail.
pub fn race(reader: &Fs, writer: &Fs, kind: Kind, rounds: u64) {
    setup(writer, kind);
    let stop = AtomicBool::new(false);
    let replaced = AtomicU64::new(0);
    std::thread::scope(|s| {
        let (stop, replaced) = (&stop, &replaced);
        s.spawn(move || {
            let _stop = StopOnDrop(stop);
            let mut i = 1;
            while !stop.load(Ordering::Relaxed) {
                replace(writer, kind, i);
                replaced.store(i, Ordering::Relaxed);
                i += 1;
            }
        });
        let _stop = StopOnDrop(stop);
        let mut failures = Vec::new();
        let mut round = 0;
        // Until enough rounds have run against enough replacements: on a loaded machine the
        // writer can get few turns while the reader runs many rounds (260 replacements in
        // 300,000 rounds once, in CI), so the bound is a generous time, not a count.
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(240);
        while (round < rounds || replaced.load(Ordering::Relaxed) < MIN_REPLACED)
            && std::time::Instant::now() < give_up
            && !stop.load(Ordering::Relaxed)
        {
            if let Err((what, e)) = act(reader, kind, round) {
                failures.push(format!("round {round}: {what}: {e}"));
            }
            round += 1;
        }
        let replaced = replaced.load(Ordering::Relaxed);
        assert!(
            failures.is_empty(),
            "{kind:?}: {} of {round} calls failed during {replaced} replacements: {:#?}",
            failures.len(),
            &failures[..failures.len().min(12)]
        );
        assert!(replaced >= MIN_REPLACED, "only {replaced} replacements");
    });
}
