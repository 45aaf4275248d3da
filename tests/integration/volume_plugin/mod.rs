//! The volume plugin endpoint (`volume_plugin` block) as dockerd and
//! Podman speak to it: HTTP/1.1 POSTs with JSON bodies over its unix
//! socket, written here byte for byte ([`Docker::call`]), against a real
//! agent and the built-in hostpath plugin. Every call, its errors (500 with
//! `Err`), the socket's mode, replacement and removal, mounts written
//! through, the access-mode rule, the agent killed during Mount and
//! Unmount, two hosts sharing a volume through etcd, and the options a
//! Create keeps with the volume (read-only mounts, a mount group, named
//! secrets).

mod calls;
mod crash;
mod hosts;
mod mounts;
mod options;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use json::Value;

use crate::harness::{healthy, Agent, WAIT};
use crate::util::Plugin;
use crate::volume_util::PLUGIN;

/// dockerd's content type.
pub const DOCKER: &str = "application/vnd.docker.plugins.v1.2+json";

/// Podman's content type.
pub const PODMAN: &str = "application/vnd.docker.plugins.v1.1+json";

/// The driver name of the tests' endpoints.
pub const NAME: &str = "csi-test";

/// How long a test waits for one call's answer: longer than any
/// `mount_timeout` the tests set.
const CALL_LIMIT: Duration = Duration::from_secs(40);

/// An answer: the HTTP status and the JSON body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Answer {
    /// `Err`, or empty.
    pub fn err(&self) -> &str {
        self.body.get("Err").and_then(Value::as_str).unwrap_or("")
    }

    /// A string field of the body.
    pub fn field(&self, key: &str) -> &str {
        self.body
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no {key} in {self:?}"))
    }

    #[track_caller]
    pub fn ok(self) -> Answer {
        assert_eq!(self.status, 200, "{self:?}");
        assert_eq!(self.err(), "", "{self:?}");
        self
    }

    /// A failure: 500 with `Err` set; its message.
    #[track_caller]
    pub fn failed(self) -> String {
        assert_eq!(self.status, 500, "{self:?}");
        assert!(!self.err().is_empty(), "{self:?}");
        self.err().to_string()
    }
}

/// A client of one endpoint, as a container engine is.
#[derive(Clone, Debug)]
pub struct Docker {
    pub socket: PathBuf,
    /// The content type sent, or none.
    pub content_type: Option<&'static str>,
}

impl Docker {
    pub fn dockerd(socket: &Path) -> Docker {
        Docker {
            socket: socket.to_path_buf(),
            content_type: Some(DOCKER),
        }
    }

    pub fn podman(socket: &Path) -> Docker {
        Docker {
            socket: socket.to_path_buf(),
            content_type: Some(PODMAN),
        }
    }

    /// POSTs `body` to `path` and reads the whole answer.
    #[track_caller]
    pub fn call(&self, path: &str, body: &str) -> Answer {
        self.try_call(path, body)
            .unwrap_or_else(|err| panic!("{path} on {}: {err}", self.socket.display()))
    }

    pub fn try_call(&self, path: &str, body: &str) -> std::io::Result<Answer> {
        let mut stream = UnixStream::connect(&self.socket)?;
        stream.set_read_timeout(Some(CALL_LIMIT))?;
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nHost: plugin\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: {}\r\nAccept-Encoding: gzip\r\n",
            body.len()
        );
        if let Some(content_type) = self.content_type {
            head.push_str(&format!("Content-Type: {content_type}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes())?;
        stream.write_all(body.as_bytes())?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw)?;
        parse_answer(&raw).map_err(std::io::Error::other)
    }

    /// `{"Name": name}` to `/VolumeDriver.<call>`.
    #[track_caller]
    pub fn named(&self, call: &str, name: &str) -> Answer {
        let body = json::to_string(&Value::object([("Name", Value::from(name))]));
        self.call(&format!("/VolumeDriver.{call}"), &body)
    }

    /// `{"Name": name, "ID": id}` to `/VolumeDriver.<call>`.
    #[track_caller]
    pub fn with_id(&self, call: &str, name: &str, id: &str) -> Answer {
        self.call(&format!("/VolumeDriver.{call}"), &name_and_id(name, id))
    }

    /// A Mount, which may get no answer (the agent killed).
    pub fn try_call_mount(&self, name: &str, id: &str) -> std::io::Result<Answer> {
        self.try_call("/VolumeDriver.Mount", &name_and_id(name, id))
    }

    /// An Unmount, which may get no answer.
    pub fn try_call_unmount(&self, name: &str, id: &str) -> std::io::Result<Answer> {
        self.try_call("/VolumeDriver.Unmount", &name_and_id(name, id))
    }

    /// Create with `opts`.
    #[track_caller]
    pub fn create(&self, name: &str, opts: &[(&str, &str)]) -> Answer {
        let opts = Value::object(opts.iter().map(|(k, v)| (*k, Value::from(*v))));
        let body = json::to_string(&Value::object([
            ("Name", Value::from(name)),
            ("Opts", opts),
        ]));
        self.call("/VolumeDriver.Create", &body)
    }

    /// A Mount that must succeed: its mount point.
    #[track_caller]
    pub fn mount(&self, name: &str, id: &str) -> PathBuf {
        PathBuf::from(self.with_id("Mount", name, id).ok().field("Mountpoint"))
    }

    #[track_caller]
    pub fn unmount(&self, name: &str, id: &str) {
        self.with_id("Unmount", name, id).ok();
    }
}

fn name_and_id(name: &str, id: &str) -> String {
    json::to_string(&Value::object([
        ("Name", Value::from(name)),
        ("ID", Value::from(id)),
    ]))
}

/// Reads `HTTP/1.1 CODE ...`, the head, and the JSON body.
fn parse_answer(raw: &[u8]) -> Result<Answer, String> {
    let text = std::str::from_utf8(raw).map_err(|e| format!("not UTF-8: {e}"))?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no end of head in {text:?}"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    let body = json::parse(body).map_err(|e| format!("body {body:?}: {e}"))?;
    Ok(Answer { status, body })
}

/// A hostpath plugin, and an agent with it as plugin [`PLUGIN`] and a
/// `volume_plugin` block whose socket is in the plugin's test dir. Dropped
/// agent first.
pub struct Host {
    pub agent: Agent,
    pub plugin: Plugin,
    pub socket: PathBuf,
}

impl Host {
    /// With the default `mount_timeout`.
    pub fn start() -> Host {
        Host::start_with("")
    }

    /// With `extra` lines in the `volume_plugin` block.
    pub fn start_with(extra: &str) -> Host {
        Host::start_with_plugin(extra, &[])
    }

    /// With `extra` lines in the `volume_plugin` block, and the hostpath
    /// plugin started with `flags` (its test hooks).
    pub fn start_with_plugin(extra: &str, flags: &[&str]) -> Host {
        let plugin = Plugin::start_with(&[("RUST_LOG", "csi_agent=debug")], flags);
        let socket = plugin
            .dir
            .join("docker-plugins")
            .join(format!("{NAME}.sock"));
        let agent = Agent::start_with_config(&config(&plugin, &socket, extra));
        agent.wait_for(PLUGIN, healthy, WAIT);
        Host {
            agent,
            plugin,
            socket,
        }
    }

    pub fn docker(&self) -> Docker {
        Docker::dockerd(&self.socket)
    }

    pub fn podman(&self) -> Docker {
        Docker::podman(&self.socket)
    }
}

/// The config lines of a plugin block for `plugin` and a `volume_plugin`
/// block at `socket`, with `extra` in it.
pub fn config(plugin: &Plugin, socket: &Path, extra: &str) -> String {
    format!(
        "\nplugin {PLUGIN:?} {{\n  socket = {:?}\n  type   = \"monolith\"\n}}\n\nvolume_plugin {{\n  name      = {NAME:?}\n  socket    = {:?}\n  plugin_id = {PLUGIN:?}\n{extra}}}\n",
        plugin.socket.display().to_string(),
        socket.display().to_string()
    )
}
