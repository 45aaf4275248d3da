//! Commands run inside a running container, through the engine's exec
//! API: `POST /containers/{id}/exec` creates one (its command, whether it
//! has a TTY), `POST /exec/{id}/start` starts it on a connection the
//! engine then hands over to its stdio (`Upgrade: tcp`), `POST
//! /exec/{id}/resize` sets its TTY's size, and `GET /exec/{id}/json` tells
//! whether it still runs and its exit code.
//!
//! On the handed-over connection the caller writes the command's stdin
//! (its write side shut at stdin's end) and reads its output: the TTY's
//! bytes as they are, or without a TTY stdout and stderr multiplexed in
//! the frames [`super::demultiplex`] reads.

use std::io::BufReader;
use std::os::unix::net::UnixStream;

use super::http::{self, encode, Hijack};
use super::{parse, Engine, Error, CALL_TIMEOUT, MAX_ANSWER};
use json::Value;

/// An exec's state, from `GET /exec/{id}/json`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecState {
    pub running: bool,
    /// Its exit code once it ended (`None` while it runs).
    pub exit_code: Option<i64>,
    /// Its process on the host (0 when the engine does not say).
    pub pid: u32,
}

/// A started exec's stdio: the connection the engine handed over.
pub struct ExecStream {
    /// Its output, with what the engine sent with its answer's head.
    pub output: BufReader<UnixStream>,
    /// Its stdin; shutting its write side down ends the command's stdin.
    pub input: UnixStream,
}

impl Engine {
    /// `POST /containers/{id}/exec`: an exec of `command` in container
    /// `container`, its stdin, stdout and stderr attached, with a TTY or
    /// not; returns its ID. A container that is not running is
    /// [`Error::Conflict`], one that does not exist [`Error::NotFound`].
    pub fn exec_create(
        &self,
        container: &str,
        command: &[String],
        tty: bool,
    ) -> Result<String, Error> {
        let target = format!("/containers/{}/exec", encode(container));
        let mut request = Engine::request("POST", &target);
        let body = Value::object([
            ("AttachStdin", Value::from(true)),
            ("AttachStdout", Value::from(true)),
            ("AttachStderr", Value::from(true)),
            ("Tty", Value::from(tty)),
            ("Cmd", Value::strings(command)),
        ]);
        request.body = Some(("application/json", json::to_string(&body).into_bytes()));
        let response = self.send(&request, Some(CALL_TIMEOUT))?;
        let answer = parse("POST /containers/exec", &self.body_if(response, &[201])?)?;
        match answer.get("Id").and_then(Value::as_str) {
            Some(id) if !id.is_empty() => Ok(id.to_string()),
            _ => Err(Error::Protocol(format!(
                "POST /containers/exec answered without an Id: {}",
                json::to_string(&answer)
            ))),
        }
    }

    /// `POST /exec/{id}/start`: starts exec `id` and returns its stdio.
    /// The engine has [`CALL_TIMEOUT`] to answer; after that the
    /// connection waits as long as the command runs.
    pub fn exec_start(&self, id: &str, tty: bool) -> Result<ExecStream, Error> {
        let target = format!("/exec/{}/start", encode(id));
        let mut request = Engine::request("POST", &target);
        let body = Value::object([("Detach", Value::from(false)), ("Tty", Value::from(tty))]);
        request.body = Some(("application/json", json::to_string(&body).into_bytes()));
        let io = |err| Error::Io {
            endpoint: self.endpoint().to_string(),
            err,
        };
        let stream = UnixStream::connect(self.socket()).map_err(|err| Error::Connect {
            endpoint: self.endpoint().to_string(),
            err,
        })?;
        stream.set_read_timeout(Some(CALL_TIMEOUT)).map_err(io)?;
        stream.set_write_timeout(Some(CALL_TIMEOUT)).map_err(io)?;
        match http::hijack_on(stream, &request).map_err(|err| self.http_error(err))? {
            Hijack::Upgraded(output) => {
                let input = output.get_ref().try_clone().map_err(io)?;
                input.set_read_timeout(None).map_err(io)?;
                input.set_write_timeout(None).map_err(io)?;
                Ok(ExecStream { output, input })
            }
            Hijack::Refused(response) => {
                let status = response.status;
                let body = response
                    .read_all(MAX_ANSWER)
                    .map_err(|err| self.http_error(err))?;
                Err(super::api_error(status, &body))
            }
        }
    }

    /// `POST /exec/{id}/resize?h=&w=`: sets the size of exec `id`'s TTY.
    /// The engine waits for the exec to have started.
    pub fn exec_resize(&self, id: &str, rows: u16, cols: u16) -> Result<(), Error> {
        let target = format!("/exec/{}/resize?h={rows}&w={cols}", encode(id));
        let response = self.send(&Engine::request("POST", &target), Some(CALL_TIMEOUT))?;
        self.body_if(response, &[200, 201, 204]).map(drop)
    }

    /// `GET /exec/{id}/json`: whether exec `id` runs, its exit code and
    /// its pid.
    pub fn exec_inspect(&self, id: &str) -> Result<ExecState, Error> {
        let answer = self.get_json(&format!("/exec/{}/json", encode(id)))?;
        let running = answer
            .get("Running")
            .and_then(Value::as_bool)
            .ok_or_else(|| Error::Protocol("GET /exec/json has no Running".to_string()))?;
        Ok(ExecState {
            running,
            exit_code: answer.get("ExitCode").and_then(Value::as_i64),
            pid: answer
                .get("Pid")
                .and_then(Value::as_u64)
                .and_then(|p| u32::try_from(p).ok())
                .unwrap_or(0),
        })
    }
}
