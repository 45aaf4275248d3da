//! A registry of one image, served by the test over plain HTTP on the
//! loopback, for the engine to pull from: the Docker Registry HTTP API V2
//! as far as a pull by tag needs it (`GET /v2/`, the manifest by tag,
//! blobs by digest). The image (one layer: a root's tarball, gzipped; its
//! config; its schema 2 manifest) is made offline; digests come from
//! `sha256sum`. The engine takes a registry on 127.0.0.0/8 as insecure:
//! it tries TLS first, which this server answers by closing the
//! connection, and then plain HTTP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;

/// The most bytes of a request's head the server reads.
const MAX_HEAD: u64 = 64 * 1024;

/// A registry serving `repo:tag`; it stops with the test's process.
pub struct Registry {
    /// `127.0.0.1:port`.
    pub host: String,
    /// Every request line it was sent, in order.
    pub requests: Arc<Mutex<Vec<String>>>,
}

fn sha256(bytes: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run sha256sum");
    let mut stdin = child.stdin.take().unwrap();
    let input = bytes.to_vec();
    let writer = thread::spawn(move || stdin.write_all(&input).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let hex = String::from_utf8(out.stdout).unwrap();
    format!("sha256:{}", hex.split_whitespace().next().unwrap())
}

fn run(program: &str, args: &[&str], input: Option<Vec<u8>>) -> Vec<u8> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let writer = thread::spawn(move || {
        if let Some(input) = input {
            stdin.write_all(&input).unwrap();
        }
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success(), "{program} failed");
    out.stdout
}

/// The engine's name of this machine's architecture.
fn architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

impl Registry {
    /// Serves image `repo:tag` of the root `rootfs`.
    pub fn serve(repo: &str, tag: &str, rootfs: &Path) -> Registry {
        let tar = run(
            "tar",
            &["-C", &rootfs.display().to_string(), "-c", "."],
            None,
        );
        let layer = run("gzip", &["-c"], Some(tar.clone()));
        let config = format!(
            r#"{{"architecture":"{}","os":"linux","config":{{}},"rootfs":{{"type":"layers","diff_ids":["{}"]}}}}"#,
            architecture(),
            sha256(&tar)
        )
        .into_bytes();
        let (config_digest, layer_digest) = (sha256(&config), sha256(&layer));
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{{"mediaType":"application/vnd.docker.container.image.v1+json","size":{},"digest":"{config_digest}"}},"layers":[{{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","size":{},"digest":"{layer_digest}"}}]}}"#,
            config.len(),
            layer.len()
        )
        .into_bytes();
        let manifest_digest = sha256(&manifest);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let served = Served {
            manifest_path: format!("/v2/{repo}/manifests/{tag}"),
            manifest,
            manifest_digest,
            blobs: vec![
                (format!("/v2/{repo}/blobs/{config_digest}"), config),
                (format!("/v2/{repo}/blobs/{layer_digest}"), layer),
            ],
        };
        let served = Arc::new(served);
        let seen = requests.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (served, seen) = (served.clone(), seen.clone());
                thread::spawn(move || served.answer(stream, &seen));
            }
        });
        Registry { host, requests }
    }
}

struct Served {
    manifest_path: String,
    manifest: Vec<u8>,
    manifest_digest: String,
    blobs: Vec<(String, Vec<u8>)>,
}

impl Served {
    /// Answers one request and closes the connection.
    fn answer(&self, stream: TcpStream, seen: &Mutex<Vec<String>>) {
        let mut reader = BufReader::new(stream.try_clone().unwrap()).take(MAX_HEAD);
        let mut line = String::new();
        // A TLS hello is no request line: closed unanswered.
        if reader.read_line(&mut line).is_err() || !line.ends_with("\r\n") {
            return;
        }
        loop {
            let mut header = String::new();
            match reader.read_line(&mut header) {
                Ok(0) | Err(_) => return,
                Ok(_) if header == "\r\n" => break,
                Ok(_) => {}
            }
        }
        let line = line.trim_end().to_string();
        seen.lock().unwrap().push(line.clone());
        let mut parts = line.split(' ');
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let path = path.split('?').next().unwrap_or("");
        let (status, content_type, body, digest): (&str, &str, &[u8], Option<&str>) =
            if path == "/v2/" {
                ("200 OK", "application/json", b"{}", None)
            } else if path == self.manifest_path {
                (
                    "200 OK",
                    "application/vnd.docker.distribution.manifest.v2+json",
                    &self.manifest,
                    Some(&self.manifest_digest),
                )
            } else if let Some((_, blob)) = self.blobs.iter().find(|(p, _)| p == path) {
                ("200 OK", "application/octet-stream", blob, None)
            } else {
                (
                    "404 Not Found",
                    "application/json",
                    br#"{"errors":[{"code":"NAME_UNKNOWN","message":"unknown"}]}"#,
                    None,
                )
            };
        let mut head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
             Docker-Distribution-API-Version: registry/2.0\r\nConnection: close\r\n",
            body.len()
        );
        if let Some(digest) = digest {
            head.push_str(&format!("Docker-Content-Digest: {digest}\r\n"));
        }
        head.push_str("\r\n");
        let mut stream = stream;
        let _ = stream.write_all(head.as_bytes());
        if method != "HEAD" {
            let _ = stream.write_all(body);
        }
    }
}
