//! What a run has mounted or put in /dev/shm outlives the process unless undone: the
//! owners undo it on drop (normal end and error paths), and this undoes it when the
//! process is killed by Ctrl-C, SIGTERM or SIGHUP, or aborts (a panic while panicking, as
//! when the output pipe closes). The handler makes only system calls: it detaches each
//! registered mount (`umount2(MNT_DETACH)`: gone once this process's files close, which its
//! death does) and removes the directory, unlinks each registered file, then dies of the
//! same signal.

use std::ffi::{CString, c_char};
use std::path::Path;
use std::ptr;
use std::sync::Once;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Registered paths: mount points, then files (a NUL-terminated string each; null: free).
/// More than a run ever has: the pools' tmpfs and the ext4 mount with its image.
static MOUNTS: [AtomicPtr<c_char>; 4] = [const { AtomicPtr::new(ptr::null_mut()) }; 4];
static FILES: [AtomicPtr<c_char>; 4] = [const { AtomicPtr::new(ptr::null_mut()) }; 4];

const SIGNALS: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGABRT];

/// Undoes the registration on drop (the owner then undoes the mount or file itself).
pub struct Registered(&'static AtomicPtr<c_char>);

impl Drop for Registered {
    fn drop(&mut self) {
        // The string is leaked (a few bytes a run): a handler may be reading it right now.
        self.0.store(ptr::null_mut(), Ordering::SeqCst);
    }
}

/// Detach the mount on `dir` if the process is killed before the returned value drops.
pub fn mount(dir: &Path) -> Option<Registered> {
    register(&MOUNTS, dir)
}

/// Remove `file` if the process is killed before the returned value drops.
pub fn file(file: &Path) -> Option<Registered> {
    register(&FILES, file)
}

fn register(slots: &'static [AtomicPtr<c_char>], path: &Path) -> Option<Registered> {
    use std::os::unix::ffi::OsStrExt;
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        for sig in SIGNALS {
            // SAFETY: installing a handler that only makes async-signal-safe calls; a
            // signal the process was told to ignore (nohup) stays ignored.
            unsafe {
                let old = libc::signal(sig, on_signal as *const () as libc::sighandler_t);
                if old == libc::SIG_IGN {
                    libc::signal(sig, libc::SIG_IGN);
                }
            }
        }
    });
    let raw = CString::new(path.as_os_str().as_bytes()).ok()?.into_raw();
    for slot in slots {
        if slot
            .compare_exchange(ptr::null_mut(), raw, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return Some(Registered(slot));
        }
    }
    // SAFETY: `raw` came from `into_raw` just above and was stored nowhere.
    drop(unsafe { CString::from_raw(raw) });
    None
}

extern "C" fn on_signal(sig: libc::c_int) {
    for slot in &MOUNTS {
        let p = slot.swap(ptr::null_mut(), Ordering::SeqCst);
        if !p.is_null() {
            // SAFETY: `p` is a leaked NUL-terminated string; umount2 and rmdir are
            // async-signal-safe system calls.
            unsafe {
                libc::umount2(p, libc::MNT_DETACH);
                libc::rmdir(p);
            }
        }
    }
    for slot in &FILES {
        let p = slot.swap(ptr::null_mut(), Ordering::SeqCst);
        if !p.is_null() {
            // SAFETY: as above; unlink is async-signal-safe.
            unsafe { libc::unlink(p) };
        }
    }
    // SAFETY: back to the default action, then die of the signal as if not caught.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}
