//! Inode flags and extended file attributes (`lsattr`, `chattr`, `FS_IOC_FSGETXATTR`): the
//! kernel asks for them with `FUSE_IOCTL` (its `fileattr` calls) after checking that a
//! setter owns the file. The pool keeps none: every file has none, setting none changes
//! nothing and setting any is `EOPNOTSUPP`, as on a file system that has none of them;
//! other requests are `ENOTTY` (what the kernel makes of `ENOSYS` too). Without this,
//! `lsattr` on the mount failed with "Inappropriate ioctl for device" where the shim and
//! tmpfs answer.

use fuser::Errno;

const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
/// The size of `struct fsxattr`.
const FSXATTR_LEN: usize = 28;
/// The flags the kernel passes (an `int`, whatever the request's number says).
const FLAGS_LEN: usize = 4;

/// The answer to ioctl `cmd` with input `input`: the bytes to hand back (at most
/// `out_size`), or the error.
pub(crate) fn answer(cmd: u32, input: &[u8], out_size: u32) -> Result<Vec<u8>, Errno> {
    let none = |len: usize| vec![0u8; len.min(out_size as usize)];
    match cmd {
        FS_IOC_GETFLAGS => Ok(none(FLAGS_LEN)),
        FS_IOC_FSGETXATTR => Ok(none(FSXATTR_LEN)),
        FS_IOC_SETFLAGS | FS_IOC_FSSETXATTR if input.iter().all(|&b| b == 0) => Ok(Vec::new()),
        FS_IOC_SETFLAGS | FS_IOC_FSSETXATTR => Err(Errno::EOPNOTSUPP),
        _ => Err(Errno::ENOTTY),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_has_no_flags_and_takes_none() {
        assert_eq!(answer(FS_IOC_GETFLAGS, &[], 4), Ok(vec![0; 4]));
        assert_eq!(answer(FS_IOC_FSGETXATTR, &[], 28), Ok(vec![0; 28]));
        assert_eq!(answer(FS_IOC_SETFLAGS, &[0; 4], 0), Ok(Vec::new()));
        assert_eq!(
            answer(FS_IOC_SETFLAGS, &[0x40, 0, 0, 0], 0),
            Err(Errno::EOPNOTSUPP)
        );
        let mut x = [0u8; 28];
        assert_eq!(answer(FS_IOC_FSSETXATTR, &x, 0), Ok(Vec::new()));
        x[0] = 8;
        assert_eq!(answer(FS_IOC_FSSETXATTR, &x, 0), Err(Errno::EOPNOTSUPP));
        assert_eq!(answer(0x1234, &[], 0), Err(Errno::ENOTTY));
    }
}
