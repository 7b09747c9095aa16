//! Where a stream of frames goes, as the operator writes it: `[SCHEME://]HOST:PORT`, the
//! scheme the framing on the wire. `udp` is one VDIF frame per datagram; `udps` is the same
//! with each datagram led by a 64-bit little-endian packet sequence number (jive5ab's `udps`,
//! which a correlator uses to count loss and restore the order); `tcp` is one connection with
//! the frames back to back.
//!
//! Below the stages: the sender (`sources`) and the forwarder (`record`) read destinations
//! here, so that `vdifrec send --to` and `--forward` take the same text and say the same
//! things about it. Each keeps its own socket code: a sender must deliver every frame, a
//! forwarder must never wait.

use crate::options::ArgError;
use std::net::{SocketAddr, ToSocketAddrs};

/// How frames travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Framing {
    /// One frame per datagram.
    Udp,
    /// One frame per datagram, after an 8-byte little-endian packet sequence number.
    Udps,
    /// One TCP connection, frames back to back.
    Tcp,
}

impl Framing {
    /// The scheme that names it.
    pub fn name(self) -> &'static str {
        match self {
            Framing::Udp => "udp",
            Framing::Udps => "udps",
            Framing::Tcp => "tcp",
        }
    }

    /// Whether each frame is led by a packet sequence number.
    pub fn psn(self) -> bool {
        self == Framing::Udps
    }

    /// Bytes before each frame on the wire.
    pub fn prefix(self) -> usize {
        if self.psn() {
            8
        } else {
            0
        }
    }

    fn parse(scheme: &str) -> Option<Framing> {
        match scheme.to_ascii_lowercase().as_str() {
            "udp" => Some(Framing::Udp),
            "udps" => Some(Framing::Udps),
            "tcp" => Some(Framing::Tcp),
            _ => None,
        }
    }
}

/// A destination: the framing, the host as written, and its address (resolved once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub framing: Framing,
    pub host: String,
    pub addr: SocketAddr,
}

impl Endpoint {
    /// Plain UDP to `addr`.
    pub fn udp(addr: SocketAddr) -> Endpoint {
        Endpoint {
            framing: Framing::Udp,
            host: addr.ip().to_string(),
            addr,
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.framing.name(), self.addr)
    }
}

/// The schemes, for error messages.
pub const SCHEMES: &str = "udp://HOST:PORT (one frame per datagram), udps://HOST:PORT (each \
    datagram led by a 64-bit packet sequence number, as jive5ab sends) or tcp://HOST:PORT \
    (frames back to back on one connection)";

/// Reads `[SCHEME://]HOST:PORT[?QUERY]` for the option `name`: the endpoint, and the query
/// (the text after `?`, for the caller's keys). Without a scheme the framing is `bare`, or
/// the scheme is required when `bare` is None. The host (an address, `[::1]` for IPv6, or a
/// name) is resolved now: a name that does not resolve is a bad argument, not a destination
/// that is down.
pub fn parse<'t>(
    name: &str,
    text: &'t str,
    bare: Option<Framing>,
) -> Result<(Endpoint, Option<&'t str>), ArgError> {
    let bad = |why: String| ArgError::new(name, why);
    let t = text.trim();
    let (framing, rest) = match t.split_once("://") {
        Some((scheme, rest)) => {
            let framing = Framing::parse(scheme).ok_or_else(|| {
                bad(format!(
                    "unknown scheme {scheme:?} in {text:?}: give {SCHEMES}"
                ))
            })?;
            (framing, rest)
        }
        None => match bare {
            Some(f) => (f, t),
            None => return Err(bad(format!("{text:?} has no scheme: give {SCHEMES}"))),
        },
    };
    let (hostport, query) = match rest.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (rest, None),
    };
    let (host, port) = split_host_port(hostport).ok_or_else(|| {
        bad(format!(
            "{text:?} is not HOST:PORT: give e.g. udp://10.0.0.1:46227, [::1]:46227 for IPv6"
        ))
    })?;
    let port = match port.parse::<u32>() {
        Ok(p) if (1..=65_535).contains(&p) => p as u16,
        _ => {
            return Err(bad(format!(
                "{text:?}: port {port:?} is out of range: give 1 to 65535"
            )))
        }
    };
    let host = if host == "localhost" {
        "127.0.0.1"
    } else {
        host
    };
    let addr = resolve(host, port).map_err(|why| {
        bad(format!(
            "{text:?}: cannot resolve host {host:?} ({why}): give an address or a name this \
             machine can resolve"
        ))
    })?;
    Ok((
        Endpoint {
            framing,
            host: host.to_string(),
            addr,
        },
        query,
    ))
}

fn split_host_port(text: &str) -> Option<(&str, &str)> {
    let (host, port) = match text.strip_prefix('[') {
        Some(v6) => v6.split_once("]:")?,
        None => text.rsplit_once(':')?,
    };
    // No host is this host, as for a listening address.
    Some((if host.is_empty() { "127.0.0.1" } else { host }, port))
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(ip) = host.parse() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| e.to_string())?
        .next()
        .ok_or_else(|| "no address".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_schemes_hosts_and_queries() {
        let (e, q) = parse("to", "udps://127.0.0.1:46227?payload=1024", None).unwrap();
        assert_eq!(
            (e.framing, e.addr.port(), q),
            (Framing::Udps, 46227, Some("payload=1024"))
        );
        let (e, q) = parse("to", "localhost:9", Some(Framing::Udp)).unwrap();
        assert_eq!(
            (e.framing, e.addr.to_string(), q),
            (Framing::Udp, "127.0.0.1:9".into(), None)
        );
        assert_eq!(
            parse("to", ":9", Some(Framing::Udp))
                .unwrap()
                .0
                .addr
                .to_string(),
            "127.0.0.1:9"
        );
        let (e, _) = parse("to", "TCP://[::1]:2630", None).unwrap();
        assert_eq!(
            (e.framing, e.addr.is_ipv6(), e.host.as_str()),
            (Framing::Tcp, true, "::1")
        );
        assert_eq!(e.to_string(), "tcp://[::1]:2630");
    }

    #[test]
    fn bad_destinations_name_the_option_and_say_what_to_write() {
        let why = |text: &str, bare| {
            let e = parse("forward", text, bare).unwrap_err();
            assert_eq!(e.name, "forward");
            e.why
        };
        assert!(why("http://127.0.0.1:80", None).contains("unknown scheme"));
        assert!(why("127.0.0.1:80", None).contains("no scheme"));
        assert!(why("udp://127.0.0.1:70000", None).contains("1 to 65535"));
        assert!(why("udp://127.0.0.1:0", None).contains("1 to 65535"));
        assert!(why("udp://127.0.0.1", None).contains("not HOST:PORT"));
        assert!(why("udp://nowhere", None).contains("not HOST:PORT"));
    }
}
