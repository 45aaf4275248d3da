//! Lost unmounts: the thread `volume-plugin-reconcile` releases a plugin
//! claim once no container of its engine uses its volume any more.
//!
//! dockerd never sends `Unmount` for the containers that were running when
//! it was killed or restarted, and `docker cp` makes Mount/Unmount pairs
//! of its own: a claim can outlive every container that used it. The
//! engines' own list of containers (`GET /containers/json?all=1`, through
//! [`crate::docker::Engine`], on dockerd's socket from the `docker` block
//! and on Podman's from `podman_endpoint`) is the truth checked here. A
//! container lists its volumes by name and driver, not by the mount ID the
//! plugin was sent, so the match is by volume: a claim of engine E is in
//! use while a container of E that may hold mounts mounts the claim's
//! volume through this plugin's driver name.
//!
//! The rule, in [`decide`] (pure, tested without an engine):
//! - A container holds its mounts in every state but `exited`, `dead` and
//!   Podman's `stopped` ([`may_hold_mounts`]): `created` counts as in use
//!   (dockerd mounts volumes while the container is still `created`, in
//!   the middle of its start) and so does `removing` (it may still be
//!   running its way out), and so does a state this code does not know.
//! - A claim is released once its volume has been seen unused in every
//!   round for [`unmount_grace`](crate::spec::VolumePluginConfig)
//!   without a break, counted from the last time it was seen in use, from
//!   when the thread first saw the claim (its taking, as seen from here,
//!   or the agent's start), or from the engine's last failed round,
//!   whichever is latest.
//! - An engine that cannot be reached or answers an error releases
//!   nothing: a down dockerd proves nothing about its containers. The
//!   outage is logged once, and its end too.
//! - Two claims of one volume with one container using it: the volume is
//!   in use, so both are kept; the stale one goes once no container uses
//!   the volume.
//! - An engine with no endpoint (Podman without `podman_endpoint`) is
//!   never asked: its claims stay until `Unmount` or `csi-agent volume
//!   release`, as the warning at start says.
//!
//! - Only this node's claims are judged ([`plugin_claims`]): in a cluster
//!   the others' containers run on other engines.
//! - Right before a release the engine is asked once more, and a claim
//!   whose volume a container has started to use meanwhile is kept
//!   ([`still_unused`]).
//! - Each release is logged and told as a `claim` event
//!   [`LOST_UNMOUNT_EVENT`], with the reason.
//!
//! Rounds come every [`period`] (at most [`RECONCILE_PERIOD`], at most half
//! the grace), the first at start.
//!
//! The thread is a client of the main loop like any other: it reads the
//! claims with [`Request::VolumeStatus`] and releases with
//! [`Request::VolumeRelease`] on the calls channel, and never touches the
//! agent's state. It asks an engine only when that engine has claims.

use std::collections::{BTreeMap, BTreeSet};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{after, bounded, select, Receiver, RecvTimeoutError, Sender};

use super::{engine_of_claim, EngineKind};
use crate::api::{Call, Request, Response};
use crate::docker::{ContainerVolumes, Engine};
use crate::spec::AgentConfig;
use crate::volume::calls::{Answer, ReleaseRequest, StatusRequest, VolumeStatus};

/// How often the claims are checked against the engines (and once at
/// start), unless half the `unmount_grace` is shorter ([`period`]).
pub const RECONCILE_PERIOD: Duration = Duration::from_secs(10);

/// The shortest period, however short the grace.
pub const MIN_RECONCILE_PERIOD: Duration = Duration::from_millis(500);

/// The time between two rounds for `grace`: [`RECONCILE_PERIOD`], or half
/// the grace when that is shorter (at least [`MIN_RECONCILE_PERIOD`]), so
/// that a claim goes within about one and a half graces of its last use.
pub fn period(grace: Duration) -> Duration {
    RECONCILE_PERIOD.min(grace / 2).max(MIN_RECONCILE_PERIOD)
}

/// The longest the thread waits for the main loop's answer to one of its
/// calls; past it the round ends (a release goes on in the agent
/// regardless) and the next one asks again.
pub const ANSWER_WAIT: Duration = Duration::from_secs(120);

/// The type of the `claim` event told as the thread releases a claim.
pub const LOST_UNMOUNT_EVENT: &str = "LostUnmount";

/// The thread's name.
pub const THREAD_NAME: &str = "volume-plugin-reconcile";

/// A claim the plugin took for an engine's mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginClaim {
    pub volume_id: String,
    pub alloc_id: String,
    pub engine: EngineKind,
}

/// What one engine said in a round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sighting {
    /// It answered: the volumes that its containers which may hold mounts
    /// mount through the plugin's driver.
    InUse(BTreeSet<String>),
    /// It could not be reached, or answered an error.
    Unreachable,
}

/// A claim [`decide`] releases, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub claim: PluginClaim,
    /// How long its volume has been seen unused.
    pub unused_for: Duration,
}

/// When each claim's grace started: the last time it was seen in use, it
/// was first seen, or its engine failed a round.
#[derive(Debug, Default)]
pub struct Clocks {
    since: BTreeMap<(String, String), Instant>,
}

/// Whether a container in engine state `state` may hold its volumes
/// mounted: every state but the stopped ones.
pub fn may_hold_mounts(state: &str) -> bool {
    !matches!(state, "exited" | "dead" | "stopped")
}

/// The volumes that `containers` which may hold mounts mount through the
/// volume driver `driver`.
pub fn volumes_in_use(containers: &[ContainerVolumes], driver: &str) -> BTreeSet<String> {
    order::set(
        containers
            .iter()
            .filter(|c| may_hold_mounts(&c.state))
            .flat_map(|c| &c.volumes)
            .filter(|m| is_driver(&m.driver, driver))
            .map(|m| m.name.clone()),
    )
}

/// Whether a container's mount names this plugin's driver: its `name`, or
/// a managed plugin's reference whose name is `name` (`[REPO/]name:TAG`):
/// dockerd names the driver of a managed plugin by its reference, with its
/// tag (`csi:latest` for `docker plugin create csi DIR`, `me/csi:1.2` once
/// installed from a registry). A volume name belongs to one driver of an
/// engine, so no other driver's volume can match one of ours.
fn is_driver(mounted: &str, driver: &str) -> bool {
    if mounted == driver {
        return true;
    }
    // The tag follows the last `:` of the last component (a registry's
    // port is in an earlier one); a plain driver name has neither.
    let last = mounted.rsplit('/').next().unwrap_or(mounted);
    let name = last.split_once(':').map_or(last, |(name, _)| name);
    name != mounted && name == driver
}

/// The claims to release at `now`: those whose engine answered
/// (`sightings`) with their volume unused for at least `grace` since
/// their clock started. Claims of an engine with no sighting (not
/// configured) are kept and not timed. Updates `clocks` and forgets the
/// claims that are gone.
pub fn decide(
    claims: &[PluginClaim],
    sightings: &[(EngineKind, Sighting)],
    clocks: &mut Clocks,
    now: Instant,
    grace: Duration,
) -> Vec<Release> {
    let present: BTreeSet<(String, String)> = order::set(
        claims
            .iter()
            .map(|c| (c.volume_id.clone(), c.alloc_id.clone())),
    );
    clocks.since.retain(|key, _| present.contains(key));
    let mut releases = Vec::new();
    for claim in claims {
        let key = (claim.volume_id.clone(), claim.alloc_id.clone());
        let since = clocks.since.entry(key).or_insert(now);
        let sighting = sightings.iter().find(|(kind, _)| *kind == claim.engine);
        match sighting.map(|(_, sighting)| sighting) {
            None => {}
            Some(Sighting::Unreachable) => *since = now,
            Some(Sighting::InUse(volumes)) if volumes.contains(&claim.volume_id) => *since = now,
            Some(Sighting::InUse(_)) => {
                let unused_for = now.saturating_duration_since(*since);
                if unused_for >= grace {
                    releases.push(Release {
                        claim: claim.clone(),
                        unused_for,
                    });
                }
            }
        }
    }
    releases
}

/// The releases of `releases` whose volume `fresh`, the engines' answers
/// of a moment later, still finds unused: one whose engine is now
/// unreachable, or has a container using the volume, is kept.
pub fn still_unused(releases: Vec<Release>, fresh: &[(EngineKind, Sighting)]) -> Vec<Release> {
    releases
        .into_iter()
        .filter(|r| {
            let sighting = fresh.iter().find(|(kind, _)| *kind == r.claim.engine);
            matches!(sighting, Some((_, Sighting::InUse(volumes))) if !volumes.contains(&r.claim.volume_id))
        })
        .collect()
}

/// The plugin's claims on this node (`node`, the agent's node name) among
/// the agent's volumes. In a cluster the status also lists other nodes'
/// claims (with their node): their containers are on other engines, so
/// they are never this thread's to judge.
pub fn plugin_claims(volumes: &[VolumeStatus], node: &str) -> Vec<PluginClaim> {
    volumes
        .iter()
        .flat_map(|v| {
            v.claims
                .iter()
                .filter(|c| c.node.is_empty() || c.node == node)
                .filter_map(move |c| {
                    Some(PluginClaim {
                        volume_id: v.id.clone(),
                        alloc_id: c.alloc_id.clone(),
                        engine: engine_of_claim(&c.alloc_id)?,
                    })
                })
        })
        .collect()
}

/// The engine's name in log lines.
fn engine_name(kind: EngineKind) -> &'static str {
    match kind {
        EngineKind::Docker => "dockerd",
        EngineKind::Podman => "Podman",
    }
}

/// An engine the thread asks, and whether it is in an outage (logged
/// once).
struct Watched {
    kind: EngineKind,
    engine: Engine,
    down: bool,
}

/// The longest the agent's end waits for the thread: a round under way
/// ends at its next call to the loop, at once, but an engine call may take
/// up to [`crate::docker::CALL_TIMEOUT`]; past this the thread is left to
/// end with the process (it holds no state).
pub const STOP_WAIT: Duration = Duration::from_secs(2);

/// The running thread; dropping it stops the thread and waits for it, up
/// to [`STOP_WAIT`].
pub struct Reconciler {
    stop: Option<Sender<()>>,
    /// Disconnected when the thread ends.
    ended: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl Reconciler {
    /// Starts the thread for the `volume_plugin` block of `config`, asking
    /// the main loop through `calls`. `None` without the block, when no
    /// engine has an endpoint (each engine without one is warned about),
    /// or when the thread cannot start (logged).
    pub fn start(config: &AgentConfig, node: &str, calls: &Sender<Call>) -> Option<Reconciler> {
        let plugin = config.volume_plugin.as_ref()?;
        let endpoints = [
            (EngineKind::Docker, Some(config.docker.endpoint.clone())),
            (
                EngineKind::Podman,
                plugin
                    .podman_endpoint
                    .as_ref()
                    .map(|p| p.display().to_string()),
            ),
        ];
        let mut engines = Vec::new();
        for (kind, endpoint) in endpoints {
            let Some(endpoint) = endpoint.filter(|e| !e.is_empty()) else {
                let setting = match kind {
                    EngineKind::Docker => "the docker block has no endpoint",
                    EngineKind::Podman => "volume_plugin has no podman_endpoint",
                };
                log::warn!(
                    "Lost unmounts of {} are not reconciled ({setting}): its volume plugin claims stay until its Unmount or `csi-agent volume release`",
                    engine_name(kind)
                );
                continue;
            };
            match Engine::new(&endpoint) {
                Ok(engine) => engines.push(Watched {
                    kind,
                    engine,
                    down: false,
                }),
                Err(err) => log::warn!(
                    "Lost unmounts of {} are not reconciled: {err}; its volume plugin claims stay until Unmount or `csi-agent volume release`",
                    engine_name(kind)
                ),
            }
        }
        if engines.is_empty() {
            return None;
        }
        let (stop, stopped) = bounded(0);
        let (ending, ended) = bounded::<()>(0);
        let rounds = Rounds {
            engines,
            driver: plugin.name.clone(),
            node: node.to_string(),
            grace: plugin.unmount_grace,
            calls: calls.clone(),
            stopped,
            clocks: Clocks::default(),
        };
        let spawned = thread::Builder::new()
            .name(THREAD_NAME.to_string())
            .spawn(move || {
                let _ending = ending;
                rounds.run();
            });
        match spawned {
            Ok(thread) => Some(Reconciler {
                stop: Some(stop),
                ended,
                thread: Some(thread),
            }),
            Err(err) => {
                log::error!(
                    "Cannot start the thread {THREAD_NAME}, so lost unmounts are not reconciled: {err}"
                );
                None
            }
        }
    }
}

impl Drop for Reconciler {
    fn drop(&mut self) {
        drop(self.stop.take());
        let Some(thread) = self.thread.take() else {
            return;
        };
        match self.ended.recv_timeout(STOP_WAIT) {
            Err(RecvTimeoutError::Timeout) => log::warn!(
                "The thread {THREAD_NAME} still waits for a container engine after {STOP_WAIT:?}; leaving it"
            ),
            _ => {
                if thread.join().is_err() {
                    log::error!("The thread {THREAD_NAME} panicked");
                }
            }
        }
    }
}

/// Why a round ended early.
enum Stop {
    /// The thread was asked to stop, or the loop is gone.
    Asked,
    /// The loop did not answer, or answered an error: try next round.
    Round(String),
}

/// The thread's state between rounds.
struct Rounds {
    engines: Vec<Watched>,
    /// The plugin's driver name.
    driver: String,
    /// This agent's node name.
    node: String,
    grace: Duration,
    calls: Sender<Call>,
    stopped: Receiver<()>,
    clocks: Clocks,
}

impl Rounds {
    fn run(mut self) {
        loop {
            match self.round() {
                Ok(()) => {}
                Err(Stop::Asked) => return,
                Err(Stop::Round(why)) => log::debug!("Lost-unmount round ended early: {why}"),
            }
            select! {
                recv(self.stopped) -> _ => return,
                recv(after(period(self.grace))) -> _ => {}
            }
        }
    }

    /// One round: the claims, each engine's containers, the releases.
    fn round(&mut self) -> Result<(), Stop> {
        let status = self.ask(Request::VolumeStatus(StatusRequest::default()))?;
        let Answer::Status(status) = status else {
            return Err(Stop::Round(format!("VolumeStatus answered {status:?}")));
        };
        let claims = plugin_claims(&status.volumes, &self.node);
        let mut sightings = Vec::new();
        for watched in self.engines.iter_mut() {
            if claims.iter().any(|c| c.engine == watched.kind) {
                sightings.push((watched.kind, watched.look(&self.driver)));
            }
        }
        let now = Instant::now();
        let releases = decide(&claims, &sightings, &mut self.clocks, now, self.grace);
        if releases.is_empty() {
            return Ok(());
        }
        // A container may have started in the meantime, mounting a volume
        // about to be released: the engines are asked once more, right
        // before the releases.
        let mut fresh = Vec::new();
        for watched in self.engines.iter_mut() {
            if releases.iter().any(|r| r.claim.engine == watched.kind) {
                fresh.push((watched.kind, watched.look(&self.driver)));
            }
        }
        for release in still_unused(releases, &fresh) {
            self.release(&release)?;
        }
        Ok(())
    }

    /// Releases a claim [`decide`] gave up on, and tells why.
    fn release(&self, release: &Release) -> Result<(), Stop> {
        let PluginClaim {
            volume_id,
            alloc_id,
            engine,
        } = &release.claim;
        let why = format!(
            "no container of {} that may hold mounts has mounted it through driver {} for {:.1?} (unmount_grace {:?}), a lost unmount",
            engine_name(*engine),
            self.driver,
            release.unused_for,
            self.grace
        );
        log::info!("Releasing claim {alloc_id} of volume {volume_id}: {why}");
        crate::events::emit(
            crate::events::Topic::Claim,
            LOST_UNMOUNT_EVENT,
            volume_id.clone(),
            format!("alloc {alloc_id}: {why}"),
        );
        let request = Request::VolumeRelease(ReleaseRequest {
            volume_id: volume_id.clone(),
            alloc_id: alloc_id.clone(),
        });
        match self.ask(request) {
            Ok(answer) => log::debug!("Release of {alloc_id} of {volume_id}: {answer:?}"),
            Err(Stop::Round(why)) => {
                log::warn!("Cannot release claim {alloc_id} of volume {volume_id}: {why}")
            }
            Err(Stop::Asked) => return Err(Stop::Asked),
        }
        Ok(())
    }

    /// Sends `request` to the main loop and waits for its answer, up to
    /// [`ANSWER_WAIT`], or until the thread is asked to stop.
    fn ask(&self, request: Request) -> Result<Answer, Stop> {
        let (reply, answer) = bounded(1);
        self.calls
            .send(Call {
                request,
                reply: reply.into(),
            })
            .map_err(|_| Stop::Asked)?;
        select! {
            recv(answer) -> answer => match answer {
                Ok(Ok(Response::Volume(answer))) => Ok(answer),
                Ok(Ok(other)) => Err(Stop::Round(format!("the agent answered {other:?}"))),
                Ok(Err(err)) => Err(Stop::Round(err.to_string())),
                // The loop dropped the call unanswered: it is stopping.
                Err(_) => Err(Stop::Asked),
            },
            recv(self.stopped) -> _ => Err(Stop::Asked),
            recv(after(ANSWER_WAIT)) -> _ => Err(Stop::Round(format!(
                "the agent did not answer within {ANSWER_WAIT:?}"
            ))),
        }
    }
}

impl Watched {
    /// What the engine says this round: the volumes its containers use
    /// through `driver`, or that it cannot say; an outage is logged at
    /// its start and its end.
    fn look(&mut self, driver: &str) -> Sighting {
        match self.engine.volume_mounts() {
            Ok(containers) => {
                if self.down {
                    log::info!(
                        "{} at {} answers again: its lost unmounts are reconciled once their grace has passed again",
                        engine_name(self.kind),
                        self.engine.endpoint()
                    );
                    self.down = false;
                }
                Sighting::InUse(volumes_in_use(&containers, driver))
            }
            Err(err) => {
                if !self.down {
                    log::warn!(
                        "Cannot list the containers of {} at {} for lost unmounts, so none of its claims is released until it answers: {}",
                        engine_name(self.kind),
                        self.engine.endpoint(),
                        crate::error_chain(&err)
                    );
                    self.down = true;
                }
                Sighting::Unreachable
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::docker::VolumeMount;

    const GRACE: Duration = Duration::from_secs(30);

    fn claim(volume: &str, alloc: &str, engine: EngineKind) -> PluginClaim {
        PluginClaim {
            volume_id: volume.into(),
            alloc_id: alloc.into(),
            engine,
        }
    }

    fn container(state: &str, mounts: &[(&str, &str)]) -> ContainerVolumes {
        ContainerVolumes {
            id: "c".into(),
            state: state.into(),
            volumes: mounts
                .iter()
                .map(|(name, driver)| VolumeMount {
                    name: name.to_string(),
                    driver: driver.to_string(),
                })
                .collect(),
        }
    }

    fn docker(sighting: Sighting) -> Vec<(EngineKind, Sighting)> {
        vec![(EngineKind::Docker, sighting)]
    }

    fn in_use(containers: &[ContainerVolumes]) -> Vec<(EngineKind, Sighting)> {
        docker(Sighting::InUse(volumes_in_use(containers, "csi")))
    }

    #[test]
    fn an_unused_claim_is_released_once_its_grace_has_passed() {
        let claims = [claim("v", "docker-m1", EngineKind::Docker)];
        let mut clocks = Clocks::default();
        let t0 = Instant::now();
        let none = in_use(&[]);
        assert!(decide(&claims, &none, &mut clocks, t0, GRACE).is_empty());
        let almost = t0 + GRACE - Duration::from_millis(1);
        assert!(decide(&claims, &none, &mut clocks, almost, GRACE).is_empty());
        let released = decide(&claims, &none, &mut clocks, t0 + GRACE, GRACE);
        assert_eq!(
            released,
            [Release {
                claim: claims[0].clone(),
                unused_for: GRACE
            }]
        );
    }

    #[test]
    fn a_claim_a_running_container_uses_is_never_released() {
        let claims = [claim("v", "docker-m1", EngineKind::Docker)];
        let t0 = Instant::now();
        for state in ["running", "restarting", "paused", "created", "removing"] {
            let mut clocks = Clocks::default();
            let sighting = in_use(&[container(state, &[("v", "csi")])]);
            for step in 0..10 {
                let now = t0 + GRACE * step;
                assert!(
                    decide(&claims, &sighting, &mut clocks, now, GRACE).is_empty(),
                    "{state} at {step}"
                );
            }
        }
    }

    #[test]
    fn a_volume_used_only_by_exited_containers_is_released() {
        let claims = [claim("v", "docker-m1", EngineKind::Docker)];
        let mut clocks = Clocks::default();
        let t0 = Instant::now();
        let sighting = in_use(&[
            container("exited", &[("v", "csi")]),
            container("dead", &[("v", "csi")]),
            container("running", &[("v", "local"), ("w", "csi")]),
        ]);
        decide(&claims, &sighting, &mut clocks, t0, GRACE);
        assert_eq!(
            decide(&claims, &sighting, &mut clocks, t0 + GRACE, GRACE).len(),
            1
        );
    }

    #[test]
    fn a_managed_plugins_reference_names_the_same_driver() {
        let sighting = volumes_in_use(
            &[container(
                "running",
                &[
                    ("v", "csi:latest"),
                    ("w", "registry:5000/me/csi:1.2"),
                    ("x", "csi-other:latest"),
                    ("y", "csi/other:latest"),
                    ("z", "local"),
                ],
            )],
            "csi",
        );
        assert_eq!(sighting, order::set(["v".to_string(), "w".to_string()]));
    }

    #[test]
    fn being_seen_in_use_restarts_the_grace() {
        let claims = [claim("v", "docker-m1", EngineKind::Docker)];
        let mut clocks = Clocks::default();
        let t0 = Instant::now();
        let used = in_use(&[container("running", &[("v", "csi")])]);
        let unused = in_use(&[container("exited", &[("v", "csi")])]);
        decide(&claims, &unused, &mut clocks, t0, GRACE);
        decide(&claims, &used, &mut clocks, t0 + GRACE / 2, GRACE);
        assert!(decide(&claims, &unused, &mut clocks, t0 + GRACE, GRACE).is_empty());
        let later = t0 + GRACE / 2 + GRACE;
        assert_eq!(decide(&claims, &unused, &mut clocks, later, GRACE).len(), 1);
    }

    #[test]
    fn an_unreachable_engine_releases_nothing_and_restarts_the_grace() {
        let claims = [claim("v", "docker-m1", EngineKind::Docker)];
        let mut clocks = Clocks::default();
        let t0 = Instant::now();
        let down = docker(Sighting::Unreachable);
        let unused = in_use(&[]);
        decide(&claims, &unused, &mut clocks, t0, GRACE);
        for step in 1..5 {
            let now = t0 + GRACE * step;
            assert!(decide(&claims, &down, &mut clocks, now, GRACE).is_empty());
        }
        // Back up: the grace counts from the last failed round.
        let back = t0 + GRACE * 4;
        assert!(decide(&claims, &unused, &mut clocks, back + GRACE / 2, GRACE).is_empty());
        assert_eq!(
            decide(&claims, &unused, &mut clocks, back + GRACE, GRACE).len(),
            1
        );
    }

    #[test]
    fn two_claims_of_a_volume_in_use_are_both_kept() {
        let claims = [
            claim("v", "docker-m1", EngineKind::Docker),
            claim("v", "docker-m2", EngineKind::Docker),
        ];
        let mut clocks = Clocks::default();
        let t0 = Instant::now();
        let used = in_use(&[container("running", &[("v", "csi")])]);
        decide(&claims, &used, &mut clocks, t0, GRACE);
        assert!(decide(&claims, &used, &mut clocks, t0 + GRACE * 3, GRACE).is_empty());
        // Once no container uses it, both go.
        let unused = in_use(&[container("exited", &[("v", "csi")])]);
        decide(&claims, &unused, &mut clocks, t0 + GRACE * 4, GRACE);
        assert_eq!(
            decide(&claims, &unused, &mut clocks, t0 + GRACE * 5, GRACE).len(),
            2
        );
    }

    #[test]
    fn each_engine_answers_for_its_own_claims_only() {
        let claims = [
            claim("v", "docker-m1", EngineKind::Docker),
            claim("v", "podman-x", EngineKind::Podman),
        ];
        let mut clocks = Clocks::default();
        let t0 = Instant::now();
        // Podman's container uses v; dockerd has none. Podman's claim
        // stays, dockerd's goes.
        let sightings = [
            (EngineKind::Docker, Sighting::InUse(BTreeSet::new())),
            (
                EngineKind::Podman,
                Sighting::InUse(BTreeSet::from(["v".to_string()])),
            ),
        ];
        decide(&claims, &sightings, &mut clocks, t0, GRACE);
        let released = decide(&claims, &sightings, &mut clocks, t0 + GRACE, GRACE);
        assert_eq!(released.len(), 1);
        assert_eq!(released[0].claim.engine, EngineKind::Docker);
    }

    #[test]
    fn an_engine_without_an_endpoint_keeps_its_claims() {
        let claims = [claim("v", "podman-x", EngineKind::Podman)];
        let mut clocks = Clocks::default();
        let t0 = Instant::now();
        let only_docker = in_use(&[]);
        for step in 0..5 {
            let now = t0 + GRACE * step;
            assert!(decide(&claims, &only_docker, &mut clocks, now, GRACE).is_empty());
        }
    }

    #[test]
    fn a_claim_taken_again_starts_a_new_grace() {
        let claims = [claim("v", "docker-m1", EngineKind::Docker)];
        let mut clocks = Clocks::default();
        let t0 = Instant::now();
        let unused = in_use(&[]);
        decide(&claims, &unused, &mut clocks, t0, GRACE);
        // Gone (an Unmount came), then taken again under the same ID.
        decide(&[], &unused, &mut clocks, t0 + GRACE, GRACE);
        let again = t0 + GRACE * 2;
        assert!(decide(&claims, &unused, &mut clocks, again, GRACE).is_empty());
        assert_eq!(
            decide(&claims, &unused, &mut clocks, again + GRACE, GRACE).len(),
            1
        );
    }

    #[test]
    fn only_this_nodes_claims_of_container_engines_are_judged() {
        use crate::volume::calls::ClaimStatus;
        let claim_on = |alloc: &str, node: &str| ClaimStatus {
            alloc_id: alloc.into(),
            node: node.into(),
            ..Default::default()
        };
        let volumes = [VolumeStatus {
            id: "v".into(),
            claims: vec![
                claim_on("docker-here", "a"),
                claim_on("podman-alone", ""),
                claim_on("docker-there", "b"),
                claim_on("0b7c6a1e-task-alloc", "a"),
            ],
            ..Default::default()
        }];
        let claims = plugin_claims(&volumes, "a");
        assert_eq!(
            claims,
            [
                claim("v", "docker-here", EngineKind::Docker),
                claim("v", "podman-alone", EngineKind::Podman),
            ]
        );
    }

    #[test]
    fn a_release_is_kept_if_the_engine_says_otherwise_a_moment_later() {
        let release = |volume: &str| Release {
            claim: claim(volume, "docker-m1", EngineKind::Docker),
            unused_for: GRACE,
        };
        let releases = vec![release("v"), release("w")];
        let fresh = in_use(&[container("running", &[("w", "csi")])]);
        assert_eq!(still_unused(releases.clone(), &fresh), [release("v")]);
        let down = docker(Sighting::Unreachable);
        assert!(still_unused(releases.clone(), &down).is_empty());
        assert!(still_unused(releases, &[]).is_empty());
    }

    #[test]
    fn the_period_is_at_most_half_the_grace_within_its_bounds() {
        assert_eq!(period(Duration::from_secs(30)), RECONCILE_PERIOD);
        assert_eq!(period(Duration::from_secs(4)), Duration::from_secs(2));
        assert_eq!(period(Duration::ZERO), MIN_RECONCILE_PERIOD);
    }

    #[test]
    fn the_stopped_states_are_the_only_ones_without_mounts() {
        for state in ["exited", "dead", "stopped"] {
            assert!(!may_hold_mounts(state), "{state}");
        }
        for state in [
            "created",
            "running",
            "paused",
            "restarting",
            "removing",
            "configured",
            "something-new",
        ] {
            assert!(may_hold_mounts(state), "{state}");
        }
    }
}

/// The thread itself, against a fake engine on a real unix socket and a
/// fake main loop on the calls channel.
#[cfg(test)]
mod thread_tests {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixListener;
    use std::path::PathBuf;

    use crossbeam_channel::{unbounded, Receiver};

    use super::*;
    use crate::spec::VolumePluginConfig;
    use crate::volume::calls::{ClaimStatus, Released, Status};

    const GRACE: Duration = Duration::from_secs(30);

    /// A directory of the test's own, removed when dropped.
    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let path = std::env::temp_dir()
                .join(format!("csi-agent-reconcile-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Dir(path)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// An engine at `socket` that answers every request with `answer`, or
    /// holds every connection open in silence when `answer` is `None`.
    fn engine(socket: &std::path::Path, answer: Option<&'static str>) {
        let listener = UnixListener::bind(socket).unwrap();
        thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let Some(body) = answer else {
                    held.push(stream);
                    continue;
                };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 2 {
                    line.clear();
                }
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        });
    }

    fn config(docker: &std::path::Path, grace: Duration) -> AgentConfig {
        let mut config = AgentConfig::default();
        config.docker.endpoint = format!("unix://{}", docker.display());
        config.volume_plugin = Some(VolumePluginConfig {
            unmount_grace: grace,
            ..VolumePluginConfig::default()
        });
        config
    }

    /// A main loop whose one volume `v` has the claim `docker-m1` until it
    /// is released; each release's alloc goes to the channel returned.
    fn fake_loop(calls: Receiver<Call>) -> Receiver<String> {
        let (released_tx, released) = unbounded();
        thread::spawn(move || {
            let mut claims = vec!["docker-m1".to_string()];
            for call in calls {
                let answer = match call.request {
                    Request::VolumeStatus(_) => Answer::Status(Status {
                        volumes: vec![VolumeStatus {
                            id: "v".into(),
                            claims: claims
                                .iter()
                                .map(|alloc| ClaimStatus {
                                    alloc_id: alloc.clone(),
                                    ..Default::default()
                                })
                                .collect(),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                    Request::VolumeRelease(req) => {
                        claims.retain(|c| *c != req.alloc_id);
                        let _ = released_tx.send(req.alloc_id);
                        Answer::Released(Released {
                            released: true,
                            message: String::new(),
                        })
                    }
                    other => panic!("unexpected call {other:?}"),
                };
                call.reply.send(Ok(Response::Volume(answer)));
            }
        });
        released
    }

    #[test]
    fn an_unused_claim_is_released_through_the_loop() {
        let dir = Dir::new("release");
        let socket = dir.0.join("docker.sock");
        engine(&socket, Some("[]"));
        let (calls_tx, calls) = unbounded();
        let released = fake_loop(calls);
        let grace = Duration::from_secs(1);
        let reconciler = Reconciler::start(&config(&socket, grace), "n", &calls_tx).unwrap();
        let start = Instant::now();
        let alloc = released.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(alloc, "docker-m1");
        assert!(start.elapsed() >= grace, "{:?}", start.elapsed());
        drop(reconciler);
    }

    #[test]
    fn a_silent_engine_releases_nothing_and_holds_up_the_end_at_most_stop_wait() {
        let dir = Dir::new("silent");
        let socket = dir.0.join("docker.sock");
        engine(&socket, None);
        let (calls_tx, calls) = unbounded();
        let released = fake_loop(calls);
        let grace = Duration::from_millis(100);
        let reconciler = Reconciler::start(&config(&socket, grace), "n", &calls_tx).unwrap();
        assert!(released.recv_timeout(grace * 10).is_err());
        let start = Instant::now();
        drop(reconciler);
        let took = start.elapsed();
        assert!(
            took >= STOP_WAIT && took < STOP_WAIT + Duration::from_secs(1),
            "{took:?}"
        );
    }

    #[test]
    fn without_the_block_or_any_endpoint_no_thread_starts() {
        let (calls_tx, _calls) = unbounded();
        assert!(Reconciler::start(&AgentConfig::default(), "n", &calls_tx).is_none());
        let mut config = config(std::path::Path::new("/nonexistent.sock"), GRACE);
        config.docker.endpoint = String::new();
        assert!(Reconciler::start(&config, "n", &calls_tx).is_none());
    }
}
