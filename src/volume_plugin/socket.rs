//! The endpoint's socket. Root's container engine is its only client, so
//! the socket is bound under a temporary name, made 0600 and renamed into
//! place: it is never reachable with looser permissions. A socket left by
//! an earlier run (one nobody answers on) is replaced; a socket someone
//! answers on, or a file or directory at the path, is refused, never
//! removed.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use super::Error;

/// Binds `path` (making its directory, 0755, if missing) with mode 0600.
pub(super) fn bind_private(path: &Path) -> Result<UnixListener, Error> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() && !dir.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(|err| Error::Dir {
                    path: dir.to_path_buf(),
                    err,
                })?;
        }
    }
    check_stale(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&temp);
    let listener = UnixListener::bind(&temp).map_err(|err| Error::Bind {
        path: temp.clone(),
        err,
    })?;
    if let Err(err) = fs::set_permissions(&temp, fs::Permissions::from_mode(0o600)) {
        let _ = fs::remove_file(&temp);
        return Err(Error::Permissions { path: temp, err });
    }
    if let Err(err) = fs::rename(&temp, path) {
        let _ = fs::remove_file(&temp);
        return Err(Error::Rename {
            path: path.to_path_buf(),
            err,
        });
    }
    Ok(listener)
}

/// Refuses what is at `path` unless it is nothing or a socket nobody
/// answers on (which the rename then replaces).
fn check_stale(path: &Path) -> Result<(), Error> {
    match fs::symlink_metadata(path) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(Error::Stale {
            path: path.to_path_buf(),
            err,
        }),
        Ok(meta) if !meta.file_type().is_socket() => Err(Error::NotASocket {
            path: path.to_path_buf(),
        }),
        Ok(_) => match UnixStream::connect(path) {
            Ok(_) => Err(Error::InUse {
                path: path.to_path_buf(),
            }),
            Err(_) => Ok(()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("csi-agent-vp-socket-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_socket_is_private_in_a_directory_made_for_it() {
        let dir = temp_dir("private");
        let path = dir.join("plugins/csi.sock");
        let _listener = bind_private(&path).unwrap();
        let meta = fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let parent = fs::metadata(dir.join("plugins")).unwrap();
        assert_eq!(parent.permissions().mode() & 0o777, 0o755);
        // Nothing else is left beside it.
        let names: Vec<_> = fs::read_dir(dir.join("plugins")).unwrap().collect();
        assert_eq!(names.len(), 1);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_stale_socket_is_replaced_and_a_live_one_or_a_file_refused() {
        let dir = temp_dir("stale");
        let path = dir.join("csi.sock");
        drop(UnixListener::bind(&path).unwrap());
        let listener = bind_private(&path).unwrap();
        let err = bind_private(&path).unwrap_err();
        assert!(matches!(err, Error::InUse { .. }), "{err}");
        drop(listener);
        fs::remove_file(&path).unwrap();
        fs::write(&path, "not a socket").unwrap();
        let err = bind_private(&path).unwrap_err();
        assert!(matches!(err, Error::NotASocket { .. }), "{err}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "not a socket");
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        let err = bind_private(&path).unwrap_err();
        assert!(err.to_string().contains("is not a socket"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
