//! What the benchmarks measure vdifrec against, in the same run on the same machine:
//! a plain receive-and-discard loop (the most any capture on this host could do), and the
//! writer alone, fed from memory (to compare with `dd` on the same disk).

use crate::record::config::Target;
use crate::record::ring::{Ring, RingMemory};
use crate::record::scan::disks::DiskSet;
use crate::record::scan::gate::Gate;
use crate::record::scan::plan::ScanPlan;
use crate::record::scan::window::Window;
use crate::record::shared::Shared;
use crate::record::writer::{self, WriterConfig};
use crate::vdif::layout::Format;
use serde::Serialize;
use socket2::{SockAddr, Socket};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the discard loop received.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DiscardResult {
    pub datagrams: u64,
    pub bytes: u64,
    pub kernel_drops: u64,
    pub cpu_s: f64,
    pub wall_s: f64,
}

/// A UDP socket read with recvmmsg into one reused buffer, every datagram thrown away.
pub struct DiscardReceiver {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<DiscardResult>>,
    pub local: SocketAddr,
    received: Arc<AtomicU64>,
}

impl DiscardReceiver {
    /// `span`: bytes of memory the datagrams are received into, one after the other as the
    /// capture fills its ring (0: the same small buffer every time, the plain discard loop).
    pub fn start(
        bind: IpAddr,
        port: u16,
        rcvbuf: usize,
        span: usize,
    ) -> std::io::Result<DiscardReceiver> {
        // Tuned exactly as the udp backend's socket, so the comparison is of the loops alone.
        let (socket, _) = crate::record::capture::udp::receive_socket(bind, rcvbuf)?;
        socket.bind(&SockAddr::from(SocketAddr::new(bind, port)))?;
        let local = socket.local_addr()?.as_socket().expect("an inet socket");
        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicU64::new(0));
        let (stop2, received2) = (stop.clone(), received.clone());
        let handle = std::thread::spawn(move || discard_loop(socket, &stop2, &received2, span));
        Ok(DiscardReceiver {
            stop,
            handle: Some(handle),
            local,
            received,
        })
    }

    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    pub fn stop(&mut self) -> DiscardResult {
        self.stop.store(true, Ordering::Release);
        self.handle
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default()
    }
}

fn discard_loop(
    socket: Socket,
    stop: &AtomicBool,
    received: &AtomicU64,
    span: usize,
) -> DiscardResult {
    const N: usize = 64;
    const SIZE: usize = 9000;
    // Every page touched now, as the ring's are before the capture starts.
    let slots = (span / SIZE).max(N) / N * N;
    let mut buf = vec![1u8; slots * SIZE];
    let mut next_slot = 0usize;
    let mut control = vec![[0u64; 8]; N];
    // SAFETY: zeroed message headers are valid; each is pointed at its buffer below.
    let mut iov: Vec<libc::iovec> = (0..N)
        .map(|i| libc::iovec {
            iov_base: unsafe { buf.as_mut_ptr().add(i * SIZE) } as *mut libc::c_void,
            iov_len: SIZE,
        })
        .collect();
    let mut msgs: Vec<libc::mmsghdr> = (0..N).map(|_| unsafe { std::mem::zeroed() }).collect();
    let mut result = DiscardResult::default();
    let t0 = Instant::now();
    let cpu0 = crate::affinity::thread_cpu_seconds();
    while !stop.load(Ordering::Acquire) {
        for i in 0..N {
            iov[i].iov_base =
                unsafe { buf.as_mut_ptr().add((next_slot + i) * SIZE) } as *mut libc::c_void;
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_control = control[i].as_mut_ptr() as *mut libc::c_void;
            msgs[i].msg_hdr.msg_controllen = 64;
        }
        // SAFETY: the headers point at live buffers.
        let n = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                msgs.as_mut_ptr(),
                N as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if n <= 0 {
            continue;
        }
        for m in &msgs[..n as usize] {
            result.bytes += m.msg_len as u64;
        }
        next_slot = (next_slot + n as usize) % (slots - N + 1);
        result.datagrams += n as u64;
        received.store(result.datagrams, Ordering::Relaxed);
        // The kernel's drop counter, read from the last message as the udp backend does.
        if let Some(d) = crate::record::capture::udp::rxq_overflow(&msgs[n as usize - 1].msg_hdr) {
            result.kernel_drops = result.kernel_drops.max(d as u64);
        }
    }
    result.cpu_s = crate::affinity::thread_cpu_seconds() - cpu0;
    result.wall_s = t0.elapsed().as_secs_f64();
    result
}

/// What the writer alone achieved.
#[derive(Clone, Debug, Serialize)]
pub struct WriterBench {
    pub bytes: u64,
    pub seconds: f64,
    pub cpu_s: f64,
    pub direct: bool,
    pub error: Option<String>,
}

/// Feeds the writer from memory as fast as the ring takes frames and times it writing
/// `total_bytes` into `dir/{prefix}_*.vdif` (the caller removes the file).
pub fn writer_throughput(
    dir: &Path,
    total_bytes: u64,
    frame_size: usize,
    direct: bool,
) -> Result<WriterBench, String> {
    let shared = Arc::new(Shared::new(true));
    let memory =
        RingMemory::new(256 << 20, true, true, Some(frame_size)).map_err(|e| e.to_string())?;
    let ring = Ring::new(memory, frame_size).map_err(|e| e.to_string())?;
    let ring = Arc::new(ring);
    shared.set_ring(ring.clone());
    let frame = bench_frame(frame_size)?;
    let cfg = WriterConfig {
        target: Target::Dir {
            dir: dir.to_path_buf(),
            prefix: "bench".into(),
        },
        file_size: None,
        direct,
        cpu: None,
        throttle: None,
        disk_limit: None,
    };
    let total = total_bytes / frame_size as u64;
    let sh = shared.clone();
    let t0 = Instant::now();
    let writer = std::thread::spawn(move || writer::run(sh, cfg));
    feed(&ring, &frame, total);
    shared.set_capture_done();
    writer
        .join()
        .map_err(|_| "writer thread panicked".to_string())?;
    let seconds = t0.elapsed().as_secs_f64();
    let direct_used = shared.notes().iter().any(|n| n.contains("O_DIRECT writes"));
    let cpu_s = shared.writer_cpu_s();
    Ok(WriterBench {
        bytes: shared.bytes_written(),
        seconds,
        cpu_s,
        direct: direct_used,
        error: shared.error(),
    })
}

/// One frame with a valid header, copied into every slot by `feed`.
fn bench_frame(frame_size: usize) -> Result<Vec<u8>, String> {
    let header = crate::sources::generate::SignalSpec {
        frame_size,
        ref_epoch: Some(53),
        start_second: Some(0),
        ..Default::default()
    }
    .template()
    .map_err(|e| e.to_string())?;
    let mut frame = vec![0x5au8; frame_size];
    header.write_to(&mut frame);
    Ok(frame)
}

/// Publishes `total` copies of `frame` into the ring as fast as its consumer frees slots.
fn feed(ring: &Ring, frame: &[u8], total: u64) {
    let mut seq = 0u64;
    while seq < total {
        let k = ring.reserve(seq, (seq + 1024).min(total));
        if k == 0 {
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        for i in 0..k {
            // SAFETY: reserved slots belong to this producer until published.
            unsafe {
                std::ptr::copy_nonoverlapping(frame.as_ptr(), ring.slot_ptr(seq + i), frame.len());
            }
        }
        seq += k;
        ring.publish(seq);
    }
}

/// The scan writers alone, fed from memory: one scan of `total_bytes` in `format` over
/// `disks` with `writers` threads, timed from the first frame to the last chunk on disk (the
/// caller removes the scan).
pub fn scan_writer_throughput(
    disks: &[std::path::PathBuf],
    total_bytes: u64,
    frame_size: usize,
    format: Format,
    chunk_bytes: u64,
    writers: usize,
) -> Result<WriterBench, String> {
    let shared = Arc::new(Shared::new(true));
    let ring_bytes = (chunk_bytes * (writers as u64 + 2)).max(256 << 20);
    let memory =
        RingMemory::new(ring_bytes, true, true, Some(frame_size)).map_err(|e| e.to_string())?;
    let ring = Arc::new(Ring::new(memory, frame_size).map_err(|e| e.to_string())?);
    shared.set_ring(ring.clone());
    let frame = bench_frame(frame_size)?;
    let set = Arc::new(DiskSet::new(disks, &[]));
    let mut gate = Gate::start(vec![(0, shared.clone())], set, false).map_err(|e| e.to_string())?;
    gate.start_scan(ScanPlan {
        name: "bench_scan".into(),
        requested_name: "bench_scan".into(),
        window: Window::default(),
        start_text: None,
        stop_text: None,
        format,
        chunk_bytes,
        file_bytes: None,
        writers,
        direct: true,
        fps: None,
        fps_given: None,
        split: None,
        writer_cpus: Vec::new(),
        notes: Vec::new(),
        from_seq: Vec::new(),
    });
    let total = total_bytes / frame_size as u64;
    let t0 = Instant::now();
    feed(&ring, &frame, total);
    shared.set_capture_done();
    gate.join();
    let seconds = t0.elapsed().as_secs_f64();
    let (scans, _) = gate.results();
    let s = scans.last().ok_or("the scan did not finish")?;
    Ok(WriterBench {
        bytes: s.bytes_written,
        seconds,
        cpu_s: 0.0,
        direct: s.notes.iter().any(|n| n.contains("O_DIRECT writes")),
        error: s.error.clone(),
    })
}

/// CPU time per frame of the capture's own work on frames already in memory, stage by stage:
/// classification (size, header, stream format) and accounting (per second and thread). The
/// frames cycle through `span` bytes, as a capture walks its ring.
#[derive(Clone, Debug, Serialize)]
pub struct StageCosts {
    pub frames: u64,
    pub classify_ns: f64,
    pub classify_and_account_ns: f64,
}

pub fn capture_stage_costs(frames: u64, span: usize) -> Result<StageCosts, String> {
    use crate::record::accounting::{Accounting, Fate, GapPolicy};
    use crate::record::classify::StreamFormat;
    let fs = 8224usize;
    let fps = 125_000u32;
    let header = crate::sources::generate::SignalSpec {
        ref_epoch: Some(53),
        start_second: Some(0),
        ..Default::default()
    }
    .template()
    .map_err(|e| e.to_string())?;
    let slots = (span / fs).max(64);
    let mut mem = vec![0u8; slots * fs];
    for k in 0..slots {
        let mut h = header;
        h.set(crate::vdif::header::field::FRAME_NR, (k as u32) % fps)
            .map_err(|e| e.to_string())?;
        h.write_to(&mut mem[k * fs..]);
    }
    let format = StreamFormat::of(&header);
    let run = |mem: &mut [u8], account: bool| -> f64 {
        let mut acc = Accounting::new(Some(fps), GapPolicy::CountAsLoss);
        let per_pass = (slots as u32).div_ceil(fps);
        let cpu0 = crate::affinity::thread_cpu_seconds();
        for i in 0..frames {
            let k = (i as usize) % slots;
            let pass = (i / slots as u64) as u32;
            let frame = &mut mem[k * fs..(k + 1) * fs];
            // Each pass over the memory is later in time, so the frames stay in order (the
            // one store lands in the header's cache line, which classification reads anyway).
            let w0 = u32::from_le_bytes(frame[0..4].try_into().expect("4 bytes"));
            let seconds = pass * per_pass + k as u32 / fps;
            frame[0..4].copy_from_slice(&((w0 & !0x3fff_ffff) | seconds).to_le_bytes());
            let h = format.classify_datagram(fs, false, 0, frame, false);
            if let (true, Ok(h)) = (account, h) {
                acc.frame(&h, Fate::Buffered);
            }
        }
        (crate::affinity::thread_cpu_seconds() - cpu0) / frames as f64 * 1e9
    };
    Ok(StageCosts {
        frames,
        classify_ns: run(&mut mem, false),
        classify_and_account_ns: run(&mut mem, true),
    })
}

/// What the plain sendmmsg loop did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SendLoopResult {
    pub frames: u64,
    pub bytes: u64,
    pub cpu_s: f64,
    pub wall_s: f64,
}

/// The forwarder's baseline: `frames` frames of `frame_size` bytes (cycled from a buffer of
/// 1024 in memory) sent to `to` with sendmmsg, up to 64 a call, paced to `per_second` as the
/// stream arrives (batches due by their place in the sequence): the least any forwarder of
/// this stream could spend.
pub fn sendmmsg_loop(
    to: SocketAddr,
    frames: u64,
    frame_size: usize,
    per_second: f64,
) -> std::io::Result<SendLoopResult> {
    const N: usize = 64;
    const POOL: usize = 1024;
    let domain = if to.is_ipv6() {
        socket2::Domain::IPV6
    } else {
        socket2::Domain::IPV4
    };
    let socket = Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    let _ = socket.set_send_buffer_size(32 << 20);
    socket.connect(&SockAddr::from(to))?;
    let pool = vec![7u8; POOL * frame_size];
    let mut iov: Vec<libc::iovec> = vec![
        libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0
        };
        N
    ];
    // SAFETY: zeroed message headers are valid; each is pointed at its iovec below.
    let mut msgs: Vec<libc::mmsghdr> = (0..N).map(|_| unsafe { std::mem::zeroed() }).collect();
    let mut result = SendLoopResult::default();
    let t0 = Instant::now();
    let cpu0 = crate::affinity::thread_cpu_seconds();
    let mut sent = 0u64;
    while sent < frames {
        let due = t0 + Duration::from_secs_f64(sent as f64 / per_second);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        // What has "arrived" by now, at most N.
        let arrived = ((t0.elapsed().as_secs_f64() * per_second) as u64).min(frames);
        let n = (arrived.saturating_sub(sent) as usize).clamp(1, N);
        for i in 0..n {
            let k = (sent as usize + i) % POOL;
            iov[i] = libc::iovec {
                iov_base: pool[k * frame_size..].as_ptr() as *mut libc::c_void,
                iov_len: frame_size,
            };
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: the headers point at live buffers (pool) for the call's duration.
        let r = unsafe { libc::sendmmsg(socket.as_raw_fd(), msgs.as_mut_ptr(), n as u32, 0) };
        if r > 0 {
            sent += r as u64;
            result.bytes += r as u64 * frame_size as u64;
        }
    }
    result.frames = sent;
    result.cpu_s = crate::affinity::thread_cpu_seconds() - cpu0;
    result.wall_s = t0.elapsed().as_secs_f64();
    Ok(result)
}
