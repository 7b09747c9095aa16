//! Where time goes between the wire and the disk: per-stage latency stamps, in the manner of
//! TCP-offload studies that split a packet's life into stages.
//!
//! Stages, each a log-bucketed histogram (seconds):
//! - `kernel`: the kernel's receive stamp (`SO_TIMESTAMPNS`; the raw backends' own packet
//!   stamps) → `recvmmsg` returned it to the capture thread: time queued in the socket;
//! - `capture`: returned → published to the ring (classified and counted);
//! - `write`: published → the write call holding the frame returned;
//! - `durable`: written → written back (buffered writes: the range's `sync_file_range` wait,
//!   which the writer makes when it writes the next range, or the closing `fdatasync`; so it
//!   includes the time to the next write. O_DIRECT writes bypass the page cache and have no
//!   separate stage);
//! - `off`: the kernel's receive stamp − the frame's own VDIF time (the operator's "off"
//!   column: a sender's clock or a network path, not vdifrec).
//!
//! Frames are sampled (every `SAMPLE_EVERY`-th frame by sequence number, so the counts are
//! exact functions of the frames received); the receive and publish stamps are per frame, the
//! write and durable stamps are one clock reading per write run, applied to the sampled frames
//! in it. The capture thread takes one clock reading per batch and does a few relaxed atomic
//! stores per sampled frame: no lock, no allocation.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// One frame in this many is stamped.
pub const SAMPLE_EVERY: u64 = 64;
/// The stages, in the order a frame passes them (`off` last: it is no stage of vdifrec's).
pub const STAGES: [&str; 5] = ["kernel", "capture", "write", "durable", "off"];
/// Buckets per decade, and the smallest bucket's upper edge (seconds): 100 ns up to
/// 10^3.75 s (1.6 hours), then +Inf.
const PER_DECADE: i32 = 4;
const FIRST_EDGE_LOG10: i32 = -7;
const BUCKETS: usize = 45;
/// Complete traces kept (the newest), for checking stage order.
const TRACES: usize = 64;

/// Upper edge of bucket `i` in seconds (the last bucket is +Inf).
pub fn bucket_edge(i: usize) -> f64 {
    if i + 1 >= BUCKETS {
        return f64::INFINITY;
    }
    10f64.powf(f64::from(FIRST_EDGE_LOG10) + i as f64 / f64::from(PER_DECADE))
}

fn bucket_of(seconds: f64) -> usize {
    if seconds <= bucket_edge(0) {
        return 0;
    }
    let k = ((seconds.log10() - f64::from(FIRST_EDGE_LOG10)) * f64::from(PER_DECADE)).ceil();
    let mut i = (k.max(0.0) as usize).min(BUCKETS - 1);
    // Floating point at an exact edge: the value belongs to the bucket whose edge holds it.
    while i > 0 && seconds <= bucket_edge(i - 1) {
        i -= 1;
    }
    i
}

/// A lock-free log-bucketed histogram of durations.
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    count: AtomicU64,
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
    /// Values below zero (only `off` has them: a sender clock ahead of ours), in bucket 0.
    negative: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
            negative: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Adds one duration of `ns` nanoseconds (negative: counted apart, in the first bucket).
    pub fn add(&self, ns: i64) {
        if ns < 0 {
            self.negative.fetch_add(1, Ordering::Relaxed);
        }
        let ns = ns.max(0) as u64;
        self.buckets[bucket_of(ns as f64 * 1e-9)].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    fn snapshot(&self) -> HistogramSnapshot {
        let buckets: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        HistogramSnapshot {
            count: buckets.iter().sum(),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
            max_ns: self.max_ns.load(Ordering::Relaxed),
            negative: self.negative.load(Ordering::Relaxed),
            buckets,
        }
    }
}

/// A histogram's counts at one moment (several streams' add up).
#[derive(Clone, Debug, Default)]
pub struct HistogramSnapshot {
    pub count: u64,
    pub sum_ns: u64,
    pub max_ns: u64,
    pub negative: u64,
    pub buckets: Vec<u64>,
}

impl HistogramSnapshot {
    fn merge(&mut self, o: &HistogramSnapshot) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; o.buckets.len()];
        }
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            *a += b;
        }
        self.count += o.count;
        self.sum_ns += o.sum_ns;
        self.max_ns = self.max_ns.max(o.max_ns);
        self.negative += o.negative;
    }

    /// Upper edge of the bucket holding quantile `q` (None when empty; capped at the max).
    fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(bucket_edge(i).min(self.max_ns as f64 * 1e-9));
            }
        }
        Some(self.max_ns as f64 * 1e-9)
    }

    /// The stage as the summary and `/status` give it.
    pub fn report(&self) -> StageReport {
        StageReport {
            count: self.count,
            p50: self.quantile(0.5),
            p99: self.quantile(0.99),
            p999: self.quantile(0.999),
            max: (self.count > 0).then_some(self.max_ns as f64 * 1e-9),
            mean: (self.count > 0).then(|| self.sum_ns as f64 * 1e-9 / self.count as f64),
            negative: self.negative,
            buckets: self
                .buckets
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(i, n)| (bucket_edge(i), *n))
                .collect(),
        }
    }

    /// Cumulative counts per bucket edge, as a Prometheus histogram wants them.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut seen = 0;
        self.buckets
            .iter()
            .enumerate()
            .map(|(i, n)| {
                seen += n;
                (bucket_edge(i), seen)
            })
            .collect()
    }
}

/// One stage in the summary: quantiles are bucket upper edges (an over- rather than an
/// under-estimate, by at most a factor 10^(1/4)); `buckets` lists the non-empty ones as
/// (upper edge, count).
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct StageReport {
    pub count: u64,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
    pub negative: u64,
    pub buckets: Vec<(f64, u64)>,
}

/// One sampled frame's stamps (nanoseconds, CLOCK_REALTIME), stage by stage.
#[derive(Clone, Copy, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct Trace {
    pub seq: u64,
    pub kernel: i64,
    pub returned: i64,
    pub published: i64,
    pub written: i64,
    /// None where a write is durable when it returns (O_DIRECT).
    pub durable: Option<i64>,
}

/// The receive-side stamps of sampled frames still in the ring, for the writer. An entry is
/// reused a ring's length later: `seq` says which frame's stamps it holds now, so a reader
/// that comes late (a range released before its durable stamp) never mixes two frames.
struct Stamps {
    seq: Box<[AtomicU64]>,
    kernel: Box<[AtomicU64]>,
    returned: Box<[AtomicU64]>,
    published: Box<[AtomicU64]>,
}

impl Stamps {
    /// Entry `i` holds frame `seq`'s stamps (read it before and after reading them).
    fn holds(&self, i: usize, seq: u64) -> bool {
        std::sync::atomic::fence(Ordering::Acquire);
        self.seq[i].load(Ordering::Acquire) == seq + 1
    }
}

/// A stream's latency stamps: the histograms, the sampled frames' stamps while their frames
/// are in the ring, and the newest complete traces.
#[derive(Default)]
pub struct Latency {
    stages: [Histogram; 5],
    stamps: OnceLock<Stamps>,
    traces: Mutex<std::collections::VecDeque<Trace>>,
}

/// Nanoseconds since the epoch on CLOCK_REALTIME (the clock the kernel's stamps use).
pub fn now_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: fills a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

impl Latency {
    /// Room for the stamps of every sampled frame a ring of `nslots` can hold.
    pub fn size_for(&self, nslots: u64) {
        let n = (nslots / SAMPLE_EVERY + 2) as usize;
        let table = || (0..n).map(|_| AtomicU64::new(0)).collect::<Box<[_]>>();
        let _ = self.stamps.set(Stamps {
            seq: table(),
            kernel: table(),
            returned: table(),
            published: table(),
        });
    }

    fn index(table: &Stamps, seq: u64) -> usize {
        (seq / SAMPLE_EVERY) as usize % table.kernel.len()
    }

    /// The capture stamps sampled frame `seq`: its kernel stamp (0: none), when `recvmmsg`
    /// returned it, when it was published, and its VDIF time (None: not yet known).
    pub fn received(
        &self,
        seq: u64,
        kernel: i64,
        returned: i64,
        published: i64,
        vdif: Option<i64>,
    ) {
        let Some(t) = self.stamps.get() else { return };
        let i = Latency::index(t, seq);
        // A frame without a kernel stamp counts from its return (the kernel stage is empty).
        let kernel = if kernel > 0 { kernel } else { returned };
        t.kernel[i].store(kernel as u64, Ordering::Relaxed);
        t.returned[i].store(returned as u64, Ordering::Relaxed);
        t.published[i].store(published as u64, Ordering::Relaxed);
        // Last, with Release: a reader that sees this frame's mark sees the stamps above.
        t.seq[i].store(seq + 1, Ordering::Release);
        if kernel != returned {
            self.stages[0].add(returned - kernel);
        }
        self.stages[1].add(published - returned);
        if let Some(v) = vdif {
            self.stages[4].add(kernel - v);
        }
    }

    /// The writer wrote frames `first..end` in one call that returned at `written`; with
    /// `durable` they were on the device then too (O_DIRECT).
    pub fn written(&self, first: u64, end: u64, written: i64, durable: bool) {
        let Some(t) = self.stamps.get() else { return };
        let mut seq = first.next_multiple_of(SAMPLE_EVERY);
        while seq < end {
            let i = Latency::index(t, seq);
            // The writer holds these frames: their entries cannot be reused meanwhile, and
            // publishing ordered their stamps before them.
            if t.holds(i, seq) {
                let published = t.published[i].load(Ordering::Relaxed) as i64;
                self.stages[2].add(written - published);
                if durable {
                    self.trace(t, seq, written, None);
                }
            }
            seq += SAMPLE_EVERY;
        }
    }

    /// Frames `first..end`, written at `written`, reached the device at `durable`.
    pub fn durable(&self, first: u64, end: u64, written: i64, durable: i64) {
        let Some(t) = self.stamps.get() else { return };
        let mut seq = first.next_multiple_of(SAMPLE_EVERY);
        while seq < end {
            self.stages[3].add(durable - written);
            self.trace(t, seq, written, Some(durable));
            seq += SAMPLE_EVERY;
        }
    }

    fn trace(&self, t: &Stamps, seq: u64, written: i64, durable: Option<i64>) {
        let i = Latency::index(t, seq);
        if !t.holds(i, seq) {
            // Reused for a later frame: this one's receive stamps are gone.
            return;
        }
        let trace = Trace {
            seq,
            kernel: t.kernel[i].load(Ordering::Relaxed) as i64,
            returned: t.returned[i].load(Ordering::Relaxed) as i64,
            published: t.published[i].load(Ordering::Relaxed) as i64,
            written,
            durable,
        };
        if !t.holds(i, seq) {
            // Reused while it was read.
            return;
        }
        let mut v = self.traces.lock().unwrap();
        if v.len() == TRACES {
            v.pop_front();
        }
        v.push_back(trace);
    }

    /// Every stage's counts now.
    pub fn snapshot(&self) -> Vec<HistogramSnapshot> {
        self.stages.iter().map(|h| h.snapshot()).collect()
    }

    pub fn traces(&self) -> Vec<Trace> {
        self.traces.lock().unwrap().iter().copied().collect()
    }
}

/// Several streams' stages added up, stage by stage.
pub fn merged<'a>(streams: impl Iterator<Item = &'a Latency>) -> Vec<HistogramSnapshot> {
    let mut out = vec![HistogramSnapshot::default(); STAGES.len()];
    for l in streams {
        for (o, s) in out.iter_mut().zip(l.snapshot()) {
            o.merge(&s);
        }
    }
    out
}

/// The summary's `latency` document: every stage's report, and the newest complete traces.
#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct LatencyReport {
    pub sample_every: u64,
    pub stages: std::collections::BTreeMap<String, StageReport>,
    pub traces: Vec<Trace>,
}

pub fn report<'a>(streams: impl Iterator<Item = &'a Latency> + Clone) -> LatencyReport {
    let merged = merged(streams.clone());
    LatencyReport {
        sample_every: SAMPLE_EVERY,
        stages: STAGES
            .iter()
            .zip(&merged)
            .map(|(n, h)| (n.to_string(), h.report()))
            .collect(),
        traces: streams.flat_map(|l| l.traces()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_log_spaced_and_values_land_under_their_edge() {
        assert!((bucket_edge(0) - 1e-7).abs() < 1e-20);
        assert!((bucket_edge(4) - 1e-6).abs() < 1e-18);
        assert!(bucket_edge(BUCKETS - 1).is_infinite());
        for v in [0.0, 1e-9, 1e-7, 1.5e-7, 3e-6, 1e-3, 0.5, 9e3, 1e6] {
            let i = bucket_of(v);
            assert!(v <= bucket_edge(i), "{v} in {i}");
            assert!(i == 0 || v > bucket_edge(i - 1), "{v} in {i}");
        }
    }

    #[test]
    fn quantiles_counts_and_order() {
        let l = Latency::default();
        l.size_for(1024);
        // 128 frames, the sampled ones 0 and 64: kernel 10 µs before return, 2 µs to publish.
        for seq in [0u64, 64] {
            let ret = 1_000_000_000 + seq as i64 * 1000;
            l.received(seq, ret - 10_000, ret, ret + 2_000, Some(ret - 20_000_000));
        }
        l.written(0, 128, 1_000_500_000, false);
        l.durable(0, 128, 1_000_500_000, 1_003_000_000);
        let r = report(std::iter::once(&l));
        assert_eq!(r.stages["kernel"].count, 2);
        assert_eq!(r.stages["capture"].count, 2);
        assert_eq!(r.stages["write"].count, 2);
        assert_eq!(r.stages["durable"].count, 2);
        assert_eq!(r.stages["off"].count, 2);
        let k = &r.stages["kernel"];
        assert!(k.p50.unwrap() >= 10e-6 && k.p50.unwrap() < 10e-6 * 10f64.powf(0.25));
        assert_eq!(k.max, Some(10e-6));
        assert_eq!(r.traces.len(), 2);
        for t in &r.traces {
            assert!(t.kernel <= t.returned && t.returned <= t.published);
            assert!(t.published <= t.written && Some(t.written) <= t.durable);
        }
    }
}
