//! The `pfring` backend: ntop's PF_RING, loaded at run time.
//!
//! `libpfring.so` is opened with libloading when this backend is chosen, so vdifrec builds and
//! installs everywhere and uses PF_RING where it exists. The functions are declared as in
//! PF_RING 8.x's `userland/lib/pfring.h`; the two structures read here are declared by their
//! sizes and offsets in `kernel/linux/pf_ring.h` (checked by a test against the values of
//! PF_RING 8.9.0). The socket is opened RX only, receive only, and read without copying in the
//! library: each packet's UDP payload is copied once, into the vdifrec ring.

use super::packet::PortFilter;
use super::{Backend, DatagramInfo};
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::io;
use std::path::{Path, PathBuf};
use thiserror::Error;

// The structures PF_RING 8.x fills, declared field by field after kernel/linux/pf_ring.h and
// userland/lib/pfring.h (packed where the header packs them). Only caplen, len and drop are
// read; the rest fixes the sizes and offsets, which a test compares with the header's.

/// `struct pkt_offset`.
#[repr(C, packed)]
pub struct PktOffset {
    pub eth: i16,
    pub vlan: i16,
    pub l3: i16,
    pub l4: i16,
    pub payload: i16,
}

/// `ip_addr`: an IPv6 address or an IPv4 one in the same 16 bytes.
#[repr(C)]
pub union IpAddr {
    pub v6: [u32; 4],
    pub v4: u32,
}

/// `tunnel_info`.
#[repr(C, packed)]
pub struct TunnelInfo {
    pub tunnel_id: u32,
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
    pub eth_type: u16,
    pub ip_version: u8,
    pub proto: u8,
    pub ip_src: IpAddr,
    pub ip_dst: IpAddr,
    pub l4_src_port: u16,
    pub l4_dst_port: u16,
}

/// The `tcp` member of `struct pkt_parsing_info` (not packed itself).
#[repr(C)]
pub struct TcpInfo {
    pub flags: u8,
    pub seq_num: u32,
    pub ack_num: u32,
}

/// `struct pkt_parsing_info`.
#[repr(C, packed)]
pub struct PktParsingInfo {
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
    pub eth_type: u16,
    pub vlan_id: u16,
    pub qinq_vlan_id: u16,
    pub ip_version: u8,
    pub l3_proto: u8,
    pub ip_tos: u8,
    pub ip_src: IpAddr,
    pub ip_dst: IpAddr,
    pub l4_src_port: u16,
    pub l4_dst_port: u16,
    pub icmp_type: u8,
    pub icmp_code: u8,
    pub tcp: TcpInfo,
    pub tunnel: TunnelInfo,
    pub last_matched_rule_id: i32,
    pub offset: PktOffset,
}

/// The `tx` member of `struct pfring_extended_pkthdr`.
#[repr(C)]
pub struct TxInfo {
    pub bounce_interface: i32,
    pub reserved: *mut c_void,
}

/// `struct pfring_extended_pkthdr`.
#[repr(C, packed)]
pub struct ExtendedPkthdr {
    pub timestamp_ns: u64,
    pub flags: u32,
    pub rx_direction: u8,
    pub port_id: u8,
    pub device_id: u16,
    pub if_index: i32,
    pub pkt_hash: u32,
    pub tx: TxInfo,
    pub pid: u32,
    pub parsed_pkt: PktParsingInfo,
}

/// `struct pfring_pkthdr`: the pcap header (timeval, caplen, len) and PF_RING's extension.
#[repr(C, packed)]
pub struct PfringPkthdr {
    pub ts: libc::timeval,
    pub caplen: u32,
    pub len: u32,
    pub extended_hdr: ExtendedPkthdr,
}

/// `pfring_stat`.
#[repr(C)]
pub struct PfringStat {
    pub recv: u64,
    pub drop: u64,
    pub shunt: u64,
}

pub const PKTHDR_SIZE: usize = std::mem::size_of::<PfringPkthdr>();
pub const PKTHDR_CAPLEN: usize = std::mem::offset_of!(PfringPkthdr, caplen);
pub const PKTHDR_LEN: usize = std::mem::offset_of!(PfringPkthdr, len);
pub const STAT_SIZE: usize = std::mem::size_of::<PfringStat>();
pub const STAT_DROP: usize = std::mem::offset_of!(PfringStat, drop);
/// `packet_direction::rx_only_direction` and `socket_mode::recv_only_mode`.
pub const RX_ONLY_DIRECTION: c_int = 1;
pub const RECV_ONLY_MODE: c_int = 2;
/// Largest packet asked for (jumbo frame with room for tags).
const CAPLEN: u32 = 9216;
/// Packets the kernel gathers before waking a poll (PF_RING's poll watermark).
const POLL_WATERMARK: u16 = 128;
/// Longest wait in `pfring_poll` (ms) when the ring is empty: short enough that a stop is
/// seen within the 100 ms the recorder promises.
const POLL_MS: c_uint = 50;

type Open = unsafe extern "C" fn(*const c_char, u32, u32) -> *mut c_void;
type SetInt = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
type SetU16 = unsafe extern "C" fn(*mut c_void, u16) -> c_int;
type SetName = unsafe extern "C" fn(*mut c_void, *mut c_char) -> c_int;
type Enable = unsafe extern "C" fn(*mut c_void) -> c_int;
type Recv = unsafe extern "C" fn(*mut c_void, *mut *mut u8, c_uint, *mut u8, u8) -> c_int;
type Stats = unsafe extern "C" fn(*mut c_void, *mut u8) -> c_int;
type Poll = unsafe extern "C" fn(*mut c_void, c_uint) -> c_int;
type Close = unsafe extern "C" fn(*mut c_void);

#[derive(Debug, Error)]
pub enum PfRingError {
    #[error("PF_RING is not installed here: no {0} could be loaded; install PF_RING (ntop.org) or use --backend udp")]
    NoLibrary(String),
    #[error("{path} lacks {symbol}: not a PF_RING library this vdifrec can use (PF_RING 8.x); use --backend udp")]
    Symbol { path: String, symbol: String },
    #[error("the pf_ring kernel module is not loaded (no /proc/net/pf_ring): `modprobe pf_ring`, or use --backend udp")]
    NoModule,
    #[error("the pfring backend needs an interface: give --interface IF")]
    NoInterface,
    #[error("pfring_open({interface}) failed: {source} (is the interface up, and do you have CAP_NET_RAW?); or use --backend udp")]
    Open {
        interface: String,
        source: io::Error,
    },
    #[error("{call} failed with {code} on {interface}")]
    Call {
        call: &'static str,
        code: c_int,
        interface: String,
    },
}

/// The PF_RING functions vdifrec uses.
struct Api {
    _lib: Library,
    open: Open,
    set_direction: SetInt,
    set_socket_mode: SetInt,
    set_poll_watermark: SetU16,
    set_application_name: SetName,
    enable_ring: Enable,
    recv: Recv,
    poll: Poll,
    stats: Stats,
    close: Close,
}

/// Library names tried, newest first, when no path is given.
const LIBRARY_NAMES: [&str; 3] = ["libpfring.so", "libpfring.so.8", "libpfring.so.1"];

impl Api {
    fn load(path: Option<&Path>) -> Result<(Api, String), PfRingError> {
        let candidates: Vec<PathBuf> = match path {
            Some(p) => vec![p.to_path_buf()],
            None => LIBRARY_NAMES.iter().map(PathBuf::from).collect(),
        };
        let mut last = String::new();
        for c in &candidates {
            // SAFETY: loading a shared library runs its initialisers; PF_RING's are benign.
            match unsafe { Library::new(c) } {
                Ok(lib) => {
                    let name = c.display().to_string();
                    return Ok((Api::resolve(lib, &name)?, name));
                }
                Err(e) => last = e.to_string(),
            }
        }
        let tried: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
        Err(PfRingError::NoLibrary(format!(
            "{} ({last})",
            tried.join(" or ")
        )))
    }

    fn resolve(lib: Library, path: &str) -> Result<Api, PfRingError> {
        macro_rules! sym {
            ($name:literal) => {{
                // SAFETY: the symbol is declared with PF_RING 8.x's prototype above.
                let s: libloading::Symbol<'_, _> = unsafe {
                    lib.get(concat!($name, "\0").as_bytes())
                }
                .map_err(|_| PfRingError::Symbol {
                    path: path.to_string(),
                    symbol: $name.to_string(),
                })?;
                *s
            }};
        }
        let api = Api {
            open: sym!("pfring_open"),
            set_direction: sym!("pfring_set_direction"),
            set_socket_mode: sym!("pfring_set_socket_mode"),
            set_poll_watermark: sym!("pfring_set_poll_watermark"),
            set_application_name: sym!("pfring_set_application_name"),
            enable_ring: sym!("pfring_enable_ring"),
            recv: sym!("pfring_recv"),
            poll: sym!("pfring_poll"),
            stats: sym!("pfring_stats"),
            close: sym!("pfring_close"),
            _lib: lib,
        };
        Ok(api)
    }
}

/// Whether the pf_ring kernel module is loaded.
pub fn module_loaded() -> bool {
    Path::new("/proc/net/pf_ring").exists()
}

pub struct PfRingBackend {
    api: Api,
    ring: *mut c_void,
    /// Which packets are ours; it counts the IP fragments to our port.
    filter: PortFilter,
    hdr: [u8; PKTHDR_SIZE + 64],
    drops: u64,
}

// SAFETY: the PF_RING handle is used by the capture thread alone after it is moved there.
unsafe impl Send for PfRingBackend {}

impl PfRingBackend {
    /// Loads the library (`library`, or the system's), checks the kernel module (unless
    /// `check_module` is false: for stand-in libraries in tests), opens `interface`.
    pub fn open(
        interface: &str,
        port: u16,
        offset: usize,
        library: Option<&Path>,
        check_module: bool,
    ) -> Result<(PfRingBackend, Vec<String>), PfRingError> {
        if interface.is_empty() {
            return Err(PfRingError::NoInterface);
        }
        let (api, lib_name) = Api::load(library)?;
        if check_module && !module_loaded() {
            return Err(PfRingError::NoModule);
        }
        let dev = CString::new(interface).map_err(|_| PfRingError::NoInterface)?;
        // SAFETY: calls into PF_RING with a valid device name; the handle is checked.
        let ring = unsafe { (api.open)(dev.as_ptr(), CAPLEN, 0) };
        if ring.is_null() {
            return Err(PfRingError::Open {
                interface: interface.to_string(),
                source: io::Error::last_os_error(),
            });
        }
        let mut backend = PfRingBackend {
            api,
            ring,
            filter: PortFilter::new(port, offset),
            hdr: [0; PKTHDR_SIZE + 64],
            drops: 0,
        };
        let call = |name: &'static str, code: c_int| {
            if code < 0 {
                Err(PfRingError::Call {
                    call: name,
                    code,
                    interface: interface.to_string(),
                })
            } else {
                Ok(())
            }
        };
        let mut app = *b"vdifrec\0";
        // SAFETY: a live handle; the name outlives the call.
        unsafe {
            call(
                "pfring_set_direction",
                (backend.api.set_direction)(ring, RX_ONLY_DIRECTION),
            )?;
            call(
                "pfring_set_socket_mode",
                (backend.api.set_socket_mode)(ring, RECV_ONLY_MODE),
            )?;
            call(
                "pfring_set_poll_watermark",
                (backend.api.set_poll_watermark)(ring, POLL_WATERMARK),
            )?;
            call(
                "pfring_set_application_name",
                (backend.api.set_application_name)(ring, app.as_mut_ptr() as *mut c_char),
            )?;
            call("pfring_enable_ring", (backend.api.enable_ring)(ring))?;
        }
        backend.kernel_drops();
        Ok((
            backend,
            vec![format!(
                "pfring: {lib_name} on {interface}, RX only, receive only, UDP port {port}"
            )],
        ))
    }
}

impl Backend for PfRingBackend {
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
            let mut buf: *mut u8 = std::ptr::null_mut();
            // SAFETY: zero-copy receive (buffer length 0): PF_RING points `buf` at the packet
            // in its ring and fills the header, which is larger than PF_RING 8.x's.
            let rc = unsafe { (self.api.recv)(self.ring, &mut buf, 0, self.hdr.as_mut_ptr(), 0) };
            if rc < 0 {
                return if n > 0 {
                    Ok(n)
                } else {
                    Err(io::Error::other(format!("pfring_recv returned {rc}")))
                };
            }
            if rc == 0 || buf.is_null() {
                if n > 0 || waited {
                    break;
                }
                // An empty ring: sleep in the kernel until the watermark's worth of packets
                // (or the timeout), rather than spinning; then return so the stop flag is seen.
                // SAFETY: a live, enabled handle.
                unsafe { (self.api.poll)(self.ring, POLL_MS) };
                waited = true;
                continue;
            }
            let caplen = u32::from_le_bytes(
                self.hdr[PKTHDR_CAPLEN..PKTHDR_CAPLEN + 4]
                    .try_into()
                    .expect("4 bytes"),
            );
            // SAFETY: PF_RING guarantees caplen bytes at buf until the next receive.
            let packet = unsafe { std::slice::from_raw_parts(buf, caplen as usize) };
            // SAFETY: the caller guarantees dst holds max * stride bytes.
            if let Some(d) = unsafe { self.filter.take(packet, dst.add(n * stride), stride) } {
                info[n] = d;
                n += 1;
            }
        }
        Ok(n)
    }

    fn kernel_drops(&mut self) -> u64 {
        let mut st = [0u8; STAT_SIZE + 16];
        // SAFETY: a live handle and a buffer larger than pfring_stat.
        if unsafe { (self.api.stats)(self.ring, st.as_mut_ptr()) } >= 0 {
            self.drops =
                u64::from_le_bytes(st[STAT_DROP..STAT_DROP + 8].try_into().expect("8 bytes"));
        }
        self.drops
    }

    fn fragments(&self) -> u64 {
        self.filter.fragments
    }
}

impl Drop for PfRingBackend {
    fn drop(&mut self) {
        // SAFETY: closing the handle we opened, once.
        unsafe { (self.api.close)(self.ring) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout of PF_RING 8.9.0 (ntop/PF_RING, kernel/linux/pf_ring.h and
    /// userland/lib/pfring.h at RING_VERSION "8.9.0"), as gcc lays it out on x86-64:
    /// sizeof(struct pfring_pkthdr) 209, caplen at 16, len at 20, extended_hdr at 24;
    /// sizeof(pfring_stat) 24, drop at 8; rx_only_direction 1, recv_only_mode 2.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn declared_layout_matches_pf_ring_8() {
        assert_eq!(std::mem::size_of::<PktOffset>(), 10);
        assert_eq!(std::mem::size_of::<TunnelInfo>(), 56);
        assert_eq!(std::mem::size_of::<PktParsingInfo>(), 141);
        assert_eq!(std::mem::size_of::<ExtendedPkthdr>(), 185);
        assert_eq!(PKTHDR_SIZE, 209);
        assert_eq!(PKTHDR_CAPLEN, 16);
        assert_eq!(PKTHDR_LEN, 20);
        assert_eq!(std::mem::offset_of!(PfringPkthdr, extended_hdr), 24);
        assert_eq!(STAT_SIZE, 24);
        assert_eq!(STAT_DROP, 8);
        assert_eq!((RX_ONLY_DIRECTION, RECV_ONLY_MODE), (1, 2));
    }

    #[test]
    fn missing_library_says_what_to_do() {
        let err = PfRingBackend::open(
            "eth0",
            46227,
            0,
            Some(Path::new("/nonexistent/libpfring.so")),
            true,
        )
        .err()
        .expect("no such library");
        let msg = err.to_string();
        assert!(msg.contains("PF_RING is not installed here"), "{msg}");
        assert!(msg.contains("--backend udp"), "{msg}");
    }
}
