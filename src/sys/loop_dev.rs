//! Loop devices: a regular file seen as a block device, for the hostpath
//! plugin's block volumes.
//!
//! [`attach`] takes a free device from `/dev/loop-control`
//! (`LOOP_CTL_GET_FREE`) and binds the file to it with `LOOP_CONFIGURE`, or
//! with `LOOP_SET_FD` and `LOOP_SET_STATUS64` on kernels before 5.8;
//! [`detach`] unbinds it (`LOOP_CLR_FD`). Which devices show a file is read
//! from sysfs ([`find`]), not remembered, so a process that restarts finds
//! the devices it attached before.
//!
//! The kernel's structures and ioctl numbers come from `<linux/loop.h>`,
//! which the libc crate does not cover. Each libc call is one small function
//! holding the only `unsafe` block for it; `cvt` turns the -1 of a failed
//! call into the thread's `errno`.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::mem;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::cvt;

/// The loop control device.
pub const LOOP_CONTROL: &str = "/dev/loop-control";

/// Where sysfs lists block devices.
const SYS_BLOCK: &str = "/sys/block";

// ioctl numbers of <linux/loop.h>.
const LOOP_SET_FD: libc::Ioctl = 0x4C00;
const LOOP_CLR_FD: libc::Ioctl = 0x4C01;
const LOOP_SET_STATUS64: libc::Ioctl = 0x4C04;
const LOOP_SET_CAPACITY: libc::Ioctl = 0x4C07;
const LOOP_CONFIGURE: libc::Ioctl = 0x4C0A;
const LOOP_CTL_GET_FREE: libc::Ioctl = 0x4C82;

/// `LO_FLAGS_READ_ONLY`.
const LO_FLAGS_READ_ONLY: u32 = 1;
/// `LO_NAME_SIZE`.
const LO_NAME_SIZE: usize = 64;

/// How many free devices [`attach`] tries: another process may bind the
/// device `LOOP_CTL_GET_FREE` offered before this one does (`EBUSY`), and
/// then asking again offers another. Only that race is retried.
const ATTACH_ATTEMPTS: usize = 16;

/// `struct loop_info64`.
#[repr(C)]
#[derive(Clone, Copy)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; LO_NAME_SIZE],
    lo_crypt_name: [u8; LO_NAME_SIZE],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config`.
#[repr(C)]
#[derive(Clone, Copy)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

// The sizes the kernel's ABI has on every architecture.
const _: () = assert!(mem::size_of::<LoopInfo64>() == 232);
const _: () = assert!(mem::size_of::<LoopConfig>() == 304);

impl LoopInfo64 {
    /// The status of a device showing `backing`: its name (truncated as the
    /// kernel does) and the read-only flag.
    fn new(backing: &Path, read_only: bool) -> LoopInfo64 {
        let mut lo_file_name = [0; LO_NAME_SIZE];
        let name = backing.as_os_str().as_bytes();
        let len = name.len().min(LO_NAME_SIZE - 1);
        lo_file_name[..len].copy_from_slice(&name[..len]);
        LoopInfo64 {
            lo_device: 0,
            lo_inode: 0,
            lo_rdevice: 0,
            lo_offset: 0,
            lo_sizelimit: 0,
            lo_number: 0,
            lo_encrypt_type: 0,
            lo_encrypt_key_size: 0,
            lo_flags: if read_only { LO_FLAGS_READ_ONLY } else { 0 },
            lo_file_name,
            lo_crypt_name: [0; LO_NAME_SIZE],
            lo_encrypt_key: [0; 32],
            lo_init: [0; 2],
        }
    }
}

/// A loop device, `/dev/loop<number>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LoopDevice {
    pub number: u32,
    /// The device refuses writes.
    pub read_only: bool,
}

impl LoopDevice {
    /// The device node.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/dev/loop{}", self.number))
    }
}

impl fmt::Display for LoopDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "/dev/loop{}", self.number)
    }
}

/// A failed step with loop devices.
#[derive(Debug)]
pub enum Error {
    /// `/dev/loop-control` could not be opened.
    OpenControl { err: io::Error },
    /// `LOOP_CTL_GET_FREE` failed.
    GetFree { err: io::Error },
    /// The backing file could not be opened.
    OpenBacking { path: PathBuf, err: io::Error },
    /// A loop device node could not be opened.
    OpenDevice { device: PathBuf, err: io::Error },
    /// Binding the backing file to the device failed.
    Configure {
        device: PathBuf,
        backing: PathBuf,
        err: io::Error,
    },
    /// Every free device offered was taken by someone else first.
    NoFreeDevice { backing: PathBuf },
    /// `LOOP_CLR_FD` failed.
    Detach { device: PathBuf, err: io::Error },
    /// `LOOP_SET_CAPACITY` failed.
    SetCapacity { device: PathBuf, err: io::Error },
    /// sysfs could not be read.
    Sysfs { path: PathBuf, err: io::Error },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::OpenControl { .. } => write!(f, "cannot open {LOOP_CONTROL}"),
            Error::GetFree { .. } => f.write_str("cannot get a free loop device"),
            Error::OpenBacking { path, .. } => {
                write!(f, "cannot open the backing file {}", path.display())
            }
            Error::OpenDevice { device, .. } => write!(f, "cannot open {}", device.display()),
            Error::Configure {
                device, backing, ..
            } => write!(
                f,
                "cannot attach {} to {}",
                backing.display(),
                device.display()
            ),
            Error::NoFreeDevice { backing } => write!(
                f,
                "no free loop device for {} after {ATTACH_ATTEMPTS} attempts",
                backing.display()
            ),
            Error::Detach { device, .. } => write!(f, "cannot detach {}", device.display()),
            Error::SetCapacity { device, .. } => {
                write!(f, "cannot update the capacity of {}", device.display())
            }
            Error::Sysfs { path, .. } => write!(f, "cannot read {}", path.display()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::OpenControl { err }
            | Error::GetFree { err }
            | Error::OpenBacking { err, .. }
            | Error::OpenDevice { err, .. }
            | Error::Configure { err, .. }
            | Error::Detach { err, .. }
            | Error::SetCapacity { err, .. }
            | Error::Sysfs { err, .. } => Some(err),
            Error::NoFreeDevice { .. } => None,
        }
    }
}

/// The loop devices that show `backing` now, read from sysfs
/// (`/sys/block/loopN/loop/backing_file`, present while a device is bound).
/// `backing` must be canonical, as the kernel reports it.
pub fn find(backing: &Path) -> Result<Vec<LoopDevice>, Error> {
    Ok(list()?
        .into_iter()
        .filter(|(_, shown)| shown == backing)
        .map(|(device, _)| device)
        .collect())
}

/// Every bound loop device and the file it shows, in device order.
pub fn list() -> Result<Vec<(LoopDevice, PathBuf)>, Error> {
    let sysfs = |path: &Path, err| Error::Sysfs {
        path: path.to_path_buf(),
        err,
    };
    let root = Path::new(SYS_BLOCK);
    let mut devices = Vec::new();
    for entry in fs::read_dir(root).map_err(|err| sysfs(root, err))? {
        let entry = entry.map_err(|err| sysfs(root, err))?;
        let name = entry.file_name();
        let Some(number) = name
            .to_str()
            .and_then(|n| n.strip_prefix("loop"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let Some(shown) = read_sysfs(&dir.join("loop/backing_file")).map_err(|e| sysfs(&dir, e))?
        else {
            continue;
        };
        // Detached between the two reads: not bound any more.
        let Some(ro) = read_sysfs(&dir.join("ro")).map_err(|e| sysfs(&dir, e))? else {
            continue;
        };
        let device = LoopDevice {
            number,
            read_only: ro == "1",
        };
        devices.push((device, PathBuf::from(shown)));
    }
    order::sort(&mut devices);
    Ok(devices)
}

/// A sysfs attribute without its newline; `None` if it does not exist.
fn read_sysfs(path: &Path) -> io::Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(text.trim_end_matches('\n').to_string())),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

/// Attaches `backing` to a free loop device, read-only if asked (then the
/// device refuses writes); the device stays attached until [`detach`].
pub fn attach(backing: &Path, read_only: bool) -> Result<LoopDevice, Error> {
    let file = OpenOptions::new()
        .read(true)
        .write(!read_only)
        .custom_flags(libc::O_CLOEXEC)
        .open(backing)
        .map_err(|err| Error::OpenBacking {
            path: backing.to_path_buf(),
            err,
        })?;
    let control = File::open(LOOP_CONTROL).map_err(|err| Error::OpenControl { err })?;
    for _ in 0..ATTACH_ATTEMPTS {
        let number = loop_ctl_get_free(&control).map_err(|err| Error::GetFree { err })?;
        let device = LoopDevice { number, read_only };
        let node = open_device(&device, true)?;
        match bind(&node, &file, backing, read_only) {
            Ok(()) => return Ok(device),
            // Someone bound it between GET_FREE and our ioctl.
            Err(err) if err.raw_os_error() == Some(libc::EBUSY) => continue,
            Err(err) => {
                return Err(Error::Configure {
                    device: device.path(),
                    backing: backing.to_path_buf(),
                    err,
                })
            }
        }
    }
    Err(Error::NoFreeDevice {
        backing: backing.to_path_buf(),
    })
}

/// Binds `file` to the loop device `node`: `LOOP_CONFIGURE`, or on a kernel
/// without it (EINVAL), `LOOP_SET_FD` then `LOOP_SET_STATUS64`.
fn bind(node: &File, file: &File, backing: &Path, read_only: bool) -> io::Result<()> {
    let info = LoopInfo64::new(backing, read_only);
    let config = LoopConfig {
        fd: file.as_raw_fd() as u32,
        block_size: 0,
        info,
        reserved: [0; 8],
    };
    match loop_configure(node, &config) {
        Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {
            loop_set_fd(node, file)?;
            loop_set_status64(node, &info).inspect_err(|_| {
                let _ = loop_clr_fd(node);
            })
        }
        other => other,
    }
}

/// Detaches `device`; a device already detached is fine. The kernel defers
/// the detach while the device is open.
pub fn detach(device: &LoopDevice) -> Result<(), Error> {
    let node = open_device(device, false)?;
    match loop_clr_fd(&node) {
        Err(err) if err.raw_os_error() == Some(libc::ENXIO) => Ok(()),
        result => result.map_err(|err| Error::Detach {
            device: device.path(),
            err,
        }),
    }
}

/// Makes `device` see the new size of its backing file.
pub fn refresh_capacity(device: &LoopDevice) -> Result<(), Error> {
    let node = open_device(device, false)?;
    loop_set_capacity(&node).map_err(|err| Error::SetCapacity {
        device: device.path(),
        err,
    })
}

fn open_device(device: &LoopDevice, write: bool) -> Result<File, Error> {
    OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_CLOEXEC)
        .open(device.path())
        .map_err(|err| Error::OpenDevice {
            device: device.path(),
            err,
        })
}

/// `ioctl(control, LOOP_CTL_GET_FREE)`: the number of a free loop device,
/// which the kernel adds if there is none.
fn loop_ctl_get_free(control: &File) -> io::Result<u32> {
    // SAFETY: LOOP_CTL_GET_FREE takes no argument and only returns a
    // number; a descriptor that is not the control device is an error.
    let number = cvt(unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) })?;
    Ok(number as u32)
}

/// `ioctl(node, LOOP_CONFIGURE, config)`.
fn loop_configure(node: &File, config: &LoopConfig) -> io::Result<()> {
    // SAFETY: `config` points to a `struct loop_config` laid out as the
    // kernel's (checked sizes) that outlives the call; the kernel only reads
    // it. Its `fd` is a descriptor the caller keeps open.
    cvt(unsafe {
        libc::ioctl(
            node.as_raw_fd(),
            LOOP_CONFIGURE,
            config as *const LoopConfig,
        )
    })?;
    Ok(())
}

/// `ioctl(node, LOOP_SET_FD, file)`.
fn loop_set_fd(node: &File, file: &File) -> io::Result<()> {
    // SAFETY: LOOP_SET_FD takes the backing descriptor as a plain integer
    // argument; no memory is passed.
    cvt(unsafe {
        libc::ioctl(
            node.as_raw_fd(),
            LOOP_SET_FD,
            file.as_raw_fd() as libc::c_ulong,
        )
    })?;
    Ok(())
}

/// `ioctl(node, LOOP_SET_STATUS64, info)`.
fn loop_set_status64(node: &File, info: &LoopInfo64) -> io::Result<()> {
    // SAFETY: `info` points to a `struct loop_info64` laid out as the
    // kernel's (checked size) that outlives the call; the kernel only reads
    // it.
    cvt(unsafe {
        libc::ioctl(
            node.as_raw_fd(),
            LOOP_SET_STATUS64,
            info as *const LoopInfo64,
        )
    })?;
    Ok(())
}

/// `ioctl(node, LOOP_CLR_FD)`.
fn loop_clr_fd(node: &File) -> io::Result<()> {
    // SAFETY: LOOP_CLR_FD takes no argument; no memory is passed.
    cvt(unsafe { libc::ioctl(node.as_raw_fd(), LOOP_CLR_FD) })?;
    Ok(())
}

/// `ioctl(node, LOOP_SET_CAPACITY)`.
fn loop_set_capacity(node: &File) -> io::Result<()> {
    // SAFETY: LOOP_SET_CAPACITY takes no argument; no memory is passed.
    cvt(unsafe { libc::ioctl(node.as_raw_fd(), LOOP_SET_CAPACITY) })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_names_the_backing_file_truncated_with_a_nul() {
        let info = LoopInfo64::new(Path::new("/a/b.img"), true);
        assert_eq!(&info.lo_file_name[..9], b"/a/b.img\0");
        assert_eq!(info.lo_flags, LO_FLAGS_READ_ONLY);
        let long = "/x".repeat(100);
        let info = LoopInfo64::new(Path::new(&long), false);
        assert_eq!(info.lo_file_name[LO_NAME_SIZE - 1], 0);
        assert_eq!(&info.lo_file_name[..4], b"/x/x");
        assert_eq!(info.lo_flags, 0);
    }

    #[test]
    fn a_file_no_device_shows_has_none() {
        // Runs without root: sysfs is readable by everyone.
        let devices = find(Path::new("/nonexistent/csi-agent/backing.img")).unwrap();
        assert!(devices.is_empty());
    }

    #[test]
    fn errors_name_the_device_and_leave_the_cause_to_source() {
        use std::error::Error as _;
        let err = Error::Detach {
            device: PathBuf::from("/dev/loop3"),
            err: io::Error::from_raw_os_error(libc::EBUSY),
        };
        assert_eq!(err.to_string(), "cannot detach /dev/loop3");
        assert!(err.source().is_some());
        let err = Error::NoFreeDevice {
            backing: PathBuf::from("/b.img"),
        };
        assert_eq!(
            err.to_string(),
            "no free loop device for /b.img after 16 attempts"
        );
    }
}
