//! Remote status for the control room: `GET /` (the control-room page), `GET /status` (JSON),
//! `GET /history` (the last ten minutes of per-second rows, JSON) and `GET /metrics`
//! (Prometheus text exposition), from a small HTTP/1.1 server on its own thread.
//!
//! The page is one self-contained file (`status_page.html`: HTML, CSS and its script inline,
//! compiled into the library), so it works offline in an air-gapped control room; it polls
//! `/status` once a second.
//!
//! It serves the snapshots the engine publishes: reading them never blocks the capture (the
//! capture skips a publication rather than wait for a reader). One connection at a time, one
//! request per connection, bounded reads and timeouts, so a slow or hostile client costs at
//! most a second of status, never a frame. How full the disks are is asked of their file
//! systems here, per request (`diskspace`), never on the recording's threads.

use crate::record::diskspace::{self, DiskSpace};
use crate::record::shared::{stats_of, Shared};
use crate::record::stats::Stats;
use crate::vdif::time::{utc_unix, VdifTime};
use serde::Serialize;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest request head read.
const MAX_REQUEST: usize = 8192;
/// How often the rates are sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);
/// Per-second rows `GET /history` serves: ten minutes of one stream.
const HISTORY_ROWS: usize = 600;
/// The control-room page.
const PAGE: &str = include_str!("status_page.html");

/// Received and written rates over the last samples.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Rates {
    pub frames_per_second: f64,
    pub receive_gbps: f64,
    pub write_gbps: f64,
}

#[derive(Serialize)]
struct Status<'a> {
    state: &'a str,
    /// The scan being written (from its start until its tail is on disk); null between scans
    /// and for a continuous recording.
    scan: Option<String>,
    /// The disks that scan is being written to (a disk that filled or failed has left it);
    /// empty between scans.
    scan_disks: Vec<String>,
    /// How much of that scan is known to be on disk, should the recorder die now: frames,
    /// bytes and the VDIF time of the last of them; null between scans.
    scan_durable: Option<&'a crate::record::stats::ScanDurable>,
    /// Why the last scan ended by itself (`scan NAME closed: no disk is left ...`), until
    /// the next one starts; null when it was stopped as asked.
    scan_ended: Option<String>,
    /// Scans no recorder closed that were on the disks when the recorder started (a crash
    /// left them): name, format, disks, whole frames and bytes, torn bytes, the note.
    unclosed_scans: Vec<crate::record::scan::unclosed::UnclosedScan>,
    /// What the process knows of the disks (`vdif::catalogue`): disks read, names at their
    /// tops, summaries noted, and whether the kernel reports their changes. The names
    /// themselves come a page at a time from `GET /scans`.
    catalogue: crate::vdif::catalogue::Size,
    /// The observation a schedule drives (`vdifrec observe`): the scan recording now, the
    /// next, those finished with their results; null when no schedule drives the recorder.
    observation: Option<crate::record::observing::Observation>,
    /// Fill of the fullest disk (0..1); null when monitoring.
    disk_fill: Option<f64>,
    disks: &'a [DiskSpace],
    start_time: String,
    start_unix: f64,
    /// UTC of the newest frame received.
    vdif_time: Option<String>,
    current_file: Option<&'a str>,
    current_file_bytes: u64,
    ring_fill: f64,
    rates: Rates,
    last_second: Option<crate::record::stats::RecordRow>,
    stats: &'a Stats,
    /// The live monitor's newest look (null when it is off or has not looked yet).
    live: Option<crate::record::live::LiveSnapshot>,
    /// Per-stage latency histograms (null unless latency stamps are on).
    latency: Option<crate::record::latency::LatencyReport>,
}

/// A running status server; stops when dropped.
pub struct StatusServer {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    pub local: SocketAddr,
}

impl StatusServer {
    /// Serves the streams' state (the first stream's times and rows, every stream's counters)
    /// and how full `disks` are (the directories the recording writes to).
    pub fn start(
        addr: SocketAddr,
        shared: Vec<Arc<Shared>>,
        disks: Vec<PathBuf>,
    ) -> std::io::Result<StatusServer> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let local = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("vdifrec-status".into())
            .spawn(move || serve(listener, shared, disks, &stop2))?;
        Ok(StatusServer {
            stop,
            handle: Some(handle),
            local,
        })
    }
}

impl Drop for StatusServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn serve(listener: TcpListener, shared: Vec<Arc<Shared>>, disks: Vec<PathBuf>, stop: &AtomicBool) {
    crate::affinity::name_current("vdifrec-status");
    let samples: Mutex<Vec<(Instant, u64, u64, u64)>> = Mutex::new(Vec::new());
    let mut last_sample = Instant::now() - SAMPLE_EVERY;
    while !stop.load(Ordering::Acquire) {
        if last_sample.elapsed() >= SAMPLE_EVERY {
            sample(&shared, &samples);
            last_sample = Instant::now();
        }
        match listener.accept() {
            Ok((stream, _)) => {
                let rates = rates(&samples);
                let _ = handle(stream, &shared, &disks, rates);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn sample(shared: &[Arc<Shared>], samples: &Mutex<Vec<(Instant, u64, u64, u64)>>) {
    let s = stats_of(shared);
    let mut v = samples.lock().unwrap();
    v.push((
        Instant::now(),
        s.capture.frames_received,
        s.capture.bytes_received,
        s.bytes_written,
    ));
    // Keep about three seconds.
    let n = v.len();
    if n > 7 {
        v.drain(..n - 7);
    }
}

fn rates(samples: &Mutex<Vec<(Instant, u64, u64, u64)>>) -> Rates {
    let v = samples.lock().unwrap();
    let (Some(first), Some(last)) = (v.first(), v.last()) else {
        return Rates::default();
    };
    let dt = last.0.duration_since(first.0).as_secs_f64();
    if dt <= 0.0 {
        return Rates::default();
    }
    Rates {
        frames_per_second: (last.1 - first.1) as f64 / dt,
        receive_gbps: (last.2 - first.2) as f64 * 8.0 / dt / 1e9,
        write_gbps: (last.3 - first.3) as f64 * 8.0 / dt / 1e9,
    }
}

fn handle(
    mut stream: TcpStream,
    shared: &[Arc<Shared>],
    disks: &[PathBuf],
    rates: Rates,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    let mut buf = vec![0u8; MAX_REQUEST];
    let mut got = 0;
    // Read the request head (we need only its first line), bounded in size and time.
    while got < buf.len() {
        let n = stream.read(&mut buf[got..])?;
        if n == 0 {
            break;
        }
        got += n;
        if buf[..got].windows(4).any(|w| w == b"\r\n\r\n") || buf[..got].contains(&b'\n') {
            break;
        }
    }
    let head = String::from_utf8_lossy(&buf[..got]);
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let (code, kind, body) = match (method, path) {
        ("GET", "/scans") => ("200 OK", "application/json", scans_json(disks, query)),
        ("GET", "/status") => (
            "200 OK",
            "application/json",
            status_json(shared, &diskspace::disks_now(disks), rates),
        ),
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            metrics(shared, &diskspace::disks_now(disks)),
        ),
        ("GET", "/history") => ("200 OK", "application/json", history_json(shared)),
        ("GET", "/") => ("200 OK", "text/html; charset=utf-8", PAGE.to_string()),
        ("GET", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: try / (the page), /status, /history, /metrics or /scans?offset=0&limit=50&name=PATTERN\n"
                .to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET\n".to_string(),
        ),
    };
    let head = format!(
        "HTTP/1.1 {code}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

fn iso(unix: f64) -> String {
    VdifTime {
        unix_seconds: unix.floor() as i64,
        fraction: unix - unix.floor(),
    }
    .iso()
}

/// Most names one `GET /scans` returns: a page, never a season.
const MOST_NAMES: usize = 500;

/// `GET /scans?offset=N&limit=N&name=PATTERN`: a page of the scan names on the recorder's disks
/// as the catalogue holds them (no disk is walked), with how many match in all.
fn scans_json(disks: &[PathBuf], query: &str) -> String {
    let (mut offset, mut limit, mut pattern) = (0usize, 50usize, None::<String>);
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decoded(value);
        match key {
            "offset" => offset = value.parse().unwrap_or(0),
            "limit" => limit = value.parse().unwrap_or(50),
            "name" if !value.is_empty() => pattern = Some(value),
            _ => {}
        }
    }
    if disks.is_empty() {
        return r#"{"total": 0, "offset": 0, "names": []}"#.to_string();
    }
    let page = crate::vdif::scan::scan_names(
        disks,
        pattern.as_deref(),
        offset,
        Some(limit.min(MOST_NAMES)),
    );
    match page {
        Ok(p) => serde_json::to_string(&p).unwrap_or_default(),
        Err(e) => serde_json::json!({ "error": e.to_string() }).to_string(),
    }
}

/// `%2A` → `*`, `+` → space: a query value as a browser sends it.
fn percent_decoded(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The JSON document of `GET /status`, with `disks` as their file systems report them now.
pub fn status_json(streams: &[Arc<Shared>], disks: &[DiskSpace], rates: Rates) -> String {
    let shared = &streams[0];
    let stats = stats_of(streams);
    let vdif_time = stats.capture.latest_frame.map(|f| {
        let fps = stats.capture.frames_per_second.max(1) as f64;
        iso(utc_unix(f.ref_epoch, f.seconds) as f64 + f.frame_nr as f64 / fps)
    });
    let doc = Status {
        state: stats.state,
        scan: shared.scan(),
        scan_disks: shared.scan_disks(),
        // The snapshot's, read before its bytes written: never more than they.
        scan_durable: stats.scan_durable.as_ref(),
        scan_ended: shared.scan_ended(),
        unclosed_scans: shared.unclosed_scans(),
        catalogue: crate::vdif::catalogue::size(),
        observation: shared.observation(),
        disk_fill: diskspace::fullest(disks),
        disks,
        start_time: iso(shared.started_unix()),
        start_unix: shared.started_unix(),
        vdif_time,
        current_file: stats.current_file.as_deref(),
        current_file_bytes: stats.current_file_bytes,
        ring_fill: stats.ring_fill,
        rates,
        last_second: shared.last_row(),
        stats: &stats,
        live: shared.live().snapshot(),
        latency: latency_of(streams),
    };
    serde_json::to_string(&doc).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// Every stream's latency stamps added up (None when off).
fn latency_of(streams: &[Arc<Shared>]) -> Option<crate::record::latency::LatencyReport> {
    streams[0].latency()?;
    Some(crate::record::latency::report(
        streams.iter().filter_map(|s| s.latency()),
    ))
}

/// The JSON document of `GET /history`: the newest per-second rows (all streams').
pub fn history_json(streams: &[Arc<Shared>]) -> String {
    let rows = streams[0].last_rows(HISTORY_ROWS * streams.len());
    serde_json::to_string(&rows).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// Samples with owned labels as `metric` takes them.
fn labelled(v: &[(String, f64)]) -> Vec<(&str, f64)> {
    v.iter().map(|(l, x)| (l.as_str(), *x)).collect()
}

/// A label value as the text exposition writes it (`\`, `"` and newlines escaped).
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The Prometheus text exposition of `GET /metrics`, with `disks` as their file systems
/// report them now.
pub fn metrics(streams: &[Arc<Shared>], disks: &[DiskSpace]) -> String {
    let shared = &streams[0];
    let s = stats_of(streams);
    let c = &s.capture;
    let t = &c.totals.counts;
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, f64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, v) in samples {
            let _ = writeln!(out, "{name}{labels} {v}");
        }
    };
    metric(
        "vdifrec_frames_received_total",
        "counter",
        "VDIF frames buffered (destined for disk).",
        &[("", c.frames_received as f64)],
    );
    let network = t.lost.saturating_sub(c.kernel_drops);
    metric(
        "vdifrec_frames_lost_total",
        "counter",
        "Frames lost, by cause: network (sequence gaps not explained by the kernel), kernel (socket buffer drops), ring (ring full), malformed (datagrams not of the stream).",
        &[
            ("{cause=\"network\"}", network as f64),
            ("{cause=\"kernel\"}", c.kernel_drops as f64),
            ("{cause=\"ring\"}", c.ring_overflows as f64),
            ("{cause=\"malformed\"}", c.malformed.total() as f64),
        ],
    );
    metric(
        "vdifrec_frames_out_of_order_total",
        "counter",
        "Frames that arrived after a later frame of their thread.",
        &[("", t.out_of_order as f64)],
    );
    metric(
        "vdifrec_frames_duplicate_total",
        "counter",
        "Frames seen twice.",
        &[("", t.duplicates as f64)],
    );
    metric(
        "vdifrec_frames_invalid_total",
        "counter",
        "Frames flagged invalid by the sender (recorded).",
        &[("", t.invalid as f64)],
    );
    metric(
        "vdifrec_datagrams_total",
        "counter",
        "Datagrams received, of any kind.",
        &[("", c.datagrams as f64)],
    );
    let kinds: Vec<(String, f64)> = c
        .malformed
        .by_kind()
        .into_iter()
        .map(|(k, v)| (format!("{{kind=\"{k}\"}}"), v as f64))
        .collect();
    let kinds: Vec<(&str, f64)> = kinds.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    metric(
        "vdifrec_datagrams_malformed_total",
        "counter",
        "Malformed datagrams by kind (never written).",
        &kinds,
    );
    metric(
        "vdifrec_bytes_buffered_total",
        "counter",
        "Bytes received into the ring.",
        &[("", s.bytes_buffered as f64)],
    );
    metric(
        "vdifrec_bytes_written_total",
        "counter",
        "Bytes written to disk.",
        &[("", s.bytes_written as f64)],
    );
    // Each stream, labelled by its port (the counters above are their sums).
    let per_stream = |f: fn(&crate::record::stats::StreamStats) -> f64| -> Vec<(String, f64)> {
        s.streams
            .iter()
            .map(|x| (format!("{{stream=\"{}\"}}", x.port), f(x)))
            .collect()
    };
    let received = per_stream(|x| x.frames_received as f64);
    metric(
        "vdifrec_stream_frames_received_total",
        "counter",
        "VDIF frames buffered, per stream (port).",
        &labelled(&received),
    );
    let lost = per_stream(|x| x.frames_lost as f64);
    metric(
        "vdifrec_stream_frames_lost_total",
        "counter",
        "Frames missing from the sequence, per stream (port).",
        &labelled(&lost),
    );
    let drops = per_stream(|x| x.kernel_drops as f64);
    metric(
        "vdifrec_stream_kernel_drops_total",
        "counter",
        "Datagrams the kernel dropped, per stream (port).",
        &labelled(&drops),
    );
    let overflows = per_stream(|x| x.ring_overflows as f64);
    metric(
        "vdifrec_stream_ring_overflows_total",
        "counter",
        "Frames dropped because the stream's ring was full, per stream (port).",
        &labelled(&overflows),
    );
    let fill = per_stream(|x| x.ring_fill);
    metric(
        "vdifrec_stream_ring_fill_ratio",
        "gauge",
        "Fraction of the stream's ring holding frames not yet on disk, per stream (port).",
        &labelled(&fill),
    );
    metric(
        "vdifrec_ring_fill_ratio",
        "gauge",
        "Fraction of ring slots holding frames not yet on disk.",
        &[("", s.ring_fill)],
    );
    metric(
        "vdifrec_ring_slots",
        "gauge",
        "Frames the ring holds.",
        &[("", s.ring_slots as f64)],
    );
    // The running scan's part known to be on disk (0 between scans): what a power loss now
    // would leave of it.
    let durable = s.scan_durable.clone().unwrap_or_default();
    metric(
        "vdifrec_scan_durable_frames",
        "gauge",
        "Frames of the running scan known to be on disk (synced), from its start without a gap; 0 between scans.",
        &[("", durable.frames as f64)],
    );
    metric(
        "vdifrec_scan_durable_bytes",
        "gauge",
        "Bytes of frames of the running scan known to be on disk (synced), from its start without a gap; 0 between scans.",
        &[("", durable.bytes as f64)],
    );
    if let Some(t) = durable.up_to_unix {
        metric(
            "vdifrec_scan_durable_vdif_time_seconds",
            "gauge",
            "VDIF time of the last frame of the running scan known to be on disk, POSIX seconds.",
            &[("", t)],
        );
    }
    if let Some(o) = shared.observation() {
        metric(
            "vdifrec_schedule_scans",
            "gauge",
            "Scans of the schedule for this station: planned, recorded (whole, as scheduled), missed (not recorded or cut short), mismatched (the stream was not the schedule's mode).",
            &[
                ("{state=\"planned\"}", o.scans_planned as f64),
                ("{state=\"recorded\"}", o.scans_recorded as f64),
                ("{state=\"missed\"}", o.scans_missed as f64),
                ("{state=\"mismatched\"}", o.scans_mismatched as f64),
            ],
        );
        if let Some(c) = o.clock_offset_s {
            metric(
                "vdifrec_clock_offset_seconds",
                "gauge",
                "VDIF time of the stream minus the host clock (positive: the formatter is ahead).",
                &[("", c)],
            );
        }
        if let Some(n) = &o.next {
            metric(
                "vdifrec_next_scan_start_seconds",
                "gauge",
                "Start of the next scan's recording window, POSIX seconds.",
                &[("", n.window_start_unix)],
            );
        }
    }
    metric(
        "vdifrec_current_file_bytes",
        "gauge",
        "Size of the file being written.",
        &[("", s.current_file_bytes as f64)],
    );
    metric(
        "vdifrec_files_closed",
        "gauge",
        "Files completed so far.",
        &[("", s.files_closed as f64)],
    );
    // Each disk the recording writes to, labelled by its directory (none when monitoring; a
    // disk whose file system could not be asked has no sample: /status says why).
    let per_disk = |f: fn(&DiskSpace) -> Option<f64>| -> Vec<(String, f64)> {
        disks
            .iter()
            .filter_map(|d| Some((format!("{{disk=\"{}\"}}", label_value(&d.path)), f(d)?)))
            .collect()
    };
    let fill = per_disk(|d| d.fill);
    metric(
        "vdifrec_disk_fill_ratio",
        "gauge",
        "Fraction of the disk's file system in use, used / (used + free to the recorder), as df's Use%; per disk (directory).",
        &labelled(&fill),
    );
    let free = per_disk(|d| d.free_bytes.map(|b| b as f64));
    metric(
        "vdifrec_disk_free_bytes",
        "gauge",
        "Bytes the recorder may still write on the disk's file system, per disk (directory).",
        &labelled(&free),
    );
    let size = per_disk(|d| d.size_bytes.map(|b| b as f64));
    metric(
        "vdifrec_disk_size_bytes",
        "gauge",
        "Size of the disk's file system, per disk (directory).",
        &labelled(&size),
    );
    metric(
        "vdifrec_start_time_seconds",
        "gauge",
        "POSIX time the recording started.",
        &[("", shared.started_unix())],
    );
    if let Some(f) = c.latest_frame {
        let fps = c.frames_per_second.max(1) as f64;
        let t = utc_unix(f.ref_epoch, f.seconds) as f64 + f.frame_nr as f64 / fps;
        metric(
            "vdifrec_vdif_time_seconds",
            "gauge",
            "VDIF time of the newest frame, POSIX seconds.",
            &[("", t)],
        );
    }
    if let Some(age) = c.seconds_since_datagram {
        metric(
            "vdifrec_seconds_since_datagram",
            "gauge",
            "Seconds since the last datagram arrived.",
            &[("", age)],
        );
    }
    metric(
        "vdifrec_recording",
        "gauge",
        "1 while the recorder runs and receives, else 0.",
        &[("", f64::from(s.state == "recording"))],
    );
    metric(
        "vdifrec_capture_cpu_seconds_total",
        "counter",
        "CPU time of the capture thread.",
        &[("", c.capture_cpu_s)],
    );
    forward_metrics(&mut metric, &s.forward);
    live_metrics(&mut metric, shared.live());
    if shared.latency().is_some() {
        let stages = crate::record::latency::merged(streams.iter().filter_map(|s| s.latency()));
        latency_histogram(&mut out, &stages);
    }
    out
}

/// A metric family of the forwarding destinations: name, kind, help, value of one.
type Family = (
    &'static str,
    &'static str,
    &'static str,
    fn(&crate::record::forward::ForwardStats) -> f64,
);

/// Each forwarding destination, labelled by its `scheme://host:port` and id (a destination
/// removed and added again is a new id).
fn forward_metrics(
    metric: &mut impl FnMut(&str, &str, &str, &[(&str, f64)]),
    forward: &[crate::record::forward::ForwardStats],
) {
    if forward.is_empty() {
        return;
    }
    let each = |f: fn(&crate::record::forward::ForwardStats) -> f64| -> Vec<(String, f64)> {
        forward
            .iter()
            .map(|x| {
                (
                    format!(
                        "{{destination=\"{}\",id=\"{}\"}}",
                        label_value(&x.destination),
                        x.id
                    ),
                    f(x),
                )
            })
            .collect()
    };
    let families: [Family; 6] = [
        (
            "vdifrec_forward_frames_total",
            "counter",
            "Frames forwarded (input frames sent on), per destination.",
            |x| x.frames as f64,
        ),
        (
            "vdifrec_forward_skipped_total",
            "counter",
            "Frames passed over because the destination was slower than the stream or down.",
            |x| x.skipped as f64,
        ),
        (
            "vdifrec_forward_bytes_total",
            "counter",
            "Bytes put on the wire, per destination.",
            |x| x.bytes as f64,
        ),
        (
            "vdifrec_forward_reconnects_total",
            "counter",
            "Connections made again after the destination went away.",
            |x| x.reconnects as f64,
        ),
        (
            "vdifrec_forward_gbps",
            "gauge",
            "Rate on the wire over about the last second, Gbit/s.",
            |x| x.gbps,
        ),
        (
            "vdifrec_forward_up",
            "gauge",
            "1 while the destination is sending or paused (connected), else 0.",
            |x| {
                f64::from(matches!(
                    x.state,
                    crate::record::forward::LinkState::Sending
                        | crate::record::forward::LinkState::Paused
                ))
            },
        ),
    ];
    for (name, kind, help, f) in families {
        metric(name, kind, help, &labelled(&each(f)));
    }
}

/// The live monitor's findings: bit-state deviation, the strongest tone per channel, its
/// looks and skips.
fn live_metrics(
    metric: &mut impl FnMut(&str, &str, &str, &[(&str, f64)]),
    live: &crate::record::live::LiveState,
) {
    let snapshot = live.snapshot();
    metric(
        "vdifrec_live_spectra_total",
        "counter",
        "Looks the live monitor completed (spectra, bit statistics and tones of part of a second).",
        &[("", live.computed() as f64)],
    );
    metric(
        "vdifrec_live_skips_total",
        "counter",
        "Looks the live monitor skipped (it yields to the recording: frames overwritten while it read them, or no CPU to spare).",
        &[("", live.skips() as f64)],
    );
    metric(
        "vdifrec_live_cpu_seconds_total",
        "counter",
        "CPU time of the live monitor thread (lowest priority: it runs on idle CPU only).",
        &[("", live.cpu_s())],
    );
    let Some(s) = snapshot else {
        return;
    };
    metric(
        "vdifrec_live_vdif_second",
        "gauge",
        "VDIF second (POSIX) the live monitor's last look describes.",
        &[("", s.unix_second as f64)],
    );
    let label = |t: u32, c: u32| format!("{{thread=\"{t}\",channel=\"{c}\"}}");
    let deviation: Vec<(String, f64)> = s
        .report
        .bit_states
        .iter()
        .filter_map(|b| Some((label(b.thread, b.channel), b.deviation_pp?)))
        .collect();
    metric(
        "vdifrec_live_bit_state_deviation_pp",
        "gauge",
        "Largest difference between a bit state's measured and expected fraction (Gaussian noise at the optimal thresholds), percentage points, per thread and channel.",
        &labelled(&deviation),
    );
    // The strongest tone of each (thread, channel): tones come strongest first per channel.
    let mut strongest: Vec<&crate::record::live::LiveTone> = Vec::new();
    for t in &s.report.tones {
        if !strongest
            .iter()
            .any(|x| x.thread == t.thread && x.channel == t.channel)
        {
            strongest.push(t);
        }
    }
    let freq: Vec<(String, f64)> = strongest
        .iter()
        .map(|t| (label(t.thread, t.channel), t.frequency))
        .collect();
    metric(
        "vdifrec_live_tone_frequency_hz",
        "gauge",
        "Frequency of the strongest tone, Hz from the band's lower edge, per thread and channel.",
        &labelled(&freq),
    );
    let power: Vec<(String, f64)> = strongest
        .iter()
        .map(|t| (label(t.thread, t.channel), t.power_ratio))
        .collect();
    metric(
        "vdifrec_live_tone_power_ratio",
        "gauge",
        "Power of the strongest tone over the median of its spectrum, per thread and channel.",
        &labelled(&power),
    );
}

/// The per-stage latency histograms as one Prometheus histogram family.
fn latency_histogram(out: &mut String, stages: &[crate::record::latency::HistogramSnapshot]) {
    let name = "vdifrec_latency_seconds";
    let _ = writeln!(out, "# HELP {name} Latency per stage (kernel: receive stamp to capture; capture: to the ring; write: to the write call's return; durable: to the device; off: arrival minus the frame's VDIF time), sampled frames.");
    let _ = writeln!(out, "# TYPE {name} histogram");
    for (stage, h) in crate::record::latency::STAGES.iter().zip(stages) {
        for (edge, n) in h.cumulative() {
            let le = if edge.is_infinite() {
                "+Inf".to_string()
            } else {
                format!("{edge:e}")
            };
            let _ = writeln!(out, "{name}_bucket{{stage=\"{stage}\",le=\"{le}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "{name}_sum{{stage=\"{stage}\"}} {}",
            h.sum_ns as f64 * 1e-9
        );
        let _ = writeln!(out, "{name}_count{{stage=\"{stage}\"}} {}", h.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_on_the_disks_are_served_a_page_at_a_time() {
        let root =
            std::env::temp_dir().join(format!("vdifrec-status-scans-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let disks: Vec<PathBuf> = (0..2).map(|i| root.join(format!("d{i}"))).collect();
        for (i, d) in disks.iter().enumerate() {
            for k in 0..1200 {
                let dir = d.join(format!("s{k:04}"));
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join(format!("s{k:04}.{i:08}")), b"").unwrap();
            }
        }
        let page = |q: &str| -> serde_json::Value {
            serde_json::from_str(&scans_json(&disks, q)).unwrap()
        };
        let p = page("offset=1190&limit=50");
        assert_eq!(p["total"], 1200);
        let names: Vec<&str> = p["names"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            (1190..1200).map(|k| format!("s{k:04}")).collect::<Vec<_>>()
        );
        let p = page("name=s001%2A&limit=3");
        assert_eq!(p["total"], 10);
        assert_eq!(p["names"], serde_json::json!(["s0010", "s0011", "s0012"]));
        // Never the whole season in one answer.
        assert_eq!(
            page("limit=100000")["names"].as_array().unwrap().len(),
            MOST_NAMES
        );
        assert!(page("name=s[").get("error").is_some());
        assert_eq!(percent_decoded("r41%5Fkv%2A+x%zz"), "r41_kv* x%zz");
        std::fs::remove_dir_all(&root).unwrap();
    }

    fn disk(path: &str, fill: Option<f64>) -> DiskSpace {
        DiskSpace {
            path: path.into(),
            size_bytes: fill.map(|_| 4000),
            used_bytes: fill.map(|f| (4000.0 * f) as u64),
            free_bytes: fill.map(|f| (4000.0 * (1.0 - f)) as u64),
            fill,
            error: fill
                .is_none()
                .then(|| "No such file or directory (os error 2)".into()),
        }
    }

    #[test]
    fn the_scan_and_the_fullest_disk_are_served() {
        let shared = vec![Arc::new(Shared::new(true))];
        let disks = [
            disk("/mnt/disk0", Some(0.25)),
            disk("/mnt/disk \"1\"", Some(0.75)),
            disk("/mnt/gone", None),
        ];
        shared[0].set_scan(Some("ev001_Kv_scan1".into()));
        shared[0].set_scan_disks(vec!["/mnt/disk0".into(), "/mnt/disk \"1\"".into()]);
        let doc: serde_json::Value =
            serde_json::from_str(&status_json(&shared, &disks, Rates::default())).unwrap();
        // Nothing of the scan is on disk yet.
        assert_eq!(
            doc["scan_durable"],
            serde_json::json!({"frames": 0, "bytes": 0, "up_to": null})
        );
        assert!(metrics(&shared, &disks).contains("\nvdifrec_scan_durable_bytes 0\n"));
        shared[0].set_scan_durable(crate::record::stats::ScanDurable {
            frames: 256,
            bytes: 256 * 8224,
            up_to: Some("2026-07-01T00:33:20.025500000".into()),
            up_to_unix: Some(1_782_866_000.025_5),
        });
        let doc: serde_json::Value =
            serde_json::from_str(&status_json(&shared, &disks, Rates::default())).unwrap();
        assert_eq!(doc["scan"], "ev001_Kv_scan1");
        assert_eq!(doc["scan_durable"]["bytes"], 256 * 8224);
        assert_eq!(
            doc["scan_durable"]["up_to"],
            "2026-07-01T00:33:20.025500000"
        );
        assert_eq!(doc["stats"]["scan_durable_frames"], 256);
        assert_eq!(
            doc["stats"]["scan_durable_up_to"],
            "2026-07-01T00:33:20.025500000"
        );
        assert_eq!(
            doc["scan_disks"],
            serde_json::json!(["/mnt/disk0", "/mnt/disk \"1\""])
        );
        assert_eq!(doc["disk_fill"], 0.75);
        assert_eq!(doc["disks"][0]["path"], "/mnt/disk0");
        assert_eq!(doc["disks"][0]["size_bytes"], 4000);
        assert_eq!(doc["disks"][0]["used_bytes"], 1000);
        assert_eq!(doc["disks"][0]["free_bytes"], 3000);
        assert_eq!(doc["disks"][0]["error"], serde_json::Value::Null);
        assert_eq!(doc["disks"][2]["fill"], serde_json::Value::Null);
        assert!(doc["disks"][2]["error"]
            .as_str()
            .unwrap()
            .contains("No such file"));
        let m = metrics(&shared, &disks);
        assert!(m.contains("\nvdifrec_disk_fill_ratio{disk=\"/mnt/disk0\"} 0.25\n"));
        assert!(m.contains("\nvdifrec_disk_fill_ratio{disk=\"/mnt/disk \\\"1\\\"\"} 0.75\n"));
        assert!(m.contains("\nvdifrec_disk_free_bytes{disk=\"/mnt/disk0\"} 3000\n"));
        assert!(m.contains("\nvdifrec_disk_size_bytes{disk=\"/mnt/disk0\"} 4000\n"));
        assert!(!m.contains("/mnt/gone"));
        assert!(m.contains("\nvdifrec_scan_durable_frames 256\n"));
        assert!(m.contains("\nvdifrec_scan_durable_bytes 2105344\n"));
        assert!(m.contains("\nvdifrec_scan_durable_vdif_time_seconds 1782866000.0255\n"));
        assert!(doc["observation"].is_null() && !m.contains("vdifrec_schedule_scans"));
    }

    #[test]
    fn an_observation_is_served_and_counted() {
        let shared = vec![Arc::new(Shared::new(true))];
        let o = crate::record::observing::Observation::from_json(
            r#"{"experiment": "vr26a", "station": "Ky", "scans_planned": 3, "scans_recorded": 1,
                "scans_missed": 1, "clock_offset_s": -2.0,
                "next": {"name": "No0003", "window_start_unix": 1782866010.0}}"#,
        )
        .unwrap();
        shared[0].set_observation(Some(o));
        let doc: serde_json::Value =
            serde_json::from_str(&status_json(&shared, &[], Rates::default())).unwrap();
        assert_eq!(doc["observation"]["station"], "Ky");
        assert_eq!(doc["observation"]["next"]["name"], "No0003");
        let m = metrics(&shared, &[]);
        assert!(
            m.contains("\nvdifrec_schedule_scans{state=\"planned\"} 3\n"),
            "{m}"
        );
        assert!(m.contains("\nvdifrec_schedule_scans{state=\"missed\"} 1\n"));
        assert!(m.contains("\nvdifrec_schedule_scans{state=\"mismatched\"} 0\n"));
        assert!(m.contains("\nvdifrec_clock_offset_seconds -2\n"));
        assert!(m.contains("\nvdifrec_next_scan_start_seconds 1782866010\n"));
    }

    #[test]
    fn monitoring_has_no_scan_and_no_disks() {
        let shared = vec![Arc::new(Shared::new(false))];
        let doc: serde_json::Value =
            serde_json::from_str(&status_json(&shared, &[], Rates::default())).unwrap();
        assert_eq!(doc["scan"], serde_json::Value::Null);
        assert_eq!(doc["disk_fill"], serde_json::Value::Null);
        assert_eq!(doc["disks"], serde_json::json!([]));
        // The families are there (a scrape config may name them), without samples.
        let m = metrics(&shared, &[]);
        assert!(m.contains("# TYPE vdifrec_disk_fill_ratio gauge\n# HELP vdifrec_disk_free_bytes"));
        assert!(!m.contains("{disk="));
        // A scan that ended is no longer named.
        shared[0].set_scan(Some("s".into()));
        shared[0].set_scan_disks(vec!["/d0".into()]);
        shared[0].set_scan_durable(Default::default());
        shared[0].set_scan(None);
        assert_eq!(shared[0].scan(), None);
        let doc: serde_json::Value =
            serde_json::from_str(&status_json(&shared, &[], Rates::default())).unwrap();
        assert_eq!(doc["scan_durable"], serde_json::Value::Null);
        assert_eq!(doc["stats"]["scan_durable_bytes"], 0);
        assert_eq!(doc["stats"]["scan_durable_up_to"], serde_json::Value::Null);
        assert!(
            shared[0].scan_disks().is_empty(),
            "the disks leave with the scan"
        );
    }
}
