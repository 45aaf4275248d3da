//! `https://` for artifacts: a TLS client connection through the
//! BoringSSL that the build already links for gRPC, with the server's
//! certificate verified against the system's CAs (the file `SSL_CERT_FILE`
//! names, or Debian's `/etc/ssl/certs/ca-certificates.crt`) and its name
//! checked against the URL's host.

use std::ffi::{c_char, c_int, c_long, c_void, CStr, CString};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// Where the CAs are when `SSL_CERT_FILE` names none.
const DEFAULT_CA_FILE: &str = "/etc/ssl/certs/ca-certificates.crt";

const SSL_VERIFY_PEER: c_int = 1;
const SSL_ERROR_ZERO_RETURN: c_int = 6;
const SSL_ERROR_SYSCALL: c_int = 5;

// BoringSSL's `openssl/ssl.h`, `openssl/err.h`, `openssl/x509.h`.
extern "C" {
    fn TLS_client_method() -> *const c_void;
    fn SSL_CTX_new(method: *const c_void) -> *mut c_void;
    fn SSL_CTX_free(ctx: *mut c_void);
    fn SSL_CTX_load_verify_locations(
        ctx: *mut c_void,
        ca_file: *const c_char,
        ca_dir: *const c_char,
    ) -> c_int;
    fn SSL_CTX_set_verify(ctx: *mut c_void, mode: c_int, callback: *const c_void);
    fn SSL_new(ctx: *mut c_void) -> *mut c_void;
    fn SSL_free(ssl: *mut c_void);
    fn SSL_set_fd(ssl: *mut c_void, fd: c_int) -> c_int;
    fn SSL_set_tlsext_host_name(ssl: *mut c_void, name: *const c_char) -> c_int;
    fn SSL_set1_host(ssl: *mut c_void, host: *const c_char) -> c_int;
    fn SSL_get0_param(ssl: *mut c_void) -> *mut c_void;
    fn X509_VERIFY_PARAM_set1_ip_asc(param: *mut c_void, ip: *const c_char) -> c_int;
    fn SSL_connect(ssl: *mut c_void) -> c_int;
    fn SSL_read(ssl: *mut c_void, buf: *mut c_void, len: c_int) -> c_int;
    fn SSL_write(ssl: *mut c_void, buf: *const c_void, len: c_int) -> c_int;
    fn SSL_get_error(ssl: *const c_void, ret: c_int) -> c_int;
    fn SSL_get_verify_result(ssl: *const c_void) -> c_long;
    fn X509_verify_cert_error_string(err: c_long) -> *const c_char;
    fn ERR_get_error() -> u32;
    fn ERR_error_string_n(err: u32, buf: *mut c_char, len: usize);
}

/// The oldest error of this thread's BoringSSL queue, as text.
fn queued_error(what: &str) -> io::Error {
    // SAFETY: reads and pops this thread's error queue.
    let code = unsafe { ERR_get_error() };
    let mut buf = [0 as c_char; 256];
    // SAFETY: `buf` holds `len` bytes, and the function NUL-terminates.
    unsafe { ERR_error_string_n(code, buf.as_mut_ptr(), buf.len()) };
    // SAFETY: NUL-terminated above, within `buf`.
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
    io::Error::other(format!("TLS: {what}: {text}"))
}

/// The CA file servers' certificates are checked against.
pub fn ca_file() -> String {
    std::env::var("SSL_CERT_FILE")
        .ok()
        .filter(|f| !f.is_empty())
        .unwrap_or_else(|| DEFAULT_CA_FILE.to_string())
}

/// A TLS connection over a TCP stream.
pub struct TlsStream {
    ctx: *mut c_void,
    ssl: *mut c_void,
    /// Kept open for as long as `ssl` uses its fd.
    tcp: TcpStream,
}

// SAFETY: the connection is used by one thread at a time (it moves, it is
// never shared); BoringSSL's objects have no thread affinity.
unsafe impl Send for TlsStream {}

impl TlsStream {
    /// Makes the TLS handshake over `tcp` with the server `host`, and
    /// verifies its certificate (against the CAs of the file `ca`) and
    /// name.
    pub fn connect(tcp: TcpStream, host: &str, ca: &str) -> io::Result<TlsStream> {
        let ca_c = CString::new(ca).map_err(|_| io::Error::other("bad CA file name"))?;
        let host_c = CString::new(host).map_err(|_| io::Error::other("bad host name"))?;
        // SAFETY: the method is a static table; the context is freed in
        // `Drop` (or below, by the stream made from it).
        let ctx = unsafe { SSL_CTX_new(TLS_client_method()) };
        if ctx.is_null() {
            return Err(queued_error("SSL_CTX_new"));
        }
        let mut stream = TlsStream {
            ctx,
            ssl: std::ptr::null_mut(),
            tcp,
        };
        // SAFETY: `ctx` is live; `ca_c` is NUL-terminated; no callback.
        unsafe {
            if SSL_CTX_load_verify_locations(ctx, ca_c.as_ptr(), std::ptr::null()) != 1 {
                return Err(queued_error(&format!("cannot load the CAs of {ca}")));
            }
            SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, std::ptr::null());
        }
        // SAFETY: `ctx` is live; the SSL is freed in `Drop`.
        stream.ssl = unsafe { SSL_new(ctx) };
        if stream.ssl.is_null() {
            return Err(queued_error("SSL_new"));
        }
        let ssl = stream.ssl;
        let is_ip = host.parse::<std::net::IpAddr>().is_ok();
        // SAFETY: `ssl` is live; the fd stays open as long as `stream`;
        // the strings are NUL-terminated and copied by BoringSSL.
        unsafe {
            if SSL_set_fd(ssl, stream.tcp.as_raw_fd()) != 1 {
                return Err(queued_error("SSL_set_fd"));
            }
            let named = if is_ip {
                X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host_c.as_ptr())
            } else {
                SSL_set_tlsext_host_name(ssl, host_c.as_ptr());
                SSL_set1_host(ssl, host_c.as_ptr())
            };
            if named != 1 {
                return Err(queued_error("cannot set the host to verify"));
            }
        }
        // SAFETY: `ssl` is set up above; the call blocks on the socket.
        let ret = unsafe { SSL_connect(ssl) };
        if ret != 1 {
            // SAFETY: `ssl` is live.
            let verify = unsafe { SSL_get_verify_result(ssl) };
            if verify != 0 {
                // SAFETY: returns a static string.
                let why = unsafe { CStr::from_ptr(X509_verify_cert_error_string(verify)) };
                return Err(io::Error::other(format!(
                    "TLS: the server's certificate is not trusted: {} (CAs of {ca})",
                    why.to_string_lossy()
                )));
            }
            return Err(stream.failed("handshake", ret));
        }
        Ok(stream)
    }

    /// The error of a call that returned `ret`.
    fn failed(&self, what: &str, ret: c_int) -> io::Error {
        // SAFETY: `ssl` is live; `ret` is the call's return value.
        let code = unsafe { SSL_get_error(self.ssl, ret) };
        if code == SSL_ERROR_SYSCALL {
            let os = io::Error::last_os_error();
            if os.raw_os_error().unwrap_or(0) != 0 {
                return os;
            }
            return io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("TLS: {what}: the connection closed"),
            );
        }
        queued_error(what)
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let len = buf.len().min(c_int::MAX as usize) as c_int;
        // SAFETY: `buf` is live for `len` bytes; `ssl` is connected.
        let ret = unsafe { SSL_read(self.ssl, buf.as_mut_ptr().cast(), len) };
        if ret > 0 {
            return Ok(ret as usize);
        }
        // SAFETY: `ssl` is live.
        let code = unsafe { SSL_get_error(self.ssl, ret) };
        match code {
            SSL_ERROR_ZERO_RETURN => Ok(0),
            // A close without close_notify: the body's own length (or
            // chunking) tells a cut answer from a whole one.
            SSL_ERROR_SYSCALL if io::Error::last_os_error().raw_os_error().unwrap_or(0) == 0 => {
                Ok(0)
            }
            _ => Err(self.failed("read", ret)),
        }
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let len = buf.len().min(c_int::MAX as usize) as c_int;
        // SAFETY: `buf` is live for `len` bytes; `ssl` is connected.
        let ret = unsafe { SSL_write(self.ssl, buf.as_ptr().cast(), len) };
        if ret > 0 {
            return Ok(ret as usize);
        }
        Err(self.failed("write", ret))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for TlsStream {
    fn drop(&mut self) {
        // SAFETY: each pointer came from its `_new` and is freed once;
        // the SSL holds its own reference to the context.
        unsafe {
            if !self.ssl.is_null() {
                SSL_free(self.ssl);
            }
            SSL_CTX_free(self.ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::http::{get, HttpLimits};
    use super::super::unpack::tests::temp_dir;
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::process::{Child, Command, Stdio};
    use std::time::Duration;

    const SERVER: &str = "import functools, http.server, ssl, sys\nport, root, cert, key = sys.argv[1:5]\nhandler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=root)\nsrv = http.server.HTTPServer(('127.0.0.1', int(port)), handler)\nctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\nctx.load_cert_chain(cert, key)\nsrv.socket = ctx.wrap_socket(srv.socket, server_side=True)\nsrv.serve_forever()\n";

    fn openssl(dir: &Path, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    }

    /// A CA and a certificate of it for `localhost`, in `dir`.
    fn make_certs(dir: &Path) {
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=csi-agent test CA",
        ]);
        openssl(dir, &ca);
        let mut csr = vec!["req"];
        csr.extend(ec);
        csr.extend([
            "-keyout",
            "srv.key",
            "-out",
            "srv.csr",
            "-subj",
            "/CN=localhost",
        ]);
        openssl(dir, &csr);
        std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost\n").unwrap();
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                "srv.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "srv.crt",
                "-days",
                "2",
                "-extfile",
                "san.ext",
            ],
        );
    }

    struct Server(Child);

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn fetch(url: &str, ca: &Path) -> Result<Vec<u8>, String> {
        let limits = HttpLimits {
            deadline: Duration::from_secs(60),
            max_size: 1 << 20,
        };
        let mut out = Vec::new();
        get(
            url,
            &BTreeMap::new(),
            limits,
            &ca.to_string_lossy(),
            &mut out,
        )?;
        Ok(out)
    }

    #[test]
    fn https_is_fetched_with_the_server_s_certificate_and_name_verified() {
        let dir = temp_dir("tls");
        make_certs(&dir);
        std::fs::create_dir(dir.join("root")).unwrap();
        std::fs::write(dir.join("root/hello.txt"), "hello over tls\n").unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let _server = Server(
            Command::new("python3")
                .args(["-c", SERVER, &port.to_string()])
                .args([dir.join("root"), dir.join("srv.crt"), dir.join("srv.key")])
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let ca = dir.join("ca.crt");
        let body = fetch(&format!("https://localhost:{port}/hello.txt"), &ca).unwrap();
        assert_eq!(body, b"hello over tls\n");
        // Not by the CA the client trusts.
        let err = fetch(
            &format!("https://localhost:{port}/hello.txt"),
            &dir.join("srv.crt"),
        )
        .unwrap_err();
        assert!(err.contains("not trusted"), "{err}");
        // The certificate names localhost, not the address.
        let err = fetch(&format!("https://127.0.0.1:{port}/hello.txt"), &ca).unwrap_err();
        assert!(err.contains("not trusted"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
