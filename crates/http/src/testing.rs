//! A fake server for the tests of programs that speak HTTP through the
//! client codec (feature `testing`, for dev-dependencies only).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::thread;

/// A fake server on the other end of a socket pair: reads the request
/// head and body, sends them back on a channel (the head's lines without
/// their CRLF, each ended by `\n`, then the body), then writes `pieces`
/// one at a time, each after the test says so on `go` (or at once when
/// the test drops its sender).
pub fn serve(pieces: Vec<Vec<u8>>) -> (UnixStream, mpsc::Receiver<String>, mpsc::Sender<()>) {
    let (ours, theirs) = UnixStream::pair().expect("socketpair");
    let (request_tx, request_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    thread::spawn(move || {
        let mut theirs = theirs;
        let mut reader = BufReader::new(theirs.try_clone().expect("clone"));
        let mut request = String::new();
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("request line");
            let line = line.trim_end_matches(['\r', '\n']);
            if let Some(n) = line.strip_prefix("Content-Length: ") {
                length = n.parse().expect("Content-Length");
            }
            request.push_str(line);
            request.push('\n');
            if line.is_empty() {
                break;
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).expect("request body");
        request.push_str(&String::from_utf8(body).expect("UTF-8 body"));
        let _ = request_tx.send(request);
        for piece in pieces {
            let _ = go_rx.recv();
            theirs.write_all(&piece).expect("answer");
            theirs.flush().expect("flush");
        }
    });
    (ours, request_rx, go_tx)
}

/// `parts` as the pieces [`serve`] writes.
pub fn pieces(parts: &[&str]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.as_bytes().to_vec()).collect()
}
