//! The socket handshake: the server tells a new client who it is and where the pool is, and
//! hands over three shared-memory descriptors (SCM_RIGHTS): the common region (which the
//! client can only map read-only), the client's own region and the wake region; it learns
//! the client's credentials from the socket (SO_PEERCRED), never from what the client says.

use crate::perm::Creds;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

const MAGIC: u64 = u64::from_le_bytes(*b"ENGRHELO");
/// Heads a refusal: the reason follows as text, and the daemon closes the connection.
const REFUSED: u64 = u64::from_le_bytes(*b"ENGRNOPE");
/// The longest reason a client reads.
const MAX_REASON: u64 = 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub client_id: u64,
    pub index: u64,
    pub pool_path: Vec<u8>,
}

/// Descriptors the greeting carries: the common region, the client's region, the wake
/// region.
pub const FDS: usize = 3;

/// Room for one control message carrying FDS descriptors (u64s keep it aligned).
fn control_buffer() -> Vec<u64> {
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE((FDS * std::mem::size_of::<RawFd>()) as u32) } as usize;
    vec![0u64; space.div_ceil(8)]
}

/// A message header over one buffer and a control buffer from `control_buffer`.
fn header(iov: &mut libc::iovec, cbuf: &mut [u64]) -> libc::msghdr {
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    hdr.msg_controllen = cbuf.len() * 8;
    hdr
}

/// Send the greeting with `fds` attached.
pub fn send_hello(stream: &UnixStream, hello: &Hello, fds: [RawFd; FDS]) -> io::Result<()> {
    let mut msg = Vec::new();
    for w in [
        MAGIC,
        hello.client_id,
        hello.index,
        hello.pool_path.len() as u64,
    ] {
        msg.extend_from_slice(&w.to_le_bytes());
    }
    msg.extend_from_slice(&hello.pool_path);
    let mut iov = libc::iovec {
        iov_base: msg.as_mut_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    let mut cbuf = control_buffer();
    let hdr = header(&mut iov, &mut cbuf);
    // SAFETY: the control buffer has room for one cmsg carrying FDS descriptors
    // (CMSG_SPACE), and every pointer written stays inside it.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&hdr);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN((FDS * std::mem::size_of::<RawFd>()) as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut [RawFd; FDS], fds);
    }
    // SAFETY: hdr points at live buffers for the duration of the call.
    let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &hdr, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != msg.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short handshake write",
        ));
    }
    Ok(())
}

/// Receive the greeting and the shared-memory descriptors.
/// How the error of a client the daemon refused (and told why) begins.
pub const REFUSED_MESSAGE: &str = "the daemon refused the connection: ";

/// Tell a client why it is refused (it may be gone already: nothing is reported).
pub fn send_refusal(stream: &UnixStream, why: &str) {
    let mut msg = REFUSED.to_le_bytes().to_vec();
    msg.extend_from_slice(&why.as_bytes()[..why.len().min(MAX_REASON as usize)]);
    // SAFETY: sending from a live buffer on our socket; MSG_NOSIGNAL: no SIGPIPE if the
    // client has gone.
    unsafe {
        libc::send(
            stream.as_raw_fd(),
            msg.as_ptr() as *const libc::c_void,
            msg.len(),
            libc::MSG_NOSIGNAL,
        )
    };
}

pub fn recv_hello(stream: &UnixStream) -> io::Result<(Hello, [OwnedFd; FDS])> {
    let mut head = [0u8; 32];
    let mut iov = libc::iovec {
        iov_base: head.as_mut_ptr() as *mut libc::c_void,
        iov_len: head.len(),
    };
    let mut cbuf = control_buffer();
    let mut hdr = header(&mut iov, &mut cbuf);
    // SAFETY: hdr points at live buffers; MSG_WAITALL fills the 32-byte head.
    let n = unsafe {
        libc::recvmsg(
            stream.as_raw_fd(),
            &mut hdr,
            libc::MSG_WAITALL | libc::MSG_CMSG_CLOEXEC,
        )
    };
    if n >= 8 && head[..8] == REFUSED.to_le_bytes() {
        let mut why = head[8..n as usize].to_vec();
        let _ = (&mut &*stream).take(MAX_REASON).read_to_end(&mut why);
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{REFUSED_MESSAGE}{}", String::from_utf8_lossy(&why)),
        ));
    }
    if n != 32 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the daemon refused the connection (a daemon of an older version, which says why \
             only in its log: the pool file's permissions, too many clients, or the pool file \
             deleted or replaced at its path since the daemon started)",
        ));
    }
    // SAFETY: reading the control message the kernel wrote, if any, after checking that it
    // carries FDS descriptors.
    let raw = unsafe {
        let c = libc::CMSG_FIRSTHDR(&hdr);
        let want = libc::CMSG_LEN((FDS * std::mem::size_of::<RawFd>()) as u32) as usize;
        if c.is_null() || (*c).cmsg_level != libc::SOL_SOCKET || (*c).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "handshake carried no descriptors",
            ));
        }
        if (*c).cmsg_len != want {
            // Another number of regions: a daemon of another build. What came is closed.
            let n = ((*c).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
            let first = libc::CMSG_DATA(c) as *const RawFd;
            for i in 0..n {
                libc::close(std::ptr::read_unaligned(first.add(i)));
            }
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the daemon is of another EngramFS version: stop it (or let it exit when idle) \
                 and start this version's",
            ));
        }
        std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const [RawFd; FDS])
    };
    // SAFETY: the kernel installed these descriptors for us; we now own them.
    let fd = raw.map(|f| unsafe { OwnedFd::from_raw_fd(f) });
    let w = |i: usize| u64::from_le_bytes(head[i * 8..i * 8 + 8].try_into().unwrap());
    if w(0) != MAGIC || w(3) > 4096 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not an EngramFS daemon",
        ));
    }
    let mut path = vec![0u8; w(3) as usize];
    (&*stream).read_exact(&mut path)?;
    Ok((
        Hello {
            client_id: w(1),
            index: w(2),
            pool_path: path,
        },
        fd,
    ))
}

/// SO_PEERGROUPS on x86_64 and most architectures (not in the libc crate's exports).
const SO_PEERGROUPS: libc::c_int = 59;

/// The peer's supplementary groups as the kernel recorded them at connect (Linux 4.13 and
/// later): one system call, where /proc/PID/status took nine at each connection, and no race
/// with a pid reused since. None where the kernel lacks the option.
fn peer_groups(stream: &UnixStream) -> Option<Vec<u32>> {
    let mut groups = vec![0u32; 64];
    loop {
        let mut len = (groups.len() * 4) as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `groups`.
        let r = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PEERGROUPS,
                groups.as_mut_ptr() as *mut libc::c_void,
                &mut len,
            )
        };
        if r == 0 {
            groups.truncate(len as usize / 4);
            return Some(groups);
        }
        // ERANGE: `len` is the size needed.
        let needed = len as usize / 4;
        if io::Error::last_os_error().raw_os_error() != Some(libc::ERANGE) || needed <= groups.len()
        {
            return None;
        }
        groups.resize(needed, 0);
    }
}

/// The credentials the kernel checks process `pid`'s file accesses with (its filesystem
/// uid and gid, the fourth field of `Uid:` and `Gid:`, and `Groups:`), from
/// /proc/PID/status; None if that cannot be read or parsed.
pub fn creds_from_proc(pid: u32) -> Option<Creds> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
    let fs_id =
        |name: &str| -> Option<u32> { field(name)?.split_whitespace().nth(3)?.parse().ok() };
    let groups = field("Groups:")?
        .split_whitespace()
        .map(|g| g.parse().ok())
        .collect::<Option<Vec<u32>>>()?;
    Some(Creds {
        uid: fs_id("Uid:")?,
        gid: fs_id("Gid:")?,
        groups,
    })
}

fn groups_from_proc(pid: i32) -> Vec<u32> {
    u32::try_from(pid)
        .ok()
        .and_then(creds_from_proc)
        .map(|c| c.groups)
        .unwrap_or_default()
}

/// The credentials of the process at the other end of the socket.
pub fn peer_creds(stream: &UnixStream) -> io::Result<(Creds, i32)> {
    // SAFETY: ucred is plain data.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let groups = peer_groups(stream).unwrap_or_else(|| groups_from_proc(cred.pid));
    Ok((
        Creds {
            uid: cred.uid,
            gid: cred.gid,
            groups,
        },
        cred.pid,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The groups of the process that made the socket (a pair, in a forked child with 100
    /// supplementary groups: more than the first buffer holds).
    #[test]
    fn the_peer_groups_are_the_connecting_process_groups() {
        // SAFETY: reading our own effective uid.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root to set supplementary groups");
            return;
        }
        let want: Vec<libc::gid_t> = (5000..5100).collect();
        // SAFETY: the child makes only system calls and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: setting this child's groups from a local array.
            let set = unsafe { libc::setgroups(want.len(), want.as_ptr()) } == 0;
            let ok = set
                && UnixStream::pair().is_ok_and(|(a, _b)| {
                    peer_groups(&a).is_some_and(|mut g| {
                        g.sort_unstable();
                        g == want
                    })
                });
            // SAFETY: leaving the forked child at once.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "SO_PEERGROUPS gave other groups than the peer's 100"
        );
    }
}
