//! The virtual current directory passed on across exec: `ENGRAM_CWD=<dev>:<ino>:<pool
//! id>:<dir ino>:<dir generation>:<pool path>`, valid only while the real current directory
//! is unchanged (its device and inode); the directory's handle and the pool it belongs to,
//! 0:0:0 when not known.

use crate::real;
use std::ffi::CString;
use std::sync::Mutex;

/// The variable's name.
pub const VAR: &[u8] = b"ENGRAM_CWD";

/// The identity of the real current directory, which an inherited virtual one is tied to.
fn real_cwd_id() -> Option<(u64, u64)> {
    // SAFETY: stat of "." into a local buffer with the real call.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { real::stat(c".".as_ptr(), &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// The value for ENGRAM_CWD, if the current directory is virtual.
static EXPORTED: Mutex<Option<CString>> = Mutex::new(None);

/// The `ENGRAM_CWD=…` entry for an exec's environment, if the current directory is virtual
/// (only a lock of its own: exec is async-signal-safe).
pub fn entry() -> Option<CString> {
    EXPORTED.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Keep ENGRAM_CWD in the environment in step with the virtual current directory.
pub fn export() {
    // Taken before the state is read: exports racing with a chdir end with the state the
    // last of them read, which is the chdir's.
    let mut g = EXPORTED.lock().unwrap_or_else(|e| e.into_inner());
    let v = crate::vcwd::exported().and_then(|(p, dir)| {
        let (dev, ino) = real_cwd_id()?;
        let (pool, dir_ino, dir_gen) =
            dir.map_or((0, 0, 0), |(h, pool)| (pool, h.ino, h.generation));
        let mut s = format!("{dev}:{ino}:{pool}:{dir_ino}:{dir_gen}:").into_bytes();
        s.extend_from_slice(&p);
        CString::new(s).ok()
    });
    // SAFETY: setenv/unsetenv with NUL-terminated strings.
    unsafe {
        match &v {
            Some(val) => libc::setenv(c"ENGRAM_CWD".as_ptr(), val.as_ptr(), 1),
            None => libc::unsetenv(c"ENGRAM_CWD".as_ptr()),
        };
    }
    *g = v.map(|val| {
        let mut e = VAR.to_vec();
        e.push(b'=');
        e.extend_from_slice(val.as_bytes());
        CString::new(e).expect("no NUL")
    });
}

/// At start-up: take over a virtual current directory from the image that exec'd us.
pub fn import() {
    // SAFETY: getenv with a NUL-terminated name; the value is copied at once.
    let p = unsafe { libc::getenv(c"ENGRAM_CWD".as_ptr()) };
    if p.is_null() {
        return;
    }
    // SAFETY: a valid C string from getenv.
    let v = unsafe { crate::util::cbytes(p) }.to_vec();
    let mut parts = v.splitn(6, |&b| b == b':');
    let mut next = || parts.next();
    let (Some(dev), Some(ino), Some(pool), Some(dir_ino), Some(dir_gen), Some(path)) =
        (next(), next(), next(), next(), next(), next())
    else {
        return;
    };
    let num = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<u64>().ok();
    // The handle goes with its pool: it is used only once connected to that pool.
    let dir = num(dir_ino)
        .zip(num(dir_gen).and_then(|g| u32::try_from(g).ok()))
        .zip(num(pool))
        .filter(|&((ino, _), _)| ino != 0)
        .map(|((ino, generation), pool)| (engram_core::Handle { ino, generation }, pool));
    if path.first() == Some(&b'/') && real_cwd_id() == num(dev).zip(num(ino)) {
        crate::vcwd::set(Some((path.to_vec(), dir)));
    } else {
        // SAFETY: unsetenv with a NUL-terminated name.
        unsafe { libc::unsetenv(c"ENGRAM_CWD".as_ptr()) };
    }
}
