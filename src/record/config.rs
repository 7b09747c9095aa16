//! What a recording is asked to do: the options as the user gives them (`RecorderOptions`,
//! which owns every default) and the checked configuration the recorder runs on
//! (`RecorderConfig`, made only by `from_options`, which owns every check).

use crate::options::{self, in_range, ArgError, Size};
use crate::record::capture::udp::MAX_OFFSET;
use crate::record::diskio::Fault;
use crate::record::live::LiveConfig;
use crate::record::ring;
use crate::record::scan::{ScanSetup, Split};
use crate::units::format_size;
use crate::vdif::header::{
    check_datagram_frame_size, check_fps, check_frame_size, frame_size_from,
};
use crate::vdif::layout::Format;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// Smallest ring when the frame size is known: one aligned run of it (at least 1 MiB).
pub const MIN_RING_BYTES: u64 = 1 << 20;
/// Smallest ring when the frame size is learned from the first frame: one aligned run of the
/// largest frame that fits a datagram (512 frames of 65504 bytes), so that whatever arrives
/// can be laid out.
pub const MIN_RING_BYTES_UNKNOWN_FRAME: u64 = 32 << 20;
/// Rotated files are at least this large.
pub const MIN_FILE_SIZE: u64 = 1 << 20;
/// Highest CPU number accepted (the kernel's default NR_CPUS limit).
const MAX_CPU: i64 = 4095;

/// The options of a recording as a user gives them (`vdifrec.Recorder(...)`, `vdifrec
/// record`): plain values, sizes as bytes or text such as `"8GiB"`. `Default` is the one
/// place each default is written; Python reads it as `vdifrec.defaults["recorder"]`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecorderOptions {
    /// UDP port (0: any free port), or several as text: `46227,46228`, each may carry its own
    /// address: `46227@10.0.1.1`.
    pub port: PortOption,
    /// The streams' ports as a list (instead of `port`): numbers or `PORT@ADDRESS` text.
    pub ports: Vec<PortOption>,
    /// Address to listen on.
    pub bind: String,
    /// Multicast group to join.
    pub multicast: Option<String>,
    /// Write to this one file (rotated files get `_0001`, ...).
    pub path: Option<PathBuf>,
    /// Or write time-stamped files with `prefix` into this directory.
    pub directory: Option<PathBuf>,
    pub prefix: String,
    /// Ring buffer size.
    pub ring: Size,
    /// Bytes per frame, header included (None: learned from the first valid frame).
    pub frame_size: Option<i64>,
    /// Bytes to strip before each frame (8 for a packet sequence number).
    pub offset: i64,
    /// Count gaps in the 8-byte packet sequence numbers.
    pub psn: bool,
    /// Frames per second per thread (None: learned from the frame-number wrap).
    pub fps: Option<i64>,
    /// Start a new file after this many bytes.
    pub file_size: Option<Size>,
    pub capture_cpu: Option<i64>,
    pub writer_cpu: Option<i64>,
    /// O_DIRECT where the file system allows it.
    pub direct: bool,
    /// Socket receive buffer to ask for.
    pub rcvbuf: Size,
    pub huge_pages: bool,
    pub mlock: bool,
    /// Stop after this many frames are buffered.
    pub max_frames: Option<i64>,
    /// `udp`, `afpacket` or `pfring`.
    pub backend: String,
    /// The interface of the afpacket and pfring backends.
    pub interface: Option<String>,
    /// The `libpfring.so` to load (default: the loader's).
    pub pfring_library: Option<PathBuf>,
    /// Refuse to start without the `pf_ring` kernel module (off for a stand-in library).
    pub pfring_check_module: bool,
    /// Test aid: write at most this many bytes per second (a slow disk).
    pub throttle: Option<Size>,
    /// Test aid: the disk is full after this many bytes.
    pub disk_limit: Option<Size>,
    /// Headers arrive with each 32-bit word byte-swapped.
    pub big_endian: bool,
    /// Serve GET /status and /metrics here (`HOST:PORT`, or `PORT` for localhost).
    pub status_listen: Option<String>,
    /// The live quality monitor (None: on whenever the status is served).
    pub live: Option<bool>,
    /// Share of each second the live monitor analyses (None: what the spare CPU allows).
    pub live_fraction: Option<f64>,
    /// Spectral channels of the live spectra.
    pub live_nfft: i64,
    /// Per-stage latency stamps (kernel receive → capture → ring → disk), as histograms.
    pub latency: bool,
    /// Directories (one per disk) that scans are written to, or globs such as `/mnt/disk*`;
    /// none: no scans.
    pub disks: Vec<String>,
    /// Layout of scans on the disks: `file`, `vbs` or `mk6` (None: file on one disk, vbs on
    /// several).
    pub format: Option<String>,
    /// vbs chunk or mk6 block size, rounded to whole runs of 128 frames (None: 256 MiB for
    /// vbs, 8 MiB for mk6).
    pub chunk_size: Option<Size>,
    /// Scan writer threads (None: one per 5 Gbit/s of the stream plus one, at most one per disk).
    pub writers: Option<i64>,
    /// Test aid: disk directory → `full@SIZE` or `error@SIZE` (the disk fills or fails after
    /// that many bytes).
    pub disk_faults: std::collections::BTreeMap<PathBuf, String>,
    /// Write one scan per VDIF `thread` or `station`, named `<scan>_ds<key>` (None: one scan).
    pub split: Option<String>,
    /// Forward the stream live to these destinations while recording it
    /// (`udp://`/`udps://`/`tcp://HOST:PORT[?threads=..&channels=..&payload=..&rate=..]`).
    pub forward: Vec<String>,
}

impl Default for RecorderOptions {
    fn default() -> Self {
        RecorderOptions {
            port: PortOption::Number(0),
            ports: Vec::new(),
            bind: "127.0.0.1".into(),
            multicast: None,
            path: None,
            directory: None,
            prefix: "vdifrec".into(),
            ring: Size::bytes(1 << 30),
            frame_size: None,
            offset: 0,
            psn: false,
            fps: None,
            file_size: None,
            capture_cpu: None,
            writer_cpu: None,
            direct: true,
            rcvbuf: Size::bytes(256 << 20),
            huge_pages: true,
            mlock: true,
            max_frames: None,
            backend: "udp".into(),
            interface: None,
            pfring_library: None,
            pfring_check_module: true,
            throttle: None,
            disk_limit: None,
            big_endian: false,
            status_listen: None,
            live: None,
            live_fraction: None,
            live_nfft: 1024,
            latency: false,
            disks: Vec::new(),
            format: None,
            chunk_size: None,
            writers: None,
            disk_faults: Default::default(),
            split: None,
            forward: Vec::new(),
        }
    }
}

/// A port as given: a number, or text (`46227`, `46227@10.0.1.1`, a list `46227,46228`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum PortOption {
    Number(i64),
    Text(String),
}

/// Where one stream arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamAddr {
    pub bind: IpAddr,
    pub port: u16,
}

/// Every stream the options name: `port` (one, or a comma-separated list) or `ports`; each
/// on `bind` unless it names its own address (`PORT@ADDRESS`).
fn stream_addrs(o: &RecorderOptions, bind: IpAddr) -> Result<Vec<StreamAddr>, ArgError> {
    let (name, items): (&str, Vec<PortOption>) = if o.ports.is_empty() {
        let items = match &o.port {
            PortOption::Text(t) if t.contains(',') => t
                .split(',')
                .map(|x| PortOption::Text(x.trim().to_string()))
                .collect(),
            p => vec![p.clone()],
        };
        ("port", items)
    } else {
        if o.port != PortOption::Number(0) {
            return Err(ArgError::new(
                "ports",
                "give port or ports, not both (ports lists every stream)",
            ));
        }
        ("ports", o.ports.clone())
    };
    let hint = "0 picks a free port";
    let mut out: Vec<StreamAddr> = Vec::new();
    for item in items {
        let (number, addr) = match item {
            PortOption::Number(n) => (n, bind),
            PortOption::Text(t) => {
                let (p, a) = match t.split_once('@') {
                    Some((p, a)) => (p, options::ip(name, a)?),
                    None => (t.as_str(), bind),
                };
                let n = p.trim().parse::<i64>().map_err(|_| {
                    ArgError::new(
                        name,
                        format!("{t:?} is not a port: give a whole number 0..65535, PORT@ADDRESS, or a list such as 46227,46228"),
                    )
                })?;
                (n, a)
            }
        };
        let port = in_range(name, number, 0, 65_535, hint)? as u16;
        let s = StreamAddr { bind: addr, port };
        if port != 0 && out.contains(&s) {
            return Err(ArgError::new(
                name,
                format!("{port} is given twice: several senders into one port are one stream"),
            ));
        }
        out.push(s);
    }
    if out.is_empty() {
        return Err(ArgError::new(name, "no port given"));
    }
    Ok(out)
}

/// Which capture backend to use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// A UDP socket (recvmmsg): works everywhere, no privileges.
    Udp,
    /// A TPACKET_V3 ring on an interface (CAP_NET_RAW).
    AfPacket { interface: String },
    /// PF_RING on an interface, `libpfring.so` loaded at run time (`library` overrides where
    /// from; `check_module` false skips the kernel-module check, for stand-in libraries).
    PfRing {
        interface: String,
        library: Option<PathBuf>,
        check_module: bool,
    },
}

impl BackendKind {
    /// The backend's name, as the user chose it.
    pub fn name(&self) -> &'static str {
        match self {
            BackendKind::Udp => "udp",
            BackendKind::AfPacket { .. } => "afpacket",
            BackendKind::PfRing { .. } => "pfring",
        }
    }
}

/// Where recordings go.
#[derive(Clone, Debug)]
pub enum Target {
    /// One path; rotated files get `_0001`, `_0002`, ... before the extension.
    File(PathBuf),
    /// `{dir}/{prefix}_{YYYY}y{DOY}d{HH}h{MM}m{SS}s.vdif`, UTC of each file's first frame.
    Dir { dir: PathBuf, prefix: String },
}

impl Target {
    /// The directory the files go to (`.` for a bare file name).
    pub fn dir(&self) -> PathBuf {
        match self {
            Target::File(p) => p
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map_or(PathBuf::from("."), |d| d.to_path_buf()),
            Target::Dir { dir, .. } => dir.clone(),
        }
    }
}

/// Spectral channels the live monitor accepts.
const LIVE_NFFT: (i64, i64) = (16, 65_536);

/// The live monitor's settings: on with the status endpoint unless `live` says otherwise.
fn live(o: &RecorderOptions) -> Result<Option<LiveConfig>, ArgError> {
    let nfft = in_range(
        "live_nfft",
        o.live_nfft,
        LIVE_NFFT.0,
        LIVE_NFFT.1,
        "spectral channels of the live spectra",
    )? as usize;
    let fraction = match o.live_fraction {
        Some(f) if !(f > 0.0 && f <= 1.0) => {
            return Err(ArgError::new(
                "live_fraction",
                format!("{f} is not a share of a second: give a number in (0, 1], such as 0.0625 (1/16 of each second), or leave it out to let the spare CPU decide"),
            ))
        }
        f => f,
    };
    let on = o.live.unwrap_or(o.status_listen.is_some());
    if !on {
        let default = RecorderOptions::default().live_nfft;
        let given = [
            ("live_fraction", fraction.is_some()),
            ("live_nfft", o.live_nfft != default),
        ];
        if let Some((name, _)) = given.iter().find(|(_, g)| *g) {
            return Err(ArgError::new(
                name,
                "the live monitor is off (it runs with status_listen, or live=True; live=False turns it off): give status_listen or live=True, or leave it out",
            ));
        }
    }
    Ok(on.then_some(LiveConfig { fraction, nfft }))
}

/// Everything a recording needs to know, checked.
#[derive(Clone, Debug)]
pub struct RecorderConfig {
    /// The first stream's address and port.
    pub bind: IpAddr,
    pub port: u16,
    /// The other streams (each its own capture thread and ring), if several.
    pub more_streams: Vec<StreamAddr>,
    pub multicast: Option<IpAddr>,
    /// None: monitor without writing.
    pub target: Option<Target>,
    pub ring_bytes: u64,
    /// None: learned from the first valid frame.
    pub frame_size: Option<usize>,
    pub offset: usize,
    pub psn: bool,
    pub fps: Option<u32>,
    pub file_size: Option<u64>,
    pub capture_cpu: Option<usize>,
    pub writer_cpu: Option<usize>,
    /// With neither CPU given, pin the capture and writer to the last two CPUs this process
    /// may use, when it may use four or more (fewer: leave them to the scheduler).
    pub auto_pin: bool,
    pub direct: bool,
    pub rcvbuf: u64,
    pub huge_pages: bool,
    pub mlock: bool,
    /// Stop after this many frames are buffered.
    pub max_frames: Option<u64>,
    pub backend: BackendKind,
    /// Test aids for a slow or full disk (see WriterConfig).
    pub throttle: Option<u64>,
    pub disk_limit: Option<u64>,
    /// Headers arrive big-endian (each 32-bit word byte-swapped), as some senders write them.
    pub big_endian: bool,
    /// Serve GET /status and /metrics here (None: no status endpoint).
    pub status_listen: Option<SocketAddr>,
    /// The live quality monitor (None: off).
    pub live: Option<LiveConfig>,
    /// Per-stage latency stamps.
    pub latency: bool,
    /// Scans to disks (None: one continuous recording to `target`, or monitoring).
    pub scans: Option<ScanSetup>,
    /// Forwarding destinations, read and resolved (`forward::Destination`), as given.
    pub forward: Vec<String>,
}

impl Default for RecorderConfig {
    /// The defaults of `RecorderOptions`, checked.
    fn default() -> Self {
        RecorderConfig::build(&RecorderOptions::default(), false).expect("the defaults are valid")
    }
}

impl RecorderConfig {
    /// Checks every option and builds the configuration. Touches no file and no socket; the
    /// ring's size is compared with the memory the machine has now.
    pub fn from_options(o: &RecorderOptions) -> Result<RecorderConfig, ArgError> {
        RecorderConfig::build(o, true)
    }

    fn build(o: &RecorderOptions, check_memory: bool) -> Result<RecorderConfig, ArgError> {
        let bind = options::ip("bind", &o.bind)?;
        let mut streams = stream_addrs(o, bind)?;
        let first = streams.remove(0);
        let (bind, port) = (first.bind, first.port);
        let multicast = match &o.multicast {
            Some(m) => {
                let group = options::ip("multicast", m)?;
                if !group.is_multicast() {
                    return Err(ArgError::new(
                        "multicast",
                        format!("{group} is not a multicast group (224.0.0.0/4 or ff00::/8)"),
                    ));
                }
                Some(group)
            }
            None => None,
        };
        let target = target(o)?;
        let offset = offset(o.offset)?;
        let frame_size = match o.frame_size {
            // A negative size is refused here; `check` applies the datagram's limit and the
            // format's rule to the rest.
            Some(fs) => Some(usize::try_from(fs).map_err(|_| {
                ArgError::new("frame_size", frame_size_from(fs).err().unwrap_or_default())
            })?),
            None => None,
        };
        let fps = match o.fps {
            Some(f) => Some(check_fps(f).map_err(|why| ArgError::new("fps", why))?),
            None => None,
        };
        let ring_bytes = o.ring.get("ring")?;
        let file_size = positive_size("file_size", &o.file_size, MIN_FILE_SIZE)?;
        let rcvbuf = o.rcvbuf.get("rcvbuf")?;
        if rcvbuf == 0 || rcvbuf > i32::MAX as u64 {
            return Err(ArgError::new(
                "rcvbuf",
                format!("{rcvbuf} bytes: give 1 byte to 2GiB (the kernel's limit)"),
            ));
        }
        let cpu = |name, c: Option<i64>| -> Result<Option<usize>, ArgError> {
            c.map(|c| {
                in_range(name, c, 0, MAX_CPU, "a CPU number, as `lscpu` lists them")
                    .map(|c| c as usize)
            })
            .transpose()
        };
        let max_frames = match o.max_frames {
            Some(n) => Some(in_range("max_frames", n, 1, i64::MAX, "")?),
            None => None,
        };
        let backend = backend(o)?;
        let scans = scans(o)?;
        if scans.is_some() && target.is_some() {
            return Err(ArgError::new(
                "disks",
                "give disks (scans) or path/directory (one continuous recording), not both",
            ));
        }
        let config = RecorderConfig {
            bind,
            port,
            more_streams: streams,
            multicast,
            target,
            ring_bytes,
            frame_size,
            offset,
            psn: o.psn,
            fps,
            file_size,
            capture_cpu: cpu("capture_cpu", o.capture_cpu)?,
            writer_cpu: cpu("writer_cpu", o.writer_cpu)?,
            auto_pin: true,
            direct: o.direct,
            rcvbuf,
            huge_pages: o.huge_pages,
            mlock: o.mlock,
            max_frames,
            backend,
            throttle: positive_size("throttle", &o.throttle, 1)?,
            disk_limit: positive_size("disk_limit", &o.disk_limit, 1)?,
            big_endian: o.big_endian,
            status_listen: o
                .status_listen
                .as_deref()
                .map(|s| options::listen_address("status_listen", s))
                .transpose()?,
            live: live(o)?,
            latency: o.latency,
            scans,
            forward: o.forward.clone(),
        };
        config.check(check_memory)?;
        Ok(config)
    }

    /// The rules that join options, or that a configuration made in Rust could break: a PSN
    /// needs its 8 bytes, a given frame size must fit a datagram after the offset, the ring
    /// must hold its frames (and, with `check_memory`, fit the memory available), the raw
    /// backends need a port. `from_options` and `Recorder::start` both run it.
    pub fn check(&self, check_memory: bool) -> Result<(), ArgError> {
        offset(self.offset as i64)?;
        for f in &self.forward {
            crate::record::forward::Destination::parse(f)?;
        }
        if self.psn && self.offset < 8 {
            return Err(ArgError::new(
                "psn",
                format!(
                    "the 8-byte packet sequence number needs offset 8, not {}",
                    self.offset
                ),
            ));
        }
        if let Some(fs) = self.frame_size {
            udp_frame_size(fs, self.offset)?;
        }
        check_ring(
            self.ring_bytes,
            self.frame_size,
            self.huge_pages,
            check_memory,
        )?;
        if !self.more_streams.is_empty() {
            let why = if self.backend != BackendKind::Udp {
                Some("several streams are received with the udp backend")
            } else if self.target.is_some() {
                Some("several streams are written as scans (disks), not to path or directory")
            } else if self.multicast.is_some() {
                Some("a multicast group is joined for one stream")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(ArgError::new("port", why));
            }
        }
        if self.backend != BackendKind::Udp && self.port == 0 {
            return Err(ArgError::new(
                "port",
                "the afpacket and pfring backends select packets by port: give the stream's UDP port",
            ));
        }
        Ok(())
    }

    /// Whether each frame is tagged with its sender (scans split by sender).
    pub fn tags_senders(&self) -> bool {
        self.scans
            .as_ref()
            .is_some_and(|s| s.split == Some(Split::Sender))
    }

    /// Whether frames go to disk (a continuous recording, or scans): the ring then has a
    /// consumer and the capture never overwrites what it has not released.
    pub fn writes(&self) -> bool {
        self.target.is_some() || self.scans.is_some()
    }

    /// The directories frames go to, one per disk: the scans' disks, or the directory of the
    /// continuous recording's files; none when monitoring.
    pub fn disk_dirs(&self) -> Vec<PathBuf> {
        match (&self.scans, &self.target) {
            (Some(s), _) => s.disks.clone(),
            (None, Some(t)) => vec![t.dir()],
            (None, None) => Vec::new(),
        }
    }

    /// Where the stream is taken from, for the operator: `ADDRESS:PORT` for the udp backend,
    /// `INTERFACE:PORT (backend)` for the raw ones, which keep that port's packets.
    pub fn source(&self, port: u16) -> String {
        match &self.backend {
            BackendKind::Udp => SocketAddr::new(self.bind, port).to_string(),
            BackendKind::AfPacket { interface } | BackendKind::PfRing { interface, .. } => {
                format!("{interface}:{port} ({})", self.backend.name())
            }
        }
    }
}

/// Bytes stripped before each frame: up to `MAX_OFFSET`.
fn offset(value: i64) -> Result<usize, ArgError> {
    Ok(in_range(
        "offset",
        value,
        0,
        MAX_OFFSET as i64,
        "8 for a packet sequence number",
    )? as usize)
}

/// A frame size that is a VDIF frame and fits one UDP datagram after `offset` bytes.
fn udp_frame_size(bytes: usize, offset: usize) -> Result<(), ArgError> {
    let invalid = |why| ArgError::new("frame_size", why);
    check_datagram_frame_size(bytes, offset).map_err(invalid)?;
    check_frame_size(bytes).map_err(invalid)
}

fn positive_size(name: &str, v: &Option<Size>, least: u64) -> Result<Option<u64>, ArgError> {
    let Some(v) = v else { return Ok(None) };
    let bytes = v.get(name)?;
    if bytes < least {
        return Err(ArgError::new(
            name,
            format!(
                "{bytes} bytes is too small: give at least {}",
                format_size(least)
            ),
        ));
    }
    Ok(Some(bytes))
}

/// The ring must hold the frames it will get (one aligned run of them; of the largest frame a
/// datagram can carry when the frame size is to be learned), and no more than the machine can
/// give now: asking for more would fail (or swap) once the stream flows, losing what arrives.
fn check_ring(
    bytes: u64,
    frame_size: Option<usize>,
    huge_pages: bool,
    check_memory: bool,
) -> Result<(), ArgError> {
    let least = match frame_size {
        Some(fs) => ring::smallest_ring(fs).max(MIN_RING_BYTES),
        None => MIN_RING_BYTES_UNKNOWN_FRAME,
    };
    if bytes < least {
        let why = match frame_size {
            Some(fs) => format!("one aligned run of {fs}-byte frames"),
            None => "one aligned run of the largest frames, as the frame size is to be learned; give frame_size for less".into(),
        };
        return Err(ArgError::new(
            "ring",
            format!("{bytes} bytes is too small: give at least {least} ({why})"),
        ));
    }
    if !check_memory || ring::uses_huge_pages(bytes, huge_pages, frame_size) {
        return Ok(());
    }
    if let Some(available) = options::memory_available() {
        if bytes > available {
            return Err(ArgError::new(
                "ring",
                format!(
                    "{} is more than the {} of memory this machine has available now (MemAvailable): give a smaller ring",
                    format_size(bytes),
                    format_size(available)
                ),
            ));
        }
    }
    Ok(())
}

fn target(o: &RecorderOptions) -> Result<Option<Target>, ArgError> {
    match (&o.path, &o.directory) {
        (Some(_), Some(_)) => Err(ArgError::new(
            "path",
            "give path or directory, not both (path for one named file, directory + prefix for time-stamped names)",
        )),
        (Some(p), None) => {
            if p.as_os_str().is_empty() {
                return Err(ArgError::new("path", "an empty path names no file"));
            }
            Ok(Some(Target::File(p.clone())))
        }
        (None, Some(d)) => {
            let prefix = &o.prefix;
            // File names add `_YYYYyDOYdHHhMMmSSs_NNNN.vdif` (30 bytes) to the prefix; most
            // file systems take 255.
            if prefix.len() > 200 {
                return Err(ArgError::new(
                    "prefix",
                    format!("{} bytes is too long for a file name: give at most 200", prefix.len()),
                ));
            }
            if prefix.is_empty()
                || prefix.contains('/')
                || prefix.contains('\0')
                || prefix.starts_with('.')
            {
                return Err(ArgError::new(
                    "prefix",
                    format!("{prefix:?} is not a plain file-name prefix (no '/', not starting with '.')"),
                ));
            }
            if d.as_os_str().is_empty() {
                return Err(ArgError::new("directory", "an empty path names no directory"));
            }
            Ok(Some(Target::Dir {
                dir: d.clone(),
                prefix: prefix.clone(),
            }))
        }
        (None, None) => Ok(None),
    }
}

/// Most scan writer threads.
const MAX_WRITERS: i64 = 64;

fn scans(o: &RecorderOptions) -> Result<Option<ScanSetup>, ArgError> {
    let scan_only = |name: &str, given: bool| {
        if given && o.disks.is_empty() {
            Err(ArgError::new(
                name,
                "applies to scans: give the disks to write them to (disks, --disk DIR)",
            ))
        } else {
            Ok(())
        }
    };
    scan_only("format", o.format.is_some())?;
    scan_only("chunk_size", o.chunk_size.is_some())?;
    scan_only("writers", o.writers.is_some())?;
    scan_only("disk_faults", !o.disk_faults.is_empty())?;
    scan_only("split", o.split.is_some())?;
    if o.disks.is_empty() {
        return Ok(None);
    }
    let disks = options::disk_dirs("disks", &o.disks)?;
    let format = match o.format.as_deref() {
        None if disks.len() == 1 => Format::File,
        None => Format::Vbs,
        Some(f) => Format::parse(f).ok_or_else(|| {
            ArgError::new(
                "format",
                format!("{f:?} is not a format: choose {}", Format::NAMES),
            )
        })?,
    };
    if format == Format::File && disks.len() > 1 {
        return Err(ArgError::new(
            "format",
            format!(
                "file writes a scan to one disk and {} are given: choose vbs or mk6 to spread scans over them",
                disks.len()
            ),
        ));
    }
    let chunk_bytes = positive_size("chunk_size", &o.chunk_size, 1)?;
    if let Some(b) = chunk_bytes {
        // A Mark6 block's size is a signed 32-bit field.
        if format == Format::Mk6 && b > (i32::MAX as u64) / 2 {
            return Err(ArgError::new(
                "chunk_size",
                format!("{b} bytes: a Mark6 block holds at most 1 GiB"),
            ));
        }
    }
    let writers = o
        .writers
        .map(|n| {
            in_range(
                "writers",
                n,
                1,
                MAX_WRITERS,
                "one per disk is the most that helps",
            )
            .map(|n| n as usize)
        })
        .transpose()?;
    let mut faults = Vec::new();
    for (dir, text) in &o.disk_faults {
        if !disks.contains(dir) {
            return Err(ArgError::new(
                "disk_faults",
                format!("{} is not one of the disks", dir.display()),
            ));
        }
        let f = Fault::parse(text).map_err(|why| ArgError::new("disk_faults", why))?;
        faults.push((dir.clone(), f));
    }
    let split = match o.split.as_deref() {
        None => None,
        Some("sender") if o.backend != "udp" => {
            return Err(ArgError::new(
                "split",
                "sender: the senders' addresses are told by the udp backend only; split by thread or station, or use the udp backend",
            ))
        }
        Some(x) => Some(Split::parse(x).ok_or_else(|| {
            ArgError::new("split", format!("{x:?} is not a split: choose {}", Split::NAMES))
        })?),
    };
    let file_bytes = positive_size("file_size", &o.file_size, MIN_FILE_SIZE)?;
    if file_bytes.is_some() && format != Format::File {
        return Err(ArgError::new(
            "file_size",
            format!(
                "rotates file scans; {} scans are cut into chunks of chunk_size already: leave file_size out",
                format.name()
            ),
        ));
    }
    Ok(Some(ScanSetup {
        disks,
        format,
        chunk_bytes,
        file_bytes,
        writers,
        faults,
        direct: o.direct,
        split,
    }))
}

fn backend(o: &RecorderOptions) -> Result<BackendKind, ArgError> {
    let interface = || -> Result<String, ArgError> {
        match o.interface.as_deref().map(str::trim) {
            Some(i) if !i.is_empty() => Ok(i.to_string()),
            _ => Err(ArgError::new(
                "interface",
                format!(
                    "the {} backend reads an interface: name it (e.g. eth2; `ip link` lists them)",
                    o.backend
                ),
            )),
        }
    };
    match o.backend.as_str() {
        "udp" => Ok(BackendKind::Udp),
        "afpacket" => Ok(BackendKind::AfPacket {
            interface: interface()?,
        }),
        "pfring" => Ok(BackendKind::PfRing {
            interface: interface()?,
            library: o.pfring_library.clone(),
            check_module: o.pfring_check_module,
        }),
        other => Err(ArgError::new(
            "backend",
            format!("{other:?} is not a backend; choose udp, afpacket or pfring"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut RecorderOptions)) -> Result<RecorderConfig, ArgError> {
        let mut o = RecorderOptions::default();
        f(&mut o);
        RecorderConfig::from_options(&o)
    }

    #[test]
    fn each_bad_option_is_named() {
        let name = |f: fn(&mut RecorderOptions)| with(f).unwrap_err().name;
        assert_eq!(name(|o| o.port = PortOption::Number(99_999)), "port");
        assert_eq!(name(|o| o.port = PortOption::Text("1,x".into())), "port");
        assert_eq!(
            name(|o| o.port = PortOption::Text("1@nowhere".into())),
            "port"
        );
        assert_eq!(name(|o| o.port = PortOption::Text("5,5".into())), "port");
        assert_eq!(
            name(|o| {
                o.port = PortOption::Text("5,6".into());
                o.path = Some("/x".into());
            }),
            "port"
        );
        assert_eq!(
            name(|o| {
                o.port = PortOption::Number(5);
                o.ports = vec![PortOption::Number(6)];
            }),
            "ports"
        );
        assert_eq!(name(|o| o.ring = Size::Text("100TiB".into())), "ring");
        assert_eq!(name(|o| o.ring = Size::bytes(1000)), "ring");
        assert_eq!(name(|o| o.psn = true), "psn");
        assert_eq!(name(|o| o.offset = -1), "offset");
        assert_eq!(name(|o| o.fps = Some(0)), "fps");
        assert_eq!(name(|o| o.frame_size = Some(8225)), "frame_size");
        assert_eq!(name(|o| o.frame_size = Some(70_000)), "frame_size");
        assert_eq!(name(|o| o.backend = "dpdk".into()), "backend");
        assert_eq!(name(|o| o.bind = "x".into()), "bind");
        assert_eq!(name(|o| o.multicast = Some("10.0.0.1".into())), "multicast");
        assert_eq!(
            name(|o| o.status_listen = Some("nowhere".into())),
            "status_listen"
        );
        assert_eq!(name(|o| o.format = Some("vbs".into())), "format");
        fn two(o: &mut RecorderOptions) {
            o.disks = vec!["/a".into(), "/b".into()];
        }
        assert_eq!(
            name(|o| {
                two(o);
                o.format = Some("file".into())
            }),
            "format"
        );
        assert_eq!(
            name(|o| {
                two(o);
                o.format = Some("mk5".into())
            }),
            "format"
        );
        assert_eq!(
            name(|o| {
                two(o);
                o.writers = Some(0)
            }),
            "writers"
        );
        assert_eq!(
            name(|o| {
                two(o);
                o.path = Some("/x".into())
            }),
            "disks"
        );
        assert_eq!(name(|o| o.disks = vec!["/nowhere/disk*".into()]), "disks");
        assert_eq!(
            name(|o| {
                two(o);
                o.split = Some("port".into())
            }),
            "split"
        );
        assert_eq!(name(|o| o.split = Some("thread".into())), "split");
        assert_eq!(
            name(|o| {
                two(o);
                o.disk_faults.insert("/c".into(), "full@1MiB".into());
            }),
            "disk_faults"
        );
    }

    #[test]
    fn several_ports_each_with_an_address() {
        let c = with(|o| o.port = PortOption::Text("46227, 46228@10.0.1.1".into())).unwrap();
        assert_eq!((c.bind.to_string(), c.port), ("127.0.0.1".into(), 46227));
        assert_eq!(
            c.more_streams,
            [StreamAddr {
                bind: "10.0.1.1".parse().unwrap(),
                port: 46228
            }]
        );
        let c = with(|o| o.ports = vec![PortOption::Number(0), PortOption::Number(0)]).unwrap();
        assert_eq!(c.more_streams.len(), 1);
    }

    #[test]
    fn defaults_are_valid_and_psn_with_offset_8_is() {
        let c = RecorderConfig::default();
        assert_eq!(c.ring_bytes, 1 << 30);
        assert!(with(|o| {
            o.psn = true;
            o.offset = 8;
            o.frame_size = Some(8224);
        })
        .is_ok());
    }
}
