//! What the live monitor publishes: its newest look (`LiveSnapshot`, the analysis's
//! `LiveReport` with what it describes) and its counters, in a `LiveState` that the recorder's
//! shared state holds for the status server and Python to read.
//!
//! It sits below both the monitor thread and `shared`: the shared state holds it without
//! knowing the thread, and the thread writes it through the methods meant for it alone.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// One (thread, channel)'s spectrum.
#[derive(Clone, Debug, Serialize)]
pub struct LiveSpectrum {
    pub thread: u32,
    pub channel: u32,
    /// Mean power per spectral channel (`nfft` of them), from the band's lower edge.
    pub power: Vec<f32>,
}

/// One (thread, channel)'s bit statistics.
#[derive(Clone, Debug, Serialize)]
pub struct LiveBits {
    pub thread: u32,
    pub channel: u32,
    /// Fraction of samples in each quantisation state, lowest level first.
    pub fractions: Vec<f64>,
    /// What Gaussian noise at the optimal thresholds gives (None: bits without a reference).
    pub expected: Option<Vec<f64>>,
    /// Largest |fraction − expected| over the states, in percentage points.
    pub deviation_pp: Option<f64>,
}

/// A tone in one (thread, channel).
#[derive(Clone, Debug, Serialize)]
pub struct LiveTone {
    pub thread: u32,
    pub channel: u32,
    /// Hz from the band's lower edge.
    pub frequency: f64,
    /// Peak power over the median (the noise floor).
    pub power_ratio: f64,
}

/// What the analysis found in one view.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LiveReport {
    pub nfft: usize,
    pub bits: u32,
    pub complex: bool,
    /// Samples per second per channel, and the band each spectrum spans (Hz; None: unknown).
    pub sample_rate_hz: Option<f64>,
    pub bandwidth_hz: Option<f64>,
    pub spectra: Vec<LiveSpectrum>,
    pub bit_states: Vec<LiveBits>,
    pub tones: Vec<LiveTone>,
}

/// The newest report with what it describes, as `/status` serves it.
#[derive(Clone, Debug, Serialize)]
pub struct LiveSnapshot {
    /// The stream (port) looked at: the recording's first.
    pub stream: u16,
    /// The VDIF second of the view's first frame (the newest complete second, whose last
    /// frames the view holds, unless it has left the newer half of the ring): epoch, seconds
    /// since it, and UTC.
    pub ref_epoch: u32,
    pub seconds: u32,
    pub vdif_second: String,
    pub unix_second: i64,
    /// Frames viewed, and their share of a second of the stream.
    pub frames: u64,
    pub fraction: f64,
    /// Looks computed and skipped (the view was overwritten, the analysis failed or could not
    /// keep up) since the start; CPU seconds the monitor used.
    pub computed: u64,
    pub skips: u64,
    pub cpu_s: f64,
    /// Why the last look was skipped, if it was.
    pub last_skip: Option<String>,
    #[serde(flatten)]
    pub report: LiveReport,
}

/// What the monitor publishes; read by the status server and Python.
#[derive(Default)]
pub struct LiveState {
    snapshot: Mutex<Option<LiveSnapshot>>,
    computed: AtomicU64,
    skips: AtomicU64,
    last_skip: Mutex<Option<String>>,
    /// CPU the monitor thread has used, in nanoseconds (looks skipped included).
    cpu_ns: AtomicU64,
    /// When the monitor last began a second (its own clock). A monitor starved of CPU cannot
    /// count the seconds it misses itself: those since, beyond the one it is in, are skips too.
    last_slot: Mutex<Option<Instant>>,
}

impl LiveState {
    /// The newest result, with the counters as they are now (None before the first).
    pub fn snapshot(&self) -> Option<LiveSnapshot> {
        let mut s = self.snapshot.lock().unwrap().clone()?;
        s.computed = self.computed.load(Ordering::Acquire);
        s.skips = self.skips();
        s.last_skip = self.last_skip.lock().unwrap().clone();
        s.cpu_s = self.cpu_s();
        Some(s)
    }
    /// CPU seconds the monitor has used so far.
    pub fn cpu_s(&self) -> f64 {
        self.cpu_ns.load(Ordering::Acquire) as f64 * 1e-9
    }
    pub fn computed(&self) -> u64 {
        self.computed.load(Ordering::Acquire)
    }
    /// Seconds skipped: counted, and those a look still running (or a starved monitor) has
    /// let pass beyond its own.
    pub fn skips(&self) -> u64 {
        self.skips.load(Ordering::Acquire) + self.pending_skips()
    }
    /// Seconds let pass since the monitor last began one, beyond that one.
    fn pending_skips(&self) -> u64 {
        self.last_slot
            .lock()
            .unwrap()
            .map_or(0, |t| t.elapsed().as_secs().saturating_sub(1))
    }

    // What the monitor (and only it) records as it goes.

    /// `n` seconds not looked at, and why.
    pub(super) fn skip(&self, n: u64, why: String) {
        self.skips.fetch_add(n, Ordering::AcqRel);
        *self.last_skip.lock().unwrap() = Some(why);
    }
    /// The monitor began a second at `at` (its own clock).
    pub(super) fn begin_second(&self, at: Instant) {
        *self.last_slot.lock().unwrap() = Some(at);
    }
    /// The monitor stopped: the seconds let pass since the last one begun are counted for good.
    pub(super) fn stopped(&self) {
        let pending = self.pending_skips();
        *self.last_slot.lock().unwrap() = None;
        if pending > 0 {
            self.skip(
                pending,
                format!("{pending} s not looked at before the recording stopped"),
            );
        }
    }
    /// The CPU time the monitor's thread has used so far.
    pub(super) fn set_cpu_s(&self, seconds: f64) {
        self.cpu_ns.store((seconds * 1e9) as u64, Ordering::Release);
    }
    /// A look's result, the newest.
    pub(super) fn publish(&self, snapshot: LiveSnapshot) {
        self.computed.fetch_add(1, Ordering::AcqRel);
        *self.snapshot.lock().unwrap() = Some(snapshot);
    }
}
