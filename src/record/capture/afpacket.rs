//! The `afpacket` backend: a TPACKET_V3 receive ring on one interface.
//!
//! The kernel fills blocks of packets in a ring shared with us; we walk each block, keep the
//! UDP datagrams to our port (IPv4 or IPv6, VLAN tags stripped into metadata or left in the
//! packet), copy their payloads into the vdifrec ring (the one copy) and hand the block back.
//! Kernel drops come from PACKET_STATISTICS, which resets on every read, so they are summed.
//! Opening the socket needs CAP_NET_RAW.

use super::packet::PortFilter;
use super::{Backend, DatagramInfo};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use thiserror::Error;

/// Ring geometry: 64 blocks of 4 MiB (256 MiB), a block handed over after 10 ms at most.
const BLOCK_SIZE: u32 = 4 << 20;
const BLOCK_COUNT: u32 = 64;
const FRAME_SIZE: u32 = 1 << 11;
const BLOCK_TIMEOUT_MS: u32 = 10;
const POLL_TIMEOUT_MS: i32 = 50;

// From <linux/if_packet.h>.
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const TPACKET_V3: libc::c_int = 2;
/// Linux 4.20+: the socket is not given the host's own outgoing packets.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;

#[repr(C)]
struct TpacketReq3 {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
    tp_retire_blk_tov: u32,
    tp_sizeof_priv: u32,
    tp_feature_req_word: u32,
}

#[repr(C)]
#[derive(Default)]
struct TpacketStatsV3 {
    tp_packets: u32,
    tp_drops: u32,
    tp_freeze_q_cnt: u32,
}

// Offsets in `struct tpacket_block_desc` (version, offset_to_priv, then tpacket_hdr_v1) and
// `struct tpacket3_hdr`, from <linux/if_packet.h>.
const BLOCK_STATUS: usize = 8;
const BLOCK_NUM_PKTS: usize = 12;
const BLOCK_FIRST_PKT: usize = 16;
const PKT_NEXT_OFFSET: usize = 0;
/// `tp_sec` and `tp_nsec`: the kernel's receive stamp of the packet.
const PKT_SEC: usize = 4;
const PKT_NSEC: usize = 8;
const PKT_SNAPLEN: usize = 12;
const PKT_MAC: usize = 24;

#[derive(Debug, Error)]
pub enum AfPacketError {
    #[error("the afpacket backend needs an interface: name it (e.g. the 10 GbE port; `ip link` lists them)")]
    NoInterface,
    #[error("interface {0:?} does not exist (`ip link` lists the interfaces)")]
    NoSuchInterface(String),
    #[error("AF_PACKET needs CAP_NET_RAW: run as root, or `setcap cap_net_raw,cap_ipc_lock+ep` the Python interpreter, or use the udp backend ({0})")]
    Permission(io::Error),
    #[error("cannot set up the AF_PACKET ring on {interface}: {source}")]
    Setup {
        interface: String,
        source: io::Error,
    },
}

pub struct AfPacketBackend {
    fd: OwnedFd,
    map: *mut u8,
    map_len: usize,
    block: usize,
    /// Position inside the current block: packets left and byte offset of the next one.
    pkts_left: u32,
    next: usize,
    /// Which packets are ours; it counts the IP fragments to our port.
    filter: PortFilter,
    drops: u64,
}

// SAFETY: the mapping belongs to this backend alone and is used by one thread at a time.
unsafe impl Send for AfPacketBackend {}

fn ifindex(name: &str) -> Result<u32, AfPacketError> {
    let c =
        std::ffi::CString::new(name).map_err(|_| AfPacketError::NoSuchInterface(name.into()))?;
    // SAFETY: a valid C string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(AfPacketError::NoSuchInterface(name.into()))
    } else {
        Ok(i)
    }
}

impl AfPacketBackend {
    pub fn open(
        interface: &str,
        port: u16,
        offset: usize,
    ) -> Result<(AfPacketBackend, Vec<String>), AfPacketError> {
        if interface.is_empty() {
            return Err(AfPacketError::NoInterface);
        }
        let index = ifindex(interface)?;
        let setup = |source| AfPacketError::Setup {
            interface: interface.to_string(),
            source,
        };
        let proto = (libc::ETH_P_ALL as u16).to_be() as libc::c_int;
        // SAFETY: plain socket calls; every pointer refers to a live local value.
        unsafe {
            let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, proto);
            if fd < 0 {
                let e = io::Error::last_os_error();
                return Err(match e.raw_os_error() {
                    Some(libc::EPERM) | Some(libc::EACCES) => AfPacketError::Permission(e),
                    _ => setup(e),
                });
            }
            let fd = OwnedFd::from_raw_fd(fd);
            let v: libc::c_int = TPACKET_V3;
            if libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_VERSION,
                &v as *const _ as *const libc::c_void,
                4,
            ) != 0
            {
                return Err(setup(io::Error::last_os_error()));
            }
            // A forward sent out of this interface to another host at the data port would
            // otherwise be captured again: its packets are the host's own, outgoing. (Older
            // kernels refuse the option; there a forward must use another port or interface.)
            let one: libc::c_int = 1;
            let _ = libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_IGNORE_OUTGOING,
                &one as *const _ as *const libc::c_void,
                4,
            );
            let req = TpacketReq3 {
                tp_block_size: BLOCK_SIZE,
                tp_block_nr: BLOCK_COUNT,
                tp_frame_size: FRAME_SIZE,
                tp_frame_nr: BLOCK_SIZE / FRAME_SIZE * BLOCK_COUNT,
                tp_retire_blk_tov: BLOCK_TIMEOUT_MS,
                tp_sizeof_priv: 0,
                tp_feature_req_word: 0,
            };
            if libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_RX_RING,
                &req as *const _ as *const libc::c_void,
                std::mem::size_of::<TpacketReq3>() as libc::socklen_t,
            ) != 0
            {
                return Err(setup(io::Error::last_os_error()));
            }
            let map_len = (BLOCK_SIZE * BLOCK_COUNT) as usize;
            let map = libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            );
            let map = if map == libc::MAP_FAILED {
                // MAP_LOCKED needs CAP_IPC_LOCK or a big enough memlock limit: try without.
                let m = libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                );
                if m == libc::MAP_FAILED {
                    return Err(setup(io::Error::last_os_error()));
                }
                m
            } else {
                map
            };
            let mut sll: libc::sockaddr_ll = std::mem::zeroed();
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = proto as u16;
            sll.sll_ifindex = index as i32;
            if libc::bind(
                fd.as_raw_fd(),
                &sll as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            ) != 0
            {
                let e = io::Error::last_os_error();
                libc::munmap(map, map_len);
                return Err(setup(e));
            }
            let notes = vec![format!(
                "afpacket: TPACKET_V3 ring of {} x {} MiB on {interface} (ifindex {index}), UDP port {port}",
                BLOCK_COUNT,
                BLOCK_SIZE >> 20
            )];
            Ok((
                AfPacketBackend {
                    fd,
                    map: map as *mut u8,
                    map_len,
                    block: 0,
                    pkts_left: 0,
                    next: 0,
                    filter: PortFilter::new(port, offset),
                    drops: 0,
                },
                notes,
            ))
        }
    }

    fn block_ptr(&self) -> *mut u8 {
        // SAFETY: block < BLOCK_COUNT, inside the mapping.
        unsafe { self.map.add(self.block * BLOCK_SIZE as usize) }
    }

    fn block_status(&self) -> u32 {
        // SAFETY: reading the status word of a block header in our mapping; the kernel
        // publishes blocks with a release store, which this acquire read pairs with.
        unsafe {
            let p = self.block_ptr().add(BLOCK_STATUS) as *const std::sync::atomic::AtomicU32;
            (*p).load(std::sync::atomic::Ordering::Acquire)
        }
    }

    fn release_block(&mut self) {
        // SAFETY: as above; handing the block back to the kernel.
        unsafe {
            let p = self.block_ptr().add(BLOCK_STATUS) as *const std::sync::atomic::AtomicU32;
            (*p).store(TP_STATUS_KERNEL, std::sync::atomic::Ordering::Release);
        }
        self.block = (self.block + 1) % BLOCK_COUNT as usize;
        self.pkts_left = 0;
    }
}

impl Backend for AfPacketBackend {
    unsafe fn receive(
        &mut self,
        dst: *mut u8,
        stride: usize,
        max: usize,
        info: &mut [DatagramInfo],
    ) -> io::Result<usize> {
        let mut n = 0;
        let mut waited = false;
        while n < max {
            if self.pkts_left == 0 {
                if self.block_status() & TP_STATUS_USER == 0 {
                    if n > 0 || waited {
                        break;
                    }
                    let mut pfd = libc::pollfd {
                        fd: self.fd.as_raw_fd(),
                        events: libc::POLLIN | libc::POLLERR,
                        revents: 0,
                    };
                    // SAFETY: polling our own descriptor.
                    unsafe { libc::poll(&mut pfd, 1, POLL_TIMEOUT_MS) };
                    waited = true;
                    continue;
                }
                // SAFETY: a block the kernel handed to us: read its header.
                unsafe {
                    let b = self.block_ptr();
                    self.pkts_left = std::ptr::read_unaligned(b.add(BLOCK_NUM_PKTS) as *const u32);
                    self.next =
                        std::ptr::read_unaligned(b.add(BLOCK_FIRST_PKT) as *const u32) as usize;
                }
                if self.pkts_left == 0 {
                    self.release_block();
                    continue;
                }
            }
            // SAFETY: the packet header and data lie inside the user-owned block.
            let (packet, next_offset, stamp) = unsafe {
                let h = self.block_ptr().add(self.next);
                let snaplen = std::ptr::read_unaligned(h.add(PKT_SNAPLEN) as *const u32) as usize;
                let mac = std::ptr::read_unaligned(h.add(PKT_MAC) as *const u16) as usize;
                let next = std::ptr::read_unaligned(h.add(PKT_NEXT_OFFSET) as *const u32) as usize;
                let sec = std::ptr::read_unaligned(h.add(PKT_SEC) as *const u32);
                let nsec = std::ptr::read_unaligned(h.add(PKT_NSEC) as *const u32);
                let stamp = i64::from(sec) * 1_000_000_000 + i64::from(nsec);
                (std::slice::from_raw_parts(h.add(mac), snaplen), next, stamp)
            };
            // SAFETY: the caller guarantees dst holds max * stride bytes.
            if let Some(mut d) = unsafe { self.filter.take(packet, dst.add(n * stride), stride) } {
                d.kernel_ns = stamp;
                info[n] = d;
                n += 1;
            }
            self.pkts_left -= 1;
            self.next += next_offset;
            if self.pkts_left == 0 {
                self.release_block();
            }
        }
        Ok(n)
    }

    fn kernel_drops(&mut self) -> u64 {
        let mut st = TpacketStatsV3::default();
        let mut len = std::mem::size_of::<TpacketStatsV3>() as libc::socklen_t;
        // SAFETY: getsockopt into a struct of the size we pass. Reading resets the kernel's
        // counters, so the drops are summed here.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                &mut st as *mut _ as *mut libc::c_void,
                &mut len,
            )
        };
        if rc == 0 {
            self.drops += st.tp_drops as u64;
        }
        self.drops
    }

    fn fragments(&self) -> u64 {
        self.filter.fragments
    }
}

impl Drop for AfPacketBackend {
    fn drop(&mut self) {
        // SAFETY: unmapping our own ring.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}
