//! A task's `artifact` blocks: fetched over HTTP into the task dir before
//! the task starts, checked against their checksum, unpacked by their
//! extension; a failed fetch is a "Failed Artifact Download" event and the
//! task's restart policy decides what follows. Each job serves its own
//! files: a prestart task writes them into the shared alloc dir and a
//! prestart sidecar serves that dir with Python's `http.server`, as
//! Nomad's own e2e job `chroot_dl_exec` does.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use super::Rig;
use crate::etcd::{require_openssl, Certs};
use crate::util::require_root;

/// Nomad's e2e job, unchanged: a prestart task packs a script into
/// `script.tar.gz`, a sidecar serves it, and the exec task fetches and
/// unpacks it into `local/` and runs it.
const CHROOT_DL_EXEC: &str = include_str!("../../fixtures/nomad/chroot_dl_exec.nomad");

/// Runs `job`, named `name`, to its end, which must be `complete`, and
/// returns the stdout of its task `t`.
#[track_caller]
fn run_complete(rig: &Rig, name: &str, job: &str) -> String {
    let allocs = rig.run_job(&format!("{name}.hcl"), job);
    let status = rig.wait_job(name, "the job to finish", |j| j.status == "dead");
    assert_eq!(status.allocs[0].status, "complete", "{status:#?}");
    rig.ok(&["alloc", "logs", &allocs[0], "t"])
}

/// [`served`]'s job run to completion: its task `t`'s stdout.
#[track_caller]
fn run_served(rig: &Rig, name: &str, artifact: &str, command: &str) -> String {
    run_complete(rig, name, &served(name, artifact, command))
}

/// A job that serves `hello.txt` ("hello\n"), and `hello.tar`,
/// `hello.zip` and `hello.txt.gz` holding it, on its port, whose task `t`
/// has `artifact` and runs `command`, tried twice at most.
fn served(name: &str, artifact: &str, command: &str) -> String {
    format!(
        r#"job "{name}" {{
  type = "batch"
  group "g" {{
    network {{
      mode = "host"
      port "http" {{}}
    }}
    restart {{
      attempts = 1
      interval = "1h"
      delay    = "1s"
      mode     = "fail"
    }}
    task "write" {{
      driver = "raw_exec"
      lifecycle {{
        hook = "prestart"
      }}
      template {{
        data        = "hello\n"
        destination = "${{NOMAD_ALLOC_DIR}}/hello.txt"
      }}
      config {{
        command = "/bin/sh"
        args    = ["-c", "cd ${{NOMAD_ALLOC_DIR}} && tar -cf hello.tar hello.txt && python3 -m zipfile -c hello.zip hello.txt && gzip -k hello.txt"]
      }}
    }}
    task "serve" {{
      driver = "raw_exec"
      lifecycle {{
        hook    = "prestart"
        sidecar = true
      }}
      config {{
        command = "/usr/bin/python3"
        args    = ["-m", "http.server", "${{NOMAD_PORT_http}}", "--bind", "127.0.0.1", "--directory", "${{NOMAD_ALLOC_DIR}}"]
      }}
    }}
    task "t" {{
      driver = "exec"
{artifact}
      config {{
        command = "/bin/sh"
        args    = ["-c", "{command}"]
      }}
    }}
  }}
}}
"#
    )
}

const HELLO_SHA256: &str = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";

#[test]
fn nomads_chroot_dl_exec_runs_the_script_it_downloaded() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let allocs = rig.run_job("chroot_dl_exec.nomad", CHROOT_DL_EXEC);
    let status = rig.wait_job("chroot_dl_exec", "the job to finish", |j| {
        j.status == "dead"
    });
    assert_eq!(status.allocs[0].status, "complete", "{status:#?}");
    let out = rig.ok(&["alloc", "logs", &allocs[0], "run-script"]);
    assert_eq!(out, "this output is from a script\n");
}

#[test]
fn validate_lists_the_artifact_and_job_run_checks_its_variables() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let out = rig.ok(&[
        "validate",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/nomad/chroot_dl_exec.nomad"
        ),
    ]);
    assert!(
        out.contains(
            "artifact http://localhost:${NOMAD_PORT_http}/script.tar.gz into \"local/\" (mode any)"
        ),
        "{out}"
    );
    let artifact = "      artifact {\n        source = \"http://127.0.0.1:${NOMAD_PORT_web}/hello.txt\"\n      }";
    let out = rig.run_job_output("unknown.hcl", &served("unknown", artifact, "true"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("artifact http://127.0.0.1:${NOMAD_PORT_web}/hello.txt: source:"),
        "{err}"
    );
    assert!(err.contains("NOMAD_PORT_web"), "{err}");
}

#[test]
fn a_plain_file_lands_where_mode_file_says_after_its_checksum() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let artifact = format!(
        "      artifact {{\n        source      = \"http://127.0.0.1:${{NOMAD_PORT_http}}/hello.txt\"\n        destination = \"local/in/greeting\"\n        mode        = \"file\"\n        options {{\n          checksum = \"sha256:{HELLO_SHA256}\"\n        }}\n      }}\n      artifact {{\n        source = \"http://127.0.0.1:${{NOMAD_PORT_http}}/hello.tar\"\n        destination = \"local/unpacked\"\n      }}"
    );
    let logs = run_served(
        &rig,
        "plain",
        &artifact,
        "cat local/in/greeting local/unpacked/hello.txt",
    );
    assert_eq!(logs, "hello\nhello\n");
}

#[test]
fn an_artifact_may_land_in_the_alloc_s_shared_dir_as_nomad_allows() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    // `../alloc/...`: the exec task reads it at /alloc, its view of the
    // shared dir.
    let artifact = "      artifact {\n        source      = \"http://127.0.0.1:${NOMAD_PORT_http}/hello.tar\"\n        destination = \"../alloc/shared\"\n      }";
    let logs = run_served(&rig, "shared", artifact, "cat /alloc/shared/hello.txt");
    assert_eq!(logs, "hello\n");
    // Above the alloc dir is still refused, at job run.
    let artifact = "      artifact {\n        source      = \"http://127.0.0.1:${NOMAD_PORT_http}/hello.tar\"\n        destination = \"../../up\"\n      }";
    let out = rig.run_job_output("up.hcl", &served("up", artifact, "true"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("\"../../up\" in artifact in task \"t\" leads outside the alloc dir"),
        "{err}"
    );
}

#[test]
fn a_zip_is_unpacked_and_a_gz_file_inflated_where_mode_file_says() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let artifact = "      artifact {\n        source      = \"http://127.0.0.1:${NOMAD_PORT_http}/hello.zip\"\n        destination = \"local/z\"\n      }\n      artifact {\n        source      = \"http://127.0.0.1:${NOMAD_PORT_http}/hello.txt.gz\"\n        destination = \"local/g/hello\"\n        mode        = \"file\"\n      }";
    let logs = run_served(
        &rig,
        "zipped",
        artifact,
        "cat local/z/hello.txt local/g/hello",
    );
    assert_eq!(logs, "hello\nhello\n");
}

#[test]
fn chown_gives_the_artifact_to_the_task_s_user() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let artifact = "      user = \"nobody\"\n      artifact {\n        source = \"http://127.0.0.1:${NOMAD_PORT_http}/hello.tar\"\n        destination = \"local/mine\"\n        chown = true\n      }\n      artifact {\n        source = \"http://127.0.0.1:${NOMAD_PORT_http}/hello.txt\"\n        destination = \"local/root\"\n      }";
    let logs = run_served(
        &rig,
        "owned",
        artifact,
        "stat -c %u local/mine local/mine/hello.txt local/root/hello.txt",
    );
    // nobody's uid for what chown gave, root's for the other.
    assert_eq!(logs, "65534\n65534\n0\n");
}

#[test]
fn a_raw_exec_task_s_task_dir_variable_names_its_own_dir() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let artifact = "      artifact {\n        source = \"http://127.0.0.1:${NOMAD_PORT_http}/hello.txt\"\n        destination = \"${NOMAD_TASK_DIR}/fetched\"\n      }";
    let job = served("raw", artifact, "cat ${NOMAD_TASK_DIR}/fetched/hello.txt").replace(
        "    task \"t\" {\n      driver = \"exec\"",
        "    task \"t\" {\n      driver = \"raw_exec\"",
    );
    assert!(
        job.contains("driver = \"raw_exec\"\n      artifact"),
        "{job}"
    );
    assert_eq!(run_complete(&rig, "raw", &job), "hello\n");
}

#[test]
fn a_checksum_mismatch_fails_the_download_and_the_restart_policy_follows() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let wrong = "0".repeat(64);
    let artifact = format!(
        "      artifact {{\n        source = \"http://127.0.0.1:${{NOMAD_PORT_http}}/hello.txt?checksum=sha256:{wrong}\"\n      }}"
    );
    rig.run_job("sum.hcl", &served("sum", &artifact, "cat local/hello.txt"));
    let status = rig.wait_job("sum", "the job to fail", |j| j.status == "dead");
    let alloc = &status.allocs[0];
    assert_eq!(alloc.status, "failed", "{alloc:#?}");
    let t = alloc.tasks.iter().find(|t| t.name == "t").unwrap();
    let kinds: Vec<&str> = t.events.iter().map(|e| e.kind.as_str()).collect();
    let downloads = kinds
        .iter()
        .filter(|k| **k == "Failed Artifact Download")
        .count();
    // One attempt and one restart, then the policy gives up.
    assert_eq!(downloads, 2, "{kinds:?}");
    assert!(kinds.contains(&"restarting"), "{kinds:?}");
    let failed = t
        .events
        .iter()
        .find(|e| e.kind == "Failed Artifact Download")
        .unwrap();
    assert!(
        failed.message.contains(&format!(
            "checksum mismatch: expected sha256:{wrong}, got sha256:{HELLO_SHA256}"
        )),
        "{failed:?}"
    );
    let last = t.events.last().unwrap();
    assert!(
        last.kind == "failed" && last.message.contains("restart policy exhausted"),
        "{last:?}"
    );
    // Nothing of the download is left in the task dir.
    assert!(!t.events.iter().any(|e| e.kind == "started"), "{kinds:?}");
}

#[test]
fn a_404_fails_naming_the_url_without_its_query() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let artifact = "      artifact {\n        source = \"http://127.0.0.1:${NOMAD_PORT_http}/missing.sh?token=s3cret\"\n      }";
    rig.run_job("gone.hcl", &served("gone", artifact, "true"));
    let status = rig.wait_job("gone", "the job to fail", |j| j.status == "dead");
    let alloc = &status.allocs[0];
    assert_eq!(alloc.status, "failed", "{alloc:#?}");
    let t = alloc.tasks.iter().find(|t| t.name == "t").unwrap();
    let failed = t
        .events
        .iter()
        .find(|e| e.kind == "Failed Artifact Download")
        .unwrap();
    assert!(
        failed
            .message
            .contains("/missing.sh?[REDACTED]: bad response code: 404"),
        "{failed:?}"
    );
    assert!(failed.message.contains("http://127.0.0.1:"), "{failed:?}");
    for e in &t.events {
        assert!(!e.message.contains("s3cret"), "{e:?}");
    }
    assert!(!alloc.message.contains("s3cret"), "{alloc:?}");
}

#[test]
fn the_agent_config_bounds_a_download() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare_with_config("client {\n  artifact {\n    http_max_size = 3\n  }\n}\n");
    let artifact = "      artifact {\n        source = \"http://127.0.0.1:${NOMAD_PORT_http}/hello.txt\"\n      }";
    rig.run_job("big.hcl", &served("big", artifact, "true"));
    let status = rig.wait_job("big", "the job to fail", |j| j.status == "dead");
    let t = status.allocs[0]
        .tasks
        .iter()
        .find(|t| t.name == "t")
        .unwrap();
    let failed = t
        .events
        .iter()
        .find(|e| e.kind == "Failed Artifact Download")
        .unwrap();
    assert!(
        failed
            .message
            .contains("larger than 3 bytes (http_max_size)"),
        "{failed:?}"
    );
}

/// Python's file server behind TLS: `port dir cert key`.
const TLS_SERVER: &str = "import functools, http.server, ssl, sys\nport, root, cert, key = sys.argv[1:5]\nhandler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=root)\nsrv = http.server.HTTPServer(('127.0.0.1', int(port)), handler)\nctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\nctx.load_cert_chain(cert, key)\nsrv.socket = ctx.wrap_socket(srv.socket, server_side=True)\nsrv.serve_forever()\n";

/// Runs openssl(1) in `dir`.
#[test]
fn https_is_fetched_from_a_server_the_agent_s_cas_vouch_for() {
    if !require_root() || !require_openssl() {
        return;
    }
    let mut rig = Rig::bare();
    let dir = rig.agent.dir.mkdir("tls");
    let certs = Certs::make(&dir, IpAddr::V4(Ipv4Addr::LOCALHOST));
    std::fs::write(dir.join("serve.py"), TLS_SERVER).unwrap();
    // The agent trusts the test's CA, as a host would trust its own.
    rig.agent
        .env
        .push(("SSL_CERT_FILE".into(), certs.ca.display().to_string()));
    assert_eq!(rig.agent.sigterm(), 0);
    rig.agent.restart();
    let plain_server = r#"args    = ["-m", "http.server", "${NOMAD_PORT_http}", "--bind", "127.0.0.1", "--directory", "${NOMAD_ALLOC_DIR}"]"#;
    let tls_server = format!(
        r#"args    = ["{}", "${{NOMAD_PORT_http}}", "${{NOMAD_ALLOC_DIR}}", "{}", "{}"]"#,
        dir.join("serve.py").display(),
        certs.server_cert.display(),
        certs.server_key.display()
    );
    let artifact = "      artifact {\n        source = \"https://localhost:${NOMAD_PORT_http}/hello.tar\"\n        destination = \"local/tls\"\n      }";
    let job = served("tls", artifact, "cat local/tls/hello.txt");
    assert!(job.contains(plain_server));
    let job = job.replace(plain_server, &tls_server);
    assert_eq!(run_complete(&rig, "tls", &job), "hello\n");
}

/// Four allocs whose artifact server accepts and never answers, with no
/// restart; their group's restart policy fails them once it closes.
const STALLED: &str = r#"job "stalled" {
  group "g" {
    count = 4
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      artifact {
        source = "http://127.0.0.1:PORT/never.txt"
      }
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
    }
  }
}
"#;

#[test]
fn fetches_from_a_server_that_never_answers_hold_no_thread_other_starts_need() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    // As many stalled fetches as the agent has threads for starts.
    let accepting = thread::spawn(move || {
        (0..4)
            .map(|_| server.accept().unwrap().0)
            .collect::<Vec<TcpStream>>()
    });
    rig.run_job("stalled.hcl", &STALLED.replace("PORT", &port.to_string()));
    let held = accepting.join().unwrap();
    // Every fetch is under way and stalled: a job without artifacts
    // still starts.
    let free = rig.run_job("free.hcl", &super::sleepers("free", 1, 100, 64));
    rig.wait_running("free", &free[0]);
    let stalled = rig.job("stalled");
    for alloc in &stalled.allocs {
        assert_eq!(alloc.tasks[0].state, "starting", "{stalled:#?}");
    }
    // The server goes: the fetches fail, and so do their allocs.
    drop(held);
    rig.wait_job("stalled", "the stalled allocs to fail", |j| {
        j.allocs.iter().all(|a| a.status == "failed")
    });
    rig.stop("free");
}

/// A batch job whose task `t` fetches `source` (with `headers`, an HCL
/// map's body) into `local/`, without restarts, and runs `command`.
fn fetching(name: &str, source: &str, headers: &str, command: &str) -> String {
    format!(
        r#"job "{name}" {{
  type = "batch"
  group "g" {{
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "raw_exec"
      artifact {{
        source = "{source}"
        headers {{
{headers}
        }}
      }}
      config {{
        command = "/bin/sh"
        args    = ["-c", "{command}"]
      }}
    }}
  }}
}}
"#
    )
}

/// Accepts one connection on `listener`, reads the request head and
/// answers `answer`; the head.
fn answer_once(listener: TcpListener, answer: String) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut head = String::new();
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap() > 2 {
            head.push_str(&line);
            line.clear();
        }
        stream.write_all(answer.as_bytes()).unwrap();
        head
    })
}

#[test]
fn a_redirect_to_another_host_gets_the_headers_but_not_the_credentials() {
    if !require_root() {
        return;
    }
    let rig = Rig::bare();
    // Two hosts on the loopback interface: 127.0.0.1 and 127.0.0.2.
    let first = TcpListener::bind("127.0.0.1:0").unwrap();
    let first_port = first.local_addr().unwrap().port();
    let other = TcpListener::bind("127.0.0.2:0").unwrap();
    let other_port = other.local_addr().unwrap().port();
    let first = answer_once(
        first,
        format!("HTTP/1.1 302 Found\r\nLocation: http://127.0.0.2:{other_port}/hello.txt\r\nContent-Length: 0\r\n\r\n"),
    );
    let other = answer_once(
        other,
        "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nhello\n".to_string(),
    );
    let headers = "          Authorization = \"Bearer s3cret\"\n          Cookie = \"session=s3cret\"\n          X-Trace = \"t-1\"";
    let job = fetching(
        "scoped",
        &format!("http://127.0.0.1:{first_port}/hello.txt"),
        headers,
        "cat local/hello.txt",
    );
    assert_eq!(run_complete(&rig, "scoped", &job), "hello\n");
    let first = first.join().unwrap();
    let other = other.join().unwrap();
    assert!(
        first.contains("\r\nAuthorization: Bearer s3cret\r\n"),
        "{first}"
    );
    assert!(first.contains("\r\nCookie: session=s3cret\r\n"), "{first}");
    assert!(!other.contains("s3cret"), "{other}");
    assert!(other.contains("\r\nX-Trace: t-1\r\n"), "{other}");
}

#[test]
fn the_deadline_cuts_off_a_server_that_trickles() {
    if !require_root() {
        return;
    }
    let rig =
        Rig::bare_with_config("client {\n  artifact {\n    http_read_timeout = \"1s\"\n  }\n}\n");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // A head, then a byte of the body every 100 ms, until the client goes.
    let server = thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut sent = stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
            .is_ok();
        while sent {
            thread::sleep(Duration::from_millis(100));
            sent = stream.write_all(b"x").is_ok();
        }
    });
    let job = fetching(
        "trickle",
        &format!("http://127.0.0.1:{port}/slow.txt"),
        "",
        "true",
    );
    let started = Instant::now();
    rig.run_job("trickle.hcl", &job);
    let status = rig.wait_job("trickle", "the job to fail", |j| j.status == "dead");
    let took = started.elapsed();
    let t = &status.allocs[0].tasks[0];
    let failed = t
        .events
        .iter()
        .find(|e| e.kind == "Failed Artifact Download")
        .unwrap();
    assert!(
        failed
            .message
            .contains("the fetch took longer than 1s (http_read_timeout)"),
        "{failed:?}"
    );
    // One second of fetching, and the agent's own pace around it.
    assert!(took < Duration::from_secs(20), "{took:?}");
    server.join().unwrap();
}
