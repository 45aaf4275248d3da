//! The server with real sockets and real clients.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::Instant;

use super::*;

/// The tests' [`System`]: poll(2) through libc, as a program's own
/// wrapper would make it; no peer is named.
struct TestSystem;

impl System for TestSystem {
    fn poll(
        &self,
        fds: &[(BorrowedFd<'_>, Want)],
        timeout: Option<Duration>,
    ) -> io::Result<Vec<bool>> {
        let mut poll_fds: Vec<libc::pollfd> = fds
            .iter()
            .map(|(fd, want)| libc::pollfd {
                fd: fd.as_raw_fd(),
                events: match want {
                    Want::Read => libc::POLLIN,
                    Want::Write => libc::POLLOUT,
                },
                revents: 0,
            })
            .collect();
        let timeout_ms = timeout.map_or(-1, |t| {
            libc::c_int::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(libc::c_int::MAX)
        });
        // SAFETY: `poll_fds` is valid for reading and writing
        // `poll_fds.len()` pollfd structures for the whole call.
        let ret = unsafe {
            libc::poll(
                poll_fds.as_mut_ptr(),
                poll_fds.len() as libc::nfds_t,
                timeout_ms,
            )
        };
        if ret == -1 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                return Ok(vec![false; fds.len()]);
            }
            return Err(err);
        }
        let trouble = libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
        Ok(poll_fds
            .iter()
            .map(|p| p.revents & (p.events | trouble) != 0)
            .collect())
    }

    fn peer_pid(&self, _: &UnixStream) -> Option<u32> {
        None
    }
}

/// A timing bound of `native`, or ten times it when the tests run under
/// a user-mode emulator (qemu-user running another architecture's build),
/// which the kernel tells apart: its `/proc/sys/kernel/arch` names the
/// host's architecture, not the one the tests were built for. Such a run
/// says so on stderr, and in the file `CSI_AGENT_EMULATION_NOTES` names.
fn emulation_bound(native: Duration, what: &str) -> Duration {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/arch").unwrap_or_default();
    let kernel = kernel.trim();
    if kernel.is_empty() || kernel == std::env::consts::ARCH {
        return native;
    }
    let bound = native * 10;
    let thread = std::thread::current();
    let note = format!(
        "{}: emulated on {kernel}: {what} is bounded by {bound:?}, not {native:?} (x10)",
        thread.name().unwrap_or("?")
    );
    eprintln!("{note}");
    if let Some(path) = std::env::var_os("CSI_AGENT_EMULATION_NOTES") {
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut file| writeln!(file, "{note}"));
    }
    bound
}

/// Long enough for any answer that is due at once on a busy machine.
const WAIT: Duration = Duration::from_secs(10);

/// A body bigger than the socket buffers of both ends of a loopback
/// connection, so that writing it waits for the client to read.
const BIG: usize = 32 << 20;

/// Set once a `/slow` request's handler runs.
static SLOW_STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Answers `<method> <path> <body>`; `/big` with [`BIG`] bytes, `/panic`
/// by panicking, `/slow` after 300 ms.
fn echo(request: &Request) -> Response {
    match request.path() {
        "/big" => Response::new(200, "application/octet-stream", vec![b'x'; BIG]),
        "/panic" => panic!("the handler panics, as a test asks"),
        "/slow" => {
            SLOW_STARTED.store(true, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(300));
            Response::text(200, "slow answer")
        }
        path => Response::text(
            200,
            &format!(
                "{} {path} {}",
                request.method,
                String::from_utf8_lossy(&request.body)
            ),
        ),
    }
}

fn start(limits: Limits) -> (Server, SocketAddr) {
    let server = Server::start(
        "httpd-test",
        &Listen::Tcp("127.0.0.1:0".parse().unwrap()),
        limits,
        TestSystem,
        echo,
    )
    .unwrap();
    let Listen::Tcp(addr) = *server.bound() else {
        unreachable!()
    };
    (server, addr)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(WAIT)).unwrap();
    conn
}

/// What the server sends until it closes (a reset ends it too).
fn answer_of(conn: &mut impl Read) -> String {
    let mut out = Vec::new();
    let _ = conn.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut conn = connect(addr);
    conn.write_all(request).unwrap();
    answer_of(&mut conn)
}

/// Waits until `done` holds, for [`WAIT`] at most.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_post_s_body_reaches_the_handler() {
    let (server, addr) = start(Limits::default());
    let answer = exchange(
        addr,
        b"POST /VolumeDriver.Mount HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\n\r\n{\"Name\":\"vol\"}\n",
    );
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(
        answer.contains("Content-Length: 40\r\nConnection: close\r\n"),
        "{answer}"
    );
    assert!(
        answer.ends_with("\r\n\r\nPOST /VolumeDriver.Mount {\"Name\":\"vol\"}\n"),
        "{answer}"
    );
    server.stop();
}

#[test]
fn a_body_sent_in_pieces_after_100_continue_is_read_whole() {
    let (server, addr) = start(Limits::default());
    let mut conn = connect(addr);
    conn.write_all(b"PUT /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 6\r\n\r\n")
        .unwrap();
    let mut continued = [0u8; 25];
    conn.read_exact(&mut continued).unwrap();
    assert_eq!(&continued, b"HTTP/1.1 100 Continue\r\n\r\n");
    conn.write_all(b"abc").unwrap();
    conn.write_all(b"def").unwrap();
    let answer = answer_of(&mut conn);
    assert!(answer.ends_with("\r\n\r\nPUT /x abcdef"), "{answer}");
    server.stop();
}

#[test]
fn a_head_past_max_head_is_431_and_a_body_past_max_body_413() {
    let (server, addr) = start(Limits::default());
    let long = format!(
        "GET /x HTTP/1.1\r\nX-Long: {}\r\n\r\n",
        "a".repeat(MAX_HEAD)
    );
    let answer = exchange(addr, long.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    assert!(answer.contains("max_head"), "{answer}");
    // Without an end of the head at all, the same.
    let answer = exchange(addr, "a".repeat(MAX_HEAD + 1).as_bytes());
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    let big = format!(
        "POST /x HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
        MAX_BODY + 1
    );
    let answer = exchange(addr, big.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    assert!(answer.contains("max_body"), "{answer}");
    // The longest allowed are served.
    let body = "b".repeat(MAX_BODY);
    let most = format!("POST /x HTTP/1.1\r\nContent-Length: {MAX_BODY}\r\n\r\n{body}");
    let answer = exchange(addr, most.as_bytes());
    assert!(
        answer.ends_with(&format!("POST /x {body}")),
        "{}",
        &answer[..100]
    );
    let chunked = exchange(
        addr,
        b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    );
    assert!(chunked.starts_with("HTTP/1.1 501 "), "{chunked}");
    let bad = exchange(
        addr,
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    );
    assert!(bad.starts_with("HTTP/1.1 400 "), "{bad}");
    server.stop();
}

#[test]
fn a_body_that_does_not_come_is_closed_at_the_request_deadline() {
    let (server, addr) = start(Limits::default());
    let mut conn = connect(addr);
    let started = Instant::now();
    conn.write_all(b"POST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
        .unwrap();
    let answer = answer_of(&mut conn);
    let open = started.elapsed();
    assert_eq!(answer, "");
    assert!(
        open >= REQUEST_TIMEOUT - Duration::from_millis(50) && open < WAIT,
        "closed after {open:?}"
    );
    server.stop();
}

#[test]
fn a_flood_past_max_connections_closes_the_oldest_idle_ones_and_serves_the_new() {
    let (server, addr) = start(Limits::default());
    let started = Instant::now();
    let mut idle: Vec<TcpStream> = (0..MAX_CONNECTIONS).map(|_| connect(addr)).collect();
    wait_until("every connection taken", || {
        server.open_connections() == MAX_CONNECTIONS
    });
    let extra = 8;
    let flood: Vec<TcpStream> = (0..extra).map(|_| connect(addr)).collect();
    for (n, conn) in idle.iter_mut().take(extra).enumerate() {
        let mut buf = [0u8; 1];
        assert_eq!(
            conn.read(&mut buf).unwrap(),
            0,
            "connection {n} is not closed"
        );
    }
    let evicted_by = started.elapsed();
    assert!(
        evicted_by < REQUEST_TIMEOUT,
        "closed by their deadline ({evicted_by:?}), not to make room"
    );
    // The next oldest is still open.
    idle[extra]
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let still = idle[extra].read(&mut [0u8; 1]).unwrap_err();
    assert_eq!(still.kind(), io::ErrorKind::WouldBlock, "{still}");
    assert_eq!(server.open_connections(), MAX_CONNECTIONS);
    for mut conn in flood {
        conn.write_all(b"GET /new HTTP/1.1\r\n\r\n").unwrap();
        let answer = answer_of(&mut conn);
        assert!(answer.ends_with("\r\n\r\nGET /new "), "{answer}");
    }
    // So is one more, which closes the next oldest.
    let answer = exchange(addr, b"GET /fresh HTTP/1.0\r\n\r\n");
    assert!(answer.ends_with("GET /fresh "), "{answer}");
    drop(idle);
    server.stop();
}

#[test]
fn when_every_connection_is_busy_a_new_one_is_refused_503() {
    let (release, held) = crossbeam_channel::unbounded::<()>();
    let held = Mutex::new(held);
    let limits = Limits {
        max_connections: 2,
        workers: 2,
        ..Limits::default()
    };
    let server = Server::start(
        "httpd-test",
        &Listen::Tcp("127.0.0.1:0".parse().unwrap()),
        limits,
        TestSystem,
        move |_| {
            let _ = held.lock().unwrap().recv();
            Response::text(200, "released")
        },
    )
    .unwrap();
    let Listen::Tcp(addr) = *server.bound() else {
        unreachable!()
    };
    let mut busy: Vec<TcpStream> = (0..2)
        .map(|_| {
            let mut conn = connect(addr);
            conn.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
            conn
        })
        .collect();
    wait_until("both requests taken", || server.open_connections() == 2);
    let refused = exchange(addr, b"GET / HTTP/1.1\r\n\r\n");
    assert!(refused.starts_with("HTTP/1.1 503 "), "{refused}");
    assert!(refused.contains("max_connections"), "{refused}");
    release.send(()).unwrap();
    release.send(()).unwrap();
    for conn in &mut busy {
        assert!(answer_of(conn).ends_with("released"));
    }
    server.stop();
}

/// `WORKERS + 1` connections asking for an answer too big for the socket
/// buffers, and never reading it.
fn stuck_clients(addr: SocketAddr) -> Vec<TcpStream> {
    (0..WORKERS + 1)
        .map(|_| {
            let mut conn = connect(addr);
            conn.write_all(b"GET /big HTTP/1.1\r\n\r\n").unwrap();
            conn
        })
        .collect()
}

#[test]
fn clients_that_never_read_a_large_answer_hold_no_worker() {
    // A write deadline past the test's own waits: a worker held by a
    // stuck client would hold it for the whole test.
    let limits = Limits {
        write_timeout: Duration::from_secs(600),
        ..Limits::default()
    };
    let (server, addr) = start(limits);
    let _stuck = stuck_clients(addr);
    // Every worker has rendered an answer nobody takes; another request is
    // answered all the same (exchange gives up after WAIT).
    let answer = exchange(addr, b"GET /small HTTP/1.1\r\n\r\n");
    assert!(answer.ends_with("GET /small "), "{answer}");
    server.stop();
}

#[test]
fn clients_that_never_read_a_large_answer_are_closed_at_the_write_deadline() {
    let (server, addr) = start(Limits::default());
    let sent = Instant::now();
    let mut stuck = stuck_clients(addr);
    // The deadline runs from each answer's first write, not from the
    // request: rendering five answers of 32 MiB takes seconds on a busy
    // machine. A peek sees the first bytes arrive and takes none, so the
    // clients still read nothing.
    for conn in &stuck {
        conn.peek(&mut [0; 1]).expect("the answer's first bytes");
    }
    let answered = Instant::now();
    wait_until("the stuck connections closed", || {
        server.open_connections() == 0
    });
    let closed = Instant::now();
    let late = emulation_bound(Duration::from_secs(3), "closing past the deadline");
    assert!(
        closed - sent >= WRITE_TIMEOUT && closed - answered < WRITE_TIMEOUT + late,
        "closed {:?} after the requests, {:?} after the last answer began",
        closed - sent,
        closed - answered
    );
    for conn in &mut stuck {
        let mut got = Vec::new();
        let _ = conn.read_to_end(&mut got);
        assert!(got.len() < BIG, "the whole answer arrived");
    }
    server.stop();
}

#[test]
fn a_handler_that_panics_is_answered_500_and_the_server_carries_on() {
    let (server, addr) = start(Limits::default());
    for _ in 0..WORKERS + 1 {
        let answer = exchange(addr, b"GET /panic HTTP/1.1\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 500 "), "{answer}");
    }
    let answer = exchange(addr, b"GET /after HTTP/1.1\r\n\r\n");
    assert!(answer.ends_with("GET /after "), "{answer}");
    server.stop();
}

#[test]
fn a_unix_socket_is_served_the_same() {
    let dir = std::env::temp_dir().join(format!("httpd-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("plugin.sock");
    let server = Server::start(
        "httpd-test",
        &Listen::Unix(path.clone()),
        Limits::default(),
        TestSystem,
        echo,
    )
    .unwrap();
    let _idle = UnixStream::connect(&path).unwrap();
    let mut conn = UnixStream::connect(&path).unwrap();
    conn.set_read_timeout(Some(WAIT)).unwrap();
    conn.write_all(b"POST /Plugin.Activate HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
        .unwrap();
    let answer = answer_of(&mut conn);
    assert!(
        answer.ends_with("\r\n\r\nPOST /Plugin.Activate {}"),
        "{answer}"
    );
    server.stop();
    assert!(!path.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stopping_closes_every_connection_and_joins_at_once() {
    let (server, addr) = start(Limits::default());
    let mut idle = connect(addr);
    let mut stuck = connect(addr);
    stuck.write_all(b"GET /big HTTP/1.1\r\n\r\n").unwrap();
    wait_until("both taken", || server.open_connections() == 2);
    let started = Instant::now();
    server.stop();
    // The answer being written to a client that does not read holds the
    // stop for STOP_DRAIN at most.
    assert!(
        started.elapsed() < STOP_DRAIN + Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(idle.read(&mut [0u8; 1]).unwrap(), 0);
    let _ = stuck.read_to_end(&mut Vec::new());
    assert!(TcpStream::connect(addr).is_err(), "still listening");
}

#[test]
fn a_handler_running_when_the_server_stops_still_has_its_answer_written() {
    let (server, addr) = start(Limits::default());
    let mut slow = connect(addr);
    slow.write_all(b"GET /slow HTTP/1.1\r\n\r\n").unwrap();
    wait_until("the handler runs", || {
        SLOW_STARTED.load(std::sync::atomic::Ordering::SeqCst)
    });
    server.stop();
    let answer = answer_of(&mut slow);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    assert!(answer.ends_with("slow answer"), "{answer:?}");
}
