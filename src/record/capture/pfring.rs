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

/// `pfring_stat` (PF_RING 8.x, userland/lib/pfring.h): three 64-bit counters, so 8-byte
/// aligned; PF_RING writes it through a `pfring_stat *`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PfringStat {
    pub recv: u64,
    pub drop: u64,
    pub shunt: u64,
}

/// What `pfring_stats` is given: a `pfring_stat` with spare room after it, in case a later
/// PF_RING adds counters at the end. Its alignment is the struct's own (8 bytes).
#[repr(C)]
#[derive(Default)]
struct StatRoom {
    stat: PfringStat,
    _spare: [u64; 4],
}

/// The packet header PF_RING fills (`struct pfring_pkthdr`), with room to spare, aligned for its
/// `struct timeval` whatever the header's packing.
#[repr(C, align(8))]
struct HdrRoom([u8; PKTHDR_SIZE + 64]);

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
/// The pause after an empty read where `pfring_poll` cannot wait (not supported, or failing).
const NO_POLL_SLEEP: std::time::Duration = std::time::Duration::from_millis(1);

// PF_RING's return codes (userland/lib/pfring.h).
pub const PF_RING_ERROR_GENERIC: c_int = -1;
pub const PF_RING_ERROR_INVALID_ARGUMENT: c_int = -2;
pub const PF_RING_ERROR_NO_PKT_AVAILABLE: c_int = -3;
pub const PF_RING_ERROR_NO_TX_SLOT_AVAILABLE: c_int = -4;
pub const PF_RING_ERROR_WRONG_CONFIGURATION: c_int = -5;
pub const PF_RING_ERROR_END_OF_DEMO_MODE: c_int = -6;
pub const PF_RING_ERROR_NOT_SUPPORTED: c_int = -7;
pub const PF_RING_ERROR_INVALID_LIB_VERSION: c_int = -8;
pub const PF_RING_ERROR_UNKNOWN_ADAPTER: c_int = -9;
pub const PF_RING_ERROR_NOT_ENOUGH_MEMORY: c_int = -10;
pub const PF_RING_ERROR_INVALID_STATUS: c_int = -11;
pub const PF_RING_ERROR_RING_NOT_ENABLED: c_int = -12;

/// A PF_RING return code's name in pfring.h and its meaning in words.
fn code_words(code: c_int) -> Option<(&'static str, &'static str)> {
    Some(match code {
        PF_RING_ERROR_GENERIC => (
            "PF_RING_ERROR_GENERIC",
            "a failure PF_RING gives no reason for",
        ),
        PF_RING_ERROR_INVALID_ARGUMENT => {
            ("PF_RING_ERROR_INVALID_ARGUMENT", "an argument was refused")
        }
        PF_RING_ERROR_NO_PKT_AVAILABLE => {
            ("PF_RING_ERROR_NO_PKT_AVAILABLE", "no packet is waiting")
        }
        PF_RING_ERROR_NO_TX_SLOT_AVAILABLE => (
            "PF_RING_ERROR_NO_TX_SLOT_AVAILABLE",
            "no transmit slot is free",
        ),
        PF_RING_ERROR_WRONG_CONFIGURATION => (
            "PF_RING_ERROR_WRONG_CONFIGURATION",
            "the device or the ring is configured in a way that does not allow this",
        ),
        PF_RING_ERROR_END_OF_DEMO_MODE => (
            "PF_RING_ERROR_END_OF_DEMO_MODE",
            "the driver's demo mode has run out: it needs a licence",
        ),
        PF_RING_ERROR_NOT_SUPPORTED => (
            "PF_RING_ERROR_NOT_SUPPORTED",
            "this device's PF_RING module does not offer the call",
        ),
        PF_RING_ERROR_INVALID_LIB_VERSION => (
            "PF_RING_ERROR_INVALID_LIB_VERSION",
            "the library and the pf_ring kernel module are of different versions",
        ),
        PF_RING_ERROR_UNKNOWN_ADAPTER => (
            "PF_RING_ERROR_UNKNOWN_ADAPTER",
            "the adapter is not one this PF_RING knows",
        ),
        PF_RING_ERROR_NOT_ENOUGH_MEMORY => (
            "PF_RING_ERROR_NOT_ENOUGH_MEMORY",
            "PF_RING could not allocate the memory it needs",
        ),
        PF_RING_ERROR_INVALID_STATUS => (
            "PF_RING_ERROR_INVALID_STATUS",
            "the ring is in a state that does not allow this call",
        ),
        PF_RING_ERROR_RING_NOT_ENABLED => {
            ("PF_RING_ERROR_RING_NOT_ENABLED", "the ring is not enabled")
        }
        _ => return None,
    })
}

/// A PF_RING return code in words: "-7, PF_RING_ERROR_NOT_SUPPORTED: this device's PF_RING
/// module does not offer the call".
pub fn explain_code(code: c_int) -> String {
    match code_words(code) {
        Some((name, meaning)) => format!("{code}, {name}: {meaning}"),
        None => format!("{code}, not one of PF_RING's error codes"),
    }
}

/// The code and its name alone, for notes: "-7, PF_RING_ERROR_NOT_SUPPORTED".
fn code_name(code: c_int) -> String {
    match code_words(code) {
        Some((name, _)) => format!("{code}, {name}"),
        None => code.to_string(),
    }
}

fn explain_ref(code: &c_int) -> String {
    explain_code(*code)
}

/// The note for an optional call that failed: vdifrec carries on without it.
fn optional_note(call: &str, code: c_int, interface: &str, consequence: &str) -> String {
    if code == PF_RING_ERROR_NOT_SUPPORTED {
        format!(
            "pfring: {call} not supported by this device ({}): {consequence}",
            code_name(code)
        )
    } else {
        format!(
            "pfring: {call} failed on {interface} ({}): {consequence}",
            explain_code(code)
        )
    }
}

type Open = unsafe extern "C" fn(*const c_char, u32, u32) -> *mut c_void;
type SetInt = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
type SetU16 = unsafe extern "C" fn(*mut c_void, u16) -> c_int;
type SetName = unsafe extern "C" fn(*mut c_void, *mut c_char) -> c_int;
type Enable = unsafe extern "C" fn(*mut c_void) -> c_int;
type Recv = unsafe extern "C" fn(*mut c_void, *mut *mut u8, c_uint, *mut u8, u8) -> c_int;
type Stats = unsafe extern "C" fn(*mut c_void, *mut PfringStat) -> c_int;
type Poll = unsafe extern "C" fn(*mut c_void, c_uint) -> c_int;
type Close = unsafe extern "C" fn(*mut c_void);

#[derive(Debug, Error)]
pub enum PfRingError {
    /// No candidate library exists where the loader looks.
    #[error("PF_RING is not installed here: no {tried} could be loaded ({reasons}); install PF_RING (ntop.org) or use the udp backend")]
    NoLibrary { tried: String, reasons: String },
    /// A library exists but the loader refused it (not an ELF file, a missing dependency or
    /// symbol, another architecture, ...).
    #[error("PF_RING could not be loaded: {reasons}; repair or reinstall PF_RING, or use the udp backend")]
    Unloadable { reasons: String },
    #[error("{path} lacks {symbol} ({reason}): not a PF_RING library this vdifrec can use (PF_RING 8.x); use the udp backend")]
    Symbol {
        path: String,
        symbol: String,
        reason: String,
    },
    #[error("the pf_ring kernel module is not loaded (no /proc/net/pf_ring): `modprobe pf_ring`, or use the udp backend")]
    NoModule,
    #[error("the pfring backend needs an interface: name it (`ip link` lists them)")]
    NoInterface,
    #[error("pfring_open({interface}) failed: {source} (PF_RING reports every refusal of the device as ENODEV: does the interface exist and is it up, do you have CAP_NET_RAW, is its prefix (zc:, pcap:, ...) built into this PF_RING?); or use the udp backend")]
    Open {
        interface: String,
        source: io::Error,
    },
    #[error("{call} failed on {interface} ({}); the recording cannot go on", explain_ref(.code))]
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

/// The loader's own words for a libloading error: dlerror's message where there is one.
fn loader_reason(e: &libloading::Error) -> String {
    let mut reason = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        // libloading says "dlopen failed"; the source is dlerror's text, which says why.
        reason = s.to_string();
        source = s.source();
    }
    reason
}

/// Whether a load failure means the file is not there (rather than there but refused).
fn is_absent(candidate: &Path, reason: &str) -> bool {
    reason.contains("No such file or directory")
        || (candidate.components().count() > 1 && !candidate.exists())
}

/// "a", "a or b", "a, b or c".
fn or_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

impl Api {
    /// Loads `path`, or the first of the usual names that loads; every refusal is kept, in
    /// the loader's words.
    fn load(path: Option<&Path>) -> Result<(Api, String), PfRingError> {
        let candidates: Vec<PathBuf> = match path {
            Some(p) => vec![p.to_path_buf()],
            None => LIBRARY_NAMES.iter().map(PathBuf::from).collect(),
        };
        let mut reasons = Vec::new();
        let mut all_absent = true;
        let mut lacking = None;
        for c in &candidates {
            let name = c.display().to_string();
            // SAFETY: loading a shared library runs its initialisers; PF_RING's are benign.
            match unsafe { Library::new(c) } {
                Ok(lib) => match Api::resolve(lib, &name) {
                    Ok(api) => return Ok((api, name)),
                    Err(e) => {
                        all_absent = false;
                        reasons.push(e.to_string());
                        lacking.get_or_insert(e);
                    }
                },
                Err(e) => {
                    let reason = loader_reason(&e);
                    all_absent &= is_absent(c, &reason);
                    // dlerror names the file itself, mostly; say it where it does not.
                    reasons.push(if reason.contains(name.as_str()) {
                        reason
                    } else {
                        format!("{name}: {reason}")
                    });
                }
            }
        }
        if let (Some(e), 1) = (lacking.take(), candidates.len()) {
            return Err(e);
        }
        let reasons = reasons.join("; ");
        Err(if all_absent {
            let tried: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
            PfRingError::NoLibrary {
                tried: or_list(&tried),
                reasons,
            }
        } else {
            PfRingError::Unloadable { reasons }
        })
    }

    fn resolve(lib: Library, path: &str) -> Result<Api, PfRingError> {
        macro_rules! sym {
            ($name:literal) => {{
                // SAFETY: the symbol is declared with PF_RING 8.x's prototype above.
                let s: libloading::Symbol<'_, _> = unsafe {
                    lib.get(concat!($name, "\0").as_bytes())
                }
                .map_err(|e| PfRingError::Symbol {
                    path: path.to_string(),
                    symbol: $name.to_string(),
                    reason: loader_reason(&e),
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
    interface: String,
    /// Which packets are ours; it counts the IP fragments to our port.
    filter: PortFilter,
    hdr: HdrRoom,
    stat: StatRoom,
    /// `pfring_stats` works on this device (else kernel drops read as 0).
    stats_ok: bool,
    /// `pfring_poll` works on this device (else an empty read is followed by a short sleep).
    poll_ok: bool,
    drops: u64,
}

// SAFETY: the PF_RING handle is used by the capture thread alone after it is moved there.
unsafe impl Send for PfRingBackend {}

impl PfRingBackend {
    /// Loads the library (`library`, or the system's), checks the kernel module (unless
    /// `check_module` is false: for stand-in libraries in tests), opens `interface`.
    ///
    /// Only `pfring_open` and `pfring_enable_ring` failing is an error. The other set-up calls
    /// (direction, socket mode, poll watermark, application name) and the statistics are
    /// optional, as in ntop's own tools: a device that does not offer them (PF_RING's `pcap:`
    /// devices, for one) is recorded from all the same, each missing call told in a note.
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
        // From here the handle is the backend's: dropping it (on an error too) closes it.
        let mut backend = PfRingBackend {
            api,
            ring,
            interface: interface.to_string(),
            filter: PortFilter::new(port, offset),
            hdr: HdrRoom([0; PKTHDR_SIZE + 64]),
            stat: StatRoom::default(),
            stats_ok: true,
            poll_ok: true,
            drops: 0,
        };
        let mut notes = Vec::new();
        let mut app = *b"vdifrec\0";
        // SAFETY: a live handle; the name outlives the call.
        let (direction, mode, watermark, name) = unsafe {
            (
                (backend.api.set_direction)(ring, RX_ONLY_DIRECTION),
                (backend.api.set_socket_mode)(ring, RECV_ONLY_MODE),
                (backend.api.set_poll_watermark)(ring, POLL_WATERMARK),
                (backend.api.set_application_name)(ring, app.as_mut_ptr() as *mut c_char),
            )
        };
        let optional = [
            (
                "pfring_set_direction",
                direction,
                format!("receiving both directions (packets this host sends to port {port} are recorded too)"),
            ),
            (
                "pfring_set_socket_mode",
                mode,
                "the ring stays open for sending too (vdifrec only receives)".to_string(),
            ),
            (
                "pfring_set_poll_watermark",
                watermark,
                "polls wake at the device's own watermark".to_string(),
            ),
            (
                "pfring_set_application_name",
                name,
                "the ring is not named vdifrec in /proc/net/pf_ring".to_string(),
            ),
        ];
        for (call, code, consequence) in &optional {
            if *code < 0 {
                notes.push(optional_note(call, *code, interface, consequence));
            }
        }
        // SAFETY: a live handle.
        let rc = unsafe { (backend.api.enable_ring)(ring) };
        if rc < 0 {
            return Err(PfRingError::Call {
                call: "pfring_enable_ring",
                code: rc,
                interface: interface.to_string(),
            });
        }
        let rc = backend.read_stats();
        if rc < 0 {
            backend.stats_ok = false;
            notes.push(optional_note(
                "pfring_stats",
                rc,
                interface,
                "kernel drops cannot be counted and read as 0",
            ));
        }
        // SAFETY: a live, enabled handle; a wait of 0 returns at once.
        let rc = unsafe { (backend.api.poll)(ring, 0) };
        if rc < 0 {
            backend.poll_ok = false;
            notes.push(optional_note(
                "pfring_poll",
                rc,
                interface,
                "an empty ring is read again after 1 ms instead",
            ));
        }
        notes.insert(
            0,
            format!(
                "pfring: {lib_name} on {interface}, {}, {}, UDP port {port}",
                if direction < 0 {
                    "both directions"
                } else {
                    "RX only"
                },
                if mode < 0 {
                    "send and receive mode"
                } else {
                    "receive only"
                },
            ),
        );
        Ok((backend, notes))
    }

    /// Calls `pfring_stats`; on success keeps the drop count. Returns PF_RING's code.
    fn read_stats(&mut self) -> c_int {
        let room: *mut StatRoom = &mut self.stat;
        // SAFETY: a live handle, and an aligned pfring_stat with room to spare after it.
        let rc = unsafe { (self.api.stats)(self.ring, room.cast::<PfringStat>()) };
        if rc >= 0 {
            self.drops = self.stat.stat.drop;
        }
        rc
    }

    /// A failed `pfring_recv` stops the recording: PF_RING does not recover from it.
    fn recv_error(&self, rc: c_int) -> io::Error {
        io::Error::other(super::FatalReceive(format!(
            "pfring_recv failed on {} ({})",
            self.interface,
            explain_code(rc)
        )))
    }
}

impl PfRingBackend {
    /// The packet's receive stamp from the header PF_RING filled (`ts`, a timeval: µs), in ns;
    /// 0 where PF_RING left it empty.
    fn stamp(&self) -> i64 {
        let word =
            |at: usize| i64::from_ne_bytes(self.hdr.0[at..at + 8].try_into().expect("8 bytes"));
        let (sec, usec) = (word(0), word(8));
        if sec <= 0 {
            return 0;
        }
        sec * 1_000_000_000 + usec * 1_000
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
            let rc = unsafe { (self.api.recv)(self.ring, &mut buf, 0, self.hdr.0.as_mut_ptr(), 0) };
            if rc < 0 && rc != PF_RING_ERROR_NO_PKT_AVAILABLE {
                return if n > 0 {
                    Ok(n)
                } else {
                    Err(self.recv_error(rc))
                };
            }
            if rc <= 0 || buf.is_null() {
                if n > 0 || waited {
                    break;
                }
                // An empty ring: sleep in the kernel until the watermark's worth of packets
                // (or the timeout), rather than spinning; then return so the stop flag is seen.
                // SAFETY: a live, enabled handle.
                if !self.poll_ok || unsafe { (self.api.poll)(self.ring, POLL_MS) } < 0 {
                    std::thread::sleep(NO_POLL_SLEEP);
                }
                waited = true;
                continue;
            }
            let caplen = u32::from_le_bytes(
                self.hdr.0[PKTHDR_CAPLEN..PKTHDR_CAPLEN + 4]
                    .try_into()
                    .expect("4 bytes"),
            );
            // SAFETY: PF_RING guarantees caplen bytes at buf until the next receive.
            let packet = unsafe { std::slice::from_raw_parts(buf, caplen as usize) };
            // SAFETY: the caller guarantees dst holds max * stride bytes.
            if let Some(mut d) = unsafe { self.filter.take(packet, dst.add(n * stride), stride) } {
                d.kernel_ns = self.stamp();
                info[n] = d;
                n += 1;
            }
        }
        Ok(n)
    }

    fn kernel_drops(&mut self) -> u64 {
        if self.stats_ok {
            self.read_stats();
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

    /// pfring_stat holds u64s: PF_RING writes it 8-byte aligned, which a byte array is not.
    #[test]
    fn stat_is_received_aligned() {
        assert_eq!(std::mem::align_of::<PfringStat>(), 8);
        assert_eq!(std::mem::align_of::<StatRoom>(), 8);
        assert_eq!(std::mem::offset_of!(StatRoom, stat), 0);
        assert!(std::mem::size_of::<StatRoom>() > STAT_SIZE);
        assert_eq!(std::mem::offset_of!(PfringStat, recv), 0);
        assert_eq!(std::mem::offset_of!(PfringStat, shunt), 16);
        assert_eq!(std::mem::align_of::<HdrRoom>(), 8);
        assert!(std::mem::size_of::<HdrRoom>() >= PKTHDR_SIZE);
        // The place a backend keeps it is aligned too, wherever the backend lies.
        let rooms = [StatRoom::default(), StatRoom::default()];
        for r in &rooms {
            assert_eq!(&r.stat as *const PfringStat as usize % 8, 0);
        }
    }

    #[test]
    fn pfring_codes_are_explained() {
        assert_eq!(
            explain_code(-7),
            "-7, PF_RING_ERROR_NOT_SUPPORTED: this device's PF_RING module does not offer the call"
        );
        assert_eq!(code_name(-7), "-7, PF_RING_ERROR_NOT_SUPPORTED");
        let names = [
            (-1, "PF_RING_ERROR_GENERIC"),
            (-2, "PF_RING_ERROR_INVALID_ARGUMENT"),
            (-3, "PF_RING_ERROR_NO_PKT_AVAILABLE"),
            (-4, "PF_RING_ERROR_NO_TX_SLOT_AVAILABLE"),
            (-5, "PF_RING_ERROR_WRONG_CONFIGURATION"),
            (-6, "PF_RING_ERROR_END_OF_DEMO_MODE"),
            (-7, "PF_RING_ERROR_NOT_SUPPORTED"),
            (-8, "PF_RING_ERROR_INVALID_LIB_VERSION"),
            (-9, "PF_RING_ERROR_UNKNOWN_ADAPTER"),
            (-10, "PF_RING_ERROR_NOT_ENOUGH_MEMORY"),
            (-11, "PF_RING_ERROR_INVALID_STATUS"),
            (-12, "PF_RING_ERROR_RING_NOT_ENABLED"),
        ];
        for (code, name) in names {
            let s = explain_code(code);
            assert!(s.starts_with(&format!("{code}, {name}: ")), "{s}");
            assert!(s.len() > format!("{code}, {name}: ").len() + 5, "{s}");
        }
        assert_eq!(explain_code(-99), "-99, not one of PF_RING's error codes");
        assert_eq!(code_name(-99), "-99");
    }

    #[test]
    fn optional_calls_become_notes() {
        assert_eq!(
            optional_note(
                "pfring_set_direction",
                -7,
                "pcap:eth0",
                "receiving both directions"
            ),
            "pfring: pfring_set_direction not supported by this device \
             (-7, PF_RING_ERROR_NOT_SUPPORTED): receiving both directions"
        );
        let other = optional_note("pfring_stats", -1, "eth0", "kernel drops read as 0");
        assert!(
            other.starts_with("pfring: pfring_stats failed on eth0 (-1, PF_RING_ERROR_GENERIC: "),
            "{other}"
        );
        let fatal = PfRingError::Call {
            call: "pfring_enable_ring",
            code: -12,
            interface: "eth0".into(),
        }
        .to_string();
        assert!(
            fatal.starts_with(
                "pfring_enable_ring failed on eth0 (-12, PF_RING_ERROR_RING_NOT_ENABLED: "
            ),
            "{fatal}"
        );
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
        assert!(msg.contains("the udp backend"), "{msg}");
        // The loader's own reason, not libloading's "dlopen failed".
        assert!(
            msg.contains("/nonexistent/libpfring.so: cannot open shared object file"),
            "{msg}"
        );
        assert!(!msg.contains("--"), "{msg}");
    }

    #[test]
    fn each_default_name_is_tried_and_its_reason_kept() {
        let Err(e) = Api::load(None) else {
            return; // a PF_RING is installed here
        };
        let msg = e.to_string();
        for name in LIBRARY_NAMES {
            assert!(msg.contains(name), "{msg}");
        }
        assert!(
            msg.contains("libpfring.so, libpfring.so.8 or libpfring.so.1"),
            "{msg}"
        );
    }

    #[test]
    fn a_file_that_is_not_a_library_gives_the_loaders_reason() {
        let dir = std::env::temp_dir().join(format!("vdifrec-pfring-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("libpfring.so");
        std::fs::write(
            &fake,
            "this is a text file, not a shared library; ".repeat(4),
        )
        .unwrap();
        let msg = PfRingBackend::open("eth0", 46227, 0, Some(&fake), false)
            .err()
            .expect("not a library")
            .to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(msg.starts_with("PF_RING could not be loaded: "), "{msg}");
        assert!(msg.contains("invalid ELF header"), "{msg}");
        assert!(msg.contains(fake.to_str().unwrap()), "{msg}");
        assert!(!msg.contains("dlopen failed"), "{msg}");
    }

    #[test]
    fn a_library_without_pfring_names_the_missing_symbol_and_why() {
        // The C library loads everywhere and has no pfring_open.
        let msg = match Api::load(Some(Path::new("libc.so.6"))) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("libc is not PF_RING"),
        };
        assert!(msg.starts_with("libc.so.6 lacks pfring_open ("), "{msg}");
        assert!(msg.contains("undefined symbol: pfring_open"), "{msg}");
    }
}
