//! Images: whether one is present, pulling one from its registry (with
//! credentials), and importing one from a root filesystem's tarball.
//!
//! A pull and an import answer with a stream of JSON progress messages;
//! one with `error` (or `errorDetail`) means the operation failed even
//! though the status was 200. A pull's messages also tell its layers'
//! progress (`pull_progress.rs`).

use std::fmt;
use std::io::{BufRead, BufReader, Read};

use super::http::{encode, Request};
use super::pull_progress::{PullProgress, Tally};
use super::{api_error, Engine, Error, MAX_ANSWER, PROGRESS_TIMEOUT};
use encode::{base64, Alphabet};
use json::Value;

/// The longest progress message a pull's stream may send.
const MAX_PROGRESS_LINE: u64 = 1 << 20;

/// Credentials for a registry, sent as `X-Registry-Auth`. `Debug` does not
/// print the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Auth {
    pub username: String,
    pub password: String,
    /// The registry, e.g. `registry.example.com:5000`.
    pub server_address: String,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth")
            .field("username", &self.username)
            .field("password", &"[REDACTED]")
            .field("server_address", &self.server_address)
            .finish()
    }
}

impl Auth {
    /// The header's value: the JSON of the credentials in base64url.
    fn header(&self) -> String {
        let json = Value::object([
            ("username", Value::from(self.username.as_str())),
            ("password", Value::from(self.password.as_str())),
            ("serveraddress", Value::from(self.server_address.as_str())),
        ]);
        // Go's `base64.URLEncoding`, which the engine decodes it with.
        base64(json::to_string(&json).as_bytes(), Alphabet::Url)
    }
}

/// An image reference split for `fromImage` and `tag`: `repo:tag`,
/// `host:5000/repo` (tag `latest`), `repo@sha256:...` (the digest stays in
/// the name, no tag).
fn split_reference(image: &str) -> (&str, &str) {
    if image.contains('@') {
        return (image, "");
    }
    let last_slash = image.rfind('/').map_or(0, |at| at + 1);
    match image[last_slash..].rfind(':') {
        Some(at) => (&image[..last_slash + at], &image[last_slash + at + 1..]),
        None => (image, "latest"),
    }
}

impl Engine {
    /// `GET /images/{name}/json`: whether the engine has `image`.
    pub fn image_present(&self, image: &str) -> Result<bool, Error> {
        let target = format!("/images/{}/json", encode(image));
        match self.get_json(&target) {
            Ok(_) => Ok(true),
            Err(Error::NotFound(_)) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// `POST /images/create?fromImage=&tag=`: pulls `image` from its
    /// registry, with `auth` if given, and returns when the engine has it,
    /// with how far it got. `progress` is called with each change of the
    /// download's progress.
    /// The engine may stay silent for at most [`PROGRESS_TIMEOUT`] at a
    /// time. Every failure the engine reports is [`Error::Pull`]; a
    /// connection that fails is [`Error::Connect`] or [`Error::Io`].
    pub fn pull(
        &self,
        image: &str,
        auth: Option<&Auth>,
        progress: &mut dyn FnMut(PullProgress),
    ) -> Result<PullProgress, Error> {
        let (name, tag) = split_reference(image);
        let mut target = format!("/images/create?fromImage={}", encode(name));
        if !tag.is_empty() {
            target.push_str(&format!("&tag={}", encode(tag)));
        }
        let mut request = Engine::request("POST", &target);
        if let Some(auth) = auth {
            request.headers.push(("X-Registry-Auth", auth.header()));
        }
        let pull_error = |message: String| Error::Pull {
            image: image.to_string(),
            message,
        };
        let mut tally = Tally::default();
        let mut each = |message: &Value| {
            if tally.take(message) {
                progress(tally.progress());
            }
        };
        match self.progress(&request, &mut each) {
            Ok(Ok(())) => Ok(tally.progress()),
            Ok(Err(message)) => Err(pull_error(message)),
            Err(
                Error::Api { message, .. } | Error::NotFound(message) | Error::Conflict(message),
            ) => Err(pull_error(message)),
            Err(err) => Err(err),
        }
    }

    /// `POST /images/create?fromSrc=-&repo=&tag=`: makes an image `tag`
    /// (`repo:tag`, `latest` if it names none) of a tarball of a root
    /// filesystem, offline; `changes` are Dockerfile instructions applied
    /// to it (`ENTRYPOINT ["/x"]`, `CMD ...`, `ENV K=v`).
    pub fn import(&self, tag: &str, tarball: Vec<u8>, changes: &[&str]) -> Result<(), Error> {
        let (repo, tag) = split_reference(tag);
        let mut target = format!(
            "/images/create?fromSrc=-&repo={}&tag={}",
            encode(repo),
            encode(tag)
        );
        for change in changes {
            target.push_str(&format!("&changes={}", encode(change)));
        }
        let mut request = Engine::request("POST", &target);
        request.body = Some(("application/x-tar", tarball));
        match self.progress(&request, &mut |_| {})? {
            Ok(()) => Ok(()),
            Err(message) => Err(Error::Api {
                status: 200,
                message,
            }),
        }
    }

    /// Sends `request` and reads its progress stream to its end, each
    /// message handed to `each`: `Ok(Err)` with the engine's message when
    /// the stream reports an error.
    fn progress(
        &self,
        request: &Request,
        each: &mut dyn FnMut(&Value),
    ) -> Result<Result<(), String>, Error> {
        let response = self.send(request, Some(PROGRESS_TIMEOUT))?;
        if response.status != 200 {
            let status = response.status;
            let body = response
                .read_all(MAX_ANSWER)
                .map_err(|err| self.http_error(err))?;
            return Err(api_error(status, &body));
        }
        let mut lines = BufReader::new(response.body);
        loop {
            let mut line = Vec::new();
            let read = (&mut lines)
                .take(MAX_PROGRESS_LINE)
                .read_until(b'\n', &mut line)
                .map_err(|err| self.http_error(err.into()))?;
            if read == 0 {
                return Ok(Ok(()));
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let message = super::parse("a progress message", &line)?;
            if let Some(error) = progress_error(&message) {
                return Ok(Err(error));
            }
            each(&message);
        }
    }
}

/// The error a progress message reports, if any.
fn progress_error(message: &Value) -> Option<String> {
    let detail = message
        .get("errorDetail")
        .and_then(|d| d.get("message"))
        .and_then(Value::as_str);
    let error = message.get("error").and_then(Value::as_str);
    error.or(detail).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_debug_hides_the_password() {
        let auth = Auth {
            username: "u".into(),
            password: "hunter2".into(),
            server_address: "r.example".into(),
        };
        let text = format!("{auth:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("[REDACTED]"), "{text}");
        // {"username":"u","password":"hunter2","serveraddress":"r.example"}
        assert_eq!(
            auth.header(),
            "eyJ1c2VybmFtZSI6InUiLCJwYXNzd29yZCI6Imh1bnRlcjIiLCJzZXJ2ZXJhZGRyZXNzIjoici5leGFtcGxlIn0="
        );
    }

    #[test]
    fn references_split_into_name_and_tag() {
        assert_eq!(split_reference("busybox"), ("busybox", "latest"));
        assert_eq!(split_reference("busybox:1.36"), ("busybox", "1.36"));
        assert_eq!(
            split_reference("reg:5000/team/app"),
            ("reg:5000/team/app", "latest")
        );
        assert_eq!(split_reference("reg:5000/app:v2"), ("reg:5000/app", "v2"));
        assert_eq!(split_reference("app@sha256:abcd"), ("app@sha256:abcd", ""));
    }

    #[test]
    fn progress_errors_are_found() {
        let error = |text: &str| progress_error(&json::parse(text).unwrap());
        assert_eq!(error(r#"{"status":"Pulling"}"#), None);
        assert_eq!(
            error(r#"{"errorDetail":{"message":"denied"},"error":"denied"}"#),
            Some("denied".to_string())
        );
    }
}
