//! inotify: the kernel cannot watch pool files, which it does not see. A watch of a pool
//! path is refused with EOPNOTSUPP, so that a program learns it at once (Node's `fs.watch`
//! throws, Java's WatchService `register` fails, and tools that poll instead can): before,
//! the kernel answered ENOENT, or, where the mount prefix exists on disk, watched the real
//! directory there and never reported an event (found by probing, 2026-11-26).

use crate::ops::{Side, real_ret, side};
use crate::session::op;
use crate::util::guard;
use crate::{real, routed};
use libc::{c_char, c_int};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn inotify_add_watch(fd: c_int, path: *const c_char, mask: u32) -> c_int {
    crate::guarded!(-1, {
        let r = routed!(
            libc::AT_FDCWD,
            path,
            mask & libc::IN_DONT_FOLLOW == 0,
            real::inotify_add_watch(fd, path, mask)
        );
        guard(-1, || {
            let _op = op();
            match side(r, mask & libc::IN_DONT_FOLLOW == 0)? {
                Side::Pool(..) | Side::Removed(..) => Err(libc::EOPNOTSUPP),
                // SAFETY: the real call on the resolved path.
                Side::Real(p) => real_ret(unsafe { real::inotify_add_watch(fd, p.as_ptr(), mask) }),
            }
        })
    })
}
