//! What three shim paths cost a program, timed with plain system calls, to run under
//! `engram run` (and without it, on a real directory, for the kernel's own cost):
//!
//! - `msync MIB`: a shared writable mapping of MIB MiB; store to one page, `msync` the
//!   whole mapping; per round (the shim writes back what the kernel records as stored to).
//! - `missing`: `stat` of a path that does not exist, under a real directory (the shim
//!   looks whether the kernel's lookup met a symlink that could lead into the prefix).
//! - `romap KIB`: open a KIB KiB file read-only, map it shared read-only, touch each page,
//!   unmap and close (the mapping joins the file's backing file).
//! - `remap MIB`: a MIB MiB file kept open; map it shared, store to one page, unmap, write
//!   4 KiB with `pwrite`; per round (gdbm maps its file again each time it grows: the
//!   backing file now stays while the file is open, so a mapping joins it).
//! - `pread 0|1`: 4 KiB `pread`s of a 1 MiB file kept open, never mapped (0) or mapped
//!   once and unmapped (1: its count lingers, so reads go to its backing file); per read.
//!
//! `engram run --pool P -- target/release/examples/shim_costs OP DIR [ARG] [ROUNDS]`,
//! DIR under the prefix for `msync` and `romap`, a real directory for `missing` (ARG is
//! ignored there); ROUNDS 200 (100,000 for `missing`).

use std::ffi::CString;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (op, dir) = match (args.first(), args.get(1)) {
        (Some(op), Some(dir)) => (op.as_str(), dir.as_str()),
        _ => {
            return Err(
                "usage: shim_costs msync|missing|romap|remap|pread DIR [ARG] [ROUNDS]".into(),
            );
        }
    };
    let arg: usize = args.get(2).map_or(Ok(64), |a| a.parse())?;
    let default_rounds = if op == "missing" { 100_000 } else { 200 };
    let rounds: usize = args.get(3).map_or(Ok(default_rounds), |a| a.parse())?;
    let per_round = match op {
        "msync" => msync_rounds(dir, arg << 20, rounds)?,
        "missing" => missing_rounds(dir, rounds)?,
        "romap" => romap_rounds(dir, arg << 10, rounds)?,
        "remap" => remap_rounds(dir, arg << 20, rounds)?,
        "pread" => pread_rounds(dir, arg != 0, rounds)?,
        other => return Err(format!("unknown operation {other}").into()),
    };
    println!("{op} {arg}: {:.2} us per round", per_round * 1e6);
    Ok(())
}

fn last_error(what: &str) -> Box<dyn std::error::Error> {
    format!("{what}: {}", std::io::Error::last_os_error()).into()
}

/// A file of `len` bytes at `path`, open for reading and writing.
fn make_file(path: &CString, len: usize) -> Result<libc::c_int, Box<dyn std::error::Error>> {
    // SAFETY: plain system calls on a NUL-terminated path and our own descriptor.
    unsafe {
        let fd = libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
            0o644,
        );
        if fd < 0 || libc::ftruncate(fd, len as libc::off_t) != 0 {
            return Err(last_error("making the file"));
        }
        Ok(fd)
    }
}

fn msync_rounds(dir: &str, len: usize, rounds: usize) -> Result<f64, Box<dyn std::error::Error>> {
    let path = CString::new(format!("{dir}/msync-cost"))?;
    let fd = make_file(&path, len)?;
    let bytes = map_shared(fd, len)?;
    let started = Instant::now();
    for r in 0..rounds {
        // SAFETY: a store inside the mapping, and msync of the mapping.
        unsafe {
            *bytes.add((r * 7919 * 4096) % len) = r as u8;
            if libc::msync(bytes.cast(), len, libc::MS_SYNC) != 0 {
                return Err(last_error("msync"));
            }
        }
    }
    let elapsed = started.elapsed();
    // SAFETY: unmapping the mapping made above.
    unsafe { libc::munmap(bytes.cast(), len) };
    Ok(closed(fd, &path, elapsed, rounds))
}

fn missing_rounds(dir: &str, rounds: usize) -> Result<f64, Box<dyn std::error::Error>> {
    let path = CString::new(format!("{dir}/no-such-dir/no-such-file"))?;
    // SAFETY: stat into a local buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let started = Instant::now();
    for _ in 0..rounds {
        // SAFETY: as above.
        if unsafe { libc::stat(path.as_ptr(), &mut st) } == 0 {
            return Err(format!("{} exists", path.to_string_lossy()).into());
        }
    }
    Ok(started.elapsed().as_secs_f64() / rounds as f64)
}

fn romap_rounds(dir: &str, len: usize, rounds: usize) -> Result<f64, Box<dyn std::error::Error>> {
    let path = CString::new(format!("{dir}/romap-cost"))?;
    // SAFETY: writing our own buffer to our own descriptor.
    unsafe {
        let fd = make_file(&path, 0)?;
        let data = vec![7u8; len];
        if libc::write(fd, data.as_ptr().cast(), len) != len as isize {
            return Err(last_error("write"));
        }
        libc::close(fd);
    }
    let mut sum = 0u64;
    let started = Instant::now();
    for _ in 0..rounds {
        // SAFETY: a read-only mapping of our own descriptor, read inside its length.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
            let m = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            );
            if fd < 0 || m == libc::MAP_FAILED {
                return Err(last_error("open and mmap"));
            }
            for off in (0..len).step_by(4096) {
                sum += u64::from(*(m as *const u8).add(off));
            }
            libc::munmap(m, len);
            libc::close(fd);
        }
    }
    let per = started.elapsed().as_secs_f64() / rounds as f64;
    std::hint::black_box(sum);
    // SAFETY: removing our own file.
    unsafe { libc::unlink(path.as_ptr()) };
    Ok(per)
}

/// A shared writable mapping of `len` bytes of `fd`.
fn map_shared(fd: libc::c_int, len: usize) -> Result<*mut u8, Box<dyn std::error::Error>> {
    // SAFETY: mapping our own descriptor; the caller stores only inside the mapping.
    let m = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if m == libc::MAP_FAILED {
        return Err(last_error("mmap"));
    }
    Ok(m.cast())
}

fn remap_rounds(dir: &str, len: usize, rounds: usize) -> Result<f64, Box<dyn std::error::Error>> {
    let path = CString::new(format!("{dir}/remap-cost"))?;
    let fd = make_file(&path, len)?;
    let page = [5u8; 4096];
    let pages = len / 4096;
    let started = Instant::now();
    for i in 0..rounds {
        let m = map_shared(fd, len)?;
        // SAFETY: a store inside the mapping, then unmapping it and writing our own buffer.
        unsafe {
            *m.add((i * 7 % pages) * 4096) = i as u8;
            libc::munmap(m.cast(), len);
            let at = ((i * 13 % pages) * 4096) as libc::off_t;
            if libc::pwrite(fd, page.as_ptr().cast(), page.len(), at) != 4096 {
                return Err(last_error("pwrite"));
            }
        }
    }
    Ok(closed(fd, &path, started.elapsed(), rounds))
}

fn pread_rounds(dir: &str, mapped: bool, rounds: usize) -> Result<f64, Box<dyn std::error::Error>> {
    const LEN: usize = 1 << 20;
    let path = CString::new(format!("{dir}/pread-cost"))?;
    let fd = make_file(&path, 0)?;
    let data = vec![3u8; LEN];
    // SAFETY: writing our own buffer to our own descriptor.
    if unsafe { libc::write(fd, data.as_ptr().cast(), LEN) } != LEN as isize {
        return Err(last_error("write"));
    }
    if mapped {
        let m = map_shared(fd, LEN)?;
        // SAFETY: unmapping the mapping just made.
        unsafe { libc::munmap(m.cast(), LEN) };
    }
    let mut buf = [0u8; 4096];
    let started = Instant::now();
    for i in 0..rounds {
        let at = ((i % (LEN / 4096)) * 4096) as libc::off_t;
        // SAFETY: reading into our own buffer from our own descriptor.
        if unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), at) } != 4096 {
            return Err(last_error("pread"));
        }
    }
    Ok(closed(fd, &path, started.elapsed(), rounds))
}

/// Seconds per round of `rounds` that took `elapsed`, once `fd` is closed and the file at
/// `path` removed.
fn closed(fd: libc::c_int, path: &CString, elapsed: Duration, rounds: usize) -> f64 {
    let per = elapsed.as_secs_f64() / rounds as f64;
    // SAFETY: closing and removing our own file.
    unsafe {
        libc::close(fd);
        libc::unlink(path.as_ptr());
    }
    per
}
