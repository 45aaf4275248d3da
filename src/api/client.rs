//! The CLI's side of the control API.
//!
//! It finds the agent at `-address`, else `$CSI_AGENT_ADDR`, else the
//! default `data_dir`'s socket, and turns "nobody is listening" into one
//! clear [`Error::NotRunning`] instead of a gRPC status.

use std::fmt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use grpcio::{CallOption, ChannelBuilder, Method, RpcStatusCode};
use protobuf::Message;

use crate::csi::Endpoint;
use crate::grpc::{grpc_environment, unary_bytes};
use crate::proto::{agent as api, agent_grpc};
use crate::spec::DEFAULT_DATA_DIR;

/// The environment variable that points the CLI at an agent.
pub const ADDRESS_ENV: &str = "CSI_AGENT_ADDR";

/// How long a status call may take.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a volume call that changes state may take: the agent answers
/// only once the plugin's RPCs (with their retries) are done.
pub const CLAIM_TIMEOUT: Duration = Duration::from_secs(5 * 60);

#[derive(Debug)]
pub enum Error {
    /// `-address` or `$CSI_AGENT_ADDR` is not a unix socket path.
    Address {
        value: String,
        reason: String,
    },
    /// Nothing accepts connections at the socket.
    NotRunning {
        socket: PathBuf,
    },
    /// The socket's permissions keep this user out.
    PermissionDenied {
        socket: PathBuf,
    },
    /// The agent accepted the connection but could not carry out the
    /// call: it is stopping, what the call needs is out of reach (the
    /// cluster's etcd), or (`foreign_user`: this user is neither root nor
    /// the socket's owner) it refused this user.
    Unavailable {
        socket: PathBuf,
        message: String,
        foreign_user: bool,
    },
    /// The agent refused the request, with its reason.
    Refused {
        code: RpcStatusCode,
        message: String,
    },
    Grpc(grpcio::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Address { value, reason } => {
                write!(f, "invalid agent address {value:?}: {reason}")
            }
            Error::NotRunning { socket } => write!(
                f,
                "the agent is not running (nothing listens on {}; start it with `csi-agent agent`, or set -address or ${ADDRESS_ENV})",
                socket.display()
            ),
            Error::PermissionDenied { socket } => write!(
                f,
                "permission denied on {}: the control API is for root and the agent's user only",
                socket.display()
            ),
            Error::Unavailable {
                socket,
                message,
                foreign_user: true,
            } => write!(
                f,
                "the agent at {} did not serve the call ({message}); the control API is for root and the agent's user only",
                socket.display()
            ),
            Error::Unavailable {
                socket,
                message,
                foreign_user: false,
            } => write!(
                f,
                "the agent at {} could not carry out the call: {message}",
                socket.display()
            ),
            Error::Refused { message, .. } => f.write_str(message),
            Error::Grpc(err) => write!(f, "the control API call failed: {err}"),
        }
    }
}

impl std::error::Error for Error {}

/// The control socket the CLI talks to: `address` (from `-address`), else
/// `$CSI_AGENT_ADDR`, else the default data dir's.
pub fn resolve_address(address: Option<&str>) -> Result<PathBuf, Error> {
    let env = std::env::var(ADDRESS_ENV).ok().filter(|v| !v.is_empty());
    match address.map(str::to_string).or(env) {
        None => Ok(Path::new(DEFAULT_DATA_DIR).join(super::SOCKET_NAME)),
        Some(value) => value
            .parse::<Endpoint>()
            .map(|e| e.path().to_path_buf())
            .map_err(|e| Error::Address {
                value,
                reason: e.to_string(),
            }),
    }
}

/// Whether this process is neither root nor the owner of the control
/// socket: then the agent's peer check may be what refused the call, and
/// only then is that worth saying.
fn foreign_user(socket: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let euid = crate::sys::peercred::current_uid();
    euid != 0 && std::fs::metadata(socket).map_or(true, |m| m.uid() != euid)
}

/// A connection to a running agent.
pub struct AgentClient {
    socket: PathBuf,
    /// The streaming calls (`alloc exec`, `alloc fs -f`).
    client: agent_grpc::AgentClient,
    /// The unary calls, as byte methods ([`AgentClient::unary`]).
    raw: grpcio::Client,
}

impl AgentClient {
    /// Connects to the agent at `socket`, or says it is not running.
    pub fn connect(socket: &Path) -> Result<AgentClient, Error> {
        // A cheap check first, so that a stopped agent is one clear line,
        // not a gRPC deadline.
        match UnixStream::connect(socket) {
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(Error::PermissionDenied {
                    socket: socket.to_path_buf(),
                })
            }
            Err(_) => {
                return Err(Error::NotRunning {
                    socket: socket.to_path_buf(),
                })
            }
        }
        let channel = ChannelBuilder::new(grpc_environment())
            .use_local_subchannel_pool(true)
            .connect(&format!("unix:{}", socket.display()));
        Ok(AgentClient {
            socket: socket.to_path_buf(),
            client: agent_grpc::AgentClient::new(channel.clone()),
            raw: grpcio::Client::new(channel),
        })
    }

    /// The unary `method` with `req`, within `timeout`. It goes as a method
    /// over plain bytes (`csi::rpc::unary_bytes`, as the CSI calls do):
    /// grpcio's client code is then compiled once, not for each method's
    /// pair of types as the generated stub has it; the typed constant names
    /// the method and its answer's type.
    fn unary<Req: Message, Resp: Message>(
        &self,
        method: &Method<Req, Resp>,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, Error> {
        unary_bytes(&self.raw, method.name, req, Self::opt(timeout)).map_err(|e| self.error(e))
    }

    fn opt(timeout: Duration) -> CallOption {
        CallOption::default().timeout(timeout)
    }

    /// The error of a streaming call (`alloc exec`), as a unary call's.
    pub fn stream_error(&self, err: grpcio::Error) -> Error {
        self.error(err)
    }

    pub fn error(&self, err: grpcio::Error) -> Error {
        match err {
            // The agent's server cancels the calls it still has when it
            // stops: as unavailable as a refused connection.
            grpcio::Error::RpcFailure(status)
                if status.code() == RpcStatusCode::UNAVAILABLE
                    || status.code() == RpcStatusCode::CANCELLED =>
            {
                if UnixStream::connect(&self.socket).is_err() {
                    Error::NotRunning {
                        socket: self.socket.clone(),
                    }
                } else {
                    let message = if status.code() == RpcStatusCode::CANCELLED {
                        "the agent cancelled the call: it is stopping".to_string()
                    } else {
                        status.message().to_string()
                    };
                    Error::Unavailable {
                        socket: self.socket.clone(),
                        message,
                        foreign_user: foreign_user(&self.socket),
                    }
                }
            }
            grpcio::Error::RpcFailure(status) => Error::Refused {
                code: status.code(),
                message: status.message().to_string(),
            },
            other => Error::Grpc(other),
        }
    }

    pub fn plugin_status(&self, id: &str) -> Result<api::PluginStatusResponse, Error> {
        let req = api::PluginStatusRequest {
            id: id.to_string(),
            ..Default::default()
        };
        self.unary(
            &agent_grpc::METHOD_AGENT_PLUGIN_STATUS,
            &req,
            STATUS_TIMEOUT,
        )
    }

    /// Registers an existing volume from the spec `hcl`, read from `file`.
    pub fn volume_register(
        &self,
        file: &str,
        hcl: &str,
    ) -> Result<api::VolumeStatusResponse, Error> {
        self.unary(
            &agent_grpc::METHOD_AGENT_VOLUME_REGISTER,
            &spec_request(file, hcl),
            CLAIM_TIMEOUT,
        )
    }

    /// Creates a volume from the spec `hcl`, read from `file`, and
    /// registers it.
    pub fn volume_create(&self, file: &str, hcl: &str) -> Result<api::VolumeStatusResponse, Error> {
        self.unary(
            &agent_grpc::METHOD_AGENT_VOLUME_CREATE,
            &spec_request(file, hcl),
            CLAIM_TIMEOUT,
        )
    }

    /// Forgets a volume; with `force`, releases its claims first.
    pub fn volume_deregister(&self, id: &str, force: bool) -> Result<(), Error> {
        let req = api::VolumeDeregisterRequest {
            id: id.to_string(),
            force,
            ..Default::default()
        };
        self.unary(
            &agent_grpc::METHOD_AGENT_VOLUME_DEREGISTER,
            &req,
            CLAIM_TIMEOUT,
        )
        .map(drop)
    }

    /// Deletes a volume the agent created, then deregisters it.
    pub fn volume_delete(&self, id: &str) -> Result<(), Error> {
        let req = api::VolumeDeregisterRequest {
            id: id.to_string(),
            ..Default::default()
        };
        self.unary(&agent_grpc::METHOD_AGENT_VOLUME_DELETE, &req, CLAIM_TIMEOUT)
            .map(drop)
    }

    /// The registered volumes, or the one named `id`; with `stats`, the
    /// agent asks the plugin for usage.
    pub fn volume_status(&self, id: &str, stats: bool) -> Result<api::VolumeStatusResponse, Error> {
        let req = api::VolumeStatusRequest {
            id: id.to_string(),
            stats,
            ..Default::default()
        };
        self.unary(
            &agent_grpc::METHOD_AGENT_VOLUME_STATUS,
            &req,
            STATUS_TIMEOUT,
        )
    }

    /// Claims a volume; answers once it is published (and mounted at the
    /// request's target, when it has one).
    pub fn volume_claim(
        &self,
        req: &api::VolumeClaimRequest,
    ) -> Result<api::VolumeClaimResponse, Error> {
        self.unary(&agent_grpc::METHOD_AGENT_VOLUME_CLAIM, req, CLAIM_TIMEOUT)
    }

    /// Releases the claim of `alloc_id` on `volume_id`.
    pub fn volume_release(
        &self,
        volume_id: &str,
        alloc_id: &str,
    ) -> Result<api::VolumeReleaseResponse, Error> {
        let req = api::VolumeReleaseRequest {
            volume_id: volume_id.to_string(),
            alloc_id: alloc_id.to_string(),
            ..Default::default()
        };
        self.unary(
            &agent_grpc::METHOD_AGENT_VOLUME_RELEASE,
            &req,
            CLAIM_TIMEOUT,
        )
    }

    /// The volumes of plugin `plugin_id`, and the plugin's own volumes
    /// that are not registered.
    pub fn volume_status_of_plugin(
        &self,
        plugin_id: &str,
    ) -> Result<api::VolumeStatusResponse, Error> {
        let req = api::VolumeStatusRequest {
            plugin_id: plugin_id.to_string(),
            ..Default::default()
        };
        self.unary(
            &agent_grpc::METHOD_AGENT_VOLUME_STATUS,
            &req,
            STATUS_TIMEOUT,
        )
    }

    pub fn snapshot_create(
        &self,
        req: &api::SnapshotCreateRequest,
    ) -> Result<api::SnapshotCreateResponse, Error> {
        self.unary(
            &agent_grpc::METHOD_AGENT_SNAPSHOT_CREATE,
            req,
            CLAIM_TIMEOUT,
        )
    }

    pub fn snapshot_delete(
        &self,
        req: &api::SnapshotDeleteRequest,
    ) -> Result<api::SnapshotDeleteResponse, Error> {
        self.unary(
            &agent_grpc::METHOD_AGENT_SNAPSHOT_DELETE,
            req,
            CLAIM_TIMEOUT,
        )
    }

    pub fn snapshot_list(
        &self,
        req: &api::SnapshotListRequest,
    ) -> Result<api::SnapshotListResponse, Error> {
        self.unary(&agent_grpc::METHOD_AGENT_SNAPSHOT_LIST, req, STATUS_TIMEOUT)
    }

    /// The agents of this agent's cluster.
    pub fn node_status(&self) -> Result<api::NodeStatusResponse, Error> {
        self.unary(
            &agent_grpc::METHOD_AGENT_NODE_STATUS,
            &api::NodeStatusRequest::new(),
            STATUS_TIMEOUT,
        )
    }

    /// Frees lost node `node`'s claims on `volume_id`.
    pub fn volume_force_detach(
        &self,
        volume_id: &str,
        node: &str,
    ) -> Result<api::VolumeForceDetachResponse, Error> {
        let req = api::VolumeForceDetachRequest {
            volume_id: volume_id.to_string(),
            node: node.to_string(),
            ..Default::default()
        };
        self.unary(
            &agent_grpc::METHOD_AGENT_VOLUME_FORCE_DETACH,
            &req,
            CLAIM_TIMEOUT,
        )
    }

    /// Sends a job file to run.
    pub fn job_run(
        &self,
        file: &str,
        hcl: &str,
        inputs: api::JobInputs,
    ) -> Result<api::JobRunResponse, Error> {
        self.job_run_checked(file, hcl, inputs, None)
    }

    /// `job run -check-index`: runs the job only if its modify index is
    /// still `check_index` (0: only if there is no such job).
    pub fn job_run_checked(
        &self,
        file: &str,
        hcl: &str,
        inputs: api::JobInputs,
        check_index: Option<u64>,
    ) -> Result<api::JobRunResponse, Error> {
        let req = api::JobRunRequest {
            file: file.to_string(),
            hcl: hcl.to_string(),
            inputs: protobuf::MessageField::some(inputs),
            enforce_index: check_index.is_some(),
            job_modify_index: check_index.unwrap_or(0),
            ..Default::default()
        };
        self.unary(&agent_grpc::METHOD_AGENT_JOB_RUN, &req, STATUS_TIMEOUT)
    }

    pub fn job_stop(&self, name: &str, purge: bool) -> Result<api::JobStopResponse, Error> {
        let req = api::JobStopRequest {
            name: name.to_string(),
            purge,
            ..Default::default()
        };
        self.unary(&agent_grpc::METHOD_AGENT_JOB_STOP, &req, STATUS_TIMEOUT)
    }

    /// `job periodic force`.
    pub fn job_periodic_force(&self, name: &str) -> Result<api::JobRunResponse, Error> {
        let req = api::JobPeriodicForceRequest {
            name: name.to_string(),
            ..Default::default()
        };
        self.unary(
            &agent_grpc::METHOD_AGENT_JOB_PERIODIC_FORCE,
            &req,
            STATUS_TIMEOUT,
        )
    }

    /// `job dispatch`.
    pub fn job_dispatch(
        &self,
        req: &api::JobDispatchRequest,
    ) -> Result<api::JobRunResponse, Error> {
        self.unary(&agent_grpc::METHOD_AGENT_JOB_DISPATCH, req, STATUS_TIMEOUT)
    }

    /// One job, or every job when `name` is empty.
    pub fn job_status(&self, name: &str) -> Result<api::JobStatusResponse, Error> {
        let req = api::JobStatusRequest {
            name: name.to_string(),
            ..Default::default()
        };
        self.unary(&agent_grpc::METHOD_AGENT_JOB_STATUS, &req, STATUS_TIMEOUT)
    }

    pub fn alloc_logs(
        &self,
        alloc_id: &str,
        task: &str,
        stderr: bool,
    ) -> Result<api::AllocLogsResponse, Error> {
        let req = api::AllocLogsRequest {
            alloc_id: alloc_id.to_string(),
            task: task.to_string(),
            stderr,
            ..Default::default()
        };
        self.unary(&agent_grpc::METHOD_AGENT_ALLOC_LOGS, &req, STATUS_TIMEOUT)
    }

    /// `alloc signal` (`action` "signal", with `signal`), `alloc
    /// restart` ("restart") or `alloc stop` ("stop") of `alloc` (an ID or
    /// a unique prefix) and `task` (empty: every running task).
    pub fn alloc_control(
        &self,
        alloc: &str,
        task: &str,
        action: &str,
        signal: &str,
    ) -> Result<api::AllocControlResponse, Error> {
        let req = api::AllocControlRequest {
            alloc_id: alloc.to_string(),
            task: task.to_string(),
            action: action.to_string(),
            signal: signal.to_string(),
            ..Default::default()
        };
        self.unary(
            &agent_grpc::METHOD_AGENT_ALLOC_CONTROL,
            &req,
            STATUS_TIMEOUT,
        )
    }

    /// `job inspect`: job `name` as submitted.
    pub fn job_inspect(&self, name: &str) -> Result<api::JobInspectResponse, Error> {
        let req = api::JobInspectRequest {
            name: name.to_string(),
            ..Default::default()
        };
        self.unary(&agent_grpc::METHOD_AGENT_JOB_INSPECT, &req, STATUS_TIMEOUT)
    }

    /// `service list` (`name` empty) and `service info NAME`.
    pub fn service_list(&self, name: &str) -> Result<api::ServiceListResponse, Error> {
        let req = api::ServiceListRequest {
            name: name.to_string(),
            ..Default::default()
        };
        self.unary(&agent_grpc::METHOD_AGENT_SERVICE_LIST, &req, STATUS_TIMEOUT)
    }

    /// `job plan`: what `job run` of the file would do, nothing done.
    pub fn job_plan(
        &self,
        file: &str,
        hcl: &str,
        inputs: api::JobInputs,
    ) -> Result<api::JobPlanResponse, Error> {
        let req = api::JobRunRequest {
            file: file.to_string(),
            hcl: hcl.to_string(),
            inputs: protobuf::MessageField::some(inputs),
            ..Default::default()
        };
        self.unary(&agent_grpc::METHOD_AGENT_JOB_PLAN, &req, STATUS_TIMEOUT)
    }

    /// Opens an `alloc exec` call: the caller sends the start first,
    /// then stdin and window sizes, and reads output until the exit code.
    /// No deadline: a session lasts as long as its command.
    #[allow(clippy::type_complexity)]
    pub fn alloc_exec(
        &self,
    ) -> Result<
        (
            grpcio::ClientDuplexSender<api::AllocExecInput>,
            grpcio::ClientDuplexReceiver<api::AllocExecOutput>,
        ),
        Error,
    > {
        self.client
            .alloc_exec_opt(CallOption::default())
            .map_err(|e| self.error(e))
    }

    /// `alloc fs`: a listing, a stat, or a part of a file from `offset`.
    pub fn alloc_fs(
        &self,
        alloc_id: &str,
        path: &str,
        stat: bool,
        offset: u64,
    ) -> Result<api::AllocFsResponse, Error> {
        let req = api::AllocFsRequest {
            alloc_id: alloc_id.to_string(),
            path: path.to_string(),
            stat,
            offset,
            ..Default::default()
        };
        self.unary(&agent_grpc::METHOD_AGENT_ALLOC_FS, &req, STATUS_TIMEOUT)
    }

    /// `alloc status`'s resource usage of each task of `alloc_id`.
    pub fn alloc_stats(&self, alloc_id: &str) -> Result<api::AllocStatsResponse, Error> {
        let req = api::AllocStatsRequest {
            alloc_id: alloc_id.to_string(),
            ..Default::default()
        };
        self.unary(&agent_grpc::METHOD_AGENT_ALLOC_STATS, &req, STATUS_TIMEOUT)
    }

    /// `alloc fs -f`: the file `path` of `alloc_id` from `offset`, then
    /// what is appended to it until the alloc is done; no timeout.
    pub fn alloc_fs_follow(
        &self,
        alloc_id: &str,
        path: &str,
        offset: u64,
    ) -> Result<grpcio::ClientSStreamReceiver<api::AllocFsResponse>, Error> {
        let req = api::AllocFsRequest {
            alloc_id: alloc_id.to_string(),
            path: path.to_string(),
            offset,
            ..Default::default()
        };
        self.client
            .alloc_fs_follow_opt(&req, CallOption::default())
            .map_err(|e| self.error(e))
    }

    /// The agent's events after `since` of `topics` (all when empty),
    /// waiting up to `wait` for one when there is none yet.
    pub fn events(
        &self,
        since: u64,
        topics: &[String],
        wait: Duration,
    ) -> Result<api::EventsResponse, Error> {
        let req = api::EventsRequest {
            since,
            topics: topics.to_vec(),
            wait_ms: u32::try_from(wait.as_millis()).unwrap_or(u32::MAX),
            ..Default::default()
        };
        self.unary(
            &agent_grpc::METHOD_AGENT_EVENTS,
            &req,
            wait + STATUS_TIMEOUT,
        )
    }
}

fn spec_request(file: &str, hcl: &str) -> api::VolumeSpecRequest {
    api::VolumeSpecRequest {
        file: file.to_string(),
        hcl: hcl.to_string(),
        ..Default::default()
    }
}
