//! The volume tests' rig: a hostpath plugin process with its fault rules,
//! call trace and debug log, an agent whose config points at it (as a
//! monolith or a node plugin, with an optional `rpc_timeout`), volume specs,
//! control API calls bounded in time, and the checks every volume test
//! makes: the spec's ordering rules on the call trace, and no mount left.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use csi_agent::api::client::{self, AgentClient};
use csi_agent::csi::{Client, Endpoint};
use csi_agent::proto::agent::{Claim, VolumeClaimRequest, VolumeClaimResponse, VolumeStatus};
use grpcio::RpcStatusCode;

use crate::harness::{healthy, Agent, WAIT};
use crate::util::{mounts_under, Plugin};

/// The plugin ID of every rig.
pub const PLUGIN: &str = "hp";

/// How long a test waits for something that takes retries with backoff
/// (1 s, 2 s, 4 s, ... with full jitter) or a restart.
pub const LONG: Duration = Duration::from_secs(30);

/// The heartbeat of a rig's agent: longer than the harness's, because the
/// plugin logs every call at debug level (its log shows refusals), and a
/// failing test prints that log; no test here waits for a heartbeat.
const RIG_HEARTBEAT: &str = "1s";

/// How often the waits poll.
const POLL: Duration = Duration::from_millis(20);

/// The volume protocol's RPCs, as the trace names them.
pub const PROTOCOL: &[&str] = &[
    "ControllerPublishVolume",
    "NodeStageVolume",
    "NodePublishVolume",
    "NodeUnpublishVolume",
    "NodeUnstageVolume",
    "ControllerUnpublishVolume",
];

/// How the agent's config names the plugin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PluginType {
    Monolith,
    Node,
}

impl PluginType {
    fn as_str(self) -> &'static str {
        match self {
            PluginType::Monolith => "monolith",
            PluginType::Node => "node",
        }
    }
}

/// The agent config of a rig: [`RIG_HEARTBEAT`], an optional
/// `rpc_timeout`, and one plugin block for the plugin at `socket`.
pub fn config_text(
    data_dir: &Path,
    socket: &Path,
    plugin_type: PluginType,
    rpc_timeout: Option<&str>,
) -> String {
    let mut text = format!(
        "data_dir         = {:?}\nplugin_heartbeat = {RIG_HEARTBEAT:?}\n",
        data_dir.display().to_string()
    );
    if let Some(timeout) = rpc_timeout {
        text.push_str(&format!("rpc_timeout      = {timeout:?}\n"));
    }
    text.push_str(&format!(
        "\nplugin {PLUGIN:?} {{\n  socket = {:?}\n  type   = {:?}\n}}\n",
        socket.display().to_string(),
        plugin_type.as_str()
    ));
    text
}

/// The plugin's log level in every rig: debug, so that the log has every
/// answer and [`assert_spec_order`] can read the plugin's refusals.
const PLUGIN_LOG: (&str, &str) = ("RUST_LOG", "csi_agent=debug");

/// What the rig and the checks need of a hostpath plugin process.
pub trait Hostpath {
    /// Its test dir: base dir, faults, trace and log.
    fn dir(&self) -> &Path;
    fn socket(&self) -> &Path;
    /// The call trace so far, one line per RPC.
    fn calls(&self) -> Vec<String>;
    fn log_text(&self) -> String;

    fn csi_client(&self) -> Client {
        Client::new(&Endpoint::from_path(self.socket()).unwrap()).with_timeout(WAIT)
    }
}

impl Hostpath for Plugin {
    fn dir(&self) -> &Path {
        &self.dir.path
    }

    fn socket(&self) -> &Path {
        &self.socket
    }

    fn calls(&self) -> Vec<String> {
        self.trace()
    }

    fn log_text(&self) -> String {
        self.log()
    }
}

/// A hostpath plugin and an agent that uses it as plugin [`PLUGIN`].
/// Dropped agent first, so nothing calls the plugin while it goes.
pub struct Rig<P: Hostpath = Plugin> {
    pub agent: Agent,
    pub plugin: P,
}

impl Rig {
    /// A monolith plugin with the default `rpc_timeout`.
    pub fn start() -> Rig {
        Rig::start_with(PluginType::Monolith, None)
    }

    /// A monolith plugin, with the agent's data dir at `data_dir`.
    pub fn start_in(data_dir: &Path) -> Rig {
        Rig::around_in(data_dir, Plugin::start_with_env(&[PLUGIN_LOG]))
    }

    /// A plugin of `plugin_type`, with an optional `rpc_timeout`.
    pub fn start_with(plugin_type: PluginType, rpc_timeout: Option<&str>) -> Rig {
        Rig::around(
            Plugin::start_with_env(&[PLUGIN_LOG]),
            plugin_type,
            rpc_timeout,
        )
    }
}

impl Rig<Plugin> {
    /// A `-no-attach` plugin, configured as `plugin_type`.
    /// A rig around a plugin started with `-no-attach`: it advertises no
    /// PUBLISH_UNPUBLISH_VOLUME and its nodes stage without an attachment,
    /// like an NFS plugin.
    pub fn attachless(plugin_type: PluginType) -> Rig<Plugin> {
        Rig::around(
            Plugin::start_with(&[PLUGIN_LOG], &["-no-attach"]),
            plugin_type,
            None,
        )
    }
}

impl<P: Hostpath> Rig<P> {
    /// Starts an agent configured for `plugin`, and waits until the plugin
    /// is healthy. The harness writes monolith blocks only, so the agent
    /// starts with none and loads this rig's config on SIGHUP.
    pub fn around(plugin: P, plugin_type: PluginType, rpc_timeout: Option<&str>) -> Rig<P> {
        Rig::around_agent(Agent::start(&[]), plugin, plugin_type, rpc_timeout)
    }

    /// Like [`Rig::around`], with the agent's data dir at `data_dir`.
    pub fn around_in(data_dir: &Path, plugin: P) -> Rig<P> {
        Rig::around_agent(
            Agent::start_in(data_dir, &[]),
            plugin,
            PluginType::Monolith,
            None,
        )
    }

    fn around_agent(
        agent: Agent,
        plugin: P,
        plugin_type: PluginType,
        rpc_timeout: Option<&str>,
    ) -> Rig<P> {
        agent.write_config(&config_text(
            &agent.data_dir,
            plugin.socket(),
            plugin_type,
            rpc_timeout,
        ));
        agent.sighup();
        agent.wait_for(PLUGIN, healthy, WAIT);
        Rig { agent, plugin }
    }

    /// Creates volume `id` through the agent (CreateVolume, then register)
    /// with one file-system capability of `access_mode`.
    #[track_caller]
    pub fn create(&self, id: &str, access_mode: &str) -> VolumeStatus {
        let resp = connect(&self.agent)
            .volume_create(&format!("{id}.hcl"), &spec(id, &[access_mode], None))
            .unwrap_or_else(|err| panic!("volume create {id}: {err}"));
        resp.volumes.into_iter().next().expect("the created volume")
    }

    /// The publish path of `alloc`'s claim of `volume` with `usage`.
    pub fn publish_path(&self, volume: &str, alloc: &str, usage: &str) -> PathBuf {
        self.agent
            .data_dir
            .join("csi")
            .join(PLUGIN)
            .join("per-alloc")
            .join(alloc)
            .join(volume)
            .join(usage)
    }

    /// The staging path of `volume`: one per volume, whoever claims it.
    pub fn staging_path(&self, volume: &str) -> PathBuf {
        self.agent
            .data_dir
            .join("csi")
            .join(PLUGIN)
            .join("staging")
            .join(volume)
    }

    /// Checks the spec's ordering rules on the call trace, and that the
    /// plugin refused nothing as out of order.
    #[track_caller]
    pub fn assert_spec_order(&self) {
        assert_spec_order(&self.plugin);
    }

    /// Nothing is mounted under the agent's or the plugin's directories,
    /// and the agent left no directory under `data_dir/csi`.
    #[track_caller]
    pub fn assert_nothing_left(&self) {
        assert_nothing_mounted(&self.agent.dir.path);
        assert_nothing_mounted(self.plugin.dir());
        assert_no_dirs_left(&self.agent.data_dir.join("csi"));
    }
}

/// The usage name of a write claim with a file-system capability of
/// `access_mode`.
pub fn rw_usage(access_mode: &str) -> String {
    format!("rw-file-system-{access_mode}")
}

/// The usage name of a read claim.
pub fn ro_usage(access_mode: &str) -> String {
    format!("ro-file-system-{access_mode}")
}

/// Claims through `agent`, answered within [`LONG`]; panics with the
/// volumes' status if there is no answer. (The harness prints the logs.)
#[track_caller]
pub fn claim(
    agent: &Agent,
    req: &VolumeClaimRequest,
) -> Result<VolumeClaimResponse, client::Error> {
    let socket = agent.socket.clone();
    let req = req.clone();
    let answer = spawn_call(move || AgentClient::connect(&socket)?.volume_claim(&req));
    within(agent, answer, "the claim")
}

/// A claim that must succeed.
#[track_caller]
pub fn claimed(agent: &Agent, req: &VolumeClaimRequest) -> VolumeClaimResponse {
    claim(agent, req)
        .unwrap_or_else(|err| panic!("claim of {} by {}: {err}", req.volume_id, req.alloc_id))
}

/// Releases the claim of `alloc` on `volume`: `(released, message)`.
#[track_caller]
pub fn release(agent: &Agent, volume: &str, alloc: &str) -> (bool, String) {
    let socket = agent.socket.clone();
    let (volume, alloc) = (volume.to_string(), alloc.to_string());
    let answer = spawn_call(move || {
        AgentClient::connect(&socket)?
            .volume_release(&volume, &alloc)
            .map(|r| (r.released, r.message))
    });
    within(agent, answer, "the release").unwrap_or_else(|err| panic!("release: {err}"))
}

/// A release that must be done when it answers.
#[track_caller]
pub fn released(agent: &Agent, volume: &str, alloc: &str) {
    let (released, message) = release(agent, volume, alloc);
    assert!(released, "release of {volume} by {alloc}: {message}");
}

#[track_caller]
fn within<T>(agent: &Agent, answer: Receiver<T>, what: &str) -> T {
    answer.recv_timeout(LONG).unwrap_or_else(|_| {
        panic!(
            "{what} got no answer within {LONG:?}; volumes now:\n{:#?}",
            volume_statuses(agent)
        )
    })
}

/// Polls volume `id` until `predicate` holds; panics with its last status
/// after `timeout`.
#[track_caller]
pub fn wait_volume(
    agent: &Agent,
    id: &str,
    what: &str,
    predicate: impl Fn(&VolumeStatus) -> bool,
    timeout: Duration,
) -> VolumeStatus {
    let start = Instant::now();
    loop {
        let last = match try_volume(agent, id) {
            Ok(Some(v)) if predicate(&v) => return v,
            Ok(v) => format!("{v:#?}"),
            Err(err) => format!("error: {err}"),
        };
        if start.elapsed() > timeout {
            panic!("volume {id} never got {what} within {timeout:?}; last status:\n{last}");
        }
        thread::sleep(POLL);
    }
}

/// Waits until the plugin's trace has `n` calls of `method`.
#[track_caller]
pub fn wait_for_calls(plugin: &impl Hostpath, method: &str, n: usize) {
    let start = Instant::now();
    while count(plugin, method) < n {
        if start.elapsed() > WAIT {
            panic!(
                "the plugin never got {n} {method}; trace:\n{}",
                plugin.calls().join("\n")
            );
        }
        thread::sleep(POLL);
    }
}

/// A volume spec for plugin [`PLUGIN`]: one file-system capability per
/// access mode, and `external_id` when registering.
pub fn spec(id: &str, access_modes: &[&str], external_id: Option<&str>) -> String {
    let mut text = format!(
        "id        = {id:?}\nname      = {id:?}\ntype      = \"csi\"\nplugin_id = {PLUGIN:?}\n"
    );
    if let Some(external) = external_id {
        text.push_str(&format!("external_id = {external:?}\n"));
    }
    for mode in access_modes {
        text.push_str(&format!(
            "\ncapability {{\n  access_mode     = {mode:?}\n  attachment_mode = \"file-system\"\n}}\n"
        ));
    }
    text
}

/// A write claim of `volume` by `alloc`, with no target.
pub fn claim_req(volume: &str, alloc: &str) -> VolumeClaimRequest {
    VolumeClaimRequest {
        volume_id: volume.to_string(),
        alloc_id: alloc.to_string(),
        ..Default::default()
    }
}

/// A claim with a host target.
pub fn claim_at(volume: &str, alloc: &str, target: &Path) -> VolumeClaimRequest {
    VolumeClaimRequest {
        target: target.display().to_string(),
        ..claim_req(volume, alloc)
    }
}

/// Runs `call` on a thread of its own; its answer arrives on the receiver.
pub fn spawn_call<T: Send + 'static>(call: impl FnOnce() -> T + Send + 'static) -> Receiver<T> {
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .name("control-call".into())
        .spawn(move || {
            let _ = tx.send(call());
        })
        .unwrap();
    rx
}

#[track_caller]
pub fn connect(agent: &Agent) -> AgentClient {
    AgentClient::connect(&agent.socket).unwrap_or_else(|err| panic!("{err}"))
}

/// Volume `id`, `None` if it is not registered.
pub fn try_volume(agent: &Agent, id: &str) -> Result<Option<VolumeStatus>, client::Error> {
    match AgentClient::connect(&agent.socket)?.volume_status(id, false) {
        Ok(resp) => Ok(resp.volumes.into_iter().next()),
        Err(client::Error::Refused { code, .. }) if code == RpcStatusCode::NOT_FOUND => Ok(None),
        Err(err) => Err(err),
    }
}

/// Volume `id`, which must be registered.
#[track_caller]
pub fn volume(agent: &Agent, id: &str) -> VolumeStatus {
    match try_volume(agent, id) {
        Ok(Some(v)) => v,
        Ok(None) => panic!("volume {id} is not registered\n{}", agent.log()),
        Err(err) => panic!("volume status {id}: {err}\n{}", agent.log()),
    }
}

/// Every volume, or the error, for failure messages.
fn volume_statuses(agent: &Agent) -> Result<Vec<VolumeStatus>, String> {
    AgentClient::connect(&agent.socket)
        .and_then(|c| c.volume_status("", false))
        .map(|r| r.volumes)
        .map_err(|e| e.to_string())
}

/// The current claim of `alloc`, if any.
pub fn claim_of<'a>(v: &'a VolumeStatus, alloc: &str) -> Option<&'a Claim> {
    v.claims.iter().find(|c| c.alloc_id == alloc)
}

/// True when `alloc`'s claim is taken.
pub fn taken(v: &VolumeStatus, alloc: &str) -> bool {
    claim_of(v, alloc).is_some_and(|c| c.state == "taken")
}

/// True when the volume has no claim, current or past.
pub fn unclaimed(v: &VolumeStatus) -> bool {
    v.claims.is_empty() && v.past_claims.is_empty()
}

/// One RPC of the call trace.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: String,
    pub fields: BTreeMap<String, String>,
}

impl Call {
    /// Parses a trace line: the method, then `key=value` fields.
    pub fn parse(line: &str) -> Option<Call> {
        let mut words = line.split(' ');
        let method = words.next().filter(|m| !m.is_empty())?.to_string();
        let fields = words
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Some(Call { method, fields })
    }

    fn field(&self, key: &str) -> &str {
        self.fields.get(key).map_or("", String::as_str)
    }
}

/// The trace's calls of the volume protocol, in the order received.
pub fn protocol_calls(plugin: &impl Hostpath) -> Vec<Call> {
    plugin
        .calls()
        .iter()
        .filter_map(|line| Call::parse(line))
        .filter(|c| PROTOCOL.contains(&c.method.as_str()))
        .collect()
}

/// The names of the protocol calls, in order.
pub fn protocol_methods(plugin: &impl Hostpath) -> Vec<String> {
    protocol_calls(plugin)
        .into_iter()
        .map(|c| c.method)
        .collect()
}

/// How many calls of `method` the trace has.
pub fn count(plugin: &impl Hostpath, method: &str) -> usize {
    plugin
        .calls()
        .iter()
        .filter(|l| l.split(' ').next() == Some(method))
        .count()
}

/// Checks the spec's ordering rules on protocol calls in the order the
/// plugin received them: ControllerPublish before NodeStage before
/// NodePublish; a writable NodePublish only on a writable attachment;
/// NodeUnstage only when no publish of that staging is live;
/// ControllerUnpublish only when nothing of the volume is staged or
/// published. When there is no ControllerPublish at all, the plugin has no
/// controller to attach with, and attachment is not required.
///
/// A call counts from its arrival, so a failed teardown call is taken as
/// done; the plugin's own refusals (see [`assert_spec_order`]) catch what
/// that leniency would miss.
pub fn check_order(calls: &[Call]) -> Result<(), String> {
    let uses_controller = calls.iter().any(|c| c.method == "ControllerPublishVolume");
    // Volume -> read-only.
    let mut attached: BTreeMap<String, bool> = BTreeMap::new();
    let mut staged: BTreeSet<(String, String)> = BTreeSet::new();
    // Target -> (volume, staging).
    let mut published: BTreeMap<String, (String, String)> = BTreeMap::new();
    for (i, call) in calls.iter().enumerate() {
        let volume = call.field("volume").to_string();
        let staging = call.field("staging").to_string();
        let target = call.field("target").to_string();
        let broken = |rule: String| {
            Err(format!(
                "call {i} ({}) breaks the rule: {rule}",
                call.method
            ))
        };
        match call.method.as_str() {
            "ControllerPublishVolume" => {
                attached.insert(volume, call.field("readonly") == "true");
            }
            "NodeStageVolume" => {
                if uses_controller && !attached.contains_key(&volume) {
                    return broken("ControllerPublishVolume before NodeStageVolume".into());
                }
                staged.insert((volume, staging));
            }
            "NodePublishVolume" => {
                if uses_controller && !attached.contains_key(&volume) {
                    return broken("ControllerPublishVolume before NodePublishVolume".into());
                }
                let writable = call.field("readonly") != "true";
                if writable && attached.get(&volume) == Some(&true) {
                    return broken(
                        "a writable NodePublishVolume needs a writable attachment".into(),
                    );
                }
                if !staging.is_empty() && !staged.contains(&(volume.clone(), staging.clone())) {
                    return broken("NodeStageVolume before NodePublishVolume".into());
                }
                published.insert(target, (volume, staging));
            }
            "NodeUnpublishVolume" => {
                published.remove(&target);
            }
            "NodeUnstageVolume" => {
                if let Some((t, _)) = published.iter().find(|(_, (_, s))| *s == staging) {
                    return broken(format!(
                        "no NodeUnstageVolume while a publish of that staging is live ({t})"
                    ));
                }
                staged.remove(&(volume, staging));
            }
            "ControllerUnpublishVolume" => {
                if staged.iter().any(|(v, _)| *v == volume) {
                    return broken("NodeUnstageVolume before ControllerUnpublishVolume".into());
                }
                if published.values().any(|(v, _)| *v == volume) {
                    return broken("NodeUnpublishVolume before ControllerUnpublishVolume".into());
                }
                attached.remove(&volume);
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks the spec's ordering rules ([`check_order`]) on the plugin's call
/// trace, and that the plugin refused nothing as out of order: the hostpath
/// plugin answers FAILED_PRECONDITION to stage before attach, publish
/// before stage, unstage while published and detach while staged, judged
/// from the real state of its volumes and mounts, and its debug log says
/// so.
#[track_caller]
pub fn assert_spec_order(plugin: &impl Hostpath) {
    let calls = protocol_calls(plugin);
    let trace = || plugin.calls().join("\n");
    if let Err(broken) = check_order(&calls) {
        panic!("{broken}\ntrace:\n{}", trace());
    }
    let refused: Vec<String> = plugin
        .log_text()
        .lines()
        .filter(|l| l.contains("FAILED_PRECONDITION"))
        .map(str::to_string)
        .collect();
    assert!(
        refused.is_empty(),
        "the plugin refused calls as out of order:\n{}\ntrace:\n{}",
        refused.join("\n"),
        trace()
    );
}

/// Nothing is mounted at or under `dir`.
#[track_caller]
pub fn assert_nothing_mounted(dir: &Path) {
    let left = mounts_under(dir);
    assert!(
        left.is_empty(),
        "mounts left under {}: {left:?}",
        dir.display()
    );
}

/// The agent removed the directories it made for volumes and allocs
/// under `csi` (its `data_dir/csi`): what is left, if anything, is the
/// plugins' skeleton it keeps, `<plugin>/staging` and `<plugin>/per-alloc`,
/// each empty.
#[track_caller]
pub fn assert_no_dirs_left(csi: &Path) {
    let entries = |dir: &Path| -> Vec<PathBuf> {
        match fs::read_dir(dir) {
            Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
            Err(_) => Vec::new(),
        }
    };
    let mut left = Vec::new();
    for plugin in entries(csi) {
        if !plugin.is_dir() {
            left.push(plugin);
            continue;
        }
        for dir in entries(&plugin) {
            let skeleton = ["staging", "per-alloc"]
                .iter()
                .any(|name| dir.file_name() == Some(name.as_ref()));
            if skeleton && dir.is_dir() {
                left.extend(entries(&dir));
            } else {
                left.push(dir);
            }
        }
    }
    assert!(left.is_empty(), "left under {}: {left:?}", csi.display());
}

/// `volume claim -alloc ALLOC VOLUME` through the CLI while the plugin
/// refuses NodePublishVolume for good (PERMISSION_DENIED, "wrong
/// credentials"): the claim fails with exit code 1. The output.
#[track_caller]
pub fn refused_claim(rig: &Rig, volume: &str, alloc: &str) -> std::process::Output {
    rig.plugin
        .set_faults("NodePublishVolume code=PERMISSION_DENIED message=wrong credentials\n");
    let out = rig.agent.cli(&["volume", "claim", "-alloc", alloc, volume]);
    assert_eq!(out.status.code(), Some(1), "{}", crate::harness::text(&out));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(lines: &[&str]) -> Vec<Call> {
        lines.iter().filter_map(|l| Call::parse(l)).collect()
    }

    const CLAIM: &[&str] = &[
        "ControllerPublishVolume volume=v node=n",
        "NodeStageVolume volume=v staging=/s",
        "NodePublishVolume volume=v staging=/s target=/t1",
    ];

    #[test]
    fn the_order_checker_accepts_a_claim_and_its_release() {
        let mut lines = CLAIM.to_vec();
        lines.extend([
            "NodeUnpublishVolume volume=v target=/t1",
            "NodeUnstageVolume volume=v staging=/s",
            "ControllerUnpublishVolume volume=v node=n",
        ]);
        assert_eq!(check_order(&calls(&lines)), Ok(()));
    }

    #[test]
    fn the_order_checker_refuses_each_broken_rule() {
        let broken = |lines: &[&str], rule: &str| {
            let err = check_order(&calls(lines)).unwrap_err();
            assert!(err.contains(rule), "{err}");
        };
        broken(
            &[
                "ControllerPublishVolume volume=w node=n",
                "NodeStageVolume volume=v staging=/s",
            ],
            "ControllerPublishVolume before NodeStageVolume",
        );
        broken(
            &[
                "ControllerPublishVolume volume=v node=n",
                "NodePublishVolume volume=v staging=/s target=/t1",
            ],
            "NodeStageVolume before NodePublishVolume",
        );
        broken(
            &[
                "ControllerPublishVolume volume=v node=n readonly=true",
                "NodeStageVolume volume=v staging=/s",
                "NodePublishVolume volume=v staging=/s target=/t1",
            ],
            "writable attachment",
        );
        let mut two = CLAIM.to_vec();
        two.extend([
            "NodePublishVolume volume=v staging=/s target=/t2",
            "NodeUnpublishVolume volume=v target=/t1",
            "NodeUnstageVolume volume=v staging=/s",
        ]);
        broken(&two, "while a publish of that staging is live (/t2)");
        let mut staged = CLAIM.to_vec();
        staged.extend([
            "NodeUnpublishVolume volume=v target=/t1",
            "ControllerUnpublishVolume volume=v node=n",
        ]);
        broken(
            &staged,
            "NodeUnstageVolume before ControllerUnpublishVolume",
        );
    }

    #[test]
    fn without_a_controller_no_attachment_is_required() {
        let lines = [
            "NodeStageVolume volume=v staging=/s",
            "NodePublishVolume volume=v staging=/s target=/t1",
            "NodeUnpublishVolume volume=v target=/t1",
            "NodeUnstageVolume volume=v staging=/s",
        ];
        assert_eq!(check_order(&calls(&lines)), Ok(()));
    }
}
