//! The shared token and the handshake that proves each end holds it without sending it:
//! each end sends a random challenge and answers the other's with an HMAC-SHA256 keyed by
//! the token. The receiver proves itself too, so a push never sends a scan to an impostor.

use super::retry::Passing;
use super::wire::{self, Message};
use crate::options::ArgError;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

type HmacSha256 = Hmac<Sha256>;

/// The token from the first line of the `token_file` option (surrounding spaces removed),
/// as push and receive both read it. A token file others can read is refused, as ssh refuses
/// a private key others can read.
pub fn read_token(path: Option<&Path>) -> Result<Vec<u8>, ArgError> {
    let why = |w: String| ArgError::new("token_file", w);
    let path =
        path.ok_or_else(|| why("give the file holding the shared token (its first line)".into()))?;
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| why(format!("cannot read {shown}: {e}")))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(why(format!(
            "{shown} can be read by other users (mode {:o}): run `chmod 600 {shown}`",
            meta.permissions().mode() & 0o777
        )));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| why(format!("cannot read {shown}: {e}")))?;
    let token = text.lines().next().unwrap_or("").trim();
    if token.len() < 16 {
        return Err(why(format!(
            "the first line of {shown} holds {} characters; a token needs at least 16 \
             (e.g. `head -c 32 /dev/urandom | base64 > {shown}` on one end, copied to the other)",
            token.len()
        )));
    }
    Ok(token.as_bytes().to_vec())
}

fn nonce() -> String {
    let mut b = [0u8; 32];
    // The kernel's random source (read as a file: getrandom's glibc wrapper is newer than the
    // glibc 2.17 the wheel runs on).
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .expect("/dev/urandom cannot be read");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn mac(token: &[u8], role: &str, mine: &str, theirs: &str) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(token).expect("HMAC takes any key length");
    m.update(b"vdifrec-transfer-1\0");
    m.update(role.as_bytes());
    m.update(b"\0");
    m.update(mine.as_bytes());
    m.update(b"\0");
    m.update(theirs.as_bytes());
    m
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn verify(m: HmacSha256, given: &str) -> bool {
    // Constant time: the comparison does not tell an attacker how much of a guess was right.
    unhex(given).is_some_and(|g| m.verify_slice(&g).is_ok())
}

/// Why the receiver's side of the handshake did not end proven: None, the peer went away
/// before proving anything (a push that was stopped while it connected); Some(why), it failed
/// to prove the token, or did not speak the protocol.
pub type Refused = Option<String>;

fn receiver_io(e: std::io::Error) -> Refused {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof
        | std::io::ErrorKind::ConnectionReset
        | std::io::ErrorKind::BrokenPipe => None,
        _ => Some(format!("handshake: {e}")),
    }
}

/// The receiver's side, first half: its challenge, sent. The sender's answer is then awaited
/// (the receiver gives a silent connection's place to a newer one meanwhile, see
/// `handshakes`) and checked by `check_answer`.
pub fn challenge(stream: &mut TcpStream) -> Result<String, Refused> {
    let ours = nonce();
    wire::send(
        stream,
        &Message::Hello {
            version: wire::VERSION,
            nonce: ours.clone(),
        },
    )
    .map_err(receiver_io)?;
    Ok(ours)
}

/// The receiver's side, second half: check the sender's answer to challenge `ours`, and
/// answer its challenge.
pub fn check_answer(stream: &mut TcpStream, token: &[u8], ours: &str) -> Result<(), Refused> {
    let (theirs, proof) = match wire::receive_small(stream).map_err(receiver_io)? {
        Message::Prove { nonce, mac } => (nonce, mac),
        other => {
            return Err(Some(format!(
                "handshake: expected the sender's proof, got {other:?}"
            )))
        }
    };
    if !verify(mac(token, "sender", ours, &theirs), &proof) {
        let _ = wire::send(
            stream,
            &Message::Error {
                message: "authentication failed: the sender's token is not the receiver's".into(),
                retry: false,
            },
        );
        return Err(Some(
            "authentication failed: the sender does not hold this receiver's token".into(),
        ));
    }
    let answer = mac(token, "receiver", &theirs, ours)
        .finalize()
        .into_bytes();
    wire::send(stream, &Message::Proven { mac: hex(&answer) }).map_err(receiver_io)
}

/// Why the sender's side of the handshake (or the connection before it) did not end proven.
#[derive(Debug, PartialEq, Eq)]
pub enum ProveError {
    /// The receiver is busy (its handshake places or its connections are all taken): it said
    /// so (`Error` with `retry`) in place of its challenge or of its proof. Worth trying again
    /// after a pause.
    Busy(String),
    /// The connection could not be made, or broke before the handshake ended, in a way that
    /// may pass (`retry::Passing`), with the whole reason. Worth trying again after a pause.
    Broken(Passing, String),
    /// Anything else (another token, another protocol, a refusal naming a problem): an answer.
    Failed(String),
}

impl ProveError {
    /// `e`, met while connecting or in the handshake and told as `why`: `Broken` where it may
    /// pass, else `Failed`.
    pub fn io(e: &std::io::Error, why: String) -> ProveError {
        match Passing::of(e) {
            Some(passing) => ProveError::Broken(passing, why),
            None => ProveError::Failed(why),
        }
    }
}

impl std::fmt::Display for ProveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProveError::Busy(why) => write!(f, "the receiver is busy ({why})"),
            ProveError::Broken(_, why) | ProveError::Failed(why) => f.write_str(why),
        }
    }
}

/// The sender's side: answer the receiver's challenge and check the receiver's answer.
pub fn prove(stream: &mut TcpStream, token: &[u8]) -> Result<(), ProveError> {
    let io = |e: std::io::Error| ProveError::io(&e, format!("handshake with the receiver: {e}"));
    let theirs = match wire::receive(stream).map_err(io)? {
        Message::Hello { version, nonce } if version == wire::VERSION => nonce,
        Message::Error {
            message,
            retry: true,
        } => return Err(ProveError::Busy(message)),
        Message::Hello { version, .. } => {
            return Err(ProveError::Failed(format!(
                "the receiver speaks transfer protocol {version}, this push {}: run the same vdifrec version at both ends",
                wire::VERSION
            )))
        }
        other => {
            return Err(ProveError::Failed(format!(
                "handshake: expected the receiver's challenge, got {other:?}"
            )))
        }
    };
    let ours = nonce();
    let proof = mac(token, "sender", &theirs, &ours).finalize().into_bytes();
    wire::send(
        stream,
        &Message::Prove {
            nonce: ours.clone(),
            mac: hex(&proof),
        },
    )
    .map_err(io)?;
    match wire::receive(stream).map_err(io)? {
        Message::Proven { mac: m } if verify(mac(token, "receiver", &ours, &theirs), &m) => Ok(()),
        Message::Proven { .. } => Err(ProveError::Failed(
            "authentication failed: the receiver does not hold this token (is it the right host?)"
                .into(),
        )),
        // Its place was given to a newer connection while this answer was on its way.
        Message::Error {
            message,
            retry: true,
        } => Err(ProveError::Busy(message)),
        Message::Error { message, .. } => Err(ProveError::Failed(format!(
            "the receiver refused: {message}"
        ))),
        other => Err(ProveError::Failed(format!(
            "handshake: expected the receiver's proof, got {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair(
        sender_token: &'static [u8],
        receiver_token: &'static [u8],
    ) -> (Result<(), ProveError>, Result<(), String>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let r = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let ours = challenge(&mut s).map_err(|e| e.unwrap_or_default())?;
            check_answer(&mut s, receiver_token, &ours).map_err(|e| e.unwrap_or_default())
        });
        let mut s = TcpStream::connect(addr).unwrap();
        let sent = prove(&mut s, sender_token);
        (sent, r.join().unwrap())
    }

    #[test]
    fn the_same_token_passes_and_another_fails_at_both_ends() {
        assert_eq!(
            pair(b"0123456789abcdef", b"0123456789abcdef"),
            (Ok(()), Ok(()))
        );
        let (sent, received) = pair(b"0123456789abcdef", b"0123456789abcdeF");
        let ProveError::Failed(why) = sent.unwrap_err() else {
            panic!("another token is no reason to try again")
        };
        assert!(why.contains("refused: authentication failed"), "{why}");
        assert!(received.unwrap_err().contains("authentication failed"));
    }

    #[test]
    fn a_busy_answer_a_broken_connection_and_another_protocol_are_told_apart() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let r = std::thread::spawn(move || {
            // Busy in place of the challenge; then a connection closed without a word; then
            // a challenge of another protocol version.
            let (mut s, _) = l.accept().unwrap();
            let busy = Message::Error {
                message: "busy: try again shortly".into(),
                retry: true,
            };
            wire::send(&mut s, &busy).unwrap();
            drop(l.accept().unwrap());
            let (mut s, _) = l.accept().unwrap();
            let other = Message::Hello {
                version: wire::VERSION + 1,
                nonce: nonce(),
            };
            wire::send(&mut s, &other).unwrap();
        });
        let busy = prove(&mut TcpStream::connect(addr).unwrap(), b"0123456789abcdef");
        assert_eq!(
            busy,
            Err(ProveError::Busy("busy: try again shortly".into()))
        );
        // Closed before the challenge: EOF (or a reset, had bytes been left unread).
        let broken = prove(&mut TcpStream::connect(addr).unwrap(), b"0123456789abcdef");
        assert!(
            matches!(&broken, Err(ProveError::Broken(Passing::Closed | Passing::Reset, w)) if w.starts_with("handshake with the receiver")),
            "{broken:?}"
        );
        let other = prove(&mut TcpStream::connect(addr).unwrap(), b"0123456789abcdef");
        assert!(
            matches!(&other, Err(ProveError::Failed(w)) if w.contains("run the same vdifrec version at both ends")),
            "{other:?}"
        );
        r.join().unwrap();
    }

    #[test]
    fn token_files() {
        let dir = std::env::temp_dir().join(format!("vdifrec-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("token");
        std::fs::write(&f, "  s3cret-s3cret-s3cret  \nsecond line\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_token(Some(&f))
            .unwrap_err()
            .to_string()
            .contains("chmod 600"));
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_token(Some(&f)).unwrap(), b"s3cret-s3cret-s3cret");
        std::fs::write(&f, "short\n").unwrap();
        assert!(read_token(Some(&f))
            .unwrap_err()
            .to_string()
            .contains("at least 16"));
        assert!(read_token(Some(&dir.join("none")))
            .unwrap_err()
            .to_string()
            .starts_with("token_file: cannot read"));
        assert!(read_token(None)
            .unwrap_err()
            .to_string()
            .starts_with("token_file: give the file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
