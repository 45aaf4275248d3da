//! Who a process is: a user's IDs from the user database, and becoming
//! that user.

use std::ffi::CStr;
use std::io;

use super::cvt;

/// The uid and gid of the user `name` in the user database
/// (getpwnam_r(3)), `None` when there is no such user.
pub fn passwd_ids(name: &CStr) -> io::Result<Option<(u32, u32)>> {
    let mut pwd = std::mem::MaybeUninit::<libc::passwd>::uninit();
    let mut buf = vec![0u8; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to live memory of the stated size; the
    // function fills `pwd` (pointing into `buf`) and sets `result`.
    let rc = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            pwd.as_mut_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    if result.is_null() {
        return Ok(None);
    }
    // SAFETY: getpwnam_r returned success with a non-null result, so `pwd`
    // is initialised.
    let pwd = unsafe { pwd.assume_init() };
    Ok(Some((pwd.pw_uid, pwd.pw_gid)))
}

/// Becomes the user `uid` with `gid` as its only group: setgroups(2),
/// setgid(2), then setuid(2). Allocates nothing.
pub fn become_ids(uid: u32, gid: u32) -> io::Result<()> {
    setgroups(&[gid])?;
    setgid(gid)?;
    setuid(uid)
}

/// Calls setgroups(2): `groups` become the supplementary groups.
pub fn setgroups(groups: &[libc::gid_t]) -> io::Result<()> {
    // SAFETY: `groups` is a live slice of the length passed.
    cvt(unsafe { libc::setgroups(groups.len(), groups.as_ptr()) }).map(drop)
}

/// Calls setgid(2): for a privileged caller, the real, effective and saved
/// group IDs.
pub fn setgid(gid: libc::gid_t) -> io::Result<()> {
    // SAFETY: plain integers.
    cvt(unsafe { libc::setgid(gid) }).map(drop)
}

/// Calls setuid(2): for a privileged caller, the real, effective and saved
/// user IDs; after it the process is the user.
pub fn setuid(uid: libc::uid_t) -> io::Result<()> {
    // SAFETY: plain integers.
    cvt(unsafe { libc::setuid(uid) }).map(drop)
}
