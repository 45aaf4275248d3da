//! A task's `artifact` blocks, as Nomad's: a file fetched over HTTP into
//! the task dir before the task starts (and before its templates render),
//! unpacked when it is an archive csi-agent knows, checked against its
//! checksum first.
//!
//! Nomad fetches through go-getter, which speaks many protocols; csi-agent
//! fetches `http://` and `https://` URLs itself and refuses every other
//! getter (`git::`, `s3::`, local paths, ...) here, at `validate` and `job run`,
//! naming the getter and the position, rather than failing at start. So are
//! archives it does not unpack (`.tar.bz2`, `.xz`, `.zst`, ...) unless
//! `archive = false`, unknown checksum types and malformed digests, and a
//! destination that leaves the task dir. go-getter's query parameters
//! `checksum` and `archive` in `source` are read as the `options` of the
//! same names, and are not sent to the server.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use super::decode::Fields;
use super::encode::Writer;
use hcl::Pos;

/// Keys of `options` that csi-agent understands.
const OPTIONS: &[&str] = &["checksum", "archive"];

/// Where an artifact goes when `destination` is not given.
pub const DEFAULT_DESTINATION: &str = "local/";

super::keywords! {
    /// How the fetched file is placed (`mode`): `any` unpacks an archive
    /// into the destination dir or puts a plain file in it, `file` makes
    /// the destination the file, `dir` wants an archive.
    pub enum ArtifactMode ("artifact mode") {
        Any = "any",
        File = "file",
        Dir = "dir",
    }
}

/// A digest's algorithm, as go-getter names it in `checksum`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestKind {
    Md5,
    Sha1,
    Sha256,
    Sha512,
}

impl DigestKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DigestKind::Md5 => "md5",
            DigestKind::Sha1 => "sha1",
            DigestKind::Sha256 => "sha256",
            DigestKind::Sha512 => "sha512",
        }
    }

    /// The digest's length in bytes.
    pub fn digest_len(self) -> usize {
        match self {
            DigestKind::Md5 => 16,
            DigestKind::Sha1 => 20,
            DigestKind::Sha256 => 32,
            DigestKind::Sha512 => 64,
        }
    }
}

/// `checksum = "sha256:<hex>"`: what the fetched file must hash to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checksum {
    pub kind: DigestKind,
    /// Lower-case hex, of the kind's length.
    pub hex: String,
}

impl std::fmt::Display for Checksum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind.as_str(), self.hex)
    }
}

/// Parses go-getter's `type:hex` checksum.
pub fn parse_checksum(text: &str) -> Result<Checksum, String> {
    let Some((kind, hex)) = text.split_once(':') else {
        return Err(format!(
            "checksum {text:?} must be \"type:hex\" (md5, sha1, sha256 or sha512)"
        ));
    };
    let kind = match kind {
        "md5" => DigestKind::Md5,
        "sha1" => DigestKind::Sha1,
        "sha256" => DigestKind::Sha256,
        "sha512" => DigestKind::Sha512,
        "file" => {
            return Err(
                "checksum type \"file\" (a checksum file fetched from a URL) is not supported; give the digest itself".into(),
            )
        }
        other => {
            return Err(format!(
                "unknown checksum type {other:?}: use md5, sha1, sha256 or sha512"
            ))
        }
    };
    if hex.len() != kind.digest_len() * 2 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "{} checksum {hex:?} must be {} hex digits",
            kind.as_str(),
            kind.digest_len() * 2
        ));
    }
    Ok(Checksum {
        kind,
        hex: hex.to_ascii_lowercase(),
    })
}

/// How an archive is unpacked, chosen by the URL path's extension as
/// go-getter chooses its decompressor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveKind {
    Tar,
    TarGz,
    /// One gzip-compressed file, which only `mode = "file"` can take.
    Gz,
    Zip,
}

/// Extensions go-getter unpacks and csi-agent does not.
const UNSUPPORTED_ARCHIVES: &[&str] = &[
    ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst", ".tzst", ".bz2", ".xz", ".zst",
];

/// The archive a URL path names by its extension: `Ok(None)` for a plain
/// file, an error for one csi-agent does not unpack.
pub fn archive_kind(path: &str) -> Result<Option<ArchiveKind>, String> {
    let lower = path.to_ascii_lowercase();
    let kind = if lower.ends_with(".tar.gz") || lower.ends_with(".tgz") {
        ArchiveKind::TarGz
    } else if lower.ends_with(".tar") {
        ArchiveKind::Tar
    } else if lower.ends_with(".gz") {
        ArchiveKind::Gz
    } else if lower.ends_with(".zip") {
        ArchiveKind::Zip
    } else if let Some(ext) = UNSUPPORTED_ARCHIVES.iter().find(|e| lower.ends_with(*e)) {
        return Err(format!(
            "csi-agent does not unpack {ext} archives; unpack it in the task, with archive = false in options"
        ));
    } else {
        return Ok(None);
    };
    Ok(Some(kind))
}

/// A source split into the URL to fetch and go-getter's parameters in its
/// query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceUrl {
    /// The URL without `checksum` and `archive`.
    pub url: String,
    pub checksum: Option<String>,
    pub archive: Option<String>,
}

/// Splits go-getter's `checksum` and `archive` parameters off `source`.
pub fn split_source(source: &str) -> SourceUrl {
    let (base, fragment) = match source.split_once('#') {
        Some((b, f)) => (b, Some(f)),
        None => (source, None),
    };
    let mut out = SourceUrl {
        url: base.to_string(),
        checksum: None,
        archive: None,
    };
    if let Some((path, query)) = base.split_once('?') {
        let mut kept = Vec::new();
        for pair in query.split('&') {
            match pair.split_once('=') {
                Some(("checksum", v)) => out.checksum = Some(v.to_string()),
                Some(("archive", v)) => out.archive = Some(v.to_string()),
                _ => kept.push(pair),
            }
        }
        out.url = path.to_string();
        if !kept.is_empty() {
            out.url = format!("{path}?{}", kept.join("&"));
        }
    }
    if let Some(fragment) = fragment {
        out.url = format!("{}#{fragment}", out.url);
    }
    out
}

/// The path of an `http://` URL, without its query.
pub fn url_path(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    rest.find('/').map_or("/", |i| &rest[i..])
}

/// Refuses a source csi-agent cannot fetch, naming go-getter's getter.
pub fn check_scheme(source: &str) -> Result<(), String> {
    if let Some((getter, _)) = source.split_once("::") {
        if !getter.contains('/') {
            return Err(format!(
                "the {getter:?} getter is not supported: csi-agent fetches http:// and https:// URLs only"
            ));
        }
    }
    let lower = source.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return Ok(());
    }
    let getter = match lower.split_once("://") {
        Some((scheme, _)) => format!("the {scheme:?} getter"),
        None if lower.starts_with('/') || lower.starts_with('.') => {
            "local files (go-getter's \"file\" getter)".to_string()
        }
        None if lower.starts_with("github.com/")
            || lower.starts_with("gitlab.com/")
            || lower.starts_with("bitbucket.org/")
            || lower.starts_with("git@") =>
        {
            "go-getter's \"git\" getter".to_string()
        }
        None => "a source without a scheme (go-getter guesses a getter)".to_string(),
    };
    Err(format!(
        "{getter} is not supported: csi-agent fetches http:// and https:// URLs only"
    ))
}

/// `artifact { ... }` of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// The URL as written; may name `${NOMAD_...}` variables.
    pub source: String,
    /// Relative to the task dir, inside the alloc dir (`../alloc/x` is the
    /// shared dir); may name `${NOMAD_...}` variables.
    pub destination: String,
    pub mode: ArtifactMode,
    /// `options { ... }` as written.
    pub options: BTreeMap<String, String>,
    /// Sent with the request; values may be secrets and are never logged.
    pub headers: BTreeMap<String, String>,
    /// The files are given to the task's user.
    pub chown: bool,
}

impl Artifact {
    /// The checksum of `options` or of the source's query (which wins, as
    /// in go-getter, where options become query parameters).
    pub fn checksum_text(&self, source: &SourceUrl) -> Option<String> {
        source
            .checksum
            .clone()
            .or_else(|| self.options.get("checksum").cloned())
    }

    /// Whether an archive is unpacked (`archive = false` turns it off).
    pub fn unpacks(&self, source: &SourceUrl) -> bool {
        let value = source
            .archive
            .as_deref()
            .or(self.options.get("archive").map(String::as_str));
        !matches!(value, Some("false"))
    }
}

/// Whether `destination`, joined to a task dir, stays inside the alloc dir
/// that holds it (the task dir itself included): as in Nomad, an artifact
/// may go to `../alloc/...`, the alloc's shared dir, but not above the
/// alloc.
fn stays_in_alloc_dir(destination: &str) -> bool {
    // The task dir is one below the alloc dir.
    let mut depth: usize = 1;
    for component in Path::new(destination.trim_start_matches('/')).components() {
        match component {
            Component::ParentDir => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    true
}

/// Checks what a source names, once its variables are known: its getter,
/// its checksum, its archive.
pub fn check_source(artifact: &Artifact, source: &str) -> Result<(), String> {
    let split = split_source(source);
    check_scheme(&split.url)?;
    if let Some(text) = artifact.checksum_text(&split) {
        parse_checksum(&text)?;
    }
    if let Some(value) = &split.archive {
        if value != "false" && value != "true" {
            return Err(format!("archive={value:?} must be true or false"));
        }
    }
    if artifact.unpacks(&split) {
        if let Some(kind) = archive_kind(url_path(&split.url))? {
            if kind != ArchiveKind::Gz && artifact.mode == ArtifactMode::File {
                return Err(
                    "mode \"file\" takes a plain or .gz file, not an archive of many files (give mode \"any\" or \"dir\", or archive = false)".into(),
                );
            }
            if kind == ArchiveKind::Gz && artifact.mode != ArtifactMode::File {
                return Err(
                    "a .gz file unpacks to one file: give mode = \"file\" and the file's destination".into(),
                );
            }
        } else if artifact.mode == ArtifactMode::Dir {
            return Err("mode \"dir\" needs an archive, and the URL names none".into());
        }
    } else if artifact.mode == ArtifactMode::Dir {
        return Err("mode \"dir\" needs an archive, and archive = false".into());
    }
    Ok(())
}

pub(crate) fn decode_artifact(f: &mut Fields<'_>) -> Option<Artifact> {
    let source = f.string_at("source");
    let source = f.require("source", source);
    let destination = f.string_at("destination");
    let mode = f.parsed("mode").unwrap_or(ArtifactMode::Any);
    let chown = f.bool("chown").unwrap_or(false);
    let headers = f.map("headers").unwrap_or_default();
    let entries = f.map_entries("options").unwrap_or_default();
    let what = f.what().to_string();
    let mut options = BTreeMap::new();
    for entry in entries {
        match entry.key.as_str() {
            "checksum" => {
                if let Err(err) = parse_checksum(&entry.value) {
                    f.error(entry.value_pos, format!("options in {what}: {err}"));
                }
            }
            "archive" if entry.value != "true" && entry.value != "false" => f.error(
                entry.value_pos,
                format!("options.archive in {what} must be true or false"),
            ),
            "archive" => {}
            other => f.error(
                entry.key_pos,
                format!(
                    "unknown option {other:?} in {what}: csi-agent knows {}",
                    OPTIONS.join(", ")
                ),
            ),
        }
        options.insert(entry.key, entry.value);
    }
    if let Some((dest, pos)) = &destination {
        if !dest.contains("${") && !stays_in_alloc_dir(dest) {
            f.error(
                *pos,
                format!("\"destination\" {dest:?} in {what} leads outside the alloc dir"),
            );
        }
    }
    f.finish();
    let (source, pos) = source?;
    let artifact = Artifact {
        source,
        destination: destination.map_or_else(|| DEFAULT_DESTINATION.to_string(), |(d, _)| d),
        mode,
        options,
        headers,
        chown,
    };
    check_at(f, &artifact, pos);
    Some(artifact)
}

/// Checks the source at `pos`, as far as it is known before variables are:
/// a source whose scheme is a variable is checked when it is fetched.
fn check_at(f: &Fields<'_>, artifact: &Artifact, pos: Pos) {
    let source = &artifact.source;
    if source.starts_with("${") {
        return;
    }
    // The checksum of `options` was checked at its own position.
    let mut query_only = artifact.clone();
    query_only.options.remove("checksum");
    if let Err(err) = check_source(&query_only, source) {
        f.error(pos, format!("artifact {}: {err}", redacted(source)));
    }
}

/// A URL for messages: without its query, where tokens live.
pub fn redacted(url: &str) -> String {
    match url.split_once('?') {
        Some((base, _)) => format!("{base}?[REDACTED]"),
        None => url.to_string(),
    }
}

pub(crate) fn write_artifact(w: &mut Writer, a: &Artifact) {
    w.open("artifact", None);
    w.string("source", &a.source);
    w.string("destination", &a.destination);
    w.string("mode", a.mode.as_str());
    if !a.options.is_empty() {
        w.map("options", &a.options);
    }
    if !a.headers.is_empty() {
        w.map("headers", &a.headers);
    }
    if a.chown {
        w.plain("chown", true);
    }
    w.close();
}

/// Nomad's client `artifact { ... }` keys that tune getters csi-agent
/// does not have, or its sandbox.
const ARTIFACT_CONFIG_IGNORED: &[&str] = &[
    "gcs_timeout",
    "git_timeout",
    "hg_timeout",
    "s3_timeout",
    "disable_filesystem_isolation",
    "filesystem_isolation_extra_paths",
    "set_environment_variables",
];

/// The agent config's `client { artifact { ... } }`: how far a fetch and
/// an unpacking may go, with Nomad's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArtifactConfig {
    /// `http_read_timeout`: the longest one download may take, from
    /// connecting to the body's last byte through every redirect (Nomad's
    /// meaning: go-getter's whole-request deadline).
    pub http_read_timeout: std::time::Duration,
    /// `http_max_size`: the largest download, in bytes.
    pub http_max_size: u64,
    /// `decompression_file_count_limit`: the most entries of an archive;
    /// 0 for no limit, as in Nomad.
    pub decompression_file_count_limit: u64,
    /// `decompression_size_limit`: the most bytes an archive unpacks to;
    /// 0 for no limit, as in Nomad.
    pub decompression_size_limit: u64,
}

/// 100 GB, Nomad's `http_max_size` and `decompression_size_limit`.
const HUNDRED_GB: u64 = 100_000_000_000;

impl Default for ArtifactConfig {
    fn default() -> ArtifactConfig {
        ArtifactConfig {
            http_read_timeout: std::time::Duration::from_secs(30 * 60),
            http_max_size: HUNDRED_GB,
            decompression_file_count_limit: 4096,
            decompression_size_limit: HUNDRED_GB,
        }
    }
}

impl ArtifactConfig {
    pub(crate) fn write(&self, w: &mut Writer) {
        w.open("artifact", None);
        w.duration("http_read_timeout", self.http_read_timeout);
        w.plain("http_max_size", self.http_max_size);
        w.plain(
            "decompression_file_count_limit",
            self.decompression_file_count_limit,
        );
        w.plain("decompression_size_limit", self.decompression_size_limit);
        w.close();
    }
}

/// A byte size written as a number or a string (`"100GB"`), at its
/// position.
fn size(f: &mut Fields<'_>, key: &'static str) -> Option<u64> {
    if let Some(attr) = f.attr(key) {
        if matches!(attr.value, hcl::Expr::Number { .. }) {
            return f.u64(key);
        }
    }
    let (text, pos) = f.string_at(key)?;
    match crate::units::parse_size(&text) {
        Ok(n) => Some(n),
        Err(err) => {
            f.error(pos, format!("{key:?} in {}: {err}", f.what()));
            None
        }
    }
}

/// Decodes `client { artifact { ... } }`.
pub(crate) fn decode_artifact_config(f: &mut Fields<'_>) -> ArtifactConfig {
    let mut config = ArtifactConfig::default();
    if let Some(timeout) = f.duration("http_read_timeout") {
        if timeout.is_zero() {
            let pos = f
                .attr("http_read_timeout")
                .map_or(f.pos(), |a| a.value.pos());
            f.error(
                pos,
                format!("\"http_read_timeout\" in {} must be more than 0", f.what()),
            );
        }
        config.http_read_timeout = timeout;
    }
    if let Some(n) = size(f, "http_max_size") {
        if n == 0 {
            let pos = f.attr("http_max_size").map_or(f.pos(), |a| a.value.pos());
            f.error(
                pos,
                format!("\"http_max_size\" in {} must be more than 0", f.what()),
            );
        }
        config.http_max_size = n;
    }
    if let Some(n) = f.u64("decompression_file_count_limit") {
        config.decompression_file_count_limit = n;
    }
    if let Some(n) = size(f, "decompression_size_limit") {
        config.decompression_size_limit = n;
    }
    f.ignore(ARTIFACT_CONFIG_IGNORED);
    f.finish();
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Job;

    /// A job whose task "t" has `body` from line 6.
    fn job(body: &str) -> String {
        format!("job \"j\" {{\n  group \"g\" {{\n    task \"t\" {{\n      driver = \"exec\"\n      config {{ command = \"/bin/true\" }}\n{body}\n    }}\n  }}\n}}\n")
    }

    fn errors(body: &str) -> Vec<String> {
        match Job::decode(&job(body), "j.hcl") {
            Ok(decoded) => panic!("decoded: {:?}", decoded.spec.groups[0].tasks[0].artifacts),
            Err(invalid) => invalid.errors.iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn an_artifact_decodes_with_nomads_defaults_and_round_trips() {
        let sum = "ab".repeat(32);
        let src = job(&format!("      artifact {{\n        source = \"http://localhost:${{NOMAD_PORT_http}}/a.tar.gz\"\n      }}\n      artifact {{\n        source = \"http://h/run.sh\"\n        destination = \"local/bin/run.sh\"\n        mode = \"file\"\n        chown = true\n        options {{\n          checksum = \"sha256:{sum}\"\n        }}\n        headers {{\n          Authorization = \"Bearer x\"\n        }}\n      }}"));
        let decoded = Job::decode(&src, "j.hcl").unwrap();
        let task = &decoded.spec.groups[0].tasks[0];
        let [first, second] = task.artifacts.as_slice() else {
            panic!("{:?}", task.artifacts)
        };
        assert_eq!(first.source, "http://localhost:${NOMAD_PORT_http}/a.tar.gz");
        assert_eq!(first.destination, "local/");
        assert_eq!(first.mode, ArtifactMode::Any);
        assert!(!first.chown);
        assert_eq!(second.mode, ArtifactMode::File);
        assert_eq!(second.options["checksum"], format!("sha256:{sum}"));
        assert_eq!(second.headers["Authorization"], "Bearer x");
        assert!(second.chown);
        assert!(decoded.warnings.is_empty(), "{:?}", decoded.warnings);
        let again = Job::decode(&decoded.spec.to_hcl(), "again.hcl").unwrap();
        assert_eq!(again.spec, decoded.spec);
    }

    #[test]
    fn bad_artifacts_are_errors_at_their_position() {
        let cases = [
            ("source = \"git::https://github.com/a/b\"", "j.hcl:7:18: artifact git::https://github.com/a/b: the \"git\" getter is not supported"),
            ("source = \"http://h/a.tar.xz\"", "j.hcl:7:18: artifact http://h/a.tar.xz: csi-agent does not unpack .tar.xz archives"),
            ("source = \"http://h/a?checksum=md5:12&token=s\"", "j.hcl:7:18: artifact http://h/a?[REDACTED]: md5 checksum \"12\" must be 32 hex digits"),
            ("source = \"http://h/a\"\n        mode = \"both\"", "j.hcl:8:16:"),
            ("source = \"http://h/a\"\n        destination = \"../../x\"", "j.hcl:8:23: \"destination\" \"../../x\" in artifact in task \"t\" leads outside the alloc dir"),
            ("source = \"http://h/a\"\n        destination = \"local/../../../x\"", "j.hcl:8:23: \"destination\" \"local/../../../x\""),
            ("source = \"http://h/a\"\n        options {\n          checksum = \"crc:00\"\n        }", "j.hcl:9:22: options in artifact"),
            ("source = \"http://h/a\"\n        options {\n          depth = \"1\"\n        }", "j.hcl:9:11: unknown option \"depth\""),
            ("source = \"http://h/a\"\n        sources = 1", "j.hcl:8:9:"),
            ("source = \"http://h/a.gz\"", "a .gz file unpacks to one file"),
            ("source = \"http://h/a.zip\"\n        mode = \"file\"\n        destination = \"local/a\"", "mode \"file\" takes a plain or .gz file"),
        ];
        for (body, want) in cases {
            let errs = errors(&format!("      artifact {{\n        {body}\n      }}"));
            assert!(
                errs.len() == 1 && errs[0].starts_with(want) || errs[0].contains(want),
                "{body}: {errs:?}"
            );
        }
        // As in Nomad, the alloc's shared dir is a destination too.
        let src = job("      artifact {\n        source = \"http://h/a\"\n        destination = \"../alloc/data\"\n      }");
        assert!(Job::decode(&src, "j.hcl").is_ok());
        // archive = false takes any extension as a plain file.
        let src = job("      artifact {\n        source = \"http://h/a.tar.xz\"\n        options {\n          archive = false\n        }\n      }");
        assert!(Job::decode(&src, "j.hcl").is_ok());
    }

    #[test]
    fn checksums_parse_by_type_and_length() {
        let sum = parse_checksum(&format!("sha256:{}", "AB".repeat(32))).unwrap();
        assert_eq!(sum.kind, DigestKind::Sha256);
        assert_eq!(sum.hex, "ab".repeat(32));
        assert!(parse_checksum(&format!("md5:{}", "0".repeat(32))).is_ok());
        assert!(parse_checksum(&format!("sha1:{}", "0".repeat(40))).is_ok());
        assert!(parse_checksum(&format!("sha512:{}", "0".repeat(128))).is_ok());
        let err = parse_checksum("crc32:00000000").unwrap_err();
        assert!(err.contains("unknown checksum type \"crc32\""), "{err}");
        let err = parse_checksum("sha256:abc").unwrap_err();
        assert!(err.contains("64 hex digits"), "{err}");
        let err = parse_checksum(&format!("md5:{}", "g".repeat(32))).unwrap_err();
        assert!(err.contains("32 hex digits"), "{err}");
        assert!(parse_checksum("abcdef").unwrap_err().contains("type:hex"));
        assert!(parse_checksum("file:http://x/sums").is_err());
    }

    #[test]
    fn getter_parameters_come_off_the_query() {
        let s = split_source("http://h/a.tgz?token=x&checksum=md5:00&archive=false");
        assert_eq!(s.url, "http://h/a.tgz?token=x");
        assert_eq!(s.checksum.as_deref(), Some("md5:00"));
        assert_eq!(s.archive.as_deref(), Some("false"));
        assert_eq!(split_source("http://h/a").url, "http://h/a");
        assert_eq!(url_path("http://h:80/x/a.tar.gz?q=1"), "/x/a.tar.gz");
        assert_eq!(url_path("http://h"), "/");
    }

    #[test]
    fn archives_are_known_by_extension() {
        assert_eq!(archive_kind("/a.tar.gz"), Ok(Some(ArchiveKind::TarGz)));
        assert_eq!(archive_kind("/a.TGZ"), Ok(Some(ArchiveKind::TarGz)));
        assert_eq!(archive_kind("/a.tar"), Ok(Some(ArchiveKind::Tar)));
        assert_eq!(archive_kind("/a.gz"), Ok(Some(ArchiveKind::Gz)));
        assert_eq!(archive_kind("/a.zip"), Ok(Some(ArchiveKind::Zip)));
        assert_eq!(archive_kind("/a.sh"), Ok(None));
        assert!(archive_kind("/a.tar.xz").unwrap_err().contains(".tar.xz"));
    }

    #[test]
    fn other_getters_are_refused_by_name() {
        assert!(check_scheme("http://h/x").is_ok());
        assert!(check_scheme("https://h/x").is_ok());
        for (source, named) in [
            ("git::https://github.com/a/b", "\"git\" getter"),
            ("s3::https://s3.amazonaws.com/b/k", "\"s3\" getter"),
            ("gcs::https://www.googleapis.com/x", "\"gcs\" getter"),
            ("hg::http://h/r", "\"hg\" getter"),
            ("/srv/file", "\"file\" getter"),
            ("github.com/a/b", "\"git\" getter"),
            ("ftp://h/x", "\"ftp\" getter"),
        ] {
            let err = check_scheme(source).unwrap_err();
            assert!(err.contains(named), "{source}: {err}");
        }
    }

    #[test]
    fn query_strings_are_redacted_in_messages() {
        assert_eq!(redacted("http://h/a?token=s"), "http://h/a?[REDACTED]");
        assert_eq!(redacted("http://h/a"), "http://h/a");
    }
}
