//! `RingView`: the owner of a zero-copy view of a recorder's ring frames (what
//! `Recorder.latest` and `Recorder.frames` hand to NumPy).

use super::errors::StaleViewError;
use super::file::readonly_view;
use crate::record::ring::Ring;
use numpy::PyArray2;
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};

/// Owner of a zero-copy view of ring frames: keeps the ring mapped (and, for a held view,
/// the frames pinned against overwriting) until released or garbage-collected. A view that
/// yields pins nothing; `stale_frames` counts what the capture has taken back since.
#[pyclass(module = "vdifrec._core", frozen)]
pub struct RingView {
    ring: Arc<Ring>,
    pin: Mutex<Option<usize>>,
    #[pyo3(get)]
    pub first: u64,
    #[pyo3(get)]
    count: u64,
    #[pyo3(get)]
    hold: bool,
}

impl RingView {
    pub fn new(ring: Arc<Ring>, pin: Option<usize>, first: u64, count: u64) -> RingView {
        RingView {
            ring,
            hold: pin.is_some(),
            pin: Mutex::new(pin),
            first,
            count,
        }
    }
}

#[pymethods]
impl RingView {
    /// The frames as a read-only (count, frame_size) uint8 array whose memory is the ring;
    /// the array keeps this owner (and so the pin and the ring) alive.
    fn array<'py>(slf: Bound<'py, Self>) -> Bound<'py, PyArray2<u8>> {
        let v = slf.get();
        // SAFETY: the frames were published when the view was made; the mapping lives as long
        // as the Arc<Ring> this owner keeps, and frames up to nslots are contiguous through
        // the mirrored mapping. A held view's frames are not overwritten while the pin holds;
        // a yielding view's may be, which `stale_frames` (read after use) detects.
        let ptr = v.ring.slot_ptr(v.first);
        let (rows, cols) = (v.count as usize, v.ring.frame_size());
        unsafe { readonly_view(ptr, rows, cols, slf.into_any()) }
    }

    /// Lets the capture reuse these frames' slots now (the array then may change).
    fn release(&self) {
        if let Some(idx) = self.pin.lock().unwrap().take() {
            self.ring.unpin(idx);
        }
    }

    #[getter]
    fn pinned(&self) -> bool {
        self.pin.lock().unwrap().is_some()
    }

    /// Frames of the view the capture has overwritten (or is writing) since it was made.
    #[getter]
    fn stale_frames(&self) -> u64 {
        self.ring.overwritten(self.first, self.count)
    }

    /// The frames the ring holds (for messages: how far behind a view fell, in time).
    #[getter]
    fn ring_slots(&self) -> u64 {
        self.ring.nslots()
    }

    /// Raises StaleViewError if the capture has taken back any of the view's frames; `what`
    /// names the analysis, for the message.
    fn check_fresh(&self, what: &str) -> PyResult<()> {
        let stale = self.stale_frames();
        if stale == 0 {
            return Ok(());
        }
        let behind = self
            .ring
            .write_seq()
            .saturating_sub(self.first + self.ring.nslots());
        Err(StaleViewError::new_err(format!(
            "{what}: the view of frames {}..{} is stale: the capture has taken back {stale} of its {} frames (overwritten, or being written; it fell {behind} frames behind a ring of {} frames) while it was in use. Views yield to the recording: take a fresh view of fewer frames (a fraction of a second) and use it at once, or view(n, hold=True) to keep the frames at the cost of ring overflows",
            self.first,
            self.first + self.count,
            self.count,
            self.ring.nslots()
        )))
    }
}
impl Drop for RingView {
    fn drop(&mut self) {
        if let Some(idx) = self.pin.lock().unwrap().take() {
            self.ring.unpin(idx);
        }
    }
}
