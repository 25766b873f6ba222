//! Paths that name an open descriptor: `/dev/stdin`, `/dev/stdout`, `/dev/stderr`,
//! `/dev/fd/N`, `/proc/self/fd/N`, `/proc/thread-self/fd/N` and `/proc/<own pid>/fd/N`.
//!
//! The kernel follows these to the file the descriptor is open on. For a descriptor of
//! ours that is the shim's placeholder (/dev/null, or the description's memfd page), so
//! `tee /dev/stdout > /mnt/engram/f` wrote into the memfd (a SIGBUS past its page) and
//! `cat /dev/stdin < /mnt/engram/f` printed the shim's state. Here such a path routes to
//! the description: a call that follows it acts on the pool file, an open makes a new
//! description of the same file (by its handle, as Linux reopens the inode even once
//! renamed), and `readlink` of the `fd/N` link gives the file's path under the prefix. A
//! call that does not follow a final link (lstat, unlink, O_NOFOLLOW) acts on the real
//! link, as it would without the shim. `/dev/fd/N/rest`, with N a directory of ours, is a
//! path relative to that directory.

use crate::route::Route;
use crate::table;
use crate::util::Res;
use libc::c_int;

/// How a path names a descriptor.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Via {
    /// `/dev/stdin` and the like: a real symlink to the `fd/N` link.
    Alias,
    /// The kernel's own `fd/N` link (through `/dev/fd`, a symlink to `/proc/self/fd`).
    Link,
}

/// The descriptor `p` names and what follows its number (empty, or from a '/').
pub fn parse(p: &[u8]) -> Option<(c_int, &[u8], Via)> {
    for (name, fd) in [
        (&b"/dev/stdin"[..], 0),
        (&b"/dev/stdout"[..], 1),
        (&b"/dev/stderr"[..], 2),
    ] {
        if let Some(rest) = p.strip_prefix(name)
            && (rest.is_empty() || rest[0] == b'/')
        {
            return Some((fd, rest, Via::Alias));
        }
    }
    let after = if let Some(r) = p.strip_prefix(b"/dev/fd/") {
        r
    } else {
        let r = p.strip_prefix(b"/proc/")?;
        let slash = r.iter().position(|&b| b == b'/')?;
        let (who, r) = (&r[..slash], &r[slash..]);
        // `/fd/` first: a tool reading /proc/<pid>/stat of every process pays no getpid.
        let r = r.strip_prefix(b"/fd/")?;
        if who != b"self" && who != b"thread-self" && !is_own_pid(who) {
            return None;
        }
        r
    };
    let digits = after.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 9 || (digits > 1 && after[0] == b'0') {
        return None;
    }
    let rest = &after[digits..];
    if !rest.is_empty() && rest[0] != b'/' {
        return None;
    }
    let fd = std::str::from_utf8(&after[..digits]).ok()?.parse().ok()?;
    Some((fd, rest, Via::Link))
}

fn is_own_pid(who: &[u8]) -> bool {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    std::str::from_utf8(who).ok().and_then(|s| s.parse().ok()) == Some(pid)
}

/// The route of an absolute path outside the prefix: `Route::Desc` or a route relative to
/// a directory of ours when it names one of our descriptors, else `Route::Pass`.
#[cold]
pub fn route(p: &[u8]) -> Res<Route<'_>> {
    let Some((fd, rest, via)) = parse(p) else {
        return Ok(Route::Pass);
    };
    let Some((dir, is_dir)) = table::dir_of(fd) else {
        return Ok(Route::Pass);
    };
    let rel = {
        let mut r = rest;
        while let [b'/', tail @ ..] = r {
            r = tail;
        }
        r
    };
    if rest.is_empty() {
        return Ok(Route::Desc { fd, orig: p, via });
    }
    if !is_dir {
        return Err(libc::ENOTDIR);
    }
    if rel.is_empty() {
        // "/dev/fd/3/": the directory itself.
        return Ok(Route::Desc { fd, orig: p, via });
    }
    Ok(Route::At { dir, fd, rel })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_paths_parse() {
        assert_eq!(parse(b"/dev/stdin"), Some((0, &b""[..], Via::Alias)));
        assert_eq!(parse(b"/dev/stderr"), Some((2, &b""[..], Via::Alias)));
        assert_eq!(parse(b"/dev/fd/7"), Some((7, &b""[..], Via::Link)));
        assert_eq!(
            parse(b"/dev/fd/12/a/b"),
            Some((12, &b"/a/b"[..], Via::Link))
        );
        assert_eq!(parse(b"/proc/self/fd/3"), Some((3, &b""[..], Via::Link)));
        assert_eq!(
            parse(b"/proc/thread-self/fd/3"),
            Some((3, &b""[..], Via::Link))
        );
        let own = format!("/proc/{}/fd/5", std::process::id());
        assert_eq!(parse(own.as_bytes()), Some((5, &b""[..], Via::Link)));
        for no in [
            &b"/dev/stdinx"[..],
            b"/dev/fd/",
            b"/dev/fd/3x",
            b"/dev/fd/03",
            b"/dev/fd/9999999999",
            b"/proc/1/fd/3",
            b"/proc/self/fdinfo/3",
            b"/proc/self/fd",
            b"/dev/null",
        ] {
            assert_eq!(parse(no), None, "{}", String::from_utf8_lossy(no));
        }
    }
}
