//! Where a frame sits in VDIF time, as listings, gap reports and torn pieces name it: its
//! reference epoch, second, frame number and thread, and the UTC it stands for.

use super::header::Header;
use super::time::{utc_unix, Utc};
use serde::Serialize;

/// Where a frame sits in VDIF time, for listings and gap reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stamp {
    pub ref_epoch: u32,
    pub seconds: u32,
    pub frame: u32,
    pub thread: u32,
    /// ISO 8601 UTC: to the nanosecond when the frame's time is known from its header (frame 0
    /// of a second, or EDV 1/3 headers that carry the rate), else the frame's whole second.
    pub time: String,
}

impl Stamp {
    pub fn of(h: &Header) -> Stamp {
        let time = match h.time(None) {
            Ok(t) => t.iso(),
            Err(_) => Utc::from_unix(utc_unix(h.ref_epoch(), h.seconds())).iso(),
        };
        Stamp {
            ref_epoch: h.ref_epoch(),
            seconds: h.seconds(),
            frame: h.frame_nr(),
            thread: h.thread_id(),
            time,
        }
    }

    /// `epoch 53 second 1001 frame 49 thread 0 (2026-...)`.
    pub fn describe(&self) -> String {
        format!(
            "VDIF epoch {} second {} frame {} thread {} ({})",
            self.ref_epoch, self.seconds, self.frame, self.thread, self.time
        )
    }
}
