//! The live quality monitor: once a second, a low-priority thread looks at part of the newest
//! frames in the ring and publishes their spectra, bit statistics and tones for the status
//! page, `/metrics` and `Recorder.live()`.
//!
//! The record stage never computes spectra itself: the recorder's maker hands it the
//! analysis (`Analyser`, `analysis::live::analyser()`). The monitor never costs a frame: its
//! view of the ring pins nothing (it yields to the capture; a result from frames the capture
//! overwrote meanwhile is thrown away and counted as a skip), it runs at the lowest priority
//! (`SCHED_IDLE`, so it gets a CPU only when the capture and writer leave one idle), and a
//! second it cannot keep up with is skipped and counted, never queued.
//!
//! What it publishes (`state`) is held in the recorder's `shared` state, below this thread,
//! so that the status server and Python read it without knowing the monitor.

pub mod state;

pub use state::{LiveBits, LiveReport, LiveSnapshot, LiveSpectrum, LiveState, LiveTone};

use crate::record::ring::Ring;
use crate::record::shared::Shared;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The analysis the monitor runs on a view: frames (whole, header included, in arrival
/// order), the spectral channels and the frames per second per thread (for the sample rate
/// when the header does not say it).
pub type Analyser = Arc<dyn Fn(&[&[u8]], usize, u32) -> Result<LiveReport, String> + Send + Sync>;

/// How often the monitor looks.
const EVERY: Duration = Duration::from_secs(1);
/// Most of the ring one look may view: the capture must never have to lap a view it could
/// have avoided lapping.
const MOST_OF_RING: u64 = 8;
/// CPU (in cores) the monitor allows itself when it sets its own fraction: a quarter of a core
/// where a core is spare, a tenth where the capture and writer use them all.
const BUDGET_SPARE: f64 = 0.25;
const BUDGET_BUSY: f64 = 0.1;

/// The monitor's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LiveConfig {
    /// Share of each second to analyse (None: what the spare CPU allows).
    pub fraction: Option<f64>,
    /// Spectral channels.
    pub nfft: usize,
}

/// A running monitor; stops when dropped.
pub struct LiveMonitor {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl LiveMonitor {
    /// Starts the monitor on the stream of `shared`; `busy_threads` are the recording's own
    /// busy threads (captures and writers), for the CPU it may use.
    pub fn start(
        shared: Arc<Shared>,
        config: LiveConfig,
        analyser: Analyser,
        busy_threads: usize,
    ) -> std::io::Result<LiveMonitor> {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("vdifrec-live".into())
            .spawn(move || run(&shared, config, &analyser, busy_threads, &stop2))?;
        Ok(LiveMonitor {
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for LiveMonitor {
    /// Tells the monitor to stop without waiting for it: a look at the lowest priority can
    /// take long on a busy host, and stopping a recording must not wait for it (the thread
    /// holds the ring and the shared state until its look ends, then goes).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        drop(self.handle.take());
    }
}

/// Lowest priority for the calling thread: `SCHED_IDLE` where allowed, else nice 19.
fn lowest_priority() {
    // SAFETY: scheduling calls on the calling thread (tid by system call: the wheel's glibc
    // 2.17 has no gettid wrapper).
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) != 0 {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, 19);
        }
    }
}

/// How much of each second the monitor looks at when it decides itself: as much as its CPU
/// budget allows at the measured cost per frame, and no more than it can read in half a
/// second of wall time (at the lowest priority it runs only on idle CPU, and a look the
/// capture laps is wasted); halved after a lapped look, grown again after good ones.
struct Pace {
    cpu_per_frame: Option<f64>,
    wall_per_frame: Option<f64>,
    scale: f64,
}

impl Pace {
    /// A look should end within this much wall time.
    const WALL: f64 = 0.5;

    fn fraction(&self, config: &LiveConfig, budget: f64, fps: f64) -> f64 {
        if let Some(f) = config.fraction {
            return f;
        }
        match (self.cpu_per_frame, self.wall_per_frame) {
            (Some(c), Some(w)) if c > 0.0 && w > 0.0 && fps > 0.0 => {
                let by_cpu = budget / (c * fps);
                let by_wall = Pace::WALL / (w * fps);
                (by_cpu.min(by_wall) * self.scale).clamp(1.0 / 4096.0, 1.0)
            }
            _ => 1.0 / 16.0 * self.scale,
        }
    }

    /// A look of `frames` took `cpu` and `wall` seconds; `lapped`: the capture overwrote it.
    fn measured(&mut self, frames: u64, cpu: f64, wall: f64, lapped: bool) {
        let n = frames.max(1) as f64;
        self.cpu_per_frame = Some(cpu / n);
        self.wall_per_frame = Some(wall / n);
        self.scale = if lapped {
            (self.scale / 2.0).max(1.0 / 64.0)
        } else {
            (self.scale * 1.25).min(1.0)
        };
    }
}

fn run(
    shared: &Shared,
    config: LiveConfig,
    analyser: &Analyser,
    busy_threads: usize,
    stop: &std::sync::atomic::AtomicBool,
) {
    crate::affinity::name_current("vdifrec-live");
    lowest_priority();
    let cpus = crate::affinity::allowed_cpus().len().max(1);
    let budget = if cpus > busy_threads {
        BUDGET_SPARE
    } else {
        BUDGET_BUSY
    };
    let state = shared.live();
    let mut last: Option<(Instant, u64)> = None;
    let mut pace = Pace {
        cpu_per_frame: None,
        wall_per_frame: None,
        scale: 1.0,
    };
    // One look per second of the monitor's own clock ("slot"); a look that runs over skips
    // the slots it covered, and says so, rather than queue them.
    let started = Instant::now();
    let mut last_slot: Option<u64> = None;
    while !stop.load(Ordering::Acquire) {
        let now = Instant::now();
        let slot = now.duration_since(started).as_secs();
        if last_slot.is_some_and(|l| slot <= l) {
            let next = started + EVERY * (slot as u32 + 1);
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
            continue;
        }
        if let Some(missed) = last_slot.map(|l| slot - l - 1).filter(|m| *m > 0) {
            state.skip(
                missed,
                format!("a look took longer than a second: {missed} s not looked at"),
            );
        }
        last_slot = Some(slot);
        state.begin_second(started + EVERY * slot as u32);
        let Some(ring) = shared.ring() else { continue };
        let capture = shared.capture_stats();
        let fps = match last {
            Some((t, n)) => {
                capture.frames_received.saturating_sub(n) as f64
                    / now.duration_since(t).as_secs_f64()
            }
            None => 0.0,
        };
        last = Some((now, capture.frames_received));
        // Frequencies need the frame rate for sure (given, or learned from the frame
        // numbers' wrap in the first second or two): until then there is nothing to describe.
        if fps <= 0.0 || !capture.frames_per_second_known {
            continue;
        }
        let fraction = pace.fraction(&config, budget, fps);
        let want = ((fraction * fps).round() as u64).clamp(1, ring.nslots() / MOST_OF_RING);
        let newest_complete = shared
            .last_row_of(shared.port())
            .map(|r| r.second.vdif_seconds);
        let cpu0 = crate::affinity::thread_cpu_seconds();
        let (result, viewed) = look(
            &ring,
            want,
            newest_complete,
            config.nfft,
            capture.frames_per_second,
            analyser,
        );
        let cpu = crate::affinity::thread_cpu_seconds();
        state.set_cpu_s(cpu);
        let lapped = matches!(&result, Err(Skip::Lapped(_)));
        if viewed > 0 {
            pace.measured(viewed, cpu - cpu0, now.elapsed().as_secs_f64(), lapped);
        }
        match result {
            Ok(mut s) => {
                s.fraction = viewed as f64 / fps;
                s.stream = shared.port();
                state.publish(s);
            }
            Err(Skip::Lapped(why) | Skip::Failed(why)) => state.skip(1, why),
        }
    }
    state.stopped();
}

/// The VDIF seconds field of frame `seq` (racy: a slot being rewritten reads as garbage,
/// which only misplaces the view; the look's staleness check still guards its result).
fn seconds_of(ring: &Ring, seq: u64) -> Option<u32> {
    // SAFETY: a published frame's slot, read as plain bytes (see above).
    let bytes = unsafe { ring.frames(seq, 1) };
    crate::vdif::Header::parse_unchecked(bytes)
        .ok()
        .map(|h| h.seconds())
}

/// Where the view goes: the last `want` frames of VDIF second `second` (the newest complete
/// one) when its end lies in the newer half of the ring, else the newest `want` frames.
fn place(ring: &Ring, want: u64, second: Option<u32>) -> u64 {
    let written = ring.write_seq();
    let newest = written.saturating_sub(want);
    let Some(second) = second else {
        return newest;
    };
    // The first frame of a later second, searched for in the newer half of the ring.
    let newer_half = written.saturating_sub(ring.nslots() / 2);
    let (mut lo, mut hi) = (newer_half, written);
    if lo >= hi || seconds_of(ring, lo).is_none_or(|s| s > second) {
        return newest;
    }
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if seconds_of(ring, mid).is_some_and(|s| s > second) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    // `hi` is the end of the second (or the newest frame when nothing later has arrived).
    hi.saturating_sub(want).max(newer_half)
}

/// Why a look gave no result.
enum Skip {
    /// The capture overwrote frames while they were read.
    Lapped(String),
    /// Nothing to view, or the analysis refused the frames.
    Failed(String),
}

/// Views the newest `want` frames without pinning them, analyses them, and keeps the result
/// only if the capture overwrote none of them meanwhile; also says how many were viewed.
fn look(
    ring: &Ring,
    want: u64,
    second: Option<u32>,
    nfft: usize,
    fps: u32,
    analyser: &Analyser,
) -> (Result<LiveSnapshot, Skip>, u64) {
    let first = place(ring, want, second);
    let count = (ring.write_seq() - first).min(want);
    if count == 0 {
        return (Err(Skip::Failed("no frame in the ring yet".into())), 0);
    }
    if let Err(e) = ring.watch(first, count) {
        return (Err(Skip::Failed(e.to_string())), 0);
    }
    // SAFETY: the frames were published when watched; the capture may overwrite them while
    // they are read (the result is then discarded below); the mapping lives as long as `ring`.
    let bytes = unsafe { ring.frames(first, count) };
    let frames: Vec<&[u8]> = bytes.chunks_exact(ring.frame_size()).collect();
    let header = crate::vdif::Header::parse_unchecked(frames[0]);
    // A panic in the analysis (frames torn by the capture, say) is a skipped look, not the
    // end of the monitor.
    let report = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        analyser(&frames, nfft, fps)
    }))
    .unwrap_or_else(|_| Err("the analysis failed on these frames".into()));
    let stale = ring.overwritten(first, count);
    if stale > 0 {
        let why = format!(
            "the capture overwrote {stale} of the {count} frames viewed while they were analysed"
        );
        return (Err(Skip::Lapped(why)), count);
    }
    let result = header
        .map_err(|e| e.to_string())
        .and_then(|h| report.map(|r| (h, r)))
        .map(|(header, report)| {
            let unix = crate::vdif::time::utc_unix(header.ref_epoch(), header.seconds());
            LiveSnapshot {
                stream: 0,
                ref_epoch: header.ref_epoch(),
                seconds: header.seconds(),
                vdif_second: crate::vdif::time::Utc::from_unix(unix).iso(),
                unix_second: unix,
                frames: count,
                fraction: 0.0,
                computed: 0,
                skips: 0,
                cpu_s: 0.0,
                last_skip: None,
                report,
            }
        })
        .map_err(Skip::Failed);
    (result, count)
}
