//! The socket a destination is sent on, in its framing: whole frames in, on the wire as
//! `udp` (a datagram per frame), `udps` (a datagram per frame after a 64-bit little-endian
//! packet sequence number, one more for each datagram, as jive5ab's `udps` counts; where it
//! starts is the caller's) or `tcp` (frames back to back).
//!
//! A send never blocks for long: UDP sends wait at most `WAIT` for room in the socket buffer,
//! TCP is non-blocking and waits at most `WAIT` for the peer to read. What the kernel did not
//! take is said in the return value, so that the forwarder can skip ahead rather than wait.
//! A TCP frame the kernel took in part is finished (from a copy: the ring may reuse its slot)
//! before anything else is sent, so the stream stays whole frames.

use crate::endpoint::{Endpoint, Framing};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Longest a send waits for the kernel to take something.
const WAIT: Duration = Duration::from_millis(20);
/// How long a TCP connection may take to be made.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Most datagrams (or stream pieces) handed to the kernel per call.
pub const MAX_BATCH: usize = 64;
/// Socket send buffer asked for: room for a few milliseconds at 10 Gbit/s.
const SEND_BUFFER: usize = 32 << 20;

/// An error that means the destination has gone away (rather than being busy).
pub fn is_gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ECONNREFUSED
                | libc::ECONNRESET
                | libc::EPIPE
                | libc::ENOTCONN
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::EHOSTDOWN
                | libc::ENETDOWN
                | libc::ECONNABORTED
                | libc::ETIMEDOUT
        )
    )
}

/// A connected socket in one framing.
pub struct Wire {
    framing: Framing,
    socket: Socket,
    /// The next packet sequence number (udps).
    psn: u64,
    /// The rest of a TCP frame the kernel took in part.
    pending: Vec<u8>,
    // Scratch for the system calls, kept to avoid allocating per batch.
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    psns: Vec<[u8; 8]>,
}

// SAFETY: the raw pointers in the scratch vectors point only into buffers of the current call.
unsafe impl Send for Wire {}

impl Wire {
    /// Connects to `dest` (for UDP: fixes the peer, so that a port with nothing listening is
    /// reported as refused).
    pub fn connect(dest: &Endpoint) -> io::Result<Wire> {
        let domain = if dest.addr.is_ipv6() {
            Domain::IPV6
        } else {
            Domain::IPV4
        };
        let to = SockAddr::from(dest.addr);
        let socket = match dest.framing {
            Framing::Udp | Framing::Udps => {
                let s = Socket::new(domain, Type::DGRAM.cloexec(), Some(Protocol::UDP))?;
                let _ = s.set_send_buffer_size(SEND_BUFFER);
                s.set_write_timeout(Some(WAIT))?;
                s.connect(&to)?;
                s
            }
            Framing::Tcp => {
                let s = Socket::new(domain, Type::STREAM.cloexec(), Some(Protocol::TCP))?;
                let _ = s.set_send_buffer_size(SEND_BUFFER);
                s.set_tcp_nodelay(true)?;
                s.connect_timeout(&to, CONNECT_TIMEOUT)?;
                s.set_nonblocking(true)?;
                s
            }
        };
        Ok(Wire {
            framing: dest.framing,
            socket,
            psn: 0,
            pending: Vec::new(),
            iov: Vec::with_capacity(2 * MAX_BATCH),
            msgs: Vec::with_capacity(MAX_BATCH),
            psns: vec![[0; 8]; MAX_BATCH],
        })
    }

    /// Continues the packet sequence of an earlier connection to the same destination, so
    /// that the far end sees one sequence across a reconnection.
    pub fn continue_from(&mut self, psn: u64) {
        self.psn = psn;
    }
    pub fn next_psn(&self) -> u64 {
        self.psn
    }

    /// Bytes on the wire for one frame of `len` bytes.
    pub fn wire_bytes(&self, len: usize) -> usize {
        len + self.framing.prefix()
    }

    /// Hands up to `MAX_BATCH` frames to the kernel; returns how many it took whole (a TCP
    /// frame taken in part counts: its rest is kept and goes first next time). Ok(0) when the
    /// socket stayed full for `WAIT`.
    pub fn send(&mut self, frames: &[&[u8]]) -> io::Result<usize> {
        let frames = &frames[..frames.len().min(MAX_BATCH)];
        match self.framing {
            Framing::Udp | Framing::Udps => self.send_datagrams(frames),
            Framing::Tcp => self.send_stream(frames),
        }
    }

    /// Finishes a TCP frame taken in part; true when nothing is pending any more.
    pub fn flush(&mut self) -> io::Result<bool> {
        while !self.pending.is_empty() {
            match self.write_some(&[]) {
                Ok(0) => return Ok(false),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    fn send_datagrams(&mut self, frames: &[&[u8]]) -> io::Result<usize> {
        let psn = self.framing == Framing::Udps;
        let per = if psn { 2 } else { 1 };
        self.iov.clear();
        for (i, f) in frames.iter().enumerate() {
            if psn {
                self.psns[i] = (self.psn + i as u64).to_le_bytes();
                self.iov.push(iovec(self.psns[i].as_ptr(), 8));
            }
            self.iov.push(iovec(f.as_ptr(), f.len()));
        }
        self.msgs.clear();
        for i in 0..frames.len() {
            // SAFETY: mmsghdr is plain data; zero is a valid (empty) value.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = self.iov[i * per..].as_mut_ptr();
            m.msg_hdr.msg_iovlen = per as _;
            self.msgs.push(m);
        }
        // SAFETY: msgs and iov point at live buffers (frames, psns) for the call's duration.
        let n = unsafe {
            libc::sendmmsg(
                self.socket.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                self.msgs.len() as u32,
                0,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Ok(0),
                io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        self.psn += n as u64;
        Ok(n as usize)
    }

    fn send_stream(&mut self, frames: &[&[u8]]) -> io::Result<usize> {
        if !self.flush()? {
            return Ok(0);
        }
        let wrote = self.write_some(frames)?;
        // Whole frames taken, and the one taken in part (its rest is now pending).
        let mut left = wrote;
        let mut taken = 0;
        for f in frames {
            if left == 0 {
                break;
            }
            if left < f.len() {
                self.pending.extend_from_slice(&f[left..]);
                taken += 1;
                break;
            }
            left -= f.len();
            taken += 1;
        }
        Ok(taken)
    }

    /// One `sendmsg` of the pending bytes then `frames`, waiting at most `WAIT` for room;
    /// returns the bytes of `frames` written (pending bytes written are dropped from it).
    fn write_some(&mut self, frames: &[&[u8]]) -> io::Result<usize> {
        self.iov.clear();
        if !self.pending.is_empty() {
            self.iov
                .push(iovec(self.pending.as_ptr(), self.pending.len()));
        }
        for f in frames {
            self.iov.push(iovec(f.as_ptr(), f.len()));
        }
        if self.iov.is_empty() {
            return Ok(0);
        }
        let fd = self.socket.as_raw_fd();
        for attempt in 0..2 {
            // SAFETY: msghdr is plain data; iov points at live buffers (pending, frames)
            // for the call's duration. MSG_NOSIGNAL: a peer that went away is an error here,
            // never a SIGPIPE for the whole process.
            let n = unsafe {
                let mut m: libc::msghdr = std::mem::zeroed();
                m.msg_iov = self.iov.as_mut_ptr();
                m.msg_iovlen = self.iov.len().min(1024) as _;
                libc::sendmsg(fd, &m, libc::MSG_NOSIGNAL)
            };
            if n >= 0 {
                let n = n as usize;
                let from_pending = n.min(self.pending.len());
                self.pending.drain(..from_pending);
                return Ok(n - from_pending);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock if attempt == 0 => wait_writable(fd, WAIT)?,
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => return Ok(0),
                _ => return Err(e),
            }
        }
        Ok(0)
    }

    /// A TCP peer that closed its end is gone even before a write fails.
    pub fn peer_closed(&self) -> bool {
        if self.framing != Framing::Tcp {
            return false;
        }
        let mut pfd = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one pollfd, no wait.
        let r = unsafe { libc::poll(&mut pfd, 1, 0) };
        r > 0 && pfd.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }
}

fn wait_writable(fd: i32, timeout: Duration) -> io::Result<()> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one pollfd for the call's duration.
    let r = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    if r > 0 && pfd.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
        return Err(io::Error::from_raw_os_error(libc::ECONNRESET));
    }
    Ok(())
}

fn iovec(base: *const u8, len: usize) -> libc::iovec {
    libc::iovec {
        iov_base: base as *mut libc::c_void,
        iov_len: len,
    }
}
