//! What the control room is told of an observation run from its schedule (`vdifrec observe`):
//! the scan recording now, the next one, the finished ones with their results, and the
//! session's counts. The schedule is read and followed by the Python side (control plane);
//! it hands this document to the recorder, which serves it in `/status` and counts it in
//! `/metrics`, so that the page and `watch` need no second connection.

use serde::{Deserialize, Serialize};

/// One scan of the schedule as the control room sees it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ObservedScan {
    /// The scan's name in the schedule, and on disk (`<exp>_<station>_<scan>`, maybe with a
    /// suffix).
    pub name: String,
    pub disk_name: String,
    pub source: String,
    pub mode: String,
    /// The recording window, UTC (ISO 8601) and POSIX seconds.
    pub window_start: String,
    pub window_stop: String,
    pub window_start_unix: f64,
    pub window_stop_unix: f64,
    pub frames_expected: Option<u64>,
    pub frames_recorded: Option<u64>,
    pub frames_lost: Option<u64>,
    /// Share of the window recorded so far (0..1), while it records.
    pub progress: Option<f64>,
    /// `OK`, `NOT OK`, `missed`, `recorded before`; empty while it waits or records.
    pub result: String,
    /// Why it was missed or is not OK.
    pub why: String,
    /// How the arriving stream differs from the schedule's mode (empty: as scheduled).
    pub mismatch: Vec<String>,
    /// Where shipping the scan stands: empty (not shipped), `queued`, `sending`, `verified`
    /// or `failed: ...`.
    pub shipped: String,
}

/// The observation: what `vdifrec observe` tells the recorder it serves.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Observation {
    pub schedule: String,
    pub experiment: String,
    pub station: String,
    pub recording: Option<ObservedScan>,
    pub next: Option<ObservedScan>,
    /// The finished scans, newest last.
    pub finished: Vec<ObservedScan>,
    pub scans_planned: u64,
    pub scans_recorded: u64,
    pub scans_missed: u64,
    pub scans_mismatched: u64,
    /// VDIF time of the stream minus the host clock, seconds (null before the first frame).
    pub clock_offset_s: Option<f64>,
    /// What the operator must know now (a clock off, a stream not as scheduled).
    pub warnings: Vec<String>,
}

impl Observation {
    /// The document as the observation script wrote it (JSON); the field at fault if not.
    pub fn from_json(text: &str) -> Result<Observation, String> {
        serde_json::from_str(text).map_err(|e| format!("observation: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_document_takes_defaults_and_a_wrong_one_is_named() {
        let o = Observation::from_json(
            r#"{"experiment": "vr26a", "next": {"name": "No0002", "window_start_unix": 10.5}}"#,
        )
        .unwrap();
        assert_eq!(o.experiment, "vr26a");
        assert_eq!(o.next.as_ref().unwrap().window_start_unix, 10.5);
        assert!(o.recording.is_none() && o.finished.is_empty());
        let e = Observation::from_json(r#"{"scans_planned": "three"}"#).unwrap_err();
        assert!(e.starts_with("observation: invalid type"), "{e}");
    }
}
