//! What each forwarding destination has done, counted by its thread in atomics and read by
//! anyone (the status server, the per-second rows, the summary) without ever waiting on it.

use crate::record::forward::destination::Pacing;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// The counters of one destination, written by its thread alone.
#[derive(Default)]
pub struct LinkCounters {
    /// Input frames sent on (each may become several output frames).
    pub frames: AtomicU64,
    /// Input frames passed over: the destination was slower than the stream, down, or paused.
    pub skipped: AtomicU64,
    /// Output frames (datagrams for udp/udps) and bytes put on the wire, prefixes included.
    pub frames_out: AtomicU64,
    pub bytes: AtomicU64,
    /// Connections made again after the destination went away, and attempts that failed.
    pub reconnects: AtomicU64,
    pub connect_failures: AtomicU64,
    /// Frames the capture overwrote while they were being sent (the forwarder fell a whole
    /// ring behind within one batch; it skips ahead long before, so this stays 0).
    pub torn: AtomicU64,
    /// Frames the shaping refused (a frame unlike the stream's first).
    pub refused: AtomicU64,
    /// Gbit/s on the wire over about the last second (f64 bits), set by the thread.
    pub gbps: AtomicU64,
    /// CPU time the thread has used, nanoseconds (updated each second and at its end).
    pub cpu_ns: AtomicU64,
}

/// A destination's state, for the operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkState {
    /// Waiting for the first frame (the shaping needs its header) or connecting.
    Connecting,
    /// Sending the stream.
    Sending,
    /// Connected, not sending (`mem2net=off`, or added paused).
    Paused,
    /// Gone away; retried with backoff.
    Down,
    /// The shaping asked for does not fit the stream (`error` says why); nothing is sent.
    Refused,
    /// Removed or the recording stopped.
    Closed,
}

/// One destination as its thread and everyone else share it.
pub struct Link {
    pub id: u32,
    /// `scheme://host:port`, and the text as given.
    pub label: String,
    pub text: String,
    pub scheme: &'static str,
    pub counters: LinkCounters,
    pub enabled: AtomicBool,
    state: Mutex<(LinkState, Option<String>)>,
    /// The pacing, changed while sending (VSI-S `ipd=`); the thread picks a change up at its
    /// next batch, on the same connection and packet sequence.
    pacing: Mutex<Pacing>,
    pacing_changes: AtomicU64,
}

impl Link {
    pub fn new(
        id: u32,
        label: String,
        text: String,
        scheme: &'static str,
        enabled: bool,
        pacing: Pacing,
    ) -> Link {
        Link {
            id,
            label,
            text,
            scheme,
            counters: LinkCounters::default(),
            enabled: AtomicBool::new(enabled),
            state: Mutex::new((LinkState::Connecting, None)),
            pacing: Mutex::new(pacing),
            pacing_changes: AtomicU64::new(0),
        }
    }

    /// Paces the destination anew from its next batch.
    pub fn set_pacing(&self, pacing: Pacing) {
        *self.pacing.lock().unwrap() = pacing;
        self.pacing_changes.fetch_add(1, Ordering::Release);
    }

    /// The pacing, and a count that changes whenever it does.
    pub fn pacing(&self) -> (Pacing, u64) {
        let changes = self.pacing_changes.load(Ordering::Acquire);
        (*self.pacing.lock().unwrap(), changes)
    }

    pub fn set_state(&self, state: LinkState, error: Option<String>) {
        let mut s = self.state.lock().unwrap();
        // A refusal stands (and explains itself) to the end; other states keep the last
        // error (why it went down) until it is sending again.
        if s.0 == LinkState::Refused {
            return;
        }
        let error = match (state, error) {
            (_, Some(e)) => Some(e),
            (LinkState::Sending, None) => None,
            (_, None) => s.1.take(),
        };
        *s = (state, error);
    }

    pub fn state(&self) -> (LinkState, Option<String>) {
        self.state.lock().unwrap().clone()
    }

    /// The counters now.
    pub fn snapshot(&self) -> ForwardStats {
        let c = &self.counters;
        let (state, error) = self.state();
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ForwardStats {
            id: self.id,
            destination: self.label.clone(),
            given: self.text.clone(),
            scheme: self.scheme,
            enabled: self.enabled.load(Ordering::Relaxed),
            state,
            error,
            frames: get(&c.frames),
            skipped: get(&c.skipped),
            frames_out: get(&c.frames_out),
            bytes: get(&c.bytes),
            reconnects: get(&c.reconnects),
            connect_failures: get(&c.connect_failures),
            torn: get(&c.torn),
            refused: get(&c.refused),
            gbps: f64::from_bits(get(&c.gbps)),
            cpu_s: get(&c.cpu_ns) as f64 * 1e-9,
        }
    }
}

/// One destination's counters at one moment: in `/status` (`forward`), the summary, and
/// (as the change since the previous row) each per-second row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ForwardStats {
    pub id: u32,
    pub destination: String,
    pub given: String,
    pub scheme: &'static str,
    pub enabled: bool,
    pub state: LinkState,
    pub error: Option<String>,
    pub frames: u64,
    pub skipped: u64,
    pub frames_out: u64,
    pub bytes: u64,
    pub reconnects: u64,
    pub connect_failures: u64,
    pub torn: u64,
    pub refused: u64,
    /// Gbit/s on the wire over about the last second.
    pub gbps: f64,
    /// CPU seconds the destination's thread has used.
    pub cpu_s: f64,
}

/// What one destination did during one per-second row.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ForwardRow {
    pub id: u32,
    pub destination: String,
    pub frames: u64,
    pub skipped: u64,
    pub bytes: u64,
    pub reconnects: u64,
    pub gbps: f64,
}

impl ForwardRow {
    /// The change from `before` to `now` over `seconds`.
    pub fn between(before: Option<&ForwardStats>, now: &ForwardStats, seconds: f64) -> ForwardRow {
        let d = |f: fn(&ForwardStats) -> u64| f(now) - before.map_or(0, f);
        let bytes = d(|s| s.bytes);
        ForwardRow {
            id: now.id,
            destination: now.destination.clone(),
            frames: d(|s| s.frames),
            skipped: d(|s| s.skipped),
            bytes,
            reconnects: d(|s| s.reconnects),
            gbps: if seconds > 0.0 {
                bytes as f64 * 8.0 / seconds / 1e9
            } else {
                0.0
            },
        }
    }
}
