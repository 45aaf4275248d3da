//! What the agent and the prepare helper say to each other: the helper's
//! [`Input`] and its [`Answer`]s, and their bytes, in the start helper's
//! encoding ([`crate::task::exec::encoding`]): the input is one message
//! behind [`INPUT_MAGIC`]; the answers are messages behind
//! [`ANSWER_MAGIC`], one per phase begun and the last with the outcome.
//! Strings are UTF-8 (a path, its bytes); a map is its length and its
//! keys and values in order; an optional number is a flag and the number.
//! Only what the helper uses of a template travels (not its change mode
//! or splay, which are the agent's).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::time::Duration;

use crate::nomad_template::NomadService;
use crate::spec::{Artifact, ArtifactMode, ChangeMode, TaskTemplate};
use crate::task::artifact::{ArtifactLimits, HttpLimits, UnpackLimits};
use crate::task::exec::encoding::{frame, unframe, Corrupt, Reader, Writer};
use crate::task::user::User;

/// What the helper is asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Work {
    /// A start's artifacts, then its templates.
    Start,
    /// A running task's templates again, writing those whose text changed.
    Rerender,
}

/// What the helper needs, owned.
pub(super) struct Input {
    pub work: Work,
    /// The agent's pid: a helper whose parent is not it has lost its
    /// agent and does nothing.
    pub agent: u32,
    pub task_dir: PathBuf,
    /// The task's user, given what `chown = true` artifacts place.
    pub user: Option<User>,
    pub limits: ArtifactLimits,
    pub artifacts: Vec<Artifact>,
    /// The environment before the templates render.
    pub env: BTreeMap<String, String>,
    pub node: BTreeMap<String, String>,
    /// The service registry's snapshot that `nomadService` reads.
    pub services: Vec<NomadService>,
    pub templates: Vec<TaskTemplate>,
}

/// Where the helper is in its work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Before any work: reading its input, bounding itself.
    Setup,
    Artifacts,
    Templates,
}

impl Phase {
    pub(super) fn describe(self) -> &'static str {
        match self {
            Phase::Setup => "task preparation",
            Phase::Artifacts => "artifact fetch",
            Phase::Templates => "template render",
        }
    }
}

/// One message of the helper's.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Answer {
    /// It begins a phase.
    Phase(Phase),
    /// A start's work is done: the environment with the `env = true`
    /// templates' variables over it, and each template's size.
    Started {
        env: BTreeMap<String, String>,
        sizes: Vec<u64>,
    },
    /// A re-render is done: the indexes of the templates whose text
    /// changed, which were written.
    Rerendered { changed: Vec<u32> },
    /// The work failed in `phase`, for the reason the message says.
    Failed { phase: Phase, message: String },
}

impl Answer {
    /// What kind of answer it is, without what it holds (an environment
    /// may hold secrets).
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Answer::Phase(_) => "a phase",
            Answer::Started { .. } => "a start's outcome",
            Answer::Rerendered { .. } => "a re-render's outcome",
            Answer::Failed { .. } => "a failure",
        }
    }
}

pub(super) const INPUT_MAGIC: &[u8; 4] = b"CSIp";
pub(super) const ANSWER_MAGIC: &[u8; 4] = b"CSIa";

pub(super) fn encode_input(input: &Input) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    w.u8(match input.work {
        Work::Start => 0,
        Work::Rerender => 1,
    });
    w.u32(input.agent);
    w.bytes(input.task_dir.as_os_str().as_bytes());
    w.flag(input.user.is_some());
    if let Some(user) = input.user {
        w.u32(user.uid);
        w.u32(user.gid);
    }
    let ArtifactLimits {
        http: HttpLimits { deadline, max_size },
        unpack: UnpackLimits { file_count, size },
    } = input.limits;
    duration(&mut w, deadline);
    w.u64(max_size);
    w.u64(file_count);
    w.u64(size);
    w.u32(input.artifacts.len());
    for a in &input.artifacts {
        string(&mut w, &a.source);
        string(&mut w, &a.destination);
        w.u8(match a.mode {
            ArtifactMode::Any => 0,
            ArtifactMode::File => 1,
            ArtifactMode::Dir => 2,
        });
        map(&mut w, &a.options);
        map(&mut w, &a.headers);
        w.flag(a.chown);
    }
    map(&mut w, &input.env);
    map(&mut w, &input.node);
    w.u32(input.services.len());
    for s in &input.services {
        for text in [
            &s.id,
            &s.name,
            &s.namespace,
            &s.node_id,
            &s.datacenter,
            &s.address,
        ] {
            string(&mut w, text);
        }
        w.u32(u32::from(s.port));
        w.u32(s.tags.len());
        for tag in &s.tags {
            string(&mut w, tag);
        }
        string(&mut w, &s.job_id);
        string(&mut w, &s.alloc_id);
    }
    w.u32(input.templates.len());
    for t in &input.templates {
        opt_string(&mut w, t.data.as_deref());
        opt_string(&mut w, t.source.as_deref());
        string(&mut w, &t.destination);
        w.u32(t.perms);
        opt_u32(&mut w, t.uid);
        opt_u32(&mut w, t.gid);
        string(&mut w, &t.left_delimiter);
        string(&mut w, &t.right_delimiter);
        w.flag(t.env);
        w.flag(t.error_on_missing_key);
    }
    frame(INPUT_MAGIC, &w.0)
}

pub(super) fn decode_input(bytes: &[u8]) -> Result<Input, Corrupt> {
    let mut r = Reader(unframe(INPUT_MAGIC, bytes, "task preparation")?);
    let work = match r.u8("the work")? {
        0 => Work::Start,
        1 => Work::Rerender,
        other => return Err(Corrupt(format!("unknown work {other}"))),
    };
    let agent = r.u32("the agent's pid")?;
    let task_dir = PathBuf::from(OsString::from_vec(r.bytes("the task dir")?.to_vec()));
    let user = if r.flag("the user flag")? {
        Some(User {
            uid: r.u32("a uid")?,
            gid: r.u32("a gid")?,
        })
    } else {
        None
    };
    let limits = ArtifactLimits {
        http: HttpLimits {
            deadline: read_duration(&mut r, "http_read_timeout")?,
            max_size: r.u64("http_max_size")?,
        },
        unpack: UnpackLimits {
            file_count: r.u64("decompression_file_count_limit")?,
            size: r.u64("decompression_size_limit")?,
        },
    };
    let count = r.len("the artifact count")?;
    let mut artifacts = Vec::with_capacity(count);
    for _ in 0..count {
        artifacts.push(Artifact {
            source: read_string(&mut r, "an artifact's source")?,
            destination: read_string(&mut r, "an artifact's destination")?,
            mode: match r.u8("an artifact's mode")? {
                0 => ArtifactMode::Any,
                1 => ArtifactMode::File,
                2 => ArtifactMode::Dir,
                other => return Err(Corrupt(format!("unknown artifact mode {other}"))),
            },
            options: read_map(&mut r, "an artifact's options")?,
            headers: read_map(&mut r, "an artifact's headers")?,
            chown: r.flag("an artifact's chown")?,
        });
    }
    let env = read_map(&mut r, "the environment")?;
    let node = read_map(&mut r, "the node's attributes")?;
    let count = r.len("the service count")?;
    let mut services = Vec::with_capacity(count);
    for _ in 0..count {
        let mut text = || read_string(&mut r, "a service's field");
        let (id, name, namespace, node_id, datacenter, address) =
            (text()?, text()?, text()?, text()?, text()?, text()?);
        let port = u16::try_from(r.u32("a service's port")?)
            .map_err(|_| Corrupt("a service's port past 65535".into()))?;
        let tags = (0..r.len("a service's tag count")?)
            .map(|_| read_string(&mut r, "a service's tag"))
            .collect::<Result<_, _>>()?;
        services.push(NomadService {
            id,
            name,
            namespace,
            node_id,
            datacenter,
            address,
            port,
            tags,
            job_id: read_string(&mut r, "a service's job")?,
            alloc_id: read_string(&mut r, "a service's alloc")?,
        });
    }
    let count = r.len("the template count")?;
    let mut templates = Vec::with_capacity(count);
    for _ in 0..count {
        templates.push(TaskTemplate {
            data: read_opt_string(&mut r, "a template's data")?,
            source: read_opt_string(&mut r, "a template's source")?,
            destination: read_string(&mut r, "a template's destination")?,
            perms: r.u32("a template's perms")?,
            uid: read_opt_u32(&mut r, "a template's uid")?,
            gid: read_opt_u32(&mut r, "a template's gid")?,
            left_delimiter: read_string(&mut r, "a template's left delimiter")?,
            right_delimiter: read_string(&mut r, "a template's right delimiter")?,
            env: r.flag("a template's env flag")?,
            error_on_missing_key: r.flag("a template's error_on_missing_key")?,
            // The agent's to take; the helper only renders.
            change_mode: ChangeMode::Noop,
            splay: Duration::ZERO,
            once: false,
            wait: None,
            ignored: Vec::new(),
        });
    }
    if !r.0.is_empty() {
        return Err(Corrupt(format!(
            "{} bytes follow the last template",
            r.0.len()
        )));
    }
    Ok(Input {
        work,
        agent,
        task_dir,
        user,
        limits,
        artifacts,
        env,
        node,
        services,
        templates,
    })
}

pub(super) fn encode_answer(answer: &Answer) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    match answer {
        Answer::Phase(phase) => {
            w.u8(0);
            w.u8(phase_tag(*phase));
        }
        Answer::Started { env, sizes } => {
            w.u8(1);
            map(&mut w, env);
            w.u32(sizes.len());
            for size in sizes {
                w.u64(*size);
            }
        }
        Answer::Rerendered { changed } => {
            w.u8(2);
            w.u32(changed.len());
            for i in changed {
                w.u32(*i);
            }
        }
        Answer::Failed { phase, message } => {
            w.u8(3);
            w.u8(phase_tag(*phase));
            string(&mut w, message);
        }
    }
    frame(ANSWER_MAGIC, &w.0)
}

/// One answer, `bytes` being its whole message.
pub(super) fn decode_answer(bytes: &[u8]) -> Result<Answer, Corrupt> {
    let mut r = Reader(unframe(ANSWER_MAGIC, bytes, "answer")?);
    let answer = match r.u8("the answer's kind")? {
        0 => Answer::Phase(read_phase(&mut r)?),
        1 => {
            let env = read_map(&mut r, "the rendered environment")?;
            let n = r.len("the template count")?;
            let mut sizes = Vec::with_capacity(n);
            for _ in 0..n {
                sizes.push(r.u64("a template's size")?);
            }
            Answer::Started { env, sizes }
        }
        2 => {
            let n = r.len("the changed template count")?;
            let mut changed = Vec::with_capacity(n);
            for _ in 0..n {
                changed.push(r.u32("a changed template")?);
            }
            Answer::Rerendered { changed }
        }
        3 => Answer::Failed {
            phase: read_phase(&mut r)?,
            message: read_string(&mut r, "the failure")?,
        },
        other => return Err(Corrupt(format!("unknown answer kind {other}"))),
    };
    if !r.0.is_empty() {
        return Err(Corrupt(format!("{} bytes follow the answer", r.0.len())));
    }
    Ok(answer)
}

fn phase_tag(phase: Phase) -> u8 {
    match phase {
        Phase::Setup => 0,
        Phase::Artifacts => 1,
        Phase::Templates => 2,
    }
}

fn read_phase(r: &mut Reader<'_>) -> Result<Phase, Corrupt> {
    match r.u8("a phase")? {
        0 => Ok(Phase::Setup),
        1 => Ok(Phase::Artifacts),
        2 => Ok(Phase::Templates),
        other => Err(Corrupt(format!("unknown phase {other}"))),
    }
}

fn string(w: &mut Writer, s: &str) {
    w.bytes(s.as_bytes());
}

fn opt_string(w: &mut Writer, s: Option<&str>) {
    w.flag(s.is_some());
    if let Some(s) = s {
        string(w, s);
    }
}

fn opt_u32(w: &mut Writer, n: Option<u32>) {
    w.flag(n.is_some());
    if let Some(n) = n {
        w.u32(n);
    }
}

fn map(w: &mut Writer, map: &BTreeMap<String, String>) {
    w.u32(map.len());
    for (key, value) in map {
        string(w, key);
        string(w, value);
    }
}

fn duration(w: &mut Writer, d: Duration) {
    w.u64(d.as_secs());
    w.u32(d.subsec_nanos());
}

fn read_string(r: &mut Reader<'_>, what: &str) -> Result<String, Corrupt> {
    String::from_utf8(r.bytes(what)?.to_vec()).map_err(|_| Corrupt(format!("{what} is not UTF-8")))
}

fn read_opt_string(r: &mut Reader<'_>, what: &str) -> Result<Option<String>, Corrupt> {
    if r.flag(what)? {
        read_string(r, what).map(Some)
    } else {
        Ok(None)
    }
}

fn read_opt_u32(r: &mut Reader<'_>, what: &str) -> Result<Option<u32>, Corrupt> {
    if r.flag(what)? {
        r.u32(what).map(Some)
    } else {
        Ok(None)
    }
}

fn read_map(r: &mut Reader<'_>, what: &str) -> Result<BTreeMap<String, String>, Corrupt> {
    let n = r.len(what)?;
    let mut map = BTreeMap::new();
    for _ in 0..n {
        let key = read_string(r, what)?;
        let value = read_string(r, what)?;
        map.insert(key, value);
    }
    Ok(map)
}

fn read_duration(r: &mut Reader<'_>, what: &str) -> Result<Duration, Corrupt> {
    let secs = r.u64(what)?;
    let nanos = r.u32(what)?;
    if nanos >= 1_000_000_000 {
        return Err(Corrupt(format!("{what} has {nanos} nanoseconds")));
    }
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> Input {
        let mut artifact_options = BTreeMap::new();
        artifact_options.insert("checksum".to_string(), "sha256:00".to_string());
        let template = |data: Option<&str>, source: Option<&str>| TaskTemplate {
            data: data.map(str::to_string),
            source: source.map(str::to_string),
            destination: "local/a".into(),
            perms: 0o640,
            uid: Some(7),
            gid: None,
            left_delimiter: "[[".into(),
            right_delimiter: "]]".into(),
            env: true,
            error_on_missing_key: true,
            change_mode: ChangeMode::Noop,
            splay: Duration::ZERO,
            once: false,
            wait: None,
            ignored: Vec::new(),
        };
        Input {
            work: Work::Rerender,
            agent: 4242,
            task_dir: PathBuf::from("/data/alloc/0a1b2c3d/t"),
            user: Some(User {
                uid: 65534,
                gid: 65533,
            }),
            limits: ArtifactLimits::default(),
            artifacts: vec![Artifact {
                source: "https://example.com/x.tar.gz".into(),
                destination: "local/".into(),
                mode: ArtifactMode::Dir,
                options: artifact_options,
                headers: BTreeMap::from([("Authorization".into(), "Bearer s".into())]),
                chown: true,
            }],
            env: BTreeMap::from([("A".into(), "1".into()), ("EMPTY".into(), String::new())]),
            node: BTreeMap::from([("node.unique.name".into(), "n".into())]),
            services: vec![NomadService {
                id: "_nomad-task-a-group-g-nfs-nfs".into(),
                name: "nfs".into(),
                address: "10.0.0.7".into(),
                port: 2049,
                tags: vec!["a".into(), "b".into()],
                ..NomadService::default()
            }],
            templates: vec![
                template(Some("{{ env \"A\" }}\n\0"), None),
                template(None, Some("local/in.tpl")),
            ],
        }
    }

    #[test]
    fn an_input_survives_the_round_trip() {
        let input = input();
        let back = decode_input(&encode_input(&input)).unwrap();
        assert_eq!(back.work, input.work);
        assert_eq!(back.agent, input.agent);
        assert_eq!(back.task_dir, input.task_dir);
        assert_eq!(back.user, input.user);
        assert_eq!(back.limits.http.deadline, input.limits.http.deadline);
        assert_eq!(back.limits.unpack.size, input.limits.unpack.size);
        assert_eq!(back.artifacts, input.artifacts);
        assert_eq!(back.env, input.env);
        assert_eq!(back.node, input.node);
        assert_eq!(back.services, input.services);
        assert_eq!(back.templates, input.templates);
    }

    #[test]
    fn every_truncation_of_an_input_or_answer_is_refused() {
        let bytes = encode_input(&input());
        for len in 0..bytes.len() {
            assert!(decode_input(&bytes[..len]).is_err(), "{len} bytes");
        }
        let answers = [
            Answer::Phase(Phase::Templates),
            Answer::Started {
                env: input().env,
                sizes: vec![3, 0],
            },
            Answer::Rerendered { changed: vec![1] },
            Answer::Failed {
                phase: Phase::Artifacts,
                message: "artifact x: bad response code: 404".into(),
            },
        ];
        for answer in answers {
            let bytes = encode_answer(&answer);
            assert_eq!(decode_answer(&bytes).unwrap(), answer);
            for len in 0..bytes.len() {
                assert!(decode_answer(&bytes[..len]).is_err(), "{answer:?}: {len}");
            }
        }
        let mut bad = encode_answer(&Answer::Phase(Phase::Setup));
        let last = bad.len() - 1;
        bad[last] = 9;
        assert_eq!(
            decode_answer(&bad).unwrap_err().to_string(),
            "unknown phase 9"
        );
    }
}
