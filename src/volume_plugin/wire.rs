//! Docker's requests and answers as JSON, through [`json`]: the
//! one place that knows the protocol's field names (`Name`, `ID`, `Opts`,
//! `Mountpoint`, `Err`, ...).
//!
//! Every error is answered with status 500 and `{"Err": "..."}`: dockerd
//! reads `Err`, Podman only the status (a 200 with `Err` set is a success
//! to it).

use crate::httpd::Response;
use json::Value;

use super::EngineKind;

/// A request's body: the fields the calls use, any of them absent.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Body {
    pub name: Option<String>,
    pub id: Option<String>,
    /// `Opts`, in the order given.
    pub opts: Vec<(String, String)>,
}

impl Body {
    /// Reads a body; an empty one is `{}` (Activate, List and
    /// Capabilities may come without one).
    pub fn parse(bytes: &[u8]) -> Result<Body, String> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Body::default());
        }
        let value = json::parse_bytes(bytes).map_err(|e| format!("the body is not JSON: {e}"))?;
        if value.as_object().is_none() {
            return Err("the body is not a JSON object".to_string());
        }
        let string = |key: &str| -> Result<Option<String>, String> {
            match value.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("{key} is not a string")),
            }
        };
        let mut body = Body {
            name: string("Name")?,
            id: string("ID")?,
            opts: Vec::new(),
        };
        match value.get("Opts") {
            None | Some(Value::Null) => {}
            Some(Value::Object(members)) => {
                for (key, v) in members {
                    match v {
                        Value::String(s) => body.opts.push((key.clone(), s.clone())),
                        _ => return Err(format!("option {key:?} is not a string")),
                    }
                }
            }
            Some(_) => return Err("Opts is not an object".to_string()),
        }
        Ok(body)
    }

    /// `Name`, which every call about a volume needs.
    pub fn name(&self) -> Result<&str, String> {
        match self.name.as_deref() {
            Some(name) if !name.is_empty() => Ok(name),
            _ => Err("the request names no volume (Name)".to_string()),
        }
    }
}

/// The content type of the answers to `engine`.
fn content_type(engine: EngineKind) -> &'static str {
    match engine {
        EngineKind::Docker => "application/vnd.docker.plugins.v1.2+json",
        EngineKind::Podman => "application/vnd.docker.plugins.v1.1+json",
    }
}

/// A success: status 200 and `value`.
pub(super) fn ok(engine: EngineKind, value: &Value) -> Response {
    Response::new(200, content_type(engine), json::to_string(value))
}

/// An empty success, `{}`.
pub(super) fn done(engine: EngineKind) -> Response {
    ok(engine, &Value::object(Vec::<(String, Value)>::new()))
}

/// A failure: `status` (500 for every call's error) and `{"Err": message}`.
pub(super) fn error(engine: EngineKind, status: u16, message: &str) -> Response {
    let body = Value::object([("Err", Value::from(message))]);
    Response::new(status, content_type(engine), json::to_string(&body))
}

/// `{"Mountpoint": path}`.
pub(super) fn mountpoint(engine: EngineKind, path: &str) -> Response {
    ok(engine, &Value::object([("Mountpoint", Value::from(path))]))
}

/// One volume of `Get` and `List`: `Name`, `Mountpoint`, and `Status`
/// (Get only).
pub(super) fn volume(name: &str, mountpoint: &str, status: Option<Value>) -> Value {
    let mut v = Value::object([
        ("Name", Value::from(name)),
        ("Mountpoint", Value::from(mountpoint)),
    ]);
    if let Some(status) = status {
        v.push("Status", status);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_gives_its_name_id_and_options() {
        let body =
            Body::parse(br#"{"Name":"data","ID":"abc","Opts":{"size":"1GiB","secrets.k":"v"}}"#)
                .unwrap();
        assert_eq!(body.name(), Ok("data"));
        assert_eq!(body.id.as_deref(), Some("abc"));
        assert_eq!(
            body.opts,
            vec![
                ("size".to_string(), "1GiB".to_string()),
                ("secrets.k".to_string(), "v".to_string())
            ]
        );
        assert_eq!(Body::parse(b"").unwrap(), Body::default());
        assert_eq!(Body::parse(b"{}").unwrap(), Body::default());
        let null_opts = Body::parse(br#"{"Name":"x","Opts":null}"#).unwrap();
        assert!(null_opts.opts.is_empty());
    }

    #[test]
    fn a_bad_body_is_refused_naming_what_is_wrong() {
        for (text, expected) in [
            (&b"{"[..], "the body is not JSON: "),
            (b"[]", "the body is not a JSON object"),
            (br#"{"Name":1}"#, "Name is not a string"),
            (br#"{"Name":"x","Opts":[]}"#, "Opts is not an object"),
            (
                br#"{"Name":"x","Opts":{"size":1}}"#,
                "option \"size\" is not a string",
            ),
        ] {
            let err = Body::parse(text).unwrap_err();
            assert!(err.starts_with(expected), "{err}");
        }
        assert_eq!(
            Body::parse(b"{}").unwrap().name(),
            Err("the request names no volume (Name)".to_string())
        );
    }

    #[test]
    fn errors_are_500_with_err_and_successes_200() {
        let answer = error(EngineKind::Docker, 500, "volume \"x\": no");
        assert_eq!(answer.status, 500);
        assert_eq!(answer.body(), br#"{"Err":"volume \"x\": no"}"#);
        let answer = mountpoint(EngineKind::Podman, "/p");
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body(), br#"{"Mountpoint":"/p"}"#);
        assert_eq!(done(EngineKind::Docker).body(), b"{}");
        let v = volume("a", "", Some(Value::object([("k", Value::from("v"))])));
        assert_eq!(
            json::to_string(&v),
            r#"{"Name":"a","Mountpoint":"","Status":{"k":"v"}}"#
        );
    }
}
