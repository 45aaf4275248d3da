//! Named secrets for a Create's `-o secrets=NAME`: the agent holds them in
//! a root-only directory (`volume_plugin`'s `secrets_dir`), so no secret
//! value passes through the container engine, whose own record of a
//! volume (`docker volume inspect`) keeps every `-o` option it was given.
//!
//! ```text
//! <secrets_dir>/            root's, mode 0700
//!   <NAME>/                 root's, mode 0700: one named secret
//!     <KEY>                 root's, mode 0600: the value, the file's bytes exactly
//! ```
//!
//! A secret is read at each Create that names it, so a new or changed
//! secret needs no restart; the values are copied into the volume's
//! record, as `volume create`'s `secrets` block is, and a later change of
//! the files does not change a volume made before it. Anything group or
//! others may read, write or enter, anything not root's, and symlinks are
//! refused, naming the path. Errors name paths and keys, never values.

use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::csi::Secrets;

/// The most keys one named secret holds.
pub const MAX_KEYS: usize = 64;

/// The most bytes one value holds: CSI's bound on a whole secrets map
/// (4 KiB).
pub const MAX_VALUE_BYTES: u64 = 4096;

/// The permission bits group and others must not have.
const NOT_OURS: u32 = 0o077;

/// Why a named secret cannot be used.
#[derive(Debug)]
pub enum SecretsError {
    /// The name is no file name of letters, digits, `.`, `_`, `-`.
    BadName {
        name: String,
    },
    /// No secret of that name.
    NotFound {
        path: PathBuf,
    },
    /// A file or directory cannot be read.
    Read {
        path: PathBuf,
        err: io::Error,
    },
    /// Group or others have access.
    Exposed {
        path: PathBuf,
        mode: u32,
    },
    /// Not root's.
    NotRoots {
        path: PathBuf,
        uid: u32,
    },
    /// A symlink, a device, a socket: not what the layout holds here.
    WrongKind {
        path: PathBuf,
        expected: &'static str,
    },
    /// A file name that is no CSI secret key (`[A-Za-z0-9-_.]`).
    BadKey {
        path: PathBuf,
    },
    TooManyKeys {
        path: PathBuf,
    },
    TooLarge {
        path: PathBuf,
    },
    NotUtf8 {
        path: PathBuf,
    },
}

impl fmt::Display for SecretsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretsError::BadName { name } => write!(
                f,
                "secret name {name:?} is not a name of letters, digits, '.', '_' and '-'"
            ),
            SecretsError::NotFound { path } => {
                write!(f, "no secret {} (secrets_dir)", path.display())
            }
            SecretsError::Read { path, err } => {
                write!(f, "cannot read {}: {err}", path.display())
            }
            SecretsError::Exposed { path, mode } => write!(
                f,
                "{} is open to group or others (mode {:04o}): secrets must be root's alone (0700 directories, 0600 files)",
                path.display(),
                mode & 0o7777
            ),
            SecretsError::NotRoots { path, uid } => write!(
                f,
                "{} belongs to uid {uid}, not root: secrets must be root's alone",
                path.display()
            ),
            SecretsError::WrongKind { path, expected } => {
                write!(f, "{} is not {expected}", path.display())
            }
            SecretsError::BadKey { path } => write!(
                f,
                "{}: a secret's file name is its key, of letters, digits, '-', '_' and '.'",
                path.display()
            ),
            SecretsError::TooManyKeys { path } => write!(
                f,
                "{} holds more than {MAX_KEYS} keys",
                path.display()
            ),
            SecretsError::TooLarge { path } => write!(
                f,
                "{} is larger than {MAX_VALUE_BYTES} bytes",
                path.display()
            ),
            SecretsError::NotUtf8 { path } => write!(f, "{} is not UTF-8", path.display()),
        }
    }
}

impl std::error::Error for SecretsError {}

/// The directory of named secrets.
#[derive(Clone, Debug)]
pub struct SecretsDir {
    dir: PathBuf,
}

impl SecretsDir {
    /// The directory at `dir`, checked: a directory of root's that only
    /// root may use.
    pub fn open(dir: &Path) -> Result<SecretsDir, SecretsError> {
        check(dir, Kind::Dir)?;
        Ok(SecretsDir {
            dir: dir.to_path_buf(),
        })
    }

    /// The secret `name`: each file of `<dir>/<name>/` as a key and its
    /// value, every path checked on the way.
    pub fn read(&self, name: &str) -> Result<Secrets, SecretsError> {
        if !valid_name(name) {
            return Err(SecretsError::BadName {
                name: name.to_string(),
            });
        }
        check(&self.dir, Kind::Dir)?;
        let dir = self.dir.join(name);
        if fs::symlink_metadata(&dir).is_err_and(|e| e.kind() == io::ErrorKind::NotFound) {
            return Err(SecretsError::NotFound { path: dir });
        }
        check(&dir, Kind::Dir)?;
        let read = |e| SecretsError::Read {
            path: dir.clone(),
            err: e,
        };
        let mut secrets = Secrets::new();
        let mut keys = 0;
        for entry in fs::read_dir(&dir).map_err(read)? {
            let entry = entry.map_err(read)?;
            let path = entry.path();
            let key = entry.file_name();
            let Some(key) = key.to_str().filter(|k| valid_key(k)) else {
                return Err(SecretsError::BadKey { path });
            };
            keys += 1;
            if keys > MAX_KEYS {
                return Err(SecretsError::TooManyKeys { path: dir });
            }
            secrets.insert(key, read_value(&path)?);
        }
        Ok(secrets)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
}

/// Checks `path` without following a symlink: of `kind`, root's, and
/// closed to group and others.
fn check(path: &Path, kind: Kind) -> Result<fs::Metadata, SecretsError> {
    let meta = fs::symlink_metadata(path).map_err(|err| SecretsError::Read {
        path: path.to_path_buf(),
        err,
    })?;
    let (matches, expected) = match kind {
        Kind::Dir => (meta.is_dir(), "a directory"),
        Kind::File => (meta.is_file(), "a regular file"),
    };
    if !matches {
        return Err(SecretsError::WrongKind {
            path: path.to_path_buf(),
            expected,
        });
    }
    if meta.uid() != 0 {
        return Err(SecretsError::NotRoots {
            path: path.to_path_buf(),
            uid: meta.uid(),
        });
    }
    if meta.mode() & NOT_OURS != 0 {
        return Err(SecretsError::Exposed {
            path: path.to_path_buf(),
            mode: meta.mode(),
        });
    }
    Ok(meta)
}

/// One value: the file's bytes, at most [`MAX_VALUE_BYTES`], UTF-8.
fn read_value(path: &Path) -> Result<String, SecretsError> {
    check(path, Kind::File)?;
    let read = |err| SecretsError::Read {
        path: path.to_path_buf(),
        err,
    };
    // O_NOFOLLOW: a symlink put in place since the check is refused.
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(read)?;
    let mut bytes = Vec::new();
    file.take(MAX_VALUE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > MAX_VALUE_BYTES {
        return Err(SecretsError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    String::from_utf8(bytes).map_err(|_| SecretsError::NotUtf8 {
        path: path.to_path_buf(),
    })
}

/// A secret's name: a file name of letters, digits, `.`, `_`, `-`, not
/// `.` or `..`, at most 63 bytes.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A CSI secret key: `[A-Za-z0-9-_.]`, at most 128 bytes.
fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 128
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A fresh directory of root's, or `None` when the tests do not run as
    /// root (the ownership checks need it): a skip, or under CI, which
    /// runs as root, a failure.
    fn dir(tag: &str) -> Option<PathBuf> {
        let dir =
            std::env::temp_dir().join(format!("csi-agent-secrets-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        if fs::metadata(&dir).unwrap().uid() == 0 {
            return Some(dir);
        }
        fs::remove_dir_all(&dir).unwrap();
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("this test needs root; CI runs as root");
        }
        eprintln!("skipping a test that needs root");
        None
    }

    fn write(path: &Path, text: &str, mode: u32) {
        fs::write(path, text).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    fn mkdir(path: &Path, mode: u32) {
        fs::create_dir(path).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_named_secret_is_its_files_and_errors_show_no_value() {
        let Some(root) = dir("read") else {
            return;
        };
        mkdir(&root.join("nfs"), 0o700);
        write(&root.join("nfs").join("password"), "hunter2\n", 0o600);
        write(&root.join("nfs").join("user"), "alice", 0o400);
        let store = SecretsDir::open(&root).unwrap();
        let secrets = store.read("nfs").unwrap();
        let pairs: Vec<(&str, &str)> = secrets.expose().collect();
        assert_eq!(pairs, [("password", "hunter2\n"), ("user", "alice")]);
        assert!(!format!("{secrets:?}").contains("hunter2"));
        let missing = store.read("smb").unwrap_err().to_string();
        assert_eq!(
            missing,
            format!("no secret {} (secrets_dir)", root.join("smb").display())
        );
        let bad = store.read("../etc").unwrap_err().to_string();
        assert!(bad.starts_with("secret name \"../etc\""), "{bad}");
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn anything_open_to_others_is_refused_naming_its_path() {
        let Some(root) = dir("exposed") else {
            return;
        };
        mkdir(&root.join("s"), 0o700);
        let value = root.join("s").join("token");
        write(&value, "v4lue", 0o644);
        let store = SecretsDir::open(&root).unwrap();
        let err = store.read("s").unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "{} is open to group or others (mode 0644): secrets must be root's alone (0700 directories, 0600 files)",
                value.display()
            )
        );
        assert!(!err.contains("v4lue"));
        fs::set_permissions(&value, fs::Permissions::from_mode(0o600)).unwrap();
        fs::set_permissions(root.join("s"), fs::Permissions::from_mode(0o750)).unwrap();
        let err = store.read("s").unwrap_err().to_string();
        assert!(
            err.contains("/s is open to group or others (mode 0750)"),
            "{err}"
        );
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        let err = SecretsDir::open(&root).unwrap_err().to_string();
        assert!(err.contains("(mode 0755)"), "{err}");
        // Someone else's file.
        fs::set_permissions(&root, fs::Permissions::from_mode(0o700)).unwrap();
        fs::set_permissions(root.join("s"), fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&value, Some(1000), None).unwrap();
        let err = store.read("s").unwrap_err().to_string();
        assert!(
            err.ends_with("belongs to uid 1000, not root: secrets must be root's alone"),
            "{err}"
        );
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn bounds_and_odd_files_are_refused() {
        let Some(root) = dir("bounds") else {
            return;
        };
        let store = SecretsDir::open(&root).unwrap();
        mkdir(&root.join("big"), 0o700);
        write(
            &root.join("big").join("k"),
            &"x".repeat(MAX_VALUE_BYTES as usize + 1),
            0o600,
        );
        let err = store.read("big").unwrap_err().to_string();
        assert!(err.ends_with("is larger than 4096 bytes"), "{err}");
        mkdir(&root.join("many"), 0o700);
        for i in 0..=MAX_KEYS {
            write(&root.join("many").join(format!("k{i}")), "v", 0o600);
        }
        let err = store.read("many").unwrap_err().to_string();
        assert!(err.ends_with("holds more than 64 keys"), "{err}");
        mkdir(&root.join("odd"), 0o700);
        write(&root.join("odd").join("a key"), "v", 0o600);
        let err = store.read("odd").unwrap_err().to_string();
        assert!(err.contains("a secret's file name is its key"), "{err}");
        mkdir(&root.join("link"), 0o700);
        std::os::unix::fs::symlink("/etc/hostname", root.join("link").join("k")).unwrap();
        let err = store.read("link").unwrap_err().to_string();
        assert!(err.ends_with("is not a regular file"), "{err}");
        fs::remove_dir_all(&root).unwrap();
    }
}
