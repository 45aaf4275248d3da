//! Each call of the protocol on an httpd worker: the request read, the
//! control API requests it makes of the main loop (as `csi-agent volume`
//! would), and the answer.
//!
//! A worker waits for the loop at most `mount_timeout` per request. A
//! Mount whose claim is not taken by then has its claim released at once,
//! so that a mount dockerd has given up on leaves nothing behind; a Create
//! not done by then goes on in the agent (`volume status` shows it
//! `creating`), and the answer says so.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::api::{self, Call, Response as ApiResponse};
use crate::call::{CallError, ErrorKind};
use crate::httpd::{Request, Response};
use crate::spec::VolumePluginConfig;
use crate::units::format_duration;
use crate::volume::calls::{
    Answer, ClaimRequest, DeregisterRequest, ReleaseRequest, SpecRequest, StatusRequest,
    VolumeStatus,
};
use json::Value;

use super::mount_counts::MountCounts;
use super::secrets::SecretsDir;
use super::wire::{self, Body};
use super::{claim_alloc_id, engine_of_claim, media_type, options, EngineKind, CONTENT_TYPES};

/// The calls of the protocol, as paths.
const CALLS: &[&str] = &[
    "/Plugin.Activate",
    "/VolumeDriver.Capabilities",
    "/VolumeDriver.Create",
    "/VolumeDriver.Remove",
    "/VolumeDriver.Mount",
    "/VolumeDriver.Unmount",
    "/VolumeDriver.Path",
    "/VolumeDriver.Get",
    "/VolumeDriver.List",
];

/// What answers the calls: where they go and how long they wait.
pub(super) struct Plugin {
    calls: Sender<Call>,
    default_plugin: Option<String>,
    /// Where `-o secrets=NAME` finds its secret.
    secrets_dir: Option<PathBuf>,
    wait: Duration,
    scope: &'static str,
    /// How many Mounts of each claim (by alloc ID) are not unmounted yet.
    mounts: MountCounts,
}

/// Why the loop gave no answer.
enum Unanswered {
    Failed(CallError),
    /// Not within `mount_timeout`.
    TimedOut,
    /// The agent is stopping: the loop takes no more calls.
    Stopping,
}

impl Plugin {
    pub fn new(config: &VolumePluginConfig, calls: Sender<Call>, cluster: bool) -> Plugin {
        Plugin {
            calls,
            default_plugin: config.plugin_id.clone(),
            secrets_dir: config.secrets_dir.clone(),
            wait: config.mount_timeout,
            scope: if cluster { "global" } else { "local" },
            mounts: MountCounts::default(),
        }
    }

    /// Answers one request.
    pub fn handle(&self, request: &Request) -> Response {
        let content_type = request.header("content-type");
        let engine = EngineKind::of_content_type(content_type);
        if let Some(given) = content_type {
            if !CONTENT_TYPES.contains(&media_type(given).as_str()) {
                let message = format!(
                    "content type {given:?} is not one of {}",
                    CONTENT_TYPES.join(", ")
                );
                return wire::error(engine, 415, &message);
            }
        }
        let path = request.path();
        if !CALLS.contains(&path) {
            return wire::error(engine, 404, &format!("unknown call {path}"));
        }
        if request.method != "POST" {
            let message = format!("{path} takes POST, not {}", request.method);
            return wire::error(engine, 405, &message);
        }
        log::debug!("Volume plugin: {path}");
        let body = match Body::parse(&request.body) {
            Ok(body) => body,
            Err(err) => return wire::error(engine, 500, &format!("{path}: {err}")),
        };
        // One bound for the whole call, however many requests it makes.
        let deadline = Instant::now() + self.wait;
        let answer = match path {
            "/Plugin.Activate" => Ok(wire::ok(
                engine,
                &Value::object([("Implements", Value::strings(["VolumeDriver"]))]),
            )),
            "/VolumeDriver.Capabilities" => Ok(wire::ok(
                engine,
                &Value::object([(
                    "Capabilities",
                    Value::object([("Scope", Value::from(self.scope))]),
                )]),
            )),
            "/VolumeDriver.List" => self.list(engine, deadline),
            _ => match body.name() {
                Err(err) => Err(format!("{path}: {err}")),
                Ok(name) => match path {
                    "/VolumeDriver.Create" => self.create(engine, name, &body.opts, deadline),
                    "/VolumeDriver.Remove" => self.remove(engine, name, deadline),
                    "/VolumeDriver.Mount" => {
                        let id = body.id.as_deref().unwrap_or("");
                        self.mount(engine, name, id, request.peer_pid, deadline)
                    }
                    "/VolumeDriver.Unmount" => {
                        let id = body.id.as_deref().unwrap_or("");
                        self.unmount(engine, name, id, deadline)
                    }
                    "/VolumeDriver.Path" => self.path(engine, name, deadline),
                    _ => self.get(engine, name, deadline),
                },
            },
        };
        answer.unwrap_or_else(|message| wire::error(engine, 500, &message))
    }

    /// Sends `request` to the loop and waits for its answer until
    /// `deadline`.
    fn ask(&self, request: api::Request, deadline: Instant) -> Result<Answer, Unanswered> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let call = Call {
            request,
            reply: crate::call::ReplyTo::from(tx),
        };
        if self.calls.send(call).is_err() {
            return Err(Unanswered::Stopping);
        }
        match rx.recv_deadline(deadline) {
            Ok(Ok(ApiResponse::Volume(answer))) => Ok(answer),
            Ok(Ok(other)) => Err(Unanswered::Failed(CallError::new(
                ErrorKind::Internal,
                format!("unexpected answer {other:?}"),
            ))),
            Ok(Err(err)) if err.kind == ErrorKind::Unavailable => Err(Unanswered::Stopping),
            Ok(Err(err)) => Err(Unanswered::Failed(err)),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Err(Unanswered::TimedOut),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(Unanswered::Stopping),
        }
    }

    /// A volume's status, or `None` when the agent knows no such volume.
    fn status(&self, name: &str, deadline: Instant) -> Result<Option<VolumeStatus>, String> {
        if crate::id::validate("volume ID", name).is_err() {
            return Ok(None);
        }
        let request = api::Request::VolumeStatus(StatusRequest {
            id: name.to_string(),
            ..Default::default()
        });
        match self.ask(request, deadline) {
            Ok(Answer::Status(mut status)) => Ok(status.volumes.pop()),
            Ok(other) => Err(unexpected(name, &other)),
            Err(Unanswered::Failed(err)) if err.kind == ErrorKind::NotFound => Ok(None),
            Err(why) => Err(self.unanswered(name, "the status", why)),
        }
    }

    /// A status that must exist.
    fn existing(&self, name: &str, deadline: Instant) -> Result<VolumeStatus, String> {
        self.status(name, deadline)?
            .ok_or_else(|| format!("volume {name:?} not found"))
    }

    fn get(&self, engine: EngineKind, name: &str, deadline: Instant) -> Result<Response, String> {
        let status = self.existing(name, deadline)?;
        let volume = wire::volume(&status.id, mountpoint(&status), Some(status_map(&status)));
        Ok(wire::ok(engine, &Value::object([("Volume", volume)])))
    }

    fn list(&self, engine: EngineKind, deadline: Instant) -> Result<Response, String> {
        let request = api::Request::VolumeStatus(StatusRequest::default());
        let volumes = match self.ask(request, deadline) {
            Ok(Answer::Status(status)) => status.volumes,
            Ok(other) => return Err(unexpected("", &other)),
            Err(why) => return Err(self.unanswered("", "the list of volumes", why)),
        };
        let list = volumes
            .iter()
            .map(|v| wire::volume(&v.id, mountpoint(v), None));
        Ok(wire::ok(
            engine,
            &Value::object([("Volumes", Value::array(list))]),
        ))
    }

    fn path(&self, engine: EngineKind, name: &str, deadline: Instant) -> Result<Response, String> {
        let status = self.existing(name, deadline)?;
        Ok(wire::mountpoint(engine, mountpoint(&status)))
    }

    fn create(
        &self,
        engine: EngineKind,
        name: &str,
        opts: &[(String, String)],
        deadline: Instant,
    ) -> Result<Response, String> {
        crate::id::validate("volume name", name).map_err(|e| e.to_string())?;
        let secrets_dir = self.secrets_dir.as_deref();
        let named_secret = |secret: &str| match secrets_dir {
            None => Err(format!(
                "no secret {secret:?}: the agent's volume_plugin block has no secrets_dir"
            )),
            Some(dir) => SecretsDir::open(dir)
                .and_then(|store| store.read(secret))
                .map_err(|e| e.to_string()),
        };
        let parsed = options::parse(name, opts, self.default_plugin.as_deref(), &named_secret)
            .map_err(|e| format!("volume {name:?}: {e}"))?;
        // The protocol's Create answer has no room for a warning (any Err
        // fails the Create): the log has it.
        for warning in &parsed.warnings {
            log::warn!("Volume plugin: volume {name}: {warning}");
        }
        if let Some(status) = self.status(name, deadline)? {
            let differences = parsed.differences(&status);
            if !differences.is_empty() {
                return Err(format!(
                    "volume {name:?} exists with other options: {}",
                    differences.join("; ")
                ));
            }
            if status.creating {
                return Err(still_creating(name));
            }
            return Ok(wire::done(engine));
        }
        log::info!(
            "Volume plugin: creating volume {name} with plugin {}",
            parsed.spec.plugin_id
        );
        let request = api::Request::VolumeCreate(SpecRequest {
            file: format!("the options of volume {name:?}"),
            hcl: parsed.spec.to_hcl(),
            settings: parsed.settings.clone(),
        });
        match self.ask(request, deadline) {
            Ok(_) => Ok(wire::done(engine)),
            Err(Unanswered::TimedOut) => Err(format!(
                "{} after {} (volume_plugin's mount_timeout)",
                still_creating(name),
                format_duration(self.wait)
            )),
            Err(why) => Err(self.unanswered(name, "the creation", why)),
        }
    }

    fn remove(
        &self,
        engine: EngineKind,
        name: &str,
        deadline: Instant,
    ) -> Result<Response, String> {
        let status = self.existing(name, deadline)?;
        let holders: Vec<&str> = status
            .claims
            .iter()
            .chain(&status.past_claims)
            .map(|c| c.alloc_id.as_str())
            .collect();
        if !holders.is_empty() {
            return Err(format!(
                "volume {name:?} is in use: claims of {}",
                holders.join(", ")
            ));
        }
        let req = DeregisterRequest {
            id: name.to_string(),
            force: false,
        };
        // A volume the agent created is deleted in its plugin; one that
        // was registered is only forgotten.
        let (request, what) = if status.created {
            (api::Request::VolumeDelete(req), "the deletion")
        } else {
            (api::Request::VolumeDeregister(req), "the deregistration")
        };
        log::info!("Volume plugin: removing volume {name} ({what})");
        self.ask(request, deadline)
            .map(|_| wire::done(engine))
            .map_err(|why| self.unanswered(name, what, why))
    }

    fn mount(
        &self,
        engine: EngineKind,
        name: &str,
        mount_id: &str,
        engine_pid: Option<u32>,
        deadline: Instant,
    ) -> Result<Response, String> {
        let status = self.existing(name, deadline)?;
        let file_system: Vec<&str> = status
            .capabilities
            .iter()
            .filter_map(|c| c.strip_suffix("/file-system"))
            .collect();
        if file_system.is_empty() {
            return Err(format!(
                "volume {name:?} has no file-system capability ({}): a docker volume is a directory",
                status.capabilities.join(", ")
            ));
        }
        // Docker does not tell a driver about `:ro`: a volume made with
        // `-o read_only=true`, or that allows no writer, is claimed for
        // reading, any other for writing.
        let read_only =
            status.mounts_read_only || file_system.iter().all(|mode| mode.ends_with("reader-only"));
        let alloc_id = claim_alloc_id(engine, mount_id);
        log::info!(
            "Volume plugin: mount {mount_id:?} of volume {name} claims it as alloc {alloc_id}"
        );
        let request = api::Request::VolumeClaim(ClaimRequest {
            volume_id: name.to_string(),
            alloc_id: alloc_id.clone(),
            read_only,
            ..Default::default()
        });
        // A claim some earlier Mount holds is answered at once as a
        // repeat; its release is for that Mount's Unmount.
        let held = self.mounts.held(name, &alloc_id);
        match self.ask(request, deadline) {
            Ok(Answer::Claimed(claimed)) => {
                self.mounts.mounted(name, &alloc_id, engine_pid);
                Ok(wire::mountpoint(engine, &claimed.publish_path))
            }
            Ok(other) => Err(unexpected(name, &other)),
            Err(Unanswered::TimedOut) if held => {
                Err(self.unanswered(name, "the mount", Unanswered::TimedOut))
            }
            Err(Unanswered::TimedOut) => {
                self.release_unwaited(name, &alloc_id);
                Err(format!(
                    "the mount of volume {name:?} (claim of alloc {alloc_id}) was not done within {} (volume_plugin's mount_timeout): its claim is released",
                    format_duration(self.wait)
                ))
            }
            Err(why) => Err(self.unanswered(name, "the mount", why)),
        }
    }

    /// Releases a claim whose mount was given up on, without waiting for
    /// the release: the manager carries it out whoever waits.
    fn release_unwaited(&self, name: &str, alloc_id: &str) {
        // Nobody waits for the answer: the receiver goes at once.
        let (tx, _) = crossbeam_channel::bounded(1);
        let call = Call {
            request: api::Request::VolumeRelease(ReleaseRequest {
                volume_id: name.to_string(),
                alloc_id: alloc_id.to_string(),
            }),
            reply: crate::call::ReplyTo::from(tx),
        };
        if self.calls.send(call).is_err() {
            log::warn!(
                "Volume plugin: cannot release alloc {alloc_id}'s claim of volume {name}: the agent is stopping"
            );
        }
    }

    fn unmount(
        &self,
        engine: EngineKind,
        name: &str,
        mount_id: &str,
        deadline: Instant,
    ) -> Result<Response, String> {
        let alloc_id = claim_alloc_id(engine, mount_id);
        if !self.mounts.unmounted(name, &alloc_id) {
            log::info!(
                "Volume plugin: unmount {mount_id:?} of volume {name} leaves alloc {alloc_id}'s claim to the other Mounts of that ID"
            );
            return Ok(wire::done(engine));
        }
        log::info!(
            "Volume plugin: unmount {mount_id:?} of volume {name} releases alloc {alloc_id}"
        );
        let request = api::Request::VolumeRelease(ReleaseRequest {
            volume_id: name.to_string(),
            alloc_id: alloc_id.clone(),
        });
        match self.ask(request, deadline) {
            Ok(Answer::Released(released)) if released.released => Ok(wire::done(engine)),
            Ok(Answer::Released(released)) => Err(format!(
                "the release of alloc {alloc_id}'s claim of volume {name:?} is not done: {}; the agent keeps retrying",
                released.message
            )),
            Ok(other) => Err(unexpected(name, &other)),
            // No such volume: nothing of this mount is left to release.
            Err(Unanswered::Failed(err)) if err.kind == ErrorKind::NotFound => {
                Ok(wire::done(engine))
            }
            Err(Unanswered::TimedOut) => Err(format!(
                "the release of alloc {alloc_id}'s claim of volume {name:?} was not done within {} (volume_plugin's mount_timeout); the agent goes on with it",
                format_duration(self.wait)
            )),
            Err(why) => Err(self.unanswered(name, "the unmount", why)),
        }
    }

    /// The message of a call the loop did not answer with success.
    fn unanswered(&self, name: &str, what: &str, why: Unanswered) -> String {
        match why {
            Unanswered::Failed(err) => named(name, &err.message),
            Unanswered::TimedOut => format!(
                "{what} of volume {name:?} got no answer within {} (volume_plugin's mount_timeout)",
                format_duration(self.wait)
            ),
            Unanswered::Stopping => {
                format!("{what} of volume {name:?}: the agent is shutting down")
            }
        }
    }
}

/// `cause`, with the volume named unless it already is.
fn named(name: &str, cause: &str) -> String {
    if name.is_empty() || cause.contains(&format!("{name:?}")) {
        cause.to_string()
    } else {
        format!("volume {name:?}: {cause}")
    }
}

fn unexpected(name: &str, answer: &Answer) -> String {
    let kind = match answer {
        Answer::Status(_) => "a status",
        Answer::Claimed(_) => "a claim",
        Answer::Released(_) => "a release",
        Answer::Deregistered => "a deregistration",
        _ => "a snapshot",
    };
    named(name, &format!("the agent answered with {kind}"))
}

fn still_creating(name: &str) -> String {
    format!("volume {name:?} is still being created (see `csi-agent volume status {name}`)")
}

/// Where a container engine mounts the volume on this host: the publish
/// path of a taken claim made by a Mount, or empty when it is not
/// mounted here.
fn mountpoint(status: &VolumeStatus) -> &str {
    status
        .claims
        .iter()
        .find(|c| {
            engine_of_claim(&c.alloc_id).is_some()
                && c.state == "taken"
                && !c.publish_path.is_empty()
        })
        .map_or("", |c| c.publish_path.as_str())
}

/// Get's `Status`: what `docker volume inspect` shows. No secret: the
/// status has none, and not even their keys are shown.
fn status_map(status: &VolumeStatus) -> Value {
    let (access, attachment) = status
        .capabilities
        .first()
        .and_then(|c| c.split_once('/'))
        .unwrap_or(("", ""));
    let condition = if status.creating {
        if status.create_error.is_empty() {
            "creating".to_string()
        } else {
            format!("creating (last error: {})", status.create_error)
        }
    } else if status.schedulable {
        "schedulable".to_string()
    } else {
        "unschedulable".to_string()
    };
    let capacity = if status.capacity_bytes > 0 {
        crate::units::format_size(status.capacity_bytes as u64)
    } else {
        "unknown".to_string()
    };
    let claims = status.claims.iter().map(|c| {
        let mut claim = Value::object([
            ("alloc_id", Value::from(c.alloc_id.as_str())),
            ("mode", Value::from(c.mode.as_str())),
            ("state", Value::from(c.state.as_str())),
        ]);
        if !c.node.is_empty() {
            claim.push("node", Value::from(c.node.as_str()));
        }
        claim
    });
    let mut map = Value::object([
        ("plugin_id", Value::from(status.plugin_id.as_str())),
        ("capacity", Value::from(capacity)),
        ("access_mode", Value::from(access)),
        ("attachment_mode", Value::from(attachment)),
        ("capabilities", Value::strings(&status.capabilities)),
        ("condition", Value::from(condition)),
        ("schedulable", Value::Bool(status.schedulable)),
        ("read_only", Value::Bool(status.mounts_read_only)),
        ("claims", Value::array(claims)),
    ]);
    if !status.mount_group.is_empty() {
        map.push("mount_group", Value::from(status.mount_group.as_str()));
    }
    // Where the volume can be used: each topology its segments.
    // Plain loops: the generic builders would compile one more copy each.
    if !status.topologies.is_empty() {
        let mut topologies = Vec::new();
        for topology in &status.topologies {
            let mut segments = Vec::new();
            for (key, value) in topology {
                segments.push((key.clone(), Value::String(value.clone())));
            }
            topologies.push(Value::Object(segments));
        }
        map.push("topologies", Value::Array(topologies));
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::calls::{ClaimStatus, Claimed, Released, Status};

    /// A plugin whose calls go to the returned receiver, the loop's side.
    fn plugin(wait: Duration) -> (Plugin, crossbeam_channel::Receiver<Call>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        let config = VolumePluginConfig {
            mount_timeout: wait,
            plugin_id: Some("hp".into()),
            ..Default::default()
        };
        (Plugin::new(&config, tx, false), rx)
    }

    fn post(path: &str, content_type: Option<&str>, body: &str) -> Request {
        Request {
            method: "POST".into(),
            target: path.into(),
            headers: content_type
                .map(|t| vec![("Content-Type".to_string(), t.to_string())])
                .unwrap_or_default(),
            body: body.as_bytes().to_vec(),
            peer_pid: None,
        }
    }

    fn err_of(response: &Response) -> String {
        let body = json::parse_bytes(response.body()).unwrap();
        body.get("Err")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    }

    fn volume_with(capabilities: &[&str]) -> VolumeStatus {
        VolumeStatus {
            id: "v".into(),
            capabilities: capabilities.iter().map(|c| c.to_string()).collect(),
            ..Default::default()
        }
    }

    /// Answers the loop's side: each call with what `answer` gives for it.
    fn serve(
        rx: crossbeam_channel::Receiver<Call>,
        answer: impl Fn(&api::Request) -> Option<crate::call::Answer<Answer>> + Send + 'static,
    ) -> std::thread::JoinHandle<Vec<String>> {
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            for call in rx.iter() {
                seen.push(format!("{:?}", call.request));
                if let Some(a) = answer(&call.request) {
                    call.reply.send(a.map(ApiResponse::Volume));
                } else {
                    // Unanswered: held as the loop holds a waiting claim.
                    std::mem::forget(call.reply);
                }
            }
            seen
        })
    }

    #[test]
    fn activate_and_capabilities_need_no_loop_and_unknowns_are_refused() {
        let (plugin, _rx) = plugin(Duration::from_secs(1));
        let answer = plugin.handle(&post("/Plugin.Activate", None, ""));
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body(), br#"{"Implements":["VolumeDriver"]}"#);
        let answer = plugin.handle(&post(
            "/VolumeDriver.Capabilities",
            Some("application/vnd.docker.plugins.v1.2+json"),
            "{}",
        ));
        assert_eq!(answer.body(), br#"{"Capabilities":{"Scope":"local"}}"#);
        let answer = plugin.handle(&post("/VolumeDriver.Nope", None, "{}"));
        assert_eq!(answer.status, 404);
        assert_eq!(err_of(&answer), "unknown call /VolumeDriver.Nope");
        let answer = plugin.handle(&post("/Plugin.Activate", Some("text/plain"), ""));
        assert_eq!(answer.status, 415);
        let get = Request {
            method: "GET".into(),
            ..post("/Plugin.Activate", None, "")
        };
        let answer = plugin.handle(&get);
        assert_eq!(answer.status, 405);
        assert_eq!(err_of(&answer), "/Plugin.Activate takes POST, not GET");
    }

    #[test]
    fn a_podman_mount_claims_for_podman_and_answers_the_publish_path() {
        let (plugin, rx) = plugin(Duration::from_secs(5));
        let loop_side = serve(rx, |request| match request {
            api::Request::VolumeStatus(_) => Some(Ok(Answer::Status(Status {
                volumes: vec![volume_with(&["single-node-reader-only/file-system"])],
                ..Default::default()
            }))),
            api::Request::VolumeClaim(claim) => Some(Ok(Answer::Claimed(Claimed {
                publish_path: format!("/p/{}/{}", claim.alloc_id, claim.read_only),
                target: String::new(),
            }))),
            _ => None,
        });
        let answer = plugin.handle(&post(
            "/VolumeDriver.Mount",
            Some("application/vnd.docker.plugins.v1.1+json"),
            r#"{"Name":"v","ID":"fixed"}"#,
        ));
        assert_eq!(answer.status, 200);
        // A reader-only volume is claimed for reading.
        assert_eq!(answer.body(), br#"{"Mountpoint":"/p/podman-fixed/true"}"#);
        drop(plugin);
        let seen = loop_side.join().unwrap();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(seen[1].contains("alloc_id: \"podman-fixed\""), "{seen:?}");
    }

    #[test]
    fn a_read_only_volume_is_claimed_for_reading_and_others_for_writing() {
        for (read_only, mode, expected) in [
            (true, "single-node-writer", "true"),
            (false, "single-node-writer", "false"),
            (false, "multi-node-reader-only", "true"),
        ] {
            let (plugin, rx) = plugin(Duration::from_secs(5));
            let loop_side = serve(rx, move |request| match request {
                api::Request::VolumeStatus(_) => Some(Ok(Answer::Status(Status {
                    volumes: vec![VolumeStatus {
                        mounts_read_only: read_only,
                        ..volume_with(&[&format!("{mode}/file-system")])
                    }],
                    ..Default::default()
                }))),
                api::Request::VolumeClaim(claim) => Some(Ok(Answer::Claimed(Claimed {
                    publish_path: format!("/p/{}", claim.read_only),
                    target: String::new(),
                }))),
                _ => None,
            });
            let answer = plugin.handle(&post(
                "/VolumeDriver.Mount",
                None,
                r#"{"Name":"v","ID":"m"}"#,
            ));
            let body = format!(r#"{{"Mountpoint":"/p/{expected}"}}"#);
            assert_eq!(answer.body(), body.as_bytes(), "{read_only} {mode}");
            drop(plugin);
            loop_side.join().unwrap();
        }
    }

    #[test]
    fn a_mount_not_answered_in_time_releases_its_claim() {
        let (plugin, rx) = plugin(Duration::from_millis(200));
        let loop_side = serve(rx, |request| match request {
            api::Request::VolumeStatus(_) => Some(Ok(Answer::Status(Status {
                volumes: vec![volume_with(&["single-node-writer/file-system"])],
                ..Default::default()
            }))),
            _ => None,
        });
        let answer = plugin.handle(&post(
            "/VolumeDriver.Mount",
            None,
            r#"{"Name":"v","ID":"m1"}"#,
        ));
        assert_eq!(answer.status, 500);
        assert_eq!(
            err_of(&answer),
            "the mount of volume \"v\" (claim of alloc docker-m1) was not done within 200ms (volume_plugin's mount_timeout): its claim is released"
        );
        drop(plugin);
        let seen = loop_side.join().unwrap();
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(seen[2].starts_with("VolumeRelease"), "{seen:?}");
        assert!(seen[2].contains("alloc_id: \"docker-m1\""), "{seen:?}");
    }

    #[test]
    fn unmount_of_an_unknown_volume_or_claim_succeeds_and_a_pending_release_is_an_error() {
        let (plugin, rx) = plugin(Duration::from_secs(5));
        let loop_side = serve(rx, |request| match request {
            api::Request::VolumeRelease(r) if r.volume_id == "gone" => Some(Err(
                CallError::not_found("no volume \"gone\" is registered"),
            )),
            api::Request::VolumeRelease(r) if r.volume_id == "stuck" => {
                Some(Ok(Answer::Released(Released {
                    released: false,
                    message: "NodeUnpublishVolume failed".into(),
                })))
            }
            api::Request::VolumeRelease(_) => Some(Ok(Answer::Released(Released {
                released: true,
                message: String::new(),
            }))),
            _ => None,
        });
        for name in ["gone", "v"] {
            let body = format!(r#"{{"Name":"{name}","ID":"m"}}"#);
            let answer = plugin.handle(&post("/VolumeDriver.Unmount", None, &body));
            assert_eq!(answer.status, 200, "{name}");
            assert_eq!(answer.body(), b"{}");
        }
        let answer = plugin.handle(&post(
            "/VolumeDriver.Unmount",
            None,
            r#"{"Name":"stuck","ID":"m"}"#,
        ));
        assert_eq!(answer.status, 500);
        assert_eq!(
            err_of(&answer),
            "the release of alloc docker-m's claim of volume \"stuck\" is not done: NodeUnpublishVolume failed; the agent keeps retrying"
        );
        drop(plugin);
        loop_side.join().unwrap();
    }

    #[test]
    fn an_unmount_releases_only_when_it_matches_the_last_mount_of_its_id() {
        let (plugin, rx) = plugin(Duration::from_secs(5));
        let loop_side = serve(rx, |request| match request {
            api::Request::VolumeStatus(_) => Some(Ok(Answer::Status(Status {
                volumes: vec![volume_with(&["single-node-writer/file-system"])],
                ..Default::default()
            }))),
            api::Request::VolumeClaim(_) => Some(Ok(Answer::Claimed(Claimed {
                publish_path: "/p".into(),
                target: String::new(),
            }))),
            _ => Some(Ok(Answer::Released(Released {
                released: true,
                message: String::new(),
            }))),
        });
        let mount = || {
            plugin.handle(&post(
                "/VolumeDriver.Mount",
                None,
                r#"{"Name":"v","ID":"c1"}"#,
            ))
        };
        let unmount = || {
            plugin.handle(&post(
                "/VolumeDriver.Unmount",
                None,
                r#"{"Name":"v","ID":"c1"}"#,
            ))
        };
        // The container's Mount, then docker cp's with the same ID.
        assert_eq!(mount().status, 200);
        assert_eq!(mount().status, 200);
        // docker cp's Unmount: the container still uses the claim.
        assert_eq!(unmount().status, 200);
        // The container's own: the last one releases.
        assert_eq!(unmount().status, 200);
        // One more (dockerd retrying) is sent on and is harmless.
        assert_eq!(unmount().status, 200);
        drop(plugin);
        let seen = loop_side.join().unwrap();
        let releases: Vec<&String> = seen
            .iter()
            .filter(|s| s.starts_with("VolumeRelease"))
            .collect();
        assert_eq!(releases.len(), 2, "{seen:?}");
        // The first release came only after both Mounts' Unmounts.
        let first = seen
            .iter()
            .position(|s| s.starts_with("VolumeRelease"))
            .unwrap();
        assert_eq!(
            seen[..first]
                .iter()
                .filter(|s| s.starts_with("VolumeClaim"))
                .count(),
            2,
            "{seen:?}"
        );
    }

    #[test]
    fn a_stopping_agent_is_said_so() {
        let (plugin, rx) = plugin(Duration::from_secs(5));
        drop(rx);
        let answer = plugin.handle(&post("/VolumeDriver.Get", None, r#"{"Name":"v"}"#));
        assert_eq!(answer.status, 500);
        assert_eq!(
            err_of(&answer),
            "the status of volume \"v\": the agent is shutting down"
        );
    }

    #[test]
    fn a_cause_names_the_volume_once() {
        assert_eq!(named("v", "no plugin"), "volume \"v\": no plugin");
        assert_eq!(
            named("v", "volume \"v\" already has a writer"),
            "volume \"v\" already has a writer"
        );
    }

    #[test]
    fn the_status_map_shows_the_volume_and_its_claims_and_no_secret() {
        let status = VolumeStatus {
            id: "data".into(),
            plugin_id: "hp".into(),
            capabilities: vec!["single-node-writer/file-system".into()],
            capacity_bytes: 64 << 20,
            schedulable: true,
            secret_keys: vec!["password".into()],
            claims: vec![ClaimStatus {
                alloc_id: "docker-abc".into(),
                mode: "write".into(),
                state: "taken".into(),
                publish_path: "/data/p".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = json::to_string(&status_map(&status));
        assert_eq!(
            text,
            r#"{"plugin_id":"hp","capacity":"64.0 MiB","access_mode":"single-node-writer","attachment_mode":"file-system","capabilities":["single-node-writer/file-system"],"condition":"schedulable","schedulable":true,"read_only":false,"claims":[{"alloc_id":"docker-abc","mode":"write","state":"taken"}]}"#
        );
        assert!(!text.contains("password"));
        assert_eq!(mountpoint(&status), "/data/p");
        let grouped = VolumeStatus {
            mounts_read_only: true,
            mount_group: "1000".into(),
            ..status
        };
        let text = json::to_string(&status_map(&grouped));
        assert!(
            text.contains(r#""read_only":true,"claims":"#)
                && text.ends_with(r#","mount_group":"1000"}"#),
            "{text}"
        );
        let placed = VolumeStatus {
            topologies: vec![
                [("zone".to_string(), "a".to_string())].into(),
                [
                    ("rack".to_string(), "r1".to_string()),
                    ("zone".to_string(), "b".to_string()),
                ]
                .into(),
            ],
            ..grouped
        };
        let text = json::to_string(&status_map(&placed));
        assert!(
            text.ends_with(
                r#","mount_group":"1000","topologies":[{"zone":"a"},{"rack":"r1","zone":"b"}]}"#
            ),
            "{text}"
        );
    }

    #[test]
    fn only_a_taken_mount_claim_gives_a_mountpoint() {
        let claim = |alloc: &str, state: &str| ClaimStatus {
            alloc_id: alloc.into(),
            state: state.into(),
            publish_path: format!("/p/{alloc}"),
            ..Default::default()
        };
        let status = VolumeStatus {
            claims: vec![
                claim("a1b2c3d4", "taken"),
                claim("docker-1", "claiming"),
                claim("podman-2", "taken"),
            ],
            ..Default::default()
        };
        assert_eq!(mountpoint(&status), "/p/podman-2");
        assert_eq!(mountpoint(&VolumeStatus::default()), "");
    }
}
