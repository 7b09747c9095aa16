//! The `udp` backend: a UDP socket read with `recvmmsg`, whose iovecs point straight into the
//! ring slots (one kernel-to-user copy, no second memcpy). With an offset (an 8-byte PSN
//! before each frame) the first iovec of each message takes the offset and the second the
//! frame, so frames still land at the start of their slots. Kernel drops come from
//! `SO_RXQ_OVFL`.

use super::{Backend, DatagramInfo, BATCH};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use thiserror::Error;

/// How long one receive call waits for a first datagram: the stop flag is seen this often.
pub const RECEIVE_TIMEOUT_MS: i64 = 50;
/// Control buffer for one message (room for the SO_RXQ_OVFL and SO_TIMESTAMPNS cmsgs: 24 + 32
/// bytes on 64-bit Linux).
const CONTROL_BYTES: usize = 64;
/// `SO_TIMESTAMPNS` (and its cmsg type `SCM_TIMESTAMPNS`): a `struct timespec` receive stamp.
/// 35 on every Linux architecture the wheel is built for (x86-64, aarch64); the libc crate
/// does not export it for Linux.
const SO_TIMESTAMPNS: libc::c_int = 35;
/// Offsets longer than this are refused (a PSN is 8 bytes; some senders add a few more).
pub const MAX_OFFSET: usize = 64;

#[derive(Debug, Error)]
pub enum UdpError {
    #[error("port: {port} on {addr} is in use by another program (`ss -ulpn 'sport = :{port}'` shows which); choose another port or stop it")]
    PortInUse { addr: IpAddr, port: u16 },
    #[error("port: binding {addr}:{port} is not permitted: ports below 1024 need root or CAP_NET_BIND_SERVICE")]
    Permission { addr: IpAddr, port: u16 },
    #[error("bind: {addr} is not an address of this host (`ip -br addr` lists them): give 0.0.0.0, 127.0.0.1 or the interface's address")]
    NotLocal { addr: IpAddr },
    #[error("cannot bind {addr}:{port}: {source} (is {addr} an address of this host?)")]
    Bind {
        addr: IpAddr,
        port: u16,
        source: io::Error,
    },
    #[error("cannot join multicast group {group}: {source}")]
    Multicast { group: IpAddr, source: io::Error },
    #[error("cannot create the UDP socket: {0}")]
    Socket(io::Error),
}

/// What to listen on.
#[derive(Clone, Debug)]
pub struct UdpConfig {
    pub bind: IpAddr,
    pub port: u16,
    pub multicast: Option<IpAddr>,
    /// Receive buffer to ask the kernel for, in bytes.
    pub rcvbuf: usize,
    /// Bytes before each frame to strip (8 for a PSN).
    pub offset: usize,
    /// Tell each datagram's sender (for scans split by sender).
    pub senders: bool,
    /// Ask the kernel for each datagram's receive stamp (`SO_TIMESTAMPNS`, latency stamps).
    pub timestamps: bool,
}

pub struct UdpBackend {
    socket: Socket,
    offset: usize,
    msgs: Vec<libc::mmsghdr>,
    iovecs: Vec<[libc::iovec; 2]>,
    prefix: Vec<[u8; MAX_OFFSET]>,
    control: Vec<[u64; CONTROL_BYTES / 8]>,
    drops: u64,
    /// Each message's source address, when senders are told.
    names: Option<Vec<libc::sockaddr_storage>>,
    /// Whether the kernel stamps each datagram.
    timestamps: bool,
}

// SAFETY: the raw pointers inside the message headers point only into this struct's own
// vectors (rebuilt on every call) and the caller's buffer during a call.
unsafe impl Send for UdpBackend {}

impl UdpBackend {
    /// Creates, tunes and binds the socket. Returns it, the bound address (the real port when
    /// 0 was asked) and notes for the operator about what the kernel granted.
    pub fn bind(cfg: &UdpConfig) -> Result<(UdpBackend, SocketAddr, Vec<String>), UdpError> {
        let (socket, buffer_note) =
            receive_socket(cfg.bind, cfg.rcvbuf).map_err(UdpError::Socket)?;
        let mut notes = vec![buffer_note];
        let addr = SocketAddr::new(cfg.bind, cfg.port);
        socket
            .bind(&SockAddr::from(addr))
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EADDRINUSE) => UdpError::PortInUse {
                    addr: cfg.bind,
                    port: cfg.port,
                },
                Some(libc::EACCES) => UdpError::Permission {
                    addr: cfg.bind,
                    port: cfg.port,
                },
                Some(libc::EADDRNOTAVAIL) => UdpError::NotLocal { addr: cfg.bind },
                _ => UdpError::Bind {
                    addr: cfg.bind,
                    port: cfg.port,
                    source: e,
                },
            })?;
        if let Some(group) = cfg.multicast {
            let r = match group {
                IpAddr::V4(g) => socket.join_multicast_v4(&g, &std::net::Ipv4Addr::UNSPECIFIED),
                IpAddr::V6(g) => socket.join_multicast_v6(&g, 0),
            };
            r.map_err(|source| UdpError::Multicast { group, source })?;
            notes.push(format!("multicast: joined {group}"));
        }
        if cfg.timestamps && !enable_timestamps(&socket) {
            notes.push(format!(
                "latency: the kernel refused SO_TIMESTAMPNS ({}); the kernel stage is not measured",
                io::Error::last_os_error()
            ));
        }
        let local = socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .unwrap_or(addr);
        let backend = UdpBackend {
            socket,
            offset: cfg.offset,
            // SAFETY: all-zero mmsghdr/iovec are valid empty values; filled before each use.
            msgs: vec![unsafe { MaybeUninit::zeroed().assume_init() }; BATCH],
            iovecs: vec![unsafe { MaybeUninit::zeroed().assume_init() }; BATCH],
            prefix: vec![[0u8; MAX_OFFSET]; BATCH],
            control: vec![[0u64; CONTROL_BYTES / 8]; BATCH],
            drops: 0,
            // SAFETY: an all-zero sockaddr_storage is a valid empty value.
            names: cfg
                .senders
                .then(|| vec![unsafe { MaybeUninit::zeroed().assume_init() }; BATCH]),
            timestamps: cfg.timestamps,
        };
        Ok((backend, local, notes))
    }
}

/// The sender key (`capture::sender_key`) of a source address recvmmsg filled in.
fn name_key(name: &libc::sockaddr_storage) -> u64 {
    match name.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in here (family AF_INET).
            let a = unsafe { &*(name as *const _ as *const libc::sockaddr_in) };
            let addr = std::net::SocketAddr::from((
                std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            ));
            super::sender_key(&addr)
        }
        libc::AF_INET6 => {
            // SAFETY: the kernel wrote a sockaddr_in6 here (family AF_INET6).
            let a = unsafe { &*(name as *const _ as *const libc::sockaddr_in6) };
            let addr = std::net::SocketAddr::from((
                std::net::Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
            ));
            super::sender_key(&addr)
        }
        _ => 0,
    }
}

/// A UDP socket for an address of `bind`'s family, tuned as every receiver here wants it
/// (vdifrec's capture and the benchmarks' discard loop alike): the receive buffer as large as
/// allowed (the note says what was granted), kernel drops reported (SO_RXQ_OVFL), and a read
/// timeout so that a stop flag is seen. Not yet bound.
pub fn receive_socket(bind: IpAddr, rcvbuf: usize) -> io::Result<(Socket, String)> {
    let domain = if bind.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let socket = Socket::new(domain, Type::DGRAM.cloexec(), Some(Protocol::UDP))?;
    let note = set_receive_buffer(&socket, rcvbuf);
    // SAFETY: setsockopt with an int option on our socket.
    unsafe {
        let on: libc::c_int = 1;
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RXQ_OVFL,
            &on as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    socket.set_read_timeout(Some(std::time::Duration::from_millis(
        RECEIVE_TIMEOUT_MS as u64,
    )))?;
    Ok((socket, note))
}

/// Asks for `want` bytes of receive buffer: SO_RCVBUFFORCE (root/CAP_NET_ADMIN) first, else
/// SO_RCVBUF (capped by net.core.rmem_max). Says what was granted.
fn set_receive_buffer(socket: &Socket, want: usize) -> String {
    let fd = socket.as_raw_fd();
    let val = want.min(i32::MAX as usize / 2) as libc::c_int;
    // SAFETY: setsockopt with an int option on our socket.
    let forced = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            &val as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    };
    if !forced {
        let _ = socket.set_recv_buffer_size(want);
    }
    // The kernel reports twice what it grants for payload (bookkeeping overhead).
    let granted = socket.recv_buffer_size().unwrap_or(0) / 2;
    if granted >= want {
        format!(
            "socket: SO_RCVBUF{} granted {granted} bytes",
            if forced { "FORCE" } else { "" }
        )
    } else {
        format!(
            "socket: SO_RCVBUF granted {granted} < {want} bytes asked: raise net.core.rmem_max (`sysctl -w net.core.rmem_max={want}`) or run with CAP_NET_ADMIN"
        )
    }
}

impl Backend for UdpBackend {
    fn wait_readable(&mut self, timeout: std::time::Duration) -> bool {
        let mut fd = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one descriptor we own, for at most `timeout`.
        unsafe { libc::poll(&mut fd, 1, timeout.as_millis() as libc::c_int) > 0 }
    }

    unsafe fn receive(
        &mut self,
        dst: *mut u8,
        stride: usize,
        max: usize,
        info: &mut [DatagramInfo],
    ) -> io::Result<usize> {
        let max = max.min(BATCH);
        let off = self.offset;
        for i in 0..max {
            let iov = &mut self.iovecs[i];
            let mut n = 0;
            if off > 0 {
                iov[0] = libc::iovec {
                    iov_base: self.prefix[i].as_mut_ptr() as *mut libc::c_void,
                    iov_len: off,
                };
                n = 1;
            }
            // SAFETY: the caller guarantees dst is valid for max * stride bytes.
            iov[n] = libc::iovec {
                iov_base: unsafe { dst.add(i * stride) } as *mut libc::c_void,
                iov_len: stride,
            };
            let hdr = &mut self.msgs[i].msg_hdr;
            match &mut self.names {
                Some(names) => {
                    hdr.msg_name =
                        &mut names[i] as *mut libc::sockaddr_storage as *mut libc::c_void;
                    hdr.msg_namelen =
                        std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                }
                None => {
                    hdr.msg_name = std::ptr::null_mut();
                    hdr.msg_namelen = 0;
                }
            }
            hdr.msg_iov = iov.as_mut_ptr();
            hdr.msg_iovlen = n + 1;
            hdr.msg_control = self.control[i].as_mut_ptr() as *mut libc::c_void;
            hdr.msg_controllen = CONTROL_BYTES;
            hdr.msg_flags = 0;
            self.msgs[i].msg_len = 0;
        }
        // SAFETY: every message header points at live buffers set up just above.
        let n = unsafe {
            libc::recvmmsg(
                self.socket.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                max as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(0),
                _ => Err(e),
            };
        }
        let n = n as usize;
        for (i, slot) in info.iter_mut().enumerate().take(n) {
            let m = &self.msgs[i];
            *slot = DatagramInfo {
                len: m.msg_len as usize,
                truncated: m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
                psn: (off >= 8 && m.msg_len as usize >= 8)
                    .then(|| u64::from_le_bytes(self.prefix[i][..8].try_into().expect("8 bytes"))),
                sender: self.names.as_ref().map_or(0, |n| name_key(&n[i])),
                kernel_ns: if self.timestamps {
                    receive_stamp(&m.msg_hdr)
                } else {
                    0
                },
            };
        }
        if n > 0 {
            // The drop counter is cumulative: the last message's value is the newest.
            if let Some(d) = rxq_overflow(&self.msgs[n - 1].msg_hdr) {
                self.drops = self.drops.max(d as u64);
            }
        }
        Ok(n)
    }

    fn kernel_drops(&mut self) -> u64 {
        // SO_RXQ_OVFL tells of drops only with the next datagram queued, so drops at the end
        // of a stream would go untold; the socket's own counter (SO_MEMINFO) has them all.
        if let Some(d) = socket_drops(self.socket.as_raw_fd()) {
            self.drops = self.drops.max(d);
        }
        self.drops
    }
}

/// The datagrams the kernel dropped on this socket so far (SK_MEMINFO_DROPS of SO_MEMINFO,
/// the counter SO_RXQ_OVFL reports); None where the kernel does not say.
fn socket_drops(fd: libc::c_int) -> Option<u64> {
    // SK_MEMINFO_VARS is 9 on current kernels; room for more.
    const SK_MEMINFO_DROPS: usize = 8;
    let mut info = [0u32; 16];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into our buffer and sets `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    let filled = len as usize / std::mem::size_of::<u32>();
    (rc == 0 && filled > SK_MEMINFO_DROPS).then(|| info[SK_MEMINFO_DROPS] as u64)
}

/// Asks the kernel to stamp each datagram as it arrives; whether it agreed.
fn enable_timestamps(socket: &Socket) -> bool {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt with an int option on our socket.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_TIMESTAMPNS,
            &on as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// The SO_TIMESTAMPNS receive stamp in a message's control data, ns since the epoch (0: none).
fn receive_stamp(hdr: &libc::msghdr) -> i64 {
    // SAFETY: walking the control buffer the kernel filled, with the libc macros.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == SO_TIMESTAMPNS {
                let ts: libc::timespec =
                    std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const libc::timespec);
                return ts.tv_sec * 1_000_000_000 + ts.tv_nsec;
            }
            cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
        }
    }
    0
}

/// The SO_RXQ_OVFL counter in a received message's control data.
pub(crate) fn rxq_overflow(hdr: &libc::msghdr) -> Option<u32> {
    // SAFETY: walking the control buffer the kernel filled, with the libc macros.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SO_RXQ_OVFL {
                let data = libc::CMSG_DATA(cmsg) as *const u32;
                return Some(std::ptr::read_unaligned(data));
            }
            cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_at_the_end_of_a_stream_are_counted() {
        // A socket nobody reads, with the smallest buffer: most of a burst is dropped, and
        // no datagram after it carries the count (as at the end of a stream).
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket2::SockRef::from(&rx).set_recv_buffer_size(1).unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let payload = [0u8; 1000];
        for _ in 0..200 {
            let _ = tx.send_to(&payload, rx.local_addr().unwrap());
        }
        let dropped = socket_drops(rx.as_raw_fd()).expect("SO_MEMINFO");
        let mut queued = 0u64;
        rx.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 2000];
        while rx.recv(&mut buf).is_ok() {
            queued += 1;
        }
        assert!(dropped > 0);
        assert_eq!(dropped + queued, 200);
    }
}
