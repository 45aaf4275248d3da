//! The part of the agent's `sys` module its template functions reach
//! (`sockaddr` reads the host's interface addresses): `ifaddrs`, from
//! the agent's own source, and the one helper it takes from its parent.

use std::io;

#[allow(dead_code)]
#[path = "../../../src/sys/ifaddrs.rs"]
pub mod ifaddrs;

/// As the crate's `sys::cvt`: a libc call's -1 as the OS error.
pub fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}
