//! EngramFS through its native Rust API: in-process (the server runs in this process), or
//! through an `engram serve` daemon started in a thread of this process and reached with
//! `Fs::connect`, exactly as another process would reach it.

use super::{Kind, Open, ProgramDir, Target, TargetFile};
use engram_core::daemon::{ServeOptions, Stop, serve_until};
use engram_core::{File, Fs, OpenOptions, Options};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

static POOLS: AtomicU64 = AtomicU64::new(0);

/// A pool path unique to this process and call, in the run's pool directory
/// (`crate::pools`: a huge-page tmpfs, or /dev/shm).
pub fn pool_path(tag: &str) -> PathBuf {
    let n = POOLS.fetch_add(1, Ordering::Relaxed);
    crate::pools::current().join(format!(
        "engram-bench-{}-{n}-{tag}.pool",
        std::process::id()
    ))
}

/// Format a pool without reserving its data pages up front (a sparse file: only the data
/// pages the file system touches take memory, so a pool sized for a million inodes costs
/// what those inodes use). `engram mkfs` reserves the whole pool instead: the shared
/// targets use that; the scaling rows, whose pools are sized for up to a million inodes,
/// use this.
///
/// The metadata regions (log, bitmaps, inode table, metadata pages: everything before the
/// data pages) are faulted in, as `mkfs_populated` does for a whole pool. Persistent memory has
/// no first-touch cost, and on this stand-in a create that reached a fresh 2 MiB page of
/// the log or the inode table waited for it to be zeroed (and, in a virtual machine, for
/// the host to back it): a quarter of the time of the creates at a million entries.
pub fn mkfs_sparse(path: &Path, size: u64) -> io::Result<()> {
    let geo = engram_core::layout::Geometry::for_size(size)?;
    let _ = std::fs::remove_file(path);
    std::fs::File::create(path)?.set_len(size)?;
    let pool = engram_pmem::Pool::open(path)?;
    engram_core::mkfs::format(&pool, &geo);
    pool.prefault(0, geo.data_off);
    Ok(())
}

/// Make a pool as `engram mkfs` does (the whole file reserved) and fault it in once, so
/// that no benchmark pays for zeroing pages it touches first: /dev/shm zeroes at
/// `fallocate` (mkfs), a huge-page tmpfs only on first touch, one 2 MiB page at a time
/// (1 MiB appends ran at a third of their speed).
///
/// On the huge-page tmpfs, a pool made while memory is fragmented gets 4 KiB pages where no
/// free 2 MiB block was found, and a mapping of it then takes a page fault per 4 KiB on
/// first touch (1 MiB appends measured 3.6 GB/s instead of 15-23). Such a pool is made once
/// more after compacting memory; if it is still short, a line says how much. (Pools
/// elsewhere, such as /dev/shm, have 4 KiB pages by design: not checked.)
fn mkfs_populated(path: &Path, size: u64) -> io::Result<()> {
    for attempt in 0..2 {
        Fs::mkfs(path, size)?;
        let pool = engram_pmem::Pool::open(path)?;
        pool.prefault(0, pool.len());
        if !crate::pools::huge_pages() {
            return Ok(());
        }
        let Some(small) = crate::pools::small_page_bytes(pool.as_ptr(), pool.len()) else {
            return Ok(());
        };
        if small == 0 {
            return Ok(());
        }
        drop(pool);
        if attempt == 0 {
            // Its pages go back first, so that compaction can move them too.
            std::fs::remove_file(path)?;
            crate::pools::compact_memory();
            continue;
        }
        println!(
            "note: {} MiB of the {} MiB pool {} are on 4 KiB pages (no free 2 MiB blocks): \
             rows that first touch them pay a page fault per 4 KiB",
            small >> 20,
            size >> 20,
            path.display()
        );
        return Ok(());
    }
    Ok(())
}

struct Daemon {
    stop: Arc<Stop>,
    thread: Option<JoinHandle<engram_core::Result<()>>>,
    socket: PathBuf,
}

impl Daemon {
    fn start(pool: &Path) -> io::Result<Daemon> {
        let socket = PathBuf::from(format!(
            "/tmp/engram-bench-{}-{}.sock",
            std::process::id(),
            POOLS.fetch_add(1, Ordering::Relaxed)
        ));
        let stop = Arc::new(Stop::new());
        let (p, s, st) = (pool.to_path_buf(), socket.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("engram-daemon".into())
            .spawn(move || {
                let opts = ServeOptions {
                    socket: s,
                    idle_exit: None,
                    log_clients: false,
                };
                serve_until(&p, &opts, &st, &|_line| {})
            })?;
        let mut d = Daemon {
            stop,
            thread: Some(thread),
            socket,
        };
        let until = Instant::now() + Duration::from_secs(10);
        while !d.socket.exists() {
            if d.thread.as_ref().is_some_and(|t| t.is_finished()) {
                let r = d.thread.take().map(|t| t.join());
                return Err(match r {
                    Some(Ok(Err(e))) => e.into(),
                    _ => io::Error::other("the daemon thread stopped at start"),
                });
            }
            if Instant::now() > until {
                return Err(io::Error::other("the daemon did not start listening"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(d)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

pub struct EngramTarget {
    name: String,
    fs: Option<Fs>,
    daemon: Option<Daemon>,
    pool: PathBuf,
    size: u64,
    /// The pool programs open in-process through the shim (made on first use): they cannot
    /// open `pool`, which this process holds.
    programs: Mutex<Option<PathBuf>>,
}

/// The prefix under which programs started by the harness reach EngramFS through the shim.
const PROGRAM_MOUNT: &str = "/mnt/engram-bench";

impl EngramTarget {
    /// The native API with the server in this process, on a fresh pool of `size` bytes
    /// made as `engram mkfs` makes it (the whole file reserved).
    pub fn native(name: &str, size: u64) -> io::Result<EngramTarget> {
        EngramTarget::start(name, size, false, false)
    }

    /// The native API connected to a daemon (serving a fresh pool made like `native`'s).
    pub fn daemon(name: &str, size: u64) -> io::Result<EngramTarget> {
        EngramTarget::start(name, size, true, false)
    }

    fn start(name: &str, size: u64, daemon: bool, sparse: bool) -> io::Result<EngramTarget> {
        let pool = pool_path(name);
        let started = if sparse {
            mkfs_sparse(&pool, size)
        } else {
            mkfs_populated(&pool, size)
        }
        .and_then(|()| {
            if daemon {
                let d = Daemon::start(&pool)?;
                Ok((Fs::connect(&d.socket)?, Some(d)))
            } else {
                Ok((Fs::open(&pool, &Options::default())?, None))
            }
        });
        match started {
            Ok((fs, daemon)) => Ok(EngramTarget {
                name: name.to_string(),
                fs: Some(fs),
                daemon,
                pool,
                size,
                programs: Mutex::new(None),
            }),
            Err(e) => {
                let _ = std::fs::remove_file(&pool);
                Err(e)
            }
        }
    }

    pub fn fs(&self) -> &Fs {
        self.fs
            .as_ref()
            .expect("the file system is open until drop")
    }

    /// The daemon's socket, for more clients (None in-process).
    pub fn socket(&self) -> Option<&Path> {
        self.daemon.as_ref().map(|d| d.socket.as_path())
    }
}

impl Drop for EngramTarget {
    fn drop(&mut self) {
        // Clients first, then the daemon (it checkpoints), then the pool file.
        drop(self.fs.take());
        drop(self.daemon.take());
        let programs = self.programs.get_mut().unwrap_or_else(|e| e.into_inner());
        for p in std::iter::once(self.pool.clone()).chain(programs.take()) {
            // The shim's lock and mapping files (sqlite3, db_bench) first: they are named
            // after the pool's canonical path, which needs the pool.
            engram_core::sidefiles::remove_all(&p);
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// Remove a directory tree through the native API.
fn remove_tree(fs: &Fs, path: &str) -> io::Result<()> {
    for e in fs.read_dir(path)? {
        let e = e?;
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let p = format!("{path}/{}", e.name_str());
        if e.file_type == libc::DT_DIR {
            remove_tree(fs, &p)?;
        } else {
            fs.unlink(&p)?;
        }
    }
    Ok(fs.rmdir(path)?)
}

impl EngramTarget {
    /// The pool of programs run in-process through the shim, made (and faulted in, like the
    /// shared pools) on first use.
    fn programs_pool(&self) -> io::Result<PathBuf> {
        let mut programs = self.programs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = programs.as_ref() {
            return Ok(p.clone());
        }
        let p = pool_path(&format!("{}-programs", self.name));
        let made = mkfs_populated(&p, self.size);
        if let Err(e) = made {
            let _ = std::fs::remove_file(&p);
            return Err(e);
        }
        *programs = Some(p.clone());
        Ok(p)
    }
}

struct EngramFile(File);

impl TargetFile for EngramFile {
    fn pread(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        Ok(self.0.read_at(buf, off)?)
    }
    fn pwrite(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        Ok(self.0.write_at(buf, off)?)
    }
    fn append(&self, buf: &[u8]) -> io::Result<usize> {
        Ok(self.0.write_next(buf)?)
    }
    fn fdatasync(&self) -> io::Result<()> {
        Ok(self.0.sync_data()?)
    }
}

impl Target for EngramTarget {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> Kind {
        Kind::Engram
    }
    fn open(&self, path: &str, how: Open) -> io::Result<Box<dyn TargetFile>> {
        let opts = OpenOptions::new()
            .read(true)
            .write(how.write)
            .create(how.create)
            .append(how.append)
            .truncate(how.truncate);
        Ok(Box::new(EngramFile(self.fs().open_file(path, &opts)?)))
    }
    fn create(&self, path: &str) -> io::Result<()> {
        let opts = OpenOptions::new().write(true).create_new(true);
        self.fs().open_file(path, &opts)?;
        Ok(())
    }
    fn mkdir(&self, path: &str) -> io::Result<()> {
        Ok(self.fs().mkdir(path, 0o755)?)
    }
    fn unlink(&self, path: &str) -> io::Result<()> {
        Ok(self.fs().unlink(path)?)
    }
    fn rmdir(&self, path: &str) -> io::Result<()> {
        Ok(self.fs().rmdir(path)?)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        Ok(self.fs().rename(from, to)?)
    }
    fn stat(&self, path: &str) -> io::Result<u64> {
        Ok(self.fs().stat(path)?.size)
    }
    fn count_dir(&self, path: &str) -> io::Result<usize> {
        let mut n = 0;
        for e in self.fs().read_dir(path)? {
            let e = e?;
            if e.name != b"." && e.name != b".." {
                n += 1;
            }
        }
        Ok(n)
    }
    fn list_dir(&self, path: &str) -> io::Result<Vec<(String, bool)>> {
        let mut out = Vec::new();
        for e in self.fs().read_dir(path)? {
            let e = e?;
            if e.name != b"." && e.name != b".." {
                out.push((e.name_str().into_owned(), e.file_type == libc::DT_DIR));
            }
        }
        Ok(out)
    }
    /// Programs reach EngramFS through the shim: the daemon target's programs connect to
    /// its daemon; the native target's open a pool of their own in-process (this process
    /// holds the shared one), with `scratch` made in it and removed afterwards.
    fn program_dir(&self, scratch: &str) -> io::Result<ProgramDir> {
        let lib = engram_run::find_library().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "libengram_preload.so not found beside the executable (build it: cargo build \
                 --release -p engram-preload; or set ENGRAM_PRELOAD_LIB)",
            )
        })?;
        let mut env = vec![
            ("LD_PRELOAD".to_string(), lib.display().to_string()),
            ("ENGRAM_MOUNT".to_string(), PROGRAM_MOUNT.to_string()),
        ];
        let dir = PathBuf::from(format!("{PROGRAM_MOUNT}{scratch}"));
        if let Some(d) = &self.daemon {
            env.push(("ENGRAM_SOCKET".into(), d.socket.display().to_string()));
            return Ok(ProgramDir {
                dir,
                env,
                cleanup: None,
            });
        }
        let pool = self.programs_pool()?;
        Fs::open(&pool, &Options::default())?.mkdir(scratch, 0o755)?;
        env.push(("ENGRAM_POOL".into(), pool.display().to_string()));
        let scratch = scratch.to_string();
        Ok(ProgramDir {
            dir,
            env,
            cleanup: Some(Box::new(move || {
                let fs = Fs::open(&pool, &Options::default())?;
                remove_tree(&fs, &scratch)
            })),
        })
    }
    fn fresh(&self, files: u64) -> Option<io::Result<Box<dyn Target>>> {
        // An inode per 8 KiB of pool; leave a quarter spare, round to 1 GiB.
        let size = ((files + 4096) * 8192 * 5 / 4).div_ceil(1 << 30) << 30;
        let t = EngramTarget::start(&self.name, size, self.daemon.is_some(), true);
        Some(t.map(|t| Box::new(t) as Box<dyn Target>))
    }
}
