//! `mkstemp` and its family, `mkdtemp` and `mktemp`. glibc makes the name and creates the
//! file or directory with its own internal calls, not through the exported `open`, `mkdir`
//! and `lstat` the shim interposes: a template under the prefix reached the kernel, where
//! the path does not exist (git, `sed -i` and editors failed with ENOENT). For such a
//! template the shim fills in the `XXXXXX` and creates the file itself through its own
//! exports, as glibc would; any other template goes to libc.

use crate::real;
use crate::util::{Res, errno};
use libc::{c_char, c_int};

/// The characters glibc fills a template with.
const LETTERS: &[u8; 62] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
/// Names tried before giving up (glibc's TMP_MAX).
const ATTEMPTS: u32 = 62 * 62 * 62;

/// What a template becomes.
#[derive(Clone, Copy)]
enum Make {
    /// A file opened with these extra flags (`O_RDWR | O_CREAT | O_EXCL` added).
    File(c_int),
    Dir,
    /// A name that does not exist yet (nothing is made).
    Name,
}

/// Where the six `X` of `template` start, before its `suffix` bytes; EINVAL if they are not
/// there. A pointer, not a slice: the template is read through the caller's pointer while
/// these bytes change.
///
/// # Safety
/// `template` is a valid C string.
unsafe fn xs(template: *mut c_char, suffix: c_int) -> Res<*mut u8> {
    // SAFETY: a valid C string.
    let len = unsafe { libc::strlen(template) };
    let suffix = usize::try_from(suffix).map_err(|_| libc::EINVAL)?;
    let start = len
        .checked_sub(suffix)
        .and_then(|end| end.checked_sub(6))
        .ok_or(libc::EINVAL)?;
    // SAFETY: bytes start..start + 6 lie inside the string.
    let at = unsafe { template.cast::<u8>().add(start) };
    // SAFETY: as above; read and dropped at once.
    if unsafe { std::slice::from_raw_parts(at, 6) } != b"XXXXXX" {
        return Err(libc::EINVAL);
    }
    Ok(at)
}

/// 64 unpredictable bits (the kernel's random pool; the clock if that fails).
fn seed() -> u64 {
    let mut s = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into `s`.
    let n = unsafe { libc::getrandom((&raw mut s).cast(), 8, libc::GRND_NONBLOCK) };
    if n != 8 {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes `t`.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut t) };
        s = (t.tv_sec as u64).rotate_left(32) ^ t.tv_nsec as u64 ^ u64::from(std::process::id());
    }
    s
}

/// Fill the `X` of `template` with fresh names until `make` succeeds; the file's
/// descriptor (0 for a directory or a name).
///
/// # Safety
/// `template` is a valid, writable C string under the prefix.
unsafe fn fill(template: *mut c_char, suffix: c_int, make: Make) -> Res<c_int> {
    // SAFETY: the caller's template.
    let xs = unsafe { xs(template, suffix) }?;
    // A success after names that existed leaves errno as it was, as glibc does.
    let saved = errno();
    let mut state = seed() | 1;
    for _ in 0..ATTEMPTS {
        for i in 0..6 {
            // xorshift64: cheap, and seeded from the kernel for each call.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // SAFETY: one of the six bytes `xs` found, which the caller lets us write.
            unsafe { *xs.add(i) = LETTERS[(state % LETTERS.len() as u64) as usize] };
        }
        // SAFETY: the shim's own exports, on the caller's (now filled) C string.
        let (r, exists) = unsafe {
            match make {
                Make::File(flags) => {
                    let fd = crate::open::open64(
                        template,
                        flags | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
                        0o600,
                    );
                    (fd, fd < 0 && errno() == libc::EEXIST)
                }
                Make::Dir => {
                    let r = crate::paths::mkdir(template, 0o700);
                    (r, r < 0 && errno() == libc::EEXIST)
                }
                Make::Name => {
                    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
                    let r = crate::stat::fstatat64(
                        libc::AT_FDCWD,
                        template,
                        st.as_mut_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                    );
                    match (r, errno()) {
                        (0, _) => (-1, true),
                        (_, libc::ENOENT) => (0, false),
                        _ => (-1, false),
                    }
                }
            }
        };
        if !exists {
            if r < 0 {
                return Err(errno());
            }
            crate::util::set_errno(saved);
            return Ok(r);
        }
    }
    Err(libc::EEXIST)
}

/// The mkstemp family: `fill` under the prefix, libc elsewhere.
///
/// # Safety
/// `template` is a valid, writable C string.
unsafe fn mkostemps_impl(
    template: *mut c_char,
    suffix: c_int,
    flags: c_int,
    pass: impl FnOnce() -> c_int,
) -> Res<c_int> {
    // SAFETY: the caller's template.
    if !unsafe { crate::route::is_ours(template) } {
        return Ok(pass());
    }
    // glibc keeps only the flags that are not an access mode.
    // SAFETY: as above.
    unsafe { fill(template, suffix, Make::File(flags & !libc::O_ACCMODE)) }
}

macro_rules! mkostemps {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
            crate::guarded!(-1, {
                // SAFETY: the caller's template; forwarded unchanged when not ours.
                unsafe { mkostemps_impl(template, suffix, flags, || real::$name(template, suffix, flags)) }?
            })
        }
    )*};
}
mkostemps!(mkostemps, mkostemps64);

macro_rules! mkstemps {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(template: *mut c_char, suffix: c_int) -> c_int {
            crate::guarded!(-1, {
                // SAFETY: the caller's template; forwarded unchanged when not ours.
                unsafe { mkostemps_impl(template, suffix, 0, || real::$name(template, suffix)) }?
            })
        }
    )*};
}
mkstemps!(mkstemps, mkstemps64);

macro_rules! mkostemp {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(template: *mut c_char, flags: c_int) -> c_int {
            crate::guarded!(-1, {
                // SAFETY: the caller's template; forwarded unchanged when not ours.
                unsafe { mkostemps_impl(template, 0, flags, || real::$name(template, flags)) }?
            })
        }
    )*};
}
mkostemp!(mkostemp, mkostemp64);

macro_rules! mkstemp {
    ($($name:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(template: *mut c_char) -> c_int {
            crate::guarded!(-1, {
                // SAFETY: the caller's template; forwarded unchanged when not ours.
                unsafe { mkostemps_impl(template, 0, 0, || real::$name(template)) }?
            })
        }
    )*};
}
mkstemp!(mkstemp, mkstemp64);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn mkdtemp(template: *mut c_char) -> *mut c_char {
    crate::guarded!(std::ptr::null_mut(), {
        // SAFETY: the caller's template.
        if !unsafe { crate::route::is_ours(template) } {
            // SAFETY: forwarded unchanged.
            return Ok(unsafe { real::mkdtemp(template) });
        }
        // SAFETY: the caller's template, under the prefix.
        unsafe { fill(template, 0, Make::Dir) }?;
        template
    })
}

/// `mktemp`: a name that did not exist when it was made (the file is not created). On
/// failure the template becomes the empty string, as glibc leaves it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mktemp(template: *mut c_char) -> *mut c_char {
    // SAFETY: the caller's template.
    if template.is_null() || !unsafe { crate::route::is_ours(template) } {
        // SAFETY: forwarded unchanged.
        return unsafe { real::mktemp(template) };
    }
    // SAFETY: the caller's template, under the prefix.
    if crate::util::guard(-1, || unsafe { fill(template, 0, Make::Name) }) < 0 {
        // SAFETY: the template is a writable C string of at least one byte.
        unsafe { *template = 0 };
    }
    template
}
