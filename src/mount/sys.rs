//! The real [`Mounter`], and the system calls behind it.
//!
//! Each libc call is wrapped in one small function that holds the only
//! `unsafe` block for it; [`cvt`] turns the -1 of a failed call into the
//! thread's `errno`.

use std::ffi::{CStr, CString};
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;

use libc::{c_int, c_ulong};

use crate::mount::{
    bind_flags, Error, FsUsage, Mounter, Propagation, Result, UnmountMode, REMOUNT_READ_ONLY_FLAGS,
};
use crate::sys::cvt;

/// `ST_NOSYMFOLLOW` from `<linux/statfs.h>`, which the libc crate lacks.
const ST_NOSYMFOLLOW: c_ulong = 0x2000;

/// The [`Mounter`] that makes the system calls; it needs `CAP_SYS_ADMIN`.
#[derive(Debug, Default, Clone, Copy)]
pub struct SysMounter;

impl Mounter for SysMounter {
    fn bind(&self, source: &Path, target: &Path, recursive: bool) -> Result<()> {
        let flags = bind_flags(recursive);
        log::debug!(
            "Bind mounting {} onto {} with flags {flags:#x}",
            source.display(),
            target.display()
        );
        mount(&c_path(source)?, &c_path(target)?, flags).map_err(|err| Error::Bind {
            source: source.to_path_buf(),
            target: target.to_path_buf(),
            err,
        })
    }

    fn remount_read_only(&self, target: &Path) -> Result<()> {
        let c_target = c_path(target)?;
        let current = statvfs_flags(&c_target).map_err(|err| Error::ReadMountFlags {
            target: target.to_path_buf(),
            err,
        })?;
        let flags = REMOUNT_READ_ONLY_FLAGS | locked_mount_flags(current);
        log::debug!(
            "Remounting {} read-only with flags {flags:#x}",
            target.display()
        );
        mount(c"none", &c_target, flags).map_err(|err| Error::RemountReadOnly {
            target: target.to_path_buf(),
            err,
        })
    }

    fn set_propagation(&self, target: &Path, propagation: Propagation) -> Result<()> {
        let flags = propagation.mount_flags();
        log::debug!(
            "Setting the propagation of {} to {propagation} with flags {flags:#x}",
            target.display()
        );
        mount(c"none", &c_path(target)?, flags).map_err(|err| Error::SetPropagation {
            target: target.to_path_buf(),
            propagation,
            err,
        })
    }

    fn unmount(&self, target: &Path, mode: UnmountMode) -> Result<()> {
        let flags = mode.flags();
        log::debug!("Unmounting {} with flags {flags:#x}", target.display());
        umount2(&c_path(target)?, flags).map_err(|err| Error::Unmount {
            target: target.to_path_buf(),
            err,
        })
    }
}

/// The flags that remount a bind of `source` read-only, keeping the
/// per-mount flags the kernel would refuse to drop; for a child that binds
/// `source` after fork, where it must not read anything itself.
pub(crate) fn read_only_remount_flags(source: &Path) -> Result<c_ulong> {
    let current = statvfs_flags(&c_path(source)?).map_err(|err| Error::ReadMountFlags {
        target: source.to_path_buf(),
        err,
    })?;
    Ok(REMOUNT_READ_ONLY_FLAGS | locked_mount_flags(current))
}

/// The mount(2) flags that keep the locked per-mount flags reported by
/// statvfs(3) through a bind remount, which would otherwise clear them.
fn locked_mount_flags(statvfs_flags: c_ulong) -> c_ulong {
    [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (ST_NOSYMFOLLOW, libc::MS_NOSYMFOLLOW),
    ]
    .into_iter()
    .filter(|&(st_flag, _)| statvfs_flags & st_flag != 0)
    .fold(0, |flags, (_, ms_flag)| flags | ms_flag)
}

/// Turns a path into a C string; a NUL byte in it is an error.
pub(crate) fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::InvalidPath {
        path: path.to_path_buf(),
    })
}

/// Calls mount(2) without a file system type or data, as bind mounts,
/// remounts and propagation changes need neither.
pub(crate) fn mount(source: &CStr, target: &CStr, flags: c_ulong) -> io::Result<()> {
    // SAFETY: `source` and `target` are NUL-terminated strings that outlive
    // the call, and mount(2) accepts null for the file system type and the
    // data; the kernel only reads from these pointers.
    cvt(unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            ptr::null(),
            flags,
            ptr::null(),
        )
    })?;
    Ok(())
}

/// Calls mount(2) with all of its arguments: a new file system of type
/// `fstype` (`tmpfs`, `proc`, `devpts`) with `data` as its options, what a
/// task's root is built with, or without either for a bind, a remount or a
/// propagation change.
pub(crate) fn mount_fs(
    source: &CStr,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    let fstype = fstype.map_or(ptr::null(), CStr::as_ptr);
    let data = data.map_or(ptr::null(), |d| d.as_ptr().cast());
    // SAFETY: every pointer is a NUL-terminated string that outlives the
    // call, or null for no type or no data, which mount(2) accepts; the
    // kernel only reads from them.
    cvt(unsafe { libc::mount(source.as_ptr(), target.as_ptr(), fstype, flags, data) })?;
    Ok(())
}

/// `struct mount_attr` of `<linux/mount.h>`, the argument of
/// mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `MOUNT_ATTR_RDONLY` of `<linux/mount.h>`.
const MOUNT_ATTR_RDONLY: u64 = 0x1;

/// Makes the mount at `target` read-only with mount_setattr(2) (Linux 5.12
/// and later), and with `recursive` every mount below it too, which a bind
/// remount cannot do. ENOSYS on an older kernel.
pub(crate) fn mount_setattr_read_only(target: &CStr, recursive: bool) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: `target` is a NUL-terminated string and `attr` a live
    // `mount_attr` of the size passed; the kernel only reads them. The raw
    // system call, as libc has no wrapper.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            target.as_ptr(),
            flags as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    cvt(ret)?;
    Ok(())
}

/// Calls pivot_root(2): `new_root` becomes the root mount of the calling
/// process's mount namespace, and the old one moves to `put_old`.
pub(crate) fn pivot_root(new_root: &CStr, put_old: &CStr) -> io::Result<()> {
    // SAFETY: both are NUL-terminated strings that outlive the call; the
    // raw system call, as libc has no wrapper.
    let ret = unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) };
    cvt(ret)?;
    Ok(())
}

/// Calls umount2(2) with `flags` as they are, for a child that detaches the
/// old root of its mount namespace.
pub(crate) fn umount_raw(target: &CStr, flags: c_int) -> io::Result<()> {
    umount2(target, flags)
}

/// Calls umount2(2).
fn umount2(target: &CStr, flags: c_int) -> io::Result<()> {
    // SAFETY: `target` is a NUL-terminated string that outlives the call.
    cvt(unsafe { libc::umount2(target.as_ptr(), flags) })?;
    Ok(())
}

/// Whether `path` is the root of a mount, as statx(2) reports it with
/// `STATX_ATTR_MOUNT_ROOT` (Linux 5.8 and later); `None` when the kernel
/// does not report that attribute. A final symlink is followed.
pub(super) fn statx_mount_root(path: &CStr) -> io::Result<Option<bool>> {
    let st = statx(path, libc::AT_STATX_DONT_SYNC, 0)?;
    let bit = libc::STATX_ATTR_MOUNT_ROOT as u64;
    Ok((st.stx_attributes_mask & bit != 0).then_some(st.stx_attributes & bit != 0))
}

/// Calls statx(2) on `path` with `flags`, asking for `mask`. The raw
/// system call, because musl before 1.2.5 has no statx wrapper to link
/// against. Fields the kernel did not fill are zero.
fn statx(path: &CStr, flags: libc::c_int, mask: libc::c_uint) -> io::Result<libc::statx> {
    let mut buf = MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: `path` is a NUL-terminated string that outlives the call, and
    // `buf` is valid for writing one `statx`.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_statx,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            mask,
            buf.as_mut_ptr(),
        )
    };
    cvt(ret)?;
    // SAFETY: statx succeeded, so it filled in `buf` (which was zeroed
    // before, so any field it left alone is zero too).
    Ok(unsafe { buf.assume_init() })
}

/// `STATX_MNT_ID` and `STATX_MNT_ID_UNIQUE` of `<linux/stat.h>`.
const STATX_MNT_ID: libc::c_uint = 0x1000;
const STATX_MNT_ID_UNIQUE: libc::c_uint = 0x4000;

/// The ID of the mount `path` is on, as statx(2) reports it: the unique
/// 64-bit ID (Linux 6.8 and later, never reused) when the kernel has it,
/// else the reusable one mountinfo lists. A final symlink is not followed.
/// `None` when the kernel reports neither (before 5.8).
pub(super) fn statx_mount_id(path: &CStr) -> io::Result<Option<u64>> {
    let mask = STATX_MNT_ID | STATX_MNT_ID_UNIQUE;
    let st = statx(
        path,
        libc::AT_STATX_DONT_SYNC | libc::AT_SYMLINK_NOFOLLOW,
        mask,
    )?;
    Ok(reported_mount_id(st.stx_mask & mask, st.stx_mnt_id))
}

/// The mount ID of a statx(2) answer whose mask had `mask_bits` of the ones
/// asked for. Zero is no ID: the unique ones start above 2^31, and a
/// reusable 0 could only be the first mount made at boot, never one a
/// volume is on. It is what a translator of the call that sets the mask
/// bit but does not copy the field leaves (qemu-user 7.2 does so), and
/// taking it for an ID would make every path seem to be on one mount.
fn reported_mount_id(mask_bits: libc::c_uint, id: u64) -> Option<u64> {
    (mask_bits != 0 && id != 0).then_some(id)
}

/// Calls statvfs(3) on `path`.
fn statvfs(path: &CStr) -> io::Result<libc::statvfs> {
    let mut buf = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string that outlives the call, and
    // `buf` is valid for writing one `statvfs`.
    cvt(unsafe { libc::statvfs(path.as_ptr(), buf.as_mut_ptr()) })?;
    // SAFETY: statvfs succeeded, so it filled in `buf`.
    Ok(unsafe { buf.assume_init() })
}

/// The mount flags (`f_flag`) of the file system at `path`.
fn statvfs_flags(path: &CStr) -> io::Result<c_ulong> {
    Ok(statvfs(path)?.f_flag)
}

/// Size and use of the file system that holds `path`.
pub fn fs_usage(path: &Path) -> Result<FsUsage> {
    let c_path = c_path(path)?;
    let st = statvfs(&c_path).map_err(|err| Error::Statvfs {
        path: path.to_path_buf(),
        err,
    })?;
    let block = u64::from(st.f_frsize as u32).max(1);
    Ok(FsUsage {
        total_bytes: st.f_blocks as u64 * block,
        available_bytes: st.f_bavail as u64 * block,
        used_bytes: (st.f_blocks as u64).saturating_sub(st.f_bfree as u64) * block,
        total_inodes: st.f_files as u64,
        available_inodes: st.f_favail as u64,
        used_inodes: (st.f_files as u64).saturating_sub(st.f_ffree as u64),
    })
}

/// Calls geteuid(2), for the tests that need root.
#[cfg(test)]
pub(super) fn euid() -> libc::uid_t {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn locked_flags_map_statvfs_bits_to_mount_bits() {
        assert_eq!(locked_mount_flags(0), 0);
        assert_eq!(locked_mount_flags(libc::ST_RDONLY | libc::ST_RELATIME), 0);
        assert_eq!(
            locked_mount_flags(libc::ST_NOSUID | libc::ST_NODEV | libc::ST_NOEXEC | ST_NOSYMFOLLOW),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_NOSYMFOLLOW
        );
        assert_eq!(locked_mount_flags(libc::ST_NODEV), libc::MS_NODEV);
    }

    #[test]
    fn a_zero_mount_id_is_no_id_even_when_the_mask_says_it_was_filled() {
        assert_eq!(
            reported_mount_id(STATX_MNT_ID_UNIQUE, 2_147_483_671),
            Some(2_147_483_671)
        );
        assert_eq!(reported_mount_id(STATX_MNT_ID, 27), Some(27));
        assert_eq!(reported_mount_id(STATX_MNT_ID_UNIQUE, 0), None);
        assert_eq!(reported_mount_id(0, 27), None);
    }

    #[test]
    fn a_path_with_a_nul_byte_is_an_error_not_a_panic() {
        let bad = PathBuf::from(OsStr::from_bytes(b"/tmp/a\0b"));
        let err = SysMounter.unmount(&bad, UnmountMode::Normal).unwrap_err();
        assert!(matches!(&err, Error::InvalidPath { path } if *path == bad));
        let err = SysMounter.bind(Path::new("/tmp"), &bad, false).unwrap_err();
        assert!(matches!(&err, Error::InvalidPath { path } if *path == bad));
    }
}
