//! Wide-character output on the shim's streams: fputwc, putwc, putwchar, fputws (and their
//! `_unlocked` forms), `__woverflow` (the inline putwc of programs built with glibc's
//! headers before 2.28), and the writing half of c/wstdio.c's fwprintf family.

use super::{
    MB_LEN_MAX, MbState, WChar, WEOF, WInt, Wide, in_locale, lock, orient, ours, ours_stream,
    std_out,
};
use crate::real;
use crate::util::{errno, set_errno};
use libc::{FILE, c_char, c_int, c_void, size_t};

unsafe extern "C" {
    fn wcrtomb(s: *mut c_char, wc: WChar, ps: *mut MbState) -> size_t;
    fn wcslen(s: *const WChar) -> size_t;
    fn fwrite_unlocked(p: *const c_void, size: size_t, n: size_t, fp: *mut FILE) -> size_t;
}

fn write(fp: *mut FILE, b: &[u8]) -> bool {
    // SAFETY: a valid stream, under its lock; `b` is ours.
    b.is_empty()
        || unsafe { fwrite_unlocked(b.as_ptr() as *const c_void, 1, b.len(), fp) } == b.len()
}

/// Write `ws` to `fp` in the stream's locale: whether every byte was written (a failed
/// write set the error indicator). A character the locale cannot encode is transliterated,
/// else written as '?', as glibc's wide streams do.
fn put(fp: *mut FILE, w: &mut Wide, ws: &[WChar]) -> bool {
    let _l = in_locale(w.loc);
    // A substitution is no error: errno stays as it was.
    let e = errno();
    let mut buf = [0u8; 1024];
    let mut len = 0;
    for &c in ws {
        if buf.len() - len < MB_LEN_MAX {
            if !write(fp, &buf[..len]) {
                return false;
            }
            len = 0;
        }
        let room = &mut buf[len..len + MB_LEN_MAX];
        // SAFETY: room for the longest character.
        let k = unsafe { wcrtomb(room.as_mut_ptr() as *mut c_char, c, &mut w.out) };
        len += if k == usize::MAX {
            w.out = MbState::default();
            let n = substitute(c, room);
            set_errno(e);
            n
        } else {
            k
        };
    }
    write(fp, &buf[..len])
}

/// What glibc's wide streams write for a character their charset lacks: its
/// transliteration (U+20AC as "EUR" in the C locale), else '?'.
fn substitute(c: WChar, out: &mut [u8]) -> usize {
    translit(c, out).unwrap_or_else(|| {
        out[0] = b'?';
        1
    })
}

fn translit(c: WChar, out: &mut [u8]) -> Option<usize> {
    // SAFETY: nl_langinfo gives a string of the thread's (the stream's) locale.
    let cs = unsafe { std::ffi::CStr::from_ptr(libc::nl_langinfo(libc::CODESET)) };
    let mut to = cs.to_bytes().to_vec();
    to.extend_from_slice(b"//TRANSLIT\0");
    // SAFETY: two NUL-terminated names.
    let cd = unsafe { libc::iconv_open(to.as_ptr() as *const c_char, c"WCHAR_T".as_ptr()) };
    if cd as isize == -1 {
        return None;
    }
    let mut inp = &c as *const WChar as *mut c_char;
    let mut in_left = size_of::<WChar>();
    let mut outp = out.as_mut_ptr() as *mut c_char;
    let mut out_left = out.len();
    // SAFETY: one character in, `out` for the result; then the reset sequence, if any.
    let ok = unsafe {
        libc::iconv(cd, &mut inp, &mut in_left, &mut outp, &mut out_left) != usize::MAX
            && in_left == 0
            && libc::iconv(
                cd,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut outp,
                &mut out_left,
            ) != usize::MAX
    };
    // SAFETY: opened above.
    unsafe { libc::iconv_close(cd) };
    ok.then(|| out.len() - out_left)
}

fn put_one(fp: *mut FILE, fd: c_int, c: WChar, locked: bool) -> WInt {
    let _g = lock(fp, locked);
    // SAFETY: under the stream's lock (or the `_unlocked` contract).
    let ok = unsafe { orient(fp, fd) }.is_some_and(|w| put(fp, w, &[c]));
    if ok { c as WInt } else { WEOF }
}

/// fputws: 1, or -1 (a byte-oriented stream, a failed write).
///
/// # Safety
/// `s` is a NUL-terminated wide string.
unsafe fn put_str(s: *const WChar, fp: *mut FILE, fd: c_int, locked: bool) -> c_int {
    let _g = lock(fp, locked);
    // SAFETY: under the stream's lock (or the `_unlocked` contract).
    let Some(w) = (unsafe { orient(fp, fd) }) else {
        return -1;
    };
    // SAFETY: as the caller promises.
    let ws = unsafe { std::slice::from_raw_parts(s, wcslen(s)) };
    if put(fp, w, ws) { 1 } else { -1 }
}

/// fputwc and the like on a stream: `locked` unless the program holds the lock itself.
macro_rules! putwcs {
    ($($name:ident => $locked:expr),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(c: WChar, fp: *mut FILE) -> WInt {
            crate::guarded!(WEOF, {
                let fd = ours_stream!(fp, real::$name(c, fp));
                put_one(fp, fd, c, $locked)
            })
        }
    )*};
}
putwcs!(fputwc => true, putwc => true, fputwc_unlocked => false, putwc_unlocked => false);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __woverflow(fp: *mut FILE, c: WInt) -> WInt {
    crate::guarded!(WEOF, {
        let fd = ours_stream!(fp, real::__woverflow(fp, c));
        if c == WEOF {
            // glibc's answer to a flush request.
            return Ok(0);
        }
        put_one(fp, fd, c as WChar, false)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn putwchar(c: WChar) -> WInt {
    crate::guarded!(WEOF, {
        let fp = std_out();
        let fd = ours_stream!(fp, real::putwchar(c));
        put_one(fp, fd, c, true)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn putwchar_unlocked(c: WChar) -> WInt {
    crate::guarded!(WEOF, {
        let fp = std_out();
        let fd = ours_stream!(fp, real::putwchar_unlocked(c));
        put_one(fp, fd, c, false)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fputws(s: *const WChar, fp: *mut FILE) -> c_int {
    crate::guarded!(-1, {
        let fd = ours_stream!(fp, real::fputws(s, fp));
        // SAFETY: the caller's string.
        unsafe { put_str(s, fp, fd, true) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fputws_unlocked(s: *const WChar, fp: *mut FILE) -> c_int {
    crate::guarded!(-1, {
        let fd = ours_stream!(fp, real::fputws_unlocked(s, fp));
        // SAFETY: as above.
        unsafe { put_str(s, fp, fd, false) }
    })
}

/// For c/wstdio.c, with the stream's lock held: write the `n` wide characters at `ws` to
/// `fp` (ours, wide-oriented). 0, or -1.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn engram_preload_wide_put(
    fp: *mut FILE,
    ws: *const WChar,
    n: size_t,
) -> c_int {
    crate::guarded!(-1, {
        let Some(fd) = ours(fp) else { return Ok(-1) };
        // SAFETY: c/wstdio.c holds the lock.
        let Some(w) = (unsafe { orient(fp, fd) }) else {
            return Ok(-1);
        };
        let ws = if n == 0 {
            &[][..]
        } else {
            // SAFETY: the caller's n characters.
            unsafe { std::slice::from_raw_parts(ws, n) }
        };
        if put(fp, w, ws) { 0 } else { -1 }
    })
}
