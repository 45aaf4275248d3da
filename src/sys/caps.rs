//! Capability system calls: the bounding set, the capability sets
//! (capset(2), version 3), the ambient set and `no_new_privs`. Which
//! capabilities a task gets is `task::exec::caps`'s.

use std::io;

use super::cvt;

/// Drops capability `cap` from the bounding set (needs `CAP_SETPCAP`).
pub fn drop_bounding(cap: u32) -> io::Result<()> {
    // SAFETY: prctl(2) with integer arguments.
    cvt(unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) }).map(drop)
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3` of `<linux/capability.h>`: 64 bits in
/// two data words.
const CAP_VERSION_3: u32 = 0x2008_0522;

/// Makes the calling thread's effective, permitted and inheritable sets
/// the bits of `caps` (bit N is capability N).
pub fn set_sets(caps: u64) -> io::Result<()> {
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let word = |shift: u32| (caps >> shift) as u32;
    let data = [
        CapData {
            effective: word(0),
            permitted: word(0),
            inheritable: word(0),
        },
        CapData {
            effective: word(32),
            permitted: word(32),
            inheritable: word(32),
        },
    ];
    // SAFETY: capset(2) reads a version 3 header and two data words, both
    // live for the call.
    cvt(unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) }).map(drop)
}

/// Raises capability `cap` in the ambient set (it must be permitted and
/// inheritable).
pub fn raise_ambient(cap: u32) -> io::Result<()> {
    // SAFETY: prctl(2) with integer arguments.
    cvt(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
            libc::c_ulong::from(cap),
            0,
            0,
        )
    })
    .map(drop)
}

/// Sets `no_new_privs`: no exec gives the process more privileges.
pub fn set_no_new_privs() -> io::Result<()> {
    // SAFETY: prctl(2) with integer arguments.
    cvt(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }).map(drop)
}
