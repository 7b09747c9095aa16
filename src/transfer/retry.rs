//! Which failures to reach the receiver may pass, and how long to pause before asking again.
//!
//! A receiver that is restarting refuses connections for a few seconds; an overloaded one, or
//! a path that glitched, resets or closes a connection before its handshake ends (a half-open
//! connection ends in EOF); a path that is down answers "no route" until it is back. Each of
//! these is likely gone a moment later, so `push` asks again after a pause, within its
//! `retry_seconds`, as it does when the receiver says it is busy. A wrong token, another
//! protocol version, or a refusal that names a problem is an answer instead: asking again
//! would get the same one.

use std::io::{self, ErrorKind};
use std::time::Duration;

/// The first pause before the receiver is asked again, and the longest: each pause doubles.
pub const PAUSE: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(2));

/// A failure to connect, or to finish the handshake, that may pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passing {
    /// Nothing listens on the port: the receiver is not started yet, or is restarting.
    Refused,
    /// The receiver, or something on the path, reset the connection.
    Reset,
    /// The connection was closed before the handshake ended.
    Closed,
    /// No answer in time.
    TimedOut,
    /// No route to the receiver's host or network.
    Unreachable,
}

impl Passing {
    /// The failure `e` met while connecting or in the handshake, if it may pass; None when
    /// it is an answer (data that is not the protocol, say).
    pub fn of(e: &io::Error) -> Option<Passing> {
        // The kernel's "host is down" has no kind of its own.
        if e.raw_os_error() == Some(libc::EHOSTDOWN) {
            return Some(Passing::Unreachable);
        }
        match e.kind() {
            ErrorKind::ConnectionRefused => Some(Passing::Refused),
            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
                Some(Passing::Reset)
            }
            ErrorKind::UnexpectedEof => Some(Passing::Closed),
            // A read that waited past the socket's timeout ends in EAGAIN (WouldBlock).
            ErrorKind::TimedOut | ErrorKind::WouldBlock => Some(Passing::TimedOut),
            ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable | ErrorKind::NetworkDown => {
                Some(Passing::Unreachable)
            }
            _ => None,
        }
    }

    /// What happened, as the push's notes count it.
    pub fn said(self) -> &'static str {
        match self {
            Passing::Refused => {
                "the receiver refused the connection (nothing listened on its port: not started yet, or restarting)"
            }
            Passing::Reset => "the connection to the receiver was reset before its handshake ended",
            Passing::Closed => {
                "the receiver closed the connection before its handshake ended (overloaded, or a half-open connection)"
            }
            Passing::TimedOut => "the receiver did not answer in time",
            Passing::Unreachable => "the receiver's host or network could not be reached",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_may_pass_is_told_from_an_answer() {
        let os = io::Error::from_raw_os_error;
        for (e, passing) in [
            (os(libc::ECONNREFUSED), Passing::Refused),
            (os(libc::ECONNRESET), Passing::Reset),
            (os(libc::ECONNABORTED), Passing::Reset),
            (os(libc::EPIPE), Passing::Reset),
            (os(libc::ETIMEDOUT), Passing::TimedOut),
            (os(libc::EAGAIN), Passing::TimedOut),
            (os(libc::EHOSTUNREACH), Passing::Unreachable),
            (os(libc::ENETUNREACH), Passing::Unreachable),
            (os(libc::ENETDOWN), Passing::Unreachable),
            (os(libc::EHOSTDOWN), Passing::Unreachable),
            // read_exact on a connection closed mid-message: "failed to fill whole buffer".
            (io::Error::from(ErrorKind::UnexpectedEof), Passing::Closed),
            (io::Error::from(ErrorKind::TimedOut), Passing::TimedOut),
        ] {
            assert_eq!(Passing::of(&e), Some(passing), "{e}");
        }
        // Another protocol, a local mistake: asking again would get the same answer.
        for e in [
            io::Error::new(ErrorKind::InvalidData, "not a vdifrec transfer message"),
            os(libc::EACCES),
            io::Error::other("anything else"),
        ] {
            assert_eq!(Passing::of(&e), None, "{e}");
        }
    }
}
