//! The artifact hook: a task's `artifact` blocks fetched into its task dir
//! on a starter thread, after the dir is made and before the templates
//! render (Nomad's hook order), for every driver. Each source is
//! interpolated with the task's environment, fetched over HTTP (`http.rs`,
//! through the TLS library gRPC links for `https://`, `tls.rs`)
//! into a file of the task dir's own, checked against its checksum
//! (`digest.rs`) before anything is unpacked or moved, then unpacked by its
//! extension (`tar.rs`, `gzip.rs`, `zip.rs`, into `unpack.rs`'s bounded
//! sink) or moved into place, and the download removed. `chown = true`
//! gives what was placed to the task's user.
//!
//! A failure is the task's start failing with "Failed Artifact Download"
//! (its restart policy decides what follows); messages name URLs without
//! their query and never the headers.

mod digest;
mod ffi;
mod gzip;
mod http;
mod tar;
mod tls;
mod unpack;
mod zip;

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

pub use self::http::HttpLimits;
pub use self::unpack::UnpackLimits;
use super::env::interpolate;
use super::user::User;
use crate::spec::{
    archive_kind, check_source, parse_checksum, redacted, split_source, url_path, ArchiveKind,
    Artifact, ArtifactConfig, ArtifactMode,
};

/// The agent's bounds on fetching and unpacking (`client { artifact {
/// ... } }`).
#[derive(Debug, Clone, Copy)]
pub struct ArtifactLimits {
    pub http: HttpLimits,
    pub unpack: UnpackLimits,
}

impl ArtifactLimits {
    pub fn from_config(config: &ArtifactConfig) -> ArtifactLimits {
        // Nomad's 0: no limit.
        let or_none = |n: u64| if n == 0 { u64::MAX } else { n };
        ArtifactLimits {
            http: HttpLimits {
                deadline: config.http_read_timeout,
                max_size: config.http_max_size,
            },
            unpack: UnpackLimits {
                file_count: or_none(config.decompression_file_count_limit),
                size: or_none(config.decompression_size_limit),
            },
        }
    }
}

impl Default for ArtifactLimits {
    fn default() -> ArtifactLimits {
        ArtifactLimits::from_config(&ArtifactConfig::default())
    }
}

/// One artifact with its variables filled in.
struct Resolved {
    /// The URL fetched, without go-getter's parameters.
    url: String,
    checksum: Option<crate::spec::Checksum>,
    archive: Option<ArchiveKind>,
    /// Relative to the alloc dir (the task's dir name first, unless it
    /// goes to `../alloc` or another of the alloc's dirs, as Nomad
    /// allows), checked to stay inside it.
    destination: Vec<String>,
    headers: BTreeMap<String, String>,
}

/// Fills in an artifact's variables and checks what they name.
fn resolve(
    a: &Artifact,
    vars: &BTreeMap<String, String>,
    task_dir: &Path,
) -> Result<Resolved, String> {
    let source = interpolate(&a.source, vars).map_err(|e| format!("source: {e}"))?;
    check_source(a, &source)?;
    let split = split_source(&source);
    let checksum = a
        .checksum_text(&split)
        .map(|text| parse_checksum(&text))
        .transpose()?;
    let archive = if a.unpacks(&split) {
        archive_kind(url_path(&split.url))?
    } else {
        None
    };
    let dest = interpolate(&a.destination, vars).map_err(|e| format!("destination: {e}"))?;
    let (alloc_dir, task) = alloc_dir_of(task_dir);
    // A raw_exec task's `${NOMAD_TASK_DIR}` and `${NOMAD_ALLOC_DIR}` are
    // the host's paths of its dirs; anything else is relative to the task
    // dir.
    let relative = Path::new(&dest).strip_prefix(alloc_dir).map_or_else(
        |_| Path::new(task).join(dest.trim_start_matches('/')),
        Path::to_path_buf,
    );
    let mut destination = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => destination.push(part.to_string_lossy().into_owned()),
            Component::ParentDir if destination.pop().is_some() => {}
            Component::ParentDir => {
                return Err(format!("destination {dest:?} leads outside the alloc dir"))
            }
            _ => {}
        }
    }
    if a.mode == ArtifactMode::File && (destination.is_empty() || destination == [task]) {
        return Err("mode \"file\" needs a destination that names the file".into());
    }
    let mut headers = BTreeMap::new();
    for (key, value) in &a.headers {
        let value = interpolate(value, vars).map_err(|e| format!("headers.{key}: {e}"))?;
        headers.insert(key.clone(), value);
    }
    Ok(Resolved {
        url: split.url,
        checksum,
        archive,
        destination,
        headers,
    })
}

/// The alloc dir that holds `task_dir`, and the task dir's name in it.
fn alloc_dir_of(task_dir: &Path) -> (&Path, &str) {
    let alloc_dir = task_dir.parent().unwrap_or(Path::new("/"));
    let task = task_dir
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or_default();
    (alloc_dir, task)
}

/// Checks, at `job run`, what can be known of a task's artifacts before it
/// starts: their variables, and the sources they make.
pub(super) fn check(
    artifacts: &[Artifact],
    vars: &BTreeMap<String, String>,
    task_dir: &Path,
) -> Result<(), String> {
    for a in artifacts {
        resolve(a, vars, task_dir).map_err(|e| format!("artifact {}: {e}", redacted(&a.source)))?;
    }
    Ok(())
}

/// Fetches every artifact of a task into `task_dir`.
pub(super) fn fetch_all(
    artifacts: &[Artifact],
    task_dir: &Path,
    vars: &BTreeMap<String, String>,
    user: Option<User>,
    limits: &ArtifactLimits,
) -> Result<(), String> {
    for (i, a) in artifacts.iter().enumerate() {
        let resolved = resolve(a, vars, task_dir)
            .map_err(|e| format!("artifact {}: {e}", redacted(&a.source)))?;
        let placed = fetch(&resolved, a.mode, task_dir, i, limits)?;
        if let (true, Some(user)) = (a.chown, user) {
            give(&placed, user).map_err(|e| {
                format!(
                    "artifact {}: cannot give it to uid {}: {e}",
                    redacted(&resolved.url),
                    user.uid
                )
            })?;
        }
    }
    Ok(())
}

/// Fetches one artifact; the path it was placed at.
fn fetch(
    r: &Resolved,
    mode: ArtifactMode,
    task_dir: &Path,
    index: usize,
    limits: &ArtifactLimits,
) -> Result<PathBuf, String> {
    let url = redacted(&r.url);
    let download = task_dir.join(format!(".artifact-{index}.download"));
    let _ = fs::remove_file(&download);
    // The download's errors name the URL they were fetching (after
    // redirects); the others name the source's.
    let placed = download_to(r, &download, limits).and_then(|()| {
        check_and_place(r, mode, &download, task_dir, limits).map_err(|e| format!("{url}: {e}"))
    });
    let _ = fs::remove_file(&download);
    placed
}

/// Checks the download against its checksum, then places it.
fn check_and_place(
    r: &Resolved,
    mode: ArtifactMode,
    download: &Path,
    task_dir: &Path,
    limits: &ArtifactLimits,
) -> Result<PathBuf, String> {
    if let Some(sum) = &r.checksum {
        let got = digest::file_hex(sum.kind, download)
            .map_err(|e| format!("cannot read the download: {e}"))?;
        if got != sum.hex {
            return Err(format!(
                "checksum mismatch: expected {sum}, got {}:{got}",
                sum.kind.as_str()
            ));
        }
    }
    place(r, mode, download, task_dir, limits).map_err(|e| e.to_string())
}

fn download_to(r: &Resolved, download: &Path, limits: &ArtifactLimits) -> Result<(), String> {
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(download)
        .map_err(|e| format!("cannot create {}: {e}", download.display()))?;
    let mut out = BufWriter::new(file);
    http::get(&r.url, &r.headers, limits.http, &tls::ca_file(), &mut out)?;
    out.flush()
        .map_err(|e| format!("cannot write {}: {e}", download.display()))
}

/// Unpacks or moves the checked download into place.
fn place(
    r: &Resolved,
    mode: ArtifactMode,
    download: &Path,
    task_dir: &Path,
    limits: &ArtifactLimits,
) -> io::Result<PathBuf> {
    let parts: Vec<&str> = r.destination.iter().map(String::as_str).collect();
    let open = || fs::File::open(download);
    let too_large = || {
        format!(
            "the file is larger than {} bytes (decompression_size_limit)",
            limits.unpack.size
        )
    };
    if mode == ArtifactMode::File {
        let (last, dirs) = parts.split_last().expect("checked by resolve");
        let dir = unpack::make_dirs(alloc_dir_of(task_dir).0, dirs)?;
        let mut content: Box<dyn io::Read> = match r.archive {
            None => Box::new(open()?),
            Some(ArchiveKind::Gz) => Box::new(gzip::GzipReader::new(open()?)?),
            Some(ArchiveKind::Tar | ArchiveKind::TarGz | ArchiveKind::Zip) => {
                return Err(io::Error::other(
                    "mode \"file\" takes a plain or .gz file, not an archive of many",
                ))
            }
        };
        unpack::write_file(
            &dir,
            last,
            0o644,
            &mut content,
            limits.unpack.size,
            &too_large,
        )?;
        return Ok(dir.path.join(last));
    }
    let dir = unpack::make_dirs(alloc_dir_of(task_dir).0, &parts)?;
    let placed = dir.path.clone();
    match r.archive {
        None => {
            let name = Path::new(url_path(&r.url))
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "index.html".into());
            unpack::write_file(
                &dir,
                &name,
                0o644,
                &mut open()?,
                limits.unpack.size,
                &too_large,
            )?;
            Ok(placed.join(&name))
        }
        Some(ArchiveKind::Tar) => {
            let mut sink = unpack::Sink::in_dir(dir, limits.unpack);
            tar::unpack(&mut io::BufReader::new(open()?), &mut sink)?;
            Ok(placed)
        }
        Some(ArchiveKind::TarGz) => {
            let mut sink = unpack::Sink::in_dir(dir, limits.unpack);
            tar::unpack(&mut gzip::GzipReader::new(open()?)?, &mut sink)?;
            Ok(placed)
        }
        Some(ArchiveKind::Zip) => {
            let mut sink = unpack::Sink::in_dir(dir, limits.unpack);
            zip::unpack(&mut open()?, &mut sink)?;
            Ok(placed)
        }
        Some(ArchiveKind::Gz) => Err(io::Error::other(
            "a .gz file needs mode \"file\" (checked at job run)",
        )),
    }
}

/// Gives `path` and everything under it to `user`, symlinks themselves.
fn give(path: &Path, user: User) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(user.uid), Some(user.gid))?;
    if fs::symlink_metadata(path)?.is_dir() {
        for entry in fs::read_dir(path)? {
            give(&entry?.path(), user)?;
        }
    }
    Ok(())
}
