//! Wide-character stdio on the shim's streams: `fwide` here, the input side in `input`, the
//! output side in `output`, the `fwprintf` and `fwscanf` families in c/wstdio.c.
//!
//! glibc's fopencookie streams have no wide-character data (`_wide_data` is null), so its
//! own wide functions crash on the streams `stdio` makes for pool files. Giving each stream
//! that data instead was ruled out: `struct _IO_wide_data` is private to glibc, and a wide
//! stream reads and writes through a jump table that glibc only accepts from its own
//! read-only section, where the only file one (`_IO_wfile_jumps`) calls the kernel on the
//! descriptor and would bypass the cookie. So the wide functions are interposed and, for
//! the shim's streams only, done over the stream's bytes: getc and ungetc to read, fwrite
//! to write, so that buffering, the position, `ftell`, `fseek` and the end-of-file and
//! error indicators all stay glibc's own. Characters convert with `mbrtowc` and `wcrtomb`
//! and a per-stream `mbstate_t`, in the LC_CTYPE locale that was current when the stream
//! became wide-oriented (glibc fixes a stream's conversion then too). Any other FILE goes to
//! glibc untouched: a stream is ours when it is the one `stdio` registered for its
//! descriptor (`register`), which takes no lock and does not touch errno.
//!
//! glibc keeps a stream's orientation in the FILE's `_mode`: fopencookie makes it -1 (byte
//! oriented for good), and a positive one makes fclose and the flush at exit use the wide
//! data, which is null here. The shim's streams start at 0, unoriented, as glibc's fopen
//! makes them (`unoriented`): glibc's byte functions then set -1 as usual, and fwide
//! answers as for a file. Wide orientation is kept here instead, with `_mode` left as it
//! is, so glibc's byte functions still work on a wide-oriented shim stream where glibc's
//! own would fail. glibc's perror writes an unoriented stderr through a duplicate of its
//! descriptor with its own calls, which would reach the shim's placeholder: `perror` is
//! interposed for the shim's stderr.

mod input;
mod output;

use crate::table::MAX_FDS;
use libc::{FILE, c_int, locale_t};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

/// glibc's `__mbstate_t`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct MbState {
    count: c_int,
    value: u32,
}

pub(crate) type WChar = libc::wchar_t;
pub(crate) type WInt = u32;
pub(crate) const WEOF: WInt = u32::MAX;
/// glibc's MB_LEN_MAX: the longest multibyte character of any locale.
pub(crate) const MB_LEN_MAX: usize = 16;

unsafe extern "C" {
    fn flockfile(fp: *mut FILE);
    fn funlockfile(fp: *mut FILE);
    static mut stdin: *mut FILE;
    static mut stdout: *mut FILE;
    static mut stderr: *mut FILE;
}

/// The wide state of one of the shim's streams, made when it becomes wide-oriented.
pub(crate) struct Wide {
    /// The LC_CTYPE locale at orientation (null: the thread's, where it could not be copied).
    loc: locale_t,
    /// Conversion state of input and of output.
    inp: MbState,
    out: MbState,
}

impl Drop for Wide {
    fn drop(&mut self) {
        if !self.loc.is_null() {
            // SAFETY: our own copy, made by duplocale and used by nothing else.
            unsafe { libc::freelocale(self.loc) };
        }
    }
}

/// Streams per descriptor kept apart: a program may `fdopen` one descriptor twice (a
/// second registration replaced the first, whose wide calls then went to glibc and crashed).
const PER_FD: usize = 2;
/// Per descriptor, `PER_FD` places: a FILE `stdio` made for it, and that stream's wide
/// state. The FILE is compared without being read, so a FILE of glibc's own whose number is
/// ours is not taken.
static OWNER: [AtomicPtr<FILE>; MAX_FDS * PER_FD] =
    [const { AtomicPtr::new(null_mut()) }; MAX_FDS * PER_FD];
static STATE: [AtomicPtr<Wide>; MAX_FDS * PER_FD] =
    [const { AtomicPtr::new(null_mut()) }; MAX_FDS * PER_FD];

/// `fp` is a stream `stdio` made for descriptor `fd`: in a free place of the descriptor's
/// (a third stream takes the first place).
pub fn register(fd: c_int, fp: *mut FILE) {
    if let Some(i) = index(fd) {
        let places = i * PER_FD..(i + 1) * PER_FD;
        let k = places
            .clone()
            .find(|&k| {
                let o = OWNER[k].load(Ordering::Acquire);
                o.is_null() || o == fp
            })
            .unwrap_or(places.start);
        drop_state(k);
        OWNER[k].store(fp, Ordering::Release);
    }
}

/// A stream on `fd` is being closed, and with it the descriptor, which every stream on it
/// used: all of them are forgotten.
pub fn unregister(fd: c_int) {
    if let Some(i) = index(fd) {
        for (k, owner) in OWNER.iter().enumerate().skip(i * PER_FD).take(PER_FD) {
            owner.store(null_mut(), Ordering::Release);
            drop_state(k);
        }
    }
}

fn index(fd: c_int) -> Option<usize> {
    usize::try_from(fd).ok().filter(|&i| i < MAX_FDS)
}

/// The place of stream `fp` on descriptor `fd`, if `stdio` registered it there.
fn place(fp: *mut FILE, fd: c_int) -> Option<usize> {
    let i = index(fd)?;
    (i * PER_FD..(i + 1) * PER_FD).find(|&k| OWNER[k].load(Ordering::Acquire) == fp)
}

fn drop_state(i: usize) {
    let p = STATE[i].swap(null_mut(), Ordering::AcqRel);
    if !p.is_null() {
        // SAFETY: `p` came from Box::into_raw in `orient` and was just taken out of the table.
        drop(unsafe { Box::from_raw(p) });
    }
}

// Fields of glibc's `struct _IO_FILE`, which <bits/types/struct_FILE.h> makes public (its
// feof and ferror macros read `_flags`): offsets on LP64.
const FLAGS_AT: usize = 0;
pub(crate) const FILENO_AT: usize = 112;
const MODE_AT: usize = 192;
pub(crate) const EOF_SEEN: c_int = 0x10;
pub(crate) const ERR_SEEN: c_int = 0x20;

/// The descriptor of `fp` if it is one of the shim's streams.
pub(crate) fn ours(fp: *mut FILE) -> Option<c_int> {
    if fp.is_null() || !cfg!(all(target_env = "gnu", target_pointer_width = "64")) {
        return None;
    }
    // SAFETY: every FILE has `_fileno` here (see FILENO_AT); a null one was refused above.
    let fd = unsafe { *((fp as *const u8).add(FILENO_AT) as *const c_int) };
    place(fp, fd).map(|_| fd)
}

fn flags_ptr(fp: *mut FILE) -> *mut c_int {
    // SAFETY: `_flags` is the FILE's first field (FLAGS_AT).
    unsafe { (fp as *mut u8).add(FLAGS_AT) as *mut c_int }
}

fn mode_ptr(fp: *mut FILE) -> *mut c_int {
    // SAFETY: `_mode` is at MODE_AT in every FILE.
    unsafe { (fp as *mut u8).add(MODE_AT) as *mut c_int }
}

/// A new stream of `stdio`'s starts unoriented, as one of glibc's fopen.
pub fn unoriented(fp: *mut FILE) {
    if cfg!(all(target_env = "gnu", target_pointer_width = "64")) {
        // SAFETY: a stream just made by fopencookie, not yet seen by the program.
        unsafe { *mode_ptr(fp) = 0 };
    }
}

/// Whether `fp`'s indicator `bit` (EOF_SEEN, ERR_SEEN) is set. The caller holds its lock.
pub(crate) fn has_flag(fp: *mut FILE, bit: c_int) -> bool {
    // SAFETY: the caller's stream, under its lock.
    unsafe { *flags_ptr(fp) & bit != 0 }
}

/// Set or clear `fp`'s indicator `bit`, as glibc's own wide functions do. The caller holds
/// its lock.
pub(crate) fn set_flag(fp: *mut FILE, bit: c_int, on: bool) {
    // SAFETY: the caller's stream, under its lock.
    unsafe {
        let f = flags_ptr(fp);
        *f = if on { *f | bit } else { *f & !bit };
    }
}

/// The stream's lock for the length of a call (released on unwinding too), or nothing for
/// the `_unlocked` forms.
pub(crate) struct Locked(*mut FILE);

pub(crate) fn lock(fp: *mut FILE, locked: bool) -> Option<Locked> {
    locked.then(|| {
        // SAFETY: a valid stream; funlockfile in Drop.
        unsafe { flockfile(fp) };
        Locked(fp)
    })
}

impl Drop for Locked {
    fn drop(&mut self) {
        // SAFETY: taken by `lock`.
        unsafe { funlockfile(self.0) };
    }
}

/// The thread runs in the stream's locale until this is dropped.
pub(crate) struct InLocale(Option<locale_t>);

pub(crate) fn in_locale(loc: locale_t) -> InLocale {
    if loc.is_null() {
        return InLocale(None);
    }
    // SAFETY: a locale object of ours, alive while its stream is.
    InLocale(Some(unsafe { libc::uselocale(loc) }))
}

impl Drop for InLocale {
    fn drop(&mut self) {
        if let Some(old) = self.0 {
            // SAFETY: the locale the thread had before.
            unsafe { libc::uselocale(old) };
        }
    }
}

/// The wide state of stream `fp` (ours, on `fd`) if it is wide-oriented.
///
/// # Safety
/// The caller holds the stream's lock (or, for the `_unlocked` forms, the program does).
pub(crate) unsafe fn state<'a>(fp: *mut FILE, fd: c_int) -> Option<&'a mut Wide> {
    let p = STATE[place(fp, fd)?].load(Ordering::Acquire);
    // SAFETY: made by `orient`, freed only when the stream is closed; the stream's lock
    // keeps other threads out.
    unsafe { p.as_mut() }
}

/// Make stream `fp` (ours, on `fd`) wide-oriented, as glibc's fwide(fp, 1): its state, or
/// None where it is byte-oriented already.
///
/// # Safety
/// As `state`.
pub(crate) unsafe fn orient<'a>(fp: *mut FILE, fd: c_int) -> Option<&'a mut Wide> {
    // SAFETY: as the caller promises.
    if let Some(w) = unsafe { state(fp, fd) } {
        return Some(w);
    }
    let i = place(fp, fd)?;
    // SAFETY: fwide(fp, 0) only reads `_mode`, which a byte function set to -1.
    if unsafe { crate::real::fwide(fp, 0) } < 0 {
        return None;
    }
    // SAFETY: a copy of the thread's current locale (glibc copies the global one too).
    let loc = unsafe { libc::duplocale(libc::uselocale(null_mut())) };
    let w = Box::new(Wide {
        loc,
        inp: MbState::default(),
        out: MbState::default(),
    });
    let p = Box::into_raw(w);
    STATE[i].store(p, Ordering::Release);
    // SAFETY: just stored; see `state`.
    unsafe { p.as_mut() }
}

/// Inside `guarded!`: forward to glibc unless `$fp` is one of the shim's streams; otherwise
/// evaluate to its descriptor.
macro_rules! ours_stream {
    ($fp:expr, $pass:expr) => {
        match $crate::wide::ours($fp) {
            Some(fd) => fd,
            // SAFETY: forwarding the caller's arguments unchanged.
            None => return Ok(unsafe { $pass }),
        }
    };
}
pub(crate) use ours_stream;

fn std_in() -> *mut FILE {
    // SAFETY: reading the program's standard stream variable.
    unsafe { stdin }
}

fn std_out() -> *mut FILE {
    // SAFETY: as above.
    unsafe { stdout }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fwide(fp: *mut FILE, mode: c_int) -> c_int {
    crate::guarded!(0, {
        let fd = ours_stream!(fp, crate::real::fwide(fp, mode));
        let _l = lock(fp, true);
        // SAFETY: under the stream's lock.
        if unsafe { state(fp, fd) }.is_some() {
            return Ok(1);
        }
        if mode > 0 {
            // SAFETY: as above.
            return Ok(if unsafe { orient(fp, fd) }.is_some() {
                1
            } else {
                -1
            });
        }
        // SAFETY: glibc's fwide with mode <= 0 only reads or sets `_mode` (-1: bytes).
        unsafe { crate::real::fwide(fp, mode) }
    })
}

/// perror on the shim's stderr: glibc writes through the stream itself when it is oriented,
/// so it is seen as byte-oriented for the call (an unoriented one stays unoriented).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perror(s: *const libc::c_char) {
    crate::guarded!((), {
        // SAFETY: reading the program's standard stream variable.
        let fp = unsafe { stderr };
        ours_stream!(fp, crate::real::perror(s));
        let e = crate::util::errno();
        let _l = lock(fp, true);
        let mode = mode_ptr(fp);
        // SAFETY: our stream, under its lock; glibc's perror takes the (recursive) lock too.
        unsafe {
            let was = *mode;
            *mode = -1;
            crate::util::set_errno(e);
            crate::real::perror(s);
            *mode = was;
        }
    })
}

/// For c/wstdio.c, with the stream's lock held: make `fp` (ours) wide-oriented and give its
/// locale in `loc` (null: the thread's). 1, or -1 where it is byte-oriented.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn engram_preload_wide_orient(fp: *mut FILE, loc: *mut locale_t) -> c_int {
    crate::guarded!(-1, {
        let Some(fd) = ours(fp) else { return Ok(-1) };
        // SAFETY: c/wstdio.c holds the lock.
        match unsafe { orient(fp, fd) } {
            Some(w) => {
                if !loc.is_null() {
                    // SAFETY: the caller's out-parameter.
                    unsafe { *loc = w.loc };
                }
                1
            }
            None => -1,
        }
    })
}

/// For c/wstdio.c: whether `fp` is one of the shim's streams (no lock, errno untouched).
#[unsafe(no_mangle)]
pub extern "C" fn engram_preload_wide_ours(fp: *mut FILE) -> c_int {
    ours(fp).is_some() as c_int
}

unsafe extern "C" {
    fn engram_c_fwprintf();
    fn engram_c_vfwprintf();
    fn engram_c_wprintf();
    fn engram_c_vwprintf();
    fn engram_c_fwprintf_chk();
    fn engram_c_vfwprintf_chk();
    fn engram_c_wprintf_chk();
    fn engram_c_vwprintf_chk();
    fn engram_c_fwscanf();
    fn engram_c_vfwscanf();
    fn engram_c_wscanf();
    fn engram_c_vwscanf();
    fn engram_c_isoc99_fwscanf();
    fn engram_c_isoc99_vfwscanf();
    fn engram_c_isoc99_wscanf();
    fn engram_c_isoc99_vwscanf();
    fn engram_c_isoc23_fwscanf();
    fn engram_c_isoc23_vfwscanf();
    fn engram_c_isoc23_wscanf();
    fn engram_c_isoc23_vwscanf();
}

crate::c_trampolines! {
    fwprintf => engram_c_fwprintf,
    vfwprintf => engram_c_vfwprintf,
    wprintf => engram_c_wprintf,
    vwprintf => engram_c_vwprintf,
    __fwprintf_chk => engram_c_fwprintf_chk,
    __vfwprintf_chk => engram_c_vfwprintf_chk,
    __wprintf_chk => engram_c_wprintf_chk,
    __vwprintf_chk => engram_c_vwprintf_chk,
    fwscanf => engram_c_fwscanf,
    vfwscanf => engram_c_vfwscanf,
    wscanf => engram_c_wscanf,
    vwscanf => engram_c_vwscanf,
    __isoc99_fwscanf => engram_c_isoc99_fwscanf,
    __isoc99_vfwscanf => engram_c_isoc99_vfwscanf,
    __isoc99_wscanf => engram_c_isoc99_wscanf,
    __isoc99_vwscanf => engram_c_isoc99_vwscanf,
    __isoc23_fwscanf => engram_c_isoc23_fwscanf,
    __isoc23_vfwscanf => engram_c_isoc23_vfwscanf,
    __isoc23_wscanf => engram_c_isoc23_wscanf,
    __isoc23_vwscanf => engram_c_isoc23_vwscanf,
}
