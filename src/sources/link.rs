//! Where a send goes and how its frames travel, as `to` names it (read by `endpoint`, as the
//! forwarder reads its destinations): `HOST:PORT` or `udp://HOST:PORT` (one frame per
//! datagram), `udps://HOST:PORT` (the same, each datagram led by a 64-bit packet sequence
//! number), `tcp://HOST:PORT` (one connection, the frames back to back, nothing between them).
//!
//! A batch goes out in one system call: `sendmmsg` for UDP, `sendmsg` of all its iovecs for
//! TCP. The link says what became of each frame; the sender counts.

pub use crate::endpoint::{Endpoint, Framing};
use crate::options::ArgError;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long a TCP connection may take to be accepted.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a blocked TCP write waits before the stop flag is looked at again.
const WRITE_SLICE: Duration = Duration::from_millis(100);

/// `to` as the user gives it: `[SCHEME://]HOST:PORT`, plain UDP without a scheme (`[::1]:PORT`
/// for IPv6, `localhost` for 127.0.0.1, or a host name).
pub fn destination(name: &str, text: &str) -> Result<Endpoint, ArgError> {
    let (to, query) = crate::endpoint::parse(name, text, Some(Framing::Udp))?;
    if query.is_some() {
        return Err(ArgError::new(
            name,
            format!("{text:?}: a send takes no ?keys: give [SCHEME://]HOST:PORT"),
        ));
    }
    Ok(to)
}

/// Why a link could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error(
        "to: nobody accepts a connection at {to} ({source}): start the receiver first, or check to"
    )]
    Refused {
        to: Endpoint,
        source: std::io::Error,
    },
    #[error("cannot open the socket to {to}: {source}")]
    Socket {
        to: Endpoint,
        source: std::io::Error,
    },
}

/// One datagram (or, on TCP, one stretch of the byte stream): up to three iovecs (PSN,
/// header, payload; or one whole frame).
pub struct Datagram {
    pub iov: [libc::iovec; 3],
    pub parts: usize,
}

impl Datagram {
    pub fn new() -> Datagram {
        Datagram {
            iov: [empty_iov(); 3],
            parts: 0,
        }
    }

    /// Appends `len` bytes at `base` (which must stay alive until the batch is sent).
    pub fn push(&mut self, base: *const u8, len: usize) {
        self.iov[self.parts] = libc::iovec {
            iov_base: base as *mut libc::c_void,
            iov_len: len,
        };
        self.parts += 1;
    }

    pub fn len(&self) -> usize {
        self.iov[..self.parts].iter().map(|v| v.iov_len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its iovecs.
    pub fn parts(&self) -> &[libc::iovec] {
        &self.iov[..self.parts]
    }
}

impl Default for Datagram {
    fn default() -> Self {
        Datagram::new()
    }
}

fn empty_iov() -> libc::iovec {
    libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }
}

/// What became of one datagram of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Sent,
    /// Nobody listened (ICMP port unreachable): not sent.
    Refused,
    /// Another error: not sent.
    Failed,
    /// A stop was asked while the link could not take it: not sent.
    Unsent,
}

/// An open link.
pub struct Link {
    to: Endpoint,
    socket: Socket,
}

impl Link {
    /// Opens the socket (and, for TCP, the connection, waiting at most 10 s).
    pub fn open(to: Endpoint) -> Result<Link, LinkError> {
        let domain = if to.addr.is_ipv6() {
            Domain::IPV6
        } else {
            Domain::IPV4
        };
        let sock_err = |source| LinkError::Socket {
            to: to.clone(),
            source,
        };
        let addr = SockAddr::from(to.addr);
        let socket = match to.framing {
            Framing::Udp | Framing::Udps => {
                let s = Socket::new(domain, Type::DGRAM.cloexec(), Some(Protocol::UDP))
                    .map_err(sock_err)?;
                let _ = s.set_send_buffer_size(64 << 20);
                s.connect(&addr).map_err(sock_err)?;
                s
            }
            Framing::Tcp => {
                let s = Socket::new(domain, Type::STREAM.cloexec(), Some(Protocol::TCP))
                    .map_err(sock_err)?;
                let _ = s.set_send_buffer_size(8 << 20);
                let _ = s.set_tcp_nodelay(true);
                s.connect_timeout(&addr, CONNECT_TIMEOUT)
                    .map_err(|source| match source.kind() {
                        std::io::ErrorKind::ConnectionRefused
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::WouldBlock => LinkError::Refused {
                            to: to.clone(),
                            source,
                        },
                        _ => LinkError::Socket {
                            to: to.clone(),
                            source,
                        },
                    })?;
                s.set_write_timeout(Some(WRITE_SLICE)).map_err(sock_err)?;
                s
            }
        };
        Ok(Link { to, socket })
    }

    pub fn destination(&self) -> &Endpoint {
        &self.to
    }

    /// Sends a batch in order; what became of each datagram. A TCP connection that breaks
    /// is an error (what was sent before is counted by the caller from the outcomes it had).
    pub fn send(
        &mut self,
        batch: &mut [Datagram],
        stop: &AtomicBool,
    ) -> Result<Vec<Outcome>, std::io::Error> {
        match self.to.framing {
            Framing::Udp | Framing::Udps => Ok(self.send_datagrams(batch)),
            Framing::Tcp => self.send_stream(batch, stop),
        }
    }

    fn send_datagrams(&mut self, batch: &mut [Datagram]) -> Vec<Outcome> {
        let mut msgs: Vec<libc::mmsghdr> = batch
            .iter_mut()
            .map(|d| {
                // SAFETY: a zeroed mmsghdr is a valid empty value; fields set below.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = d.iov.as_mut_ptr();
                m.msg_hdr.msg_iovlen = d.parts;
                m
            })
            .collect();
        let mut out = Vec::with_capacity(batch.len());
        while out.len() < msgs.len() {
            let at = out.len();
            // SAFETY: the messages point at buffers alive for this call.
            let rc = unsafe {
                libc::sendmmsg(
                    self.socket.as_raw_fd(),
                    msgs[at..].as_mut_ptr(),
                    (msgs.len() - at) as libc::c_uint,
                    0,
                )
            };
            if rc >= 0 {
                out.extend(std::iter::repeat_n(Outcome::Sent, rc as usize));
                continue;
            }
            match std::io::Error::last_os_error().raw_os_error() {
                // Nobody listening: this datagram is not sent; count it and go on.
                Some(libc::ECONNREFUSED) => out.push(Outcome::Refused),
                Some(libc::ENOBUFS) | Some(libc::EAGAIN) | Some(libc::EINTR) => {
                    std::thread::sleep(Duration::from_micros(50));
                }
                _ => out.push(Outcome::Failed),
            }
        }
        out
    }

    /// Writes every iovec of the batch to the connection, however the kernel splits it.
    fn send_stream(
        &mut self,
        batch: &mut [Datagram],
        stop: &AtomicBool,
    ) -> Result<Vec<Outcome>, std::io::Error> {
        let mut iov: Vec<libc::iovec> = batch.iter().flat_map(|d| d.parts()).copied().collect();
        // The datagram each iovec ends, for the outcomes.
        let mut ends = Vec::with_capacity(iov.len());
        for (i, d) in batch.iter().enumerate() {
            ends.extend((0..d.parts).map(|p| (p + 1 == d.parts).then_some(i)));
        }
        let mut out = Vec::with_capacity(batch.len());
        let mut first = 0;
        while first < iov.len() {
            // SAFETY: a zeroed msghdr is a valid empty value; it points at live iovecs.
            let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
            m.msg_iov = iov[first..].as_mut_ptr();
            m.msg_iovlen = (iov.len() - first).min(libc::UIO_MAXIOV as usize);
            // SAFETY: the iovecs point at buffers alive for this call; MSG_NOSIGNAL turns a
            // closed connection into EPIPE rather than a signal.
            let rc = unsafe { libc::sendmsg(self.socket.as_raw_fd(), &m, libc::MSG_NOSIGNAL) };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => {
                        if stop.load(Ordering::Acquire) {
                            out.resize(batch.len(), Outcome::Unsent);
                            return Ok(out);
                        }
                        continue;
                    }
                    _ => return Err(e),
                }
            }
            // Step over what was written: whole iovecs, then part of one.
            let mut n = rc as usize;
            while first < iov.len() && n >= iov[first].iov_len {
                n -= iov[first].iov_len;
                if ends[first].is_some() {
                    out.push(Outcome::Sent);
                }
                first += 1;
            }
            if n > 0 {
                let v = &mut iov[first];
                // SAFETY: n < iov_len: the pointer stays inside the same buffer.
                v.iov_base = unsafe { (v.iov_base as *mut u8).add(n) } as *mut libc::c_void;
                v.iov_len -= n;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn schemes() {
        let d = destination("to", "127.0.0.1:5000").unwrap();
        assert_eq!(d.framing, Framing::Udp);
        assert_eq!(d.to_string(), "udp://127.0.0.1:5000");
        for (text, framing) in [
            ("udp://127.0.0.1:5000", Framing::Udp),
            ("udps://localhost:5000", Framing::Udps),
            ("TCP://[::1]:5000", Framing::Tcp),
        ] {
            assert_eq!(destination("to", text).unwrap().framing, framing, "{text}");
        }
        let e = destination("to", "http://127.0.0.1:80")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("to: unknown scheme \"http\"")
                && e.contains("udp://")
                && e.contains("udps://")
                && e.contains("tcp://"),
            "{e}"
        );
        for bad in [
            "tcp://",
            "udp://127.0.0.1",
            "nonsense",
            "udps://127.0.0.1:0",
        ] {
            let e = destination("to", bad).unwrap_err().to_string();
            assert!(e.starts_with("to: "), "{e}");
        }
    }

    #[test]
    fn a_refused_connection_names_to() {
        // A port nobody listens on: bind one, note it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let to = destination("to", &format!("tcp://127.0.0.1:{port}")).unwrap();
        let e = Link::open(to).err().expect("refused").to_string();
        assert!(
            e.starts_with("to: nobody accepts a connection at tcp://127.0.0.1:"),
            "{e}"
        );
    }

    /// A TCP receiver on loopback that keeps everything until the sender closes (accepting
    /// within 20 s): its port, and the thread that returns the bytes.
    pub(crate) fn tcp_sink() -> (u16, std::thread::JoinHandle<Vec<u8>>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let reader = std::thread::spawn(move || {
            listener.set_nonblocking(true).unwrap();
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            let mut c = loop {
                match listener.accept() {
                    Ok((c, _)) => break c,
                    Err(_) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(e) => panic!("no connection within 20 s: {e}"),
                }
            };
            c.set_nonblocking(false).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut all = Vec::new();
            std::io::Read::read_to_end(&mut c, &mut all).unwrap();
            all
        });
        (port, reader)
    }

    #[test]
    fn tcp_carries_the_bytes_back_to_back() {
        let (port, reader) = tcp_sink();
        let mut link =
            Link::open(destination("to", &format!("tcp://127.0.0.1:{port}")).unwrap()).unwrap();
        let frames: Vec<Vec<u8>> = (0..200u32).map(|i| vec![i as u8; 5000]).collect();
        let stop = AtomicBool::new(false);
        for chunk in frames.chunks(32) {
            let mut batch: Vec<Datagram> = chunk
                .iter()
                .map(|f| {
                    let mut d = Datagram::new();
                    d.push(f.as_ptr(), 32);
                    d.push(f[32..].as_ptr(), f.len() - 32);
                    d
                })
                .collect();
            let out = link.send(&mut batch, &stop).unwrap();
            assert_eq!(out, vec![Outcome::Sent; chunk.len()]);
        }
        drop(link);
        assert_eq!(reader.join().unwrap(), frames.concat());
    }
}
