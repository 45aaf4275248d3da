//! `https://` for artifacts: a TLS client connection through the TLS
//! library that the build already links for gRPC (BoringSSL, or the
//! system's OpenSSL in the development build; by way of the C shim, `ffi`), with the server's certificate verified against the system's CAs
//! (the file `SSL_CERT_FILE` names, or Debian's
//! `/etc/ssl/certs/ca-certificates.crt`) and its name checked against the
//! URL's host.

use std::ffi::CString;
use std::io::{self, Read, Write};
use std::net::TcpStream;

use super::ffi::{self, Tls, CSI_TLS_ERROR_SYSCALL, CSI_TLS_ERROR_ZERO_RETURN};

/// Where the CAs are when `SSL_CERT_FILE` names none.
const DEFAULT_CA_FILE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The oldest error of this thread's TLS library queue, as text.
fn queued_error(what: &str) -> io::Error {
    io::Error::other(format!("TLS: {what}: {}", ffi::tls_pop_error()))
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
    /// The session, which owns the TCP stream.
    tls: Tls,
}

impl TlsStream {
    /// Makes the TLS handshake over `tcp` with the server `host`, and
    /// verifies its certificate (against the CAs of the file `ca`) and
    /// name.
    pub fn connect(tcp: TcpStream, host: &str, ca: &str) -> io::Result<TlsStream> {
        let ca_c = CString::new(ca).map_err(|_| io::Error::other("bad CA file name"))?;
        let host_c = CString::new(host).map_err(|_| io::Error::other("bad host name"))?;
        let Some(mut tls) = Tls::new() else {
            return Err(queued_error("SSL_CTX_new"));
        };
        if !tls.trust_cas(&ca_c) {
            return Err(queued_error(&format!("cannot load the CAs of {ca}")));
        }
        if !tls.new_session() {
            return Err(queued_error("SSL_new"));
        }
        if !tls.set_socket(tcp) {
            return Err(queued_error("SSL_set_fd"));
        }
        let named = if host.parse::<std::net::IpAddr>().is_ok() {
            tls.expect_ip(&host_c)
        } else {
            tls.expect_host(&host_c)
        };
        if !named {
            return Err(queued_error("cannot set the host to verify"));
        }
        let mut stream = TlsStream { tls };
        let ret = stream.tls.handshake();
        if ret != 1 {
            if let Some(why) = stream.tls.verify_failure() {
                return Err(io::Error::other(format!(
                    "TLS: the server's certificate is not trusted: {why} (CAs of {ca})"
                )));
            }
            return Err(stream.failed("handshake", ret));
        }
        Ok(stream)
    }

    /// The error of a call that returned `ret`.
    fn failed(&self, what: &str, ret: i32) -> io::Error {
        if self.tls.error_kind(ret) == CSI_TLS_ERROR_SYSCALL {
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
        let ret = self.tls.read(buf);
        if ret > 0 {
            return Ok(ret as usize);
        }
        match self.tls.error_kind(ret) {
            CSI_TLS_ERROR_ZERO_RETURN => Ok(0),
            // A close without close_notify: the body's own length (or
            // chunking) tells a cut answer from a whole one.
            CSI_TLS_ERROR_SYSCALL
                if io::Error::last_os_error().raw_os_error().unwrap_or(0) == 0 =>
            {
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
        let ret = self.tls.write(buf);
        if ret > 0 {
            return Ok(ret as usize);
        }
        Err(self.failed("write", ret))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
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
