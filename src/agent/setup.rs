//! What the agent starts from: how it was asked to run ([`Options`]), its
//! config file, the node's name, its `csi_dir`, and its
//! data dir (made private, or a temporary one for `agent -dev`, removed at
//! the end unless something is still mounted under it).

use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use super::Error;
use crate::spec::AgentConfig;

/// How the agent was asked to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub config: AgentConfig,
    /// The file SIGHUP re-reads; `None` when there is none (`-dev` alone).
    pub config_path: Option<PathBuf>,
    /// `-dev`: the built-in hostpath plugin and its `demo` volume.
    pub dev: bool,
    /// `-hostpath`: the built-in hostpath plugin, as plugin `hostpath`
    /// (`-dev` runs it too).
    pub hostpath: bool,
    /// Remove the data dir on exit (a temporary one of `-dev`), unless
    /// something is still mounted under it.
    pub temporary_data_dir: bool,
}

/// How long a control socket must keep taking connections to be another
/// agent's.
const STALE_SOCKET_WAIT: Duration = Duration::from_secs(1);

/// Whether another agent answers on `socket`: it takes connections for
/// [`STALE_SOCKET_WAIT`]. The listening socket of an agent killed while
/// it forked a task lingers in that child until it execs (the socket is
/// close-on-exec), taking connections for a moment, then refusing them.
pub(super) fn another_agent_answers(socket: &Path) -> bool {
    let deadline = Instant::now() + STALE_SOCKET_WAIT;
    loop {
        if UnixStream::connect(socket).is_err() {
            return false;
        }
        if Instant::now() >= deadline {
            return true;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Reads and validates an agent config file.
pub fn load_config(path: &Path) -> Result<AgentConfig, String> {
    let src = fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    match AgentConfig::decode(&src, &path.to_string_lossy()) {
        Ok(decoded) => {
            for warning in &decoded.warnings {
                log::warn!("{warning}");
            }
            Ok(decoded.spec)
        }
        Err(invalid) => Err(invalid.to_string().replace('\n', "; ")),
    }
}

/// The node's name: the config's, else the host name.
pub fn node_name(config: &AgentConfig) -> String {
    config.node_name.clone().unwrap_or_else(host_name)
}

/// The kernel's host name, or `localhost` when it has none.
pub fn host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// The node's ID, as Nomad's `${node.unique.id}`: a random UUID made the
/// first time the agent starts on its data dir and kept there in
/// `node-id`, so that it stays the same across restarts.
pub(super) fn node_id(data_dir: &Path) -> Result<String, Error> {
    let path = data_dir.join("node-id");
    let failed = |err| Error::DataDir {
        path: path.clone(),
        err,
    };
    match fs::read_to_string(&path) {
        Ok(text) if is_uuid(text.trim()) => return Ok(text.trim().to_string()),
        Ok(_) => log::warn!("{} does not hold a UUID: making a new one", path.display()),
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(failed(err)),
    }
    let mut bytes = [0u8; 16];
    io::Read::read_exact(
        &mut fs::File::open("/dev/urandom").map_err(failed)?,
        &mut bytes,
    )
    .map_err(failed)?;
    // Version 4, variant RFC 4122.
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let id = format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    );
    let temp = data_dir.join("node-id.tmp");
    fs::write(&temp, format!("{id}\n")).map_err(failed)?;
    fs::rename(&temp, &path).map_err(failed)?;
    Ok(id)
}

/// Whether `text` is a UUID as 8-4-4-4-12 hex digits.
fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
}

pub(super) fn create_private_dir(path: &Path) -> Result<(), Error> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|err| Error::DataDir {
            path: path.to_path_buf(),
            err,
        })
}

/// Makes the config's `csi_dir` (0700) when it is missing and makes it
/// canonical, as mountinfo names the mounts under it (a managed Docker
/// plugin's propagated mount is there already); then checks it against the
/// data dir again, which `-data-dir` may have moved under it.
pub(super) fn resolve_csi_dir(config: &mut AgentConfig) -> Result<(), Error> {
    if let Some(path) = &config.csi_dir {
        let error = |err| Error::CsiDir {
            path: path.clone(),
            err,
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .map_err(error)?;
        config.csi_dir = Some(fs::canonicalize(path).map_err(error)?);
    }
    match config.csi_dir_conflict() {
        Some(conflict) => Err(Error::CsiDirConflict(conflict)),
        None => Ok(()),
    }
}

/// A fresh data dir for `agent -dev`: `/tmp/csi-agent-dev-<pid>`, or with a
/// counter when that exists.
pub fn temp_data_dir() -> io::Result<PathBuf> {
    let base = std::env::temp_dir();
    for n in 0..100u32 {
        let name = if n == 0 {
            format!("csi-agent-dev-{}", std::process::id())
        } else {
            format!("csi-agent-dev-{}-{n}", std::process::id())
        };
        let path = base.join(name);
        match fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(path),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(err) => return Err(err),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free name for a dev data dir",
    ))
}

/// Removes a temporary data dir, unless something is still mounted under
/// it: deleting through a mount would delete the volume's data.
pub(super) fn remove_temporary_data_dir(path: &Path) {
    match crate::mount::MountInfo::read() {
        Ok(info) if info.under(path).next().is_none() => {
            if let Err(err) = fs::remove_dir_all(path) {
                log::warn!("Cannot remove the dev data dir {}: {err}", path.display());
            }
        }
        Ok(_) => log::warn!(
            "Leaving the dev data dir {}: something is still mounted under it",
            path.display()
        ),
        Err(err) => log::warn!("Leaving the dev data dir {}: {err}", path.display()),
    }
}

/// Says at a reload what changed that takes effect only at the next
/// start: the data dir (but for `-dev`'s own), `csi_dir`, the endpoints of the
/// `telemetry` and `volume_plugin` blocks.
pub(super) fn changed_for_next_start(running: &AgentConfig, read: &AgentConfig, dev: bool) {
    if read.data_dir != running.data_dir && !dev {
        log::warn!(
            "SIGHUP: data_dir changed to {}; it takes effect at the next start",
            read.data_dir.display()
        );
    }
    if read.csi_dir() != running.csi_dir()
        && fs::canonicalize(read.csi_dir()).ok() != running.csi_dir
    {
        log::warn!(
            "SIGHUP: csi_dir changed to {}; it takes effect at the next start",
            read.csi_dir().display()
        );
    }
    super::telemetry::reloaded(&running.telemetry, &read.telemetry);
    super::volume_plugin::reloaded(running, read);
}

#[cfg(test)]
mod tests {
    use super::{is_uuid, node_id};

    #[test]
    fn the_node_id_is_made_once_and_kept() {
        let dir = std::env::temp_dir().join(format!("csi-agent-node-id-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = node_id(&dir).unwrap();
        assert!(is_uuid(&first), "{first}");
        assert_eq!(&first[14..15], "4");
        assert_eq!(node_id(&dir).unwrap(), first);
        // A file that does not hold one is replaced.
        std::fs::write(dir.join("node-id"), "junk\n").unwrap();
        let second = node_id(&dir).unwrap();
        assert!(is_uuid(&second) && second != first);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
