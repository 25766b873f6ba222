//! Wide-character input on the shim's streams: fgetwc, getwc, getwchar, fgetws (and their
//! `_unlocked` and fortified forms), ungetwc, and `__wuflow`, which the inline getwc of
//! programs built with glibc's headers before 2.28 calls.

use super::{
    EOF_SEEN, ERR_SEEN, MB_LEN_MAX, MbState, WChar, WEOF, WInt, Wide, has_flag, in_locale, lock,
    orient, ours_stream, set_flag, std_in,
};
use crate::real;
use crate::util::{errno, set_errno};
use libc::{FILE, c_char, c_int, size_t};

unsafe extern "C" {
    fn getc_unlocked(fp: *mut FILE) -> c_int;
    fn mbrtowc(pwc: *mut WChar, s: *const c_char, n: size_t, ps: *mut MbState) -> size_t;
    fn wcrtomb(s: *mut c_char, wc: WChar, ps: *mut MbState) -> size_t;
    fn __chk_fail() -> !;
}

/// mbrtowc's answers for an invalid and for an incomplete sequence.
const INVALID: size_t = usize::MAX;
const INCOMPLETE: size_t = usize::MAX - 1;

/// Push `bytes` back onto `fp`, last first, so that the next read starts with them (and
/// the position, as ftell sees it, is before them).
fn unread(fp: *mut FILE, bytes: &[u8]) -> bool {
    bytes.iter().rev().all(|&b| {
        // SAFETY: a valid stream; glibc's ungetc takes more than one byte back.
        unsafe { libc::ungetc(b as c_int, fp) != libc::EOF }
    })
}

/// The next wide character of `fp`, or None for WEOF. As glibc: at the end of the input
/// (an incomplete character there is left unread and only ends the input), or EILSEQ and
/// the error indicator for bytes that are not a character (left unread: every later read
/// fails the same way). The caller runs in the stream's locale (`in_locale`).
fn read_wc(fp: *mut FILE, w: &mut Wide) -> Option<WChar> {
    let start = w.inp;
    let mut seen = [0u8; MB_LEN_MAX];
    let mut n = 0;
    loop {
        // SAFETY: a valid stream, under its lock.
        let c = unsafe { getc_unlocked(fp) };
        if c == libc::EOF {
            if n > 0 {
                let eof = has_flag(fp, EOF_SEEN);
                unread(fp, &seen[..n]);
                set_flag(fp, EOF_SEEN, eof);
                w.inp = start;
            }
            return None;
        }
        seen[n] = c as u8;
        n += 1;
        let mut wc: WChar = 0;
        // SAFETY: one byte of `seen`, and the stream's state.
        let r = unsafe {
            mbrtowc(
                &mut wc,
                seen[n - 1..].as_ptr() as *const c_char,
                1,
                &mut w.inp,
            )
        };
        match r {
            INCOMPLETE if n < MB_LEN_MAX => continue,
            INCOMPLETE | INVALID => {
                unread(fp, &seen[..n]);
                w.inp = start;
                set_flag(fp, ERR_SEEN, true);
                set_errno(libc::EILSEQ);
                return None;
            }
            _ => return Some(wc),
        }
    }
}

fn get_one(fp: *mut FILE, fd: c_int, locked: bool) -> WInt {
    let _g = lock(fp, locked);
    // SAFETY: under the stream's lock (or the `_unlocked` contract).
    match unsafe { orient(fp, fd) } {
        Some(w) => {
            let _l = in_locale(w.loc);
            read_wc(fp, w).map_or(WEOF, |c| c as WInt)
        }
        None => WEOF,
    }
}

/// fgetws and its forms; `size` is the buffer's length for the fortified ones.
///
/// # Safety
/// `buf` holds `n` wide characters (`size`, where given).
unsafe fn get_line(
    buf: *mut WChar,
    n: c_int,
    fp: *mut FILE,
    fd: c_int,
    locked: bool,
    size: Option<usize>,
) -> *mut WChar {
    if n <= 0 {
        return std::ptr::null_mut();
    }
    if n == 1 && size.is_none() {
        // Room for the terminator only: glibc reads nothing.
        // SAFETY: as the caller promises.
        unsafe { *buf = 0 };
        return buf;
    }
    let _g = lock(fp, locked);
    // SAFETY: under the stream's lock (or the `_unlocked` contract).
    let Some(w) = (unsafe { orient(fp, fd) }) else {
        return std::ptr::null_mut();
    };
    // Only an error of this call fails it (glibc: the descriptor may be non-blocking).
    let old_error = has_flag(fp, ERR_SEEN);
    set_flag(fp, ERR_SEEN, false);
    let max = (n as usize - 1).min(size.unwrap_or(usize::MAX));
    let _l = in_locale(w.loc);
    let mut count = 0;
    while count < max {
        let Some(c) = read_wc(fp, w) else { break };
        // SAFETY: count < n - 1 (and < size).
        unsafe { *buf.add(count) = c };
        count += 1;
        if c == b'\n' as WChar {
            break;
        }
    }
    let r = if count == 0 || (has_flag(fp, ERR_SEEN) && errno() != libc::EAGAIN) {
        std::ptr::null_mut()
    } else if size.is_some_and(|s| count >= s) {
        // SAFETY: glibc's overflow report; it does not return.
        unsafe { __chk_fail() }
    } else {
        // SAFETY: count < n.
        unsafe { *buf.add(count) = 0 };
        buf
    };
    if old_error {
        set_flag(fp, ERR_SEEN, true);
    }
    r
}

/// fgetwc and the like on a stream: `locked` unless the program holds the lock itself.
macro_rules! getwcs {
    ($($name:ident => $locked:expr),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fp: *mut FILE) -> WInt {
            crate::guarded!(WEOF, {
                let fd = ours_stream!(fp, real::$name(fp));
                get_one(fp, fd, $locked)
            })
        }
    )*};
}
getwcs!(fgetwc => true, getwc => true, fgetwc_unlocked => false, getwc_unlocked => false, __wuflow => false);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getwchar() -> WInt {
    crate::guarded!(WEOF, {
        let fp = std_in();
        let fd = ours_stream!(fp, real::getwchar());
        get_one(fp, fd, true)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getwchar_unlocked() -> WInt {
    crate::guarded!(WEOF, {
        let fp = std_in();
        let fd = ours_stream!(fp, real::getwchar_unlocked());
        get_one(fp, fd, false)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fgetws(buf: *mut WChar, n: c_int, fp: *mut FILE) -> *mut WChar {
    crate::guarded!(std::ptr::null_mut(), {
        let fd = ours_stream!(fp, real::fgetws(buf, n, fp));
        // SAFETY: the caller's buffer of n characters.
        unsafe { get_line(buf, n, fp, fd, true, None) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fgetws_unlocked(buf: *mut WChar, n: c_int, fp: *mut FILE) -> *mut WChar {
    crate::guarded!(std::ptr::null_mut(), {
        let fd = ours_stream!(fp, real::fgetws_unlocked(buf, n, fp));
        // SAFETY: as above.
        unsafe { get_line(buf, n, fp, fd, false, None) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __fgetws_chk(
    buf: *mut WChar,
    size: size_t,
    n: c_int,
    fp: *mut FILE,
) -> *mut WChar {
    crate::guarded!(std::ptr::null_mut(), {
        let fd = ours_stream!(fp, real::__fgetws_chk(buf, size, n, fp));
        // SAFETY: the caller's buffer of `size` characters.
        unsafe { get_line(buf, n, fp, fd, true, Some(size)) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __fgetws_unlocked_chk(
    buf: *mut WChar,
    size: size_t,
    n: c_int,
    fp: *mut FILE,
) -> *mut WChar {
    crate::guarded!(std::ptr::null_mut(), {
        let fd = ours_stream!(fp, real::__fgetws_unlocked_chk(buf, size, n, fp));
        // SAFETY: as above.
        unsafe { get_line(buf, n, fp, fd, false, Some(size)) }
    })
}

/// ungetwc: the character's bytes go back onto the stream, so that the position, ftell
/// and a later fseek (which drops them) behave as for any pushed-back input.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ungetwc(c: WInt, fp: *mut FILE) -> WInt {
    crate::guarded!(WEOF, {
        let fd = ours_stream!(fp, real::ungetwc(c, fp));
        let _g = lock(fp, true);
        // SAFETY: under the stream's lock.
        let Some(w) = (unsafe { orient(fp, fd) }) else {
            return Ok(WEOF);
        };
        if c == WEOF {
            return Ok(WEOF);
        }
        let _l = in_locale(w.loc);
        let mut b = [0u8; MB_LEN_MAX];
        let mut st = MbState::default();
        // SAFETY: room for the longest character.
        let k = unsafe { wcrtomb(b.as_mut_ptr() as *mut c_char, c as WChar, &mut st) };
        if k == INVALID {
            // Not a character of the stream's locale: none of its reads could give it.
            Err(libc::EILSEQ)?
        }
        if unread(fp, &b[..k]) { c } else { WEOF }
    })
}
