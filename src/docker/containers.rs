//! Containers: create, start, inspect, list, wait, kill and remove, and
//! the [`Container`] read from the engine's answers.

use std::collections::BTreeMap;

use super::http::encode;
use super::{parse, ContainerSpec, Engine, Error, CALL_TIMEOUT};
use json::Value;

/// A container as the engine reports it. [`Engine::inspect`] fills every
/// field; [`Engine::list`] only `id`, `name`, `image`, `labels`, `status`
/// and `running` (the rest are zero or empty): inspect one for more.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Container {
    pub id: String,
    /// Without the engine's leading `/`.
    pub name: String,
    /// The image as the container was created with it.
    pub image: String,
    pub labels: BTreeMap<String, String>,
    pub running: bool,
    /// The main process's PID on the host; 0 when not running.
    pub pid: u32,
    pub exit_code: i64,
    /// Whether the kernel's OOM killer ended it, as far as the engine saw:
    /// 20.10 watches for OOM events only once the task has started, so a
    /// container killed in its first milliseconds exits 137 with this
    /// false; and the event may reach the engine a moment after the exit.
    pub oom_killed: bool,
    /// `created`, `running`, `paused`, `restarting`, `removing`, `exited`
    /// or `dead`.
    pub status: String,
    /// RFC 3339 times; `0001-01-01T00:00:00Z` when it never happened.
    pub started_at: String,
    pub finished_at: String,
}

fn text(value: Option<&Value>) -> String {
    value.and_then(Value::as_str).unwrap_or("").to_string()
}

fn labels(value: Option<&Value>) -> BTreeMap<String, String> {
    let members = value.and_then(Value::as_object).unwrap_or(&[]);
    order::map(
        members
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))),
    )
}

impl Container {
    /// From `GET /containers/{id}/json`.
    fn from_inspect(value: &Value) -> Result<Container, Error> {
        let id = text(value.get("Id"));
        if id.is_empty() {
            return Err(Error::Protocol("a container without an Id".to_string()));
        }
        let config = value.get("Config");
        let state = value.get("State");
        let field = |key: &str| state.and_then(|s| s.get(key));
        Ok(Container {
            id,
            name: text(value.get("Name")).trim_start_matches('/').to_string(),
            image: text(config.and_then(|c| c.get("Image"))),
            labels: labels(config.and_then(|c| c.get("Labels"))),
            running: field("Running").and_then(Value::as_bool).unwrap_or(false),
            pid: field("Pid")
                .and_then(Value::as_u64)
                .and_then(|pid| u32::try_from(pid).ok())
                .unwrap_or(0),
            exit_code: field("ExitCode").and_then(Value::as_i64).unwrap_or(0),
            oom_killed: field("OOMKilled").and_then(Value::as_bool).unwrap_or(false),
            status: text(field("Status")),
            started_at: text(field("StartedAt")),
            finished_at: text(field("FinishedAt")),
        })
    }

    /// From one item of `GET /containers/json`.
    fn from_summary(value: &Value) -> Result<Container, Error> {
        let id = text(value.get("Id"));
        if id.is_empty() {
            return Err(Error::Protocol(
                "a listed container without an Id".to_string(),
            ));
        }
        let names = value.get("Names").and_then(Value::as_array).unwrap_or(&[]);
        let name = names.first().and_then(Value::as_str).unwrap_or("");
        let status = text(value.get("State"));
        Ok(Container {
            id,
            name: name.trim_start_matches('/').to_string(),
            image: text(value.get("Image")),
            labels: labels(value.get("Labels")),
            running: status == "running",
            status,
            ..Container::default()
        })
    }
}

impl Engine {
    /// `POST /containers/create?name=`: creates the container `name` as
    /// `spec` asks, and returns its ID. A name in use is
    /// [`Error::Conflict`]; an image the engine does not have is
    /// [`Error::NotFound`].
    pub fn create(&self, name: &str, spec: &ContainerSpec) -> Result<String, Error> {
        let target = format!("/containers/create?name={}", encode(name));
        let mut request = Engine::request("POST", &target);
        let body = json::to_string(&spec.to_json()).into_bytes();
        request.body = Some(("application/json", body));
        let response = self.send(&request, Some(CALL_TIMEOUT))?;
        let answer = parse("POST /containers/create", &self.body_if(response, &[201])?)?;
        match answer.get("Id").and_then(Value::as_str) {
            Some(id) if !id.is_empty() => Ok(id.to_string()),
            _ => Err(Error::Protocol(format!(
                "POST /containers/create answered without an Id: {}",
                json::to_string(&answer)
            ))),
        }
    }

    /// `POST /containers/{id}/start`; a container already started is fine.
    pub fn start(&self, id: &str) -> Result<(), Error> {
        let target = format!("/containers/{}/start", encode(id));
        let response = self.send(&Engine::request("POST", &target), Some(CALL_TIMEOUT))?;
        self.body_if(response, &[204, 304]).map(drop)
    }

    /// `GET /containers/{id}/json`: the container, or `None` if the engine
    /// has none of that ID or name.
    pub fn inspect(&self, id_or_name: &str) -> Result<Option<Container>, Error> {
        let target = format!("/containers/{}/json", encode(id_or_name));
        match self.get_json(&target) {
            Ok(value) => Container::from_inspect(&value).map(Some),
            Err(Error::NotFound(_)) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// `GET /containers/json?all=1`: every container, running or not, with
    /// the label `label`, given as `key` (any value) or `key=value`.
    pub fn list(&self, label: &str) -> Result<Vec<Container>, Error> {
        let filters = Value::object([("label", Value::strings([label]))]);
        let target = format!(
            "/containers/json?all=1&filters={}",
            encode(&json::to_string(&filters))
        );
        let answer = self.get_json(&target)?;
        let items = answer.as_array().ok_or_else(|| {
            Error::Protocol("GET /containers/json did not answer a list".to_string())
        })?;
        items.iter().map(Container::from_summary).collect()
    }

    /// `POST /containers/{id}/wait`: waits, as long as it takes, for the
    /// container to stop, and returns its exit code. A container that is
    /// not running (already exited, or created and not started yet)
    /// answers at once: call it after [`Engine::start`].
    pub fn wait(&self, id: &str) -> Result<i64, Error> {
        let target = format!("/containers/{}/wait", encode(id));
        let response = self.send(&Engine::request("POST", &target), None)?;
        let answer = parse("POST /containers/wait", &self.body_if(response, &[200])?)?;
        if let Some(message) = answer
            .get("Error")
            .and_then(|e| e.get("Message"))
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
        {
            return Err(Error::Api {
                status: 200,
                message: message.to_string(),
            });
        }
        answer
            .get("StatusCode")
            .and_then(Value::as_i64)
            .ok_or_else(|| Error::Protocol("POST /containers/wait: no StatusCode".to_string()))
    }

    /// `POST /containers/{id}/kill?signal=`: sends `signal` (`SIGTERM`,
    /// `TERM` or a number) to the container's main process. A container
    /// that is not running is fine; one that does not exist is
    /// [`Error::NotFound`].
    pub fn kill(&self, id: &str, signal: &str) -> Result<(), Error> {
        let target = format!("/containers/{}/kill?signal={}", encode(id), encode(signal));
        let response = self.send(&Engine::request("POST", &target), Some(CALL_TIMEOUT))?;
        match self.body_if(response, &[204]) {
            Err(Error::Conflict(message)) if message.contains("is not running") => Ok(()),
            other => other.map(drop),
        }
    }

    /// `DELETE /containers/{id}?force=&v=1`: removes the container and its
    /// anonymous volumes; `force` kills it first if it runs. One that does
    /// not exist is fine.
    pub fn remove(&self, id: &str, force: bool) -> Result<(), Error> {
        let target = format!(
            "/containers/{}?force={}&v=1",
            encode(id),
            if force { 1 } else { 0 }
        );
        let response = self.send(&Engine::request("DELETE", &target), Some(CALL_TIMEOUT))?;
        match self.body_if(response, &[204]) {
            Err(Error::NotFound(_)) => Ok(()),
            other => other.map(drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspect_answers_become_containers() {
        let value = json::parse(
            r#"{"Id":"abc","Name":"/web","Image":"sha256:1",
                "Config":{"Image":"busybox:1","Labels":{"a":"b"}},
                "State":{"Status":"exited","Running":false,"Pid":0,"ExitCode":137,
                         "OOMKilled":true,"StartedAt":"s","FinishedAt":"f"}}"#,
        )
        .unwrap();
        let container = Container::from_inspect(&value).unwrap();
        assert_eq!(container.name, "web");
        assert_eq!(container.image, "busybox:1");
        assert_eq!(container.labels.get("a").map(String::as_str), Some("b"));
        assert_eq!(container.exit_code, 137);
        assert!(container.oom_killed);
        assert_eq!(container.status, "exited");
        assert_eq!(
            (
                container.started_at.as_str(),
                container.finished_at.as_str()
            ),
            ("s", "f")
        );
        assert!(Container::from_inspect(&json::parse("{}").unwrap()).is_err());
    }

    #[test]
    fn list_items_become_containers() {
        let value = json::parse(
            r#"{"Id":"abc","Names":["/web"],"Image":"busybox:1","Labels":null,
                "State":"running","Status":"Up 2 seconds"}"#,
        )
        .unwrap();
        let container = Container::from_summary(&value).unwrap();
        assert_eq!(container.name, "web");
        assert!(container.running);
        assert_eq!(container.status, "running");
        assert!(container.labels.is_empty());
    }
}
