//! Where a forwarded stream goes and in what shape, as the operator writes it:
//! `SCHEME://HOST:PORT[?key=value&...]`.
//!
//! The scheme is the framing on the wire: `udp` (one VDIF frame per datagram), `udps` (each
//! datagram a 64-bit packet sequence number, then the frame: jive5ab's `udps`, which a
//! correlator uses to count loss and put datagrams back in order) or `tcp` (frames back to back
//! on one connection). The keys shape the stream: `threads=0,1` (only these VDIF threads),
//! `channels=0-15` (corner-turn: each listed channel its own single-channel thread),
//! `payload=N` (re-frame to N-byte payloads so that each datagram fits the path's MTU), and a
//! pacing cap, `rate=2Gbps` or jive5ab's `ipd=N` (microseconds between datagrams; `Nns`).
//! `endpoint` reads the scheme and the host (resolved once: a name that does not resolve is a
//! bad argument, not a destination that is down).

use crate::endpoint::{self, Endpoint, Framing};
use crate::options::ArgError;
use crate::vdif::transform::{parse_index_list, TransformSpec};
use std::time::Duration;

/// The option's name in errors (`--forward` on the command line).
pub const OPTION: &str = "forward";

/// How fast a destination may be sent to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pacing {
    /// As fast as the stream comes.
    Free,
    /// At most this many bytes per second on the wire (datagrams or stream bytes).
    Rate(f64),
    /// At least this long between datagrams (jive5ab's `ipd`).
    Gap(Duration),
}

/// A destination, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Destination {
    /// As the operator wrote it, for the accounting.
    pub text: String,
    pub endpoint: Endpoint,
    pub transform: TransformSpec,
    pub pacing: Pacing,
}

fn bad(why: impl Into<String>) -> ArgError {
    ArgError::new(OPTION, why)
}

impl Destination {
    /// Reads `udp://host:port?...`; every problem names `forward` and says what to write.
    pub fn parse(text: &str) -> Result<Destination, ArgError> {
        let (endpoint, query) = endpoint::parse(OPTION, text, None)?;
        let (transform, pacing) = match query {
            Some(q) => parse_query(text, q)?,
            None => (TransformSpec::default(), Pacing::Free),
        };
        Ok(Destination {
            text: text.trim().to_string(),
            endpoint,
            transform,
            pacing,
        })
    }

    /// Whether frames are cut or corner-turned on the way (copied into new frames); a
    /// `threads=` filter alone sends the kept frames straight from the ring.
    pub fn reshapes(&self) -> bool {
        self.transform.channels.is_some() || self.transform.payload.is_some()
    }

    pub fn framing(&self) -> Framing {
        self.endpoint.framing
    }

    /// `scheme://host:port`, without the shaping keys: how the accounting names it.
    pub fn label(&self) -> String {
        match self.text.split_once('?') {
            Some((l, _)) => l.to_string(),
            None => self.text.clone(),
        }
    }
}

fn parse_query(text: &str, query: &str) -> Result<(TransformSpec, Pacing), ArgError> {
    let mut spec = TransformSpec::default();
    let mut pacing = Pacing::Free;
    let mut seen: Vec<&str> = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').ok_or_else(|| {
            bad(format!(
                "{text:?}: {pair:?} is not key=value (threads, channels, payload, rate, ipd)"
            ))
        })?;
        if seen.contains(&key) {
            return Err(bad(format!(
                "{text:?}: {key}= is given twice: give it once"
            )));
        }
        seen.push(key);
        // The kernels' own errors name their key; the operator typed it inside --forward.
        let inside = |e: ArgError| bad(format!("{text:?}: {}={value}: {}", e.name, e.why));
        match key {
            "threads" => spec.threads = Some(parse_index_list("threads", value).map_err(inside)?),
            "channels" => {
                spec.channels = Some(parse_index_list("channels", value).map_err(inside)?)
            }
            "payload" => {
                let n: usize = value
                    .parse()
                    .ok()
                    .filter(|n| *n > 0 && n % 8 == 0)
                    .ok_or_else(|| {
                        bad(format!(
                        "{text:?}: payload={value}: give the payload in bytes, a multiple of 8 \
                         that divides the stream's (payload=1024)"
                    ))
                    })?;
                spec.payload = Some(n);
            }
            "rate" | "ipd" if pacing != Pacing::Free => {
                return Err(bad(format!(
                    "{text:?}: give rate= or ipd=, not both (ipd is the gap between datagrams)"
                )))
            }
            "rate" => {
                let r = crate::units::parse_rate("rate", value)
                    .map_err(|e| bad(format!("{text:?}: {e}")))?;
                pacing = Pacing::Rate(r);
            }
            "ipd" => pacing = parse_ipd(value).map_err(|why| bad(format!("{text:?}: {why}")))?,
            other => {
                return Err(bad(format!(
                    "{text:?}: unknown key {other:?}: use threads, channels, payload, rate or ipd"
                )))
            }
        }
    }
    // What can be checked without the stream (thread IDs VDIF can hold, lists without
    // repeats) is checked now, before anything binds.
    spec.check()
        .map_err(|e| bad(format!("{text:?}: {}: {}", e.name, e.why)))?;
    Ok((spec, pacing))
}

/// A pacing alone, as a destination's key gives it: `rate=2Gbps`, `ipd=10`, or empty text
/// for none (`Recorder::pace_forward`, VSI-S `ipd=` while sending).
pub fn parse_pacing(text: &str) -> Result<Pacing, ArgError> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(Pacing::Free);
    }
    let why = |w: String| ArgError::new("pacing", w);
    match t.split_once('=') {
        Some(("rate", v)) => crate::units::parse_rate("rate", v)
            .map(Pacing::Rate)
            .map_err(|e| why(e.to_string())),
        Some(("ipd", v)) => parse_ipd(v).map_err(why),
        _ => Err(why(format!(
            "{t:?}: give rate=RATE (rate=2Gbps), ipd=MICROSECONDS (ipd=10, ipd=2500ns) or nothing"
        ))),
    }
}

/// The longest gap between datagrams: jive5ab's (2^31 - 1 microseconds, about 36 minutes).
const IPD_MOST_S: f64 = 2_147.483_647;

/// jive5ab's inter-packet delay: microseconds (`10`, `1.5`, `10us`, `10u`), or nanoseconds
/// with `ns` or `n`; 0 is none. (jive5ab's -1, "work it out from the mode", is the VSI-S
/// station's to work out: here a gap is given.)
pub fn parse_ipd(value: &str) -> Result<Pacing, String> {
    let v = value.trim();
    let (num, scale) = if let Some(n) = v.strip_suffix("ns").or_else(|| v.strip_suffix('n')) {
        (n, 1e-9)
    } else {
        let n = v.strip_suffix("us").or_else(|| v.strip_suffix('u'));
        (n.unwrap_or(v), 1e-6)
    };
    let seconds = num
        .trim()
        .parse::<f64>()
        .ok()
        .map(|n| n * scale)
        .filter(|s| s.is_finite() && (0.0..=IPD_MOST_S).contains(s))
        .ok_or_else(|| {
            format!(
                "ipd={value}: give 0 (no gap) to 2147483647 microseconds (ipd=10, ipd=1.5) \
                 or nanoseconds (ipd=2500ns)"
            )
        })?;
    if seconds == 0.0 {
        return Ok(Pacing::Free);
    }
    Ok(Pacing::Gap(Duration::from_secs_f64(seconds)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(text: &str) -> String {
        let e = Destination::parse(text).unwrap_err();
        assert_eq!(e.name, "forward");
        e.why
    }

    #[test]
    fn reads_the_three_schemes_and_the_keys() {
        let d = Destination::parse("udps://127.0.0.1:46227?threads=0,1&payload=1024&ipd=2500ns")
            .unwrap();
        assert_eq!(d.framing(), Framing::Udps);
        assert_eq!(d.endpoint.addr, "127.0.0.1:46227".parse().unwrap());
        assert_eq!(d.transform.threads, Some(vec![0, 1]));
        assert_eq!(d.transform.payload, Some(1024));
        assert_eq!(d.pacing, Pacing::Gap(Duration::from_nanos(2500)));
        assert_eq!(d.label(), "udps://127.0.0.1:46227");
        let d = Destination::parse("tcp://localhost:2630?rate=2Gbps").unwrap();
        assert_eq!(d.framing(), Framing::Tcp);
        assert_eq!(d.pacing, Pacing::Rate(2e9 / 8.0));
        let d = Destination::parse("udp://[::1]:9000").unwrap();
        assert!(d.endpoint.addr.is_ipv6());
        assert_eq!(
            Destination::parse("udp://127.0.0.1:1?ipd=10")
                .unwrap()
                .pacing,
            Pacing::Gap(Duration::from_micros(10))
        );
        assert_eq!(
            Destination::parse("udp://127.0.0.1:1?ipd=0")
                .unwrap()
                .pacing,
            Pacing::Free
        );
        assert_eq!(
            Destination::parse("udp://127.0.0.1:1?ipd=1.5")
                .unwrap()
                .pacing,
            Pacing::Gap(Duration::from_nanos(1500))
        );
        assert_eq!(
            Destination::parse("udp://127.0.0.1:1?ipd=2500n")
                .unwrap()
                .pacing,
            Pacing::Gap(Duration::from_nanos(2500))
        );
    }

    #[test]
    fn bad_destinations_name_the_option_and_the_fix() {
        assert!(why("http://127.0.0.1:80").contains("unknown scheme"));
        assert!(why("127.0.0.1:80").contains("no scheme"));
        assert!(why("udp://127.0.0.1:70000").contains("1 to 65535"));
        assert!(why("udp://127.0.0.1:0").contains("1 to 65535"));
        assert!(why("udp://127.0.0.1").contains("not HOST:PORT"));
        assert!(why("udp://nowhere").contains("not HOST:PORT"));
        assert!(why("udp://127.0.0.1:1?colour=red").contains("unknown key"));
        assert!(why("udp://127.0.0.1:1?rate=fast").contains("rate"));
        assert!(why("udp://127.0.0.1:1?rate=1Gbps&ipd=3").contains("not both"));
        assert!(why("udp://127.0.0.1:1?payload=-8").contains("payload"));
        assert!(why("udp://127.0.0.1:1?payload=12").contains("multiple of 8"));
        assert!(why("udp://127.0.0.1:1?threads=5000").contains("0 to 1023"));
        assert!(why("udp://127.0.0.1:1?payload=1024&payload=2048").contains("twice"));
        assert!(why("udp://127.0.0.1:1?ipd=-3").contains("0 (no gap)"));
        assert!(why("udp://127.0.0.1:1?ipd=3000000000").contains("2147483647"));
        assert_eq!(
            Destination::parse("udp://127.0.0.1:1?ipd=20000000ns")
                .unwrap()
                .pacing,
            Pacing::Gap(Duration::from_millis(20))
        );
    }
}
