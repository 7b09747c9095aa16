//! `Recorder` (behind `vdifrec.Recorder`): the recording engine, its scans, and the views
//! of its ring it hands out (`ring_view`).

use super::errors::{arg_err, record_err, ring_err, scan_command_err, RecorderError};
use super::ring_view::RingView;
use super::to_json;
use crate::options::ArgError;
use crate::record::recorder::{Recorder as CoreRecorder, RecorderConfig, RecorderOptions};
use crate::record::ring::Ring;
use crate::record::scan::ScanRequest;
use crate::record::shared::Shared;
use crate::vdif::time::parse_utc;
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The recording engine (wrapped by `vdifrec.Recorder`).
#[pyclass(module = "vdifrec._core", name = "Recorder", frozen)]
pub struct PyRecorder {
    config: RecorderConfig,
    inner: Mutex<Option<CoreRecorder>>,
    shared: Mutex<Option<Arc<Shared>>>,
    summary: Mutex<Option<String>>,
}

#[pymethods]
impl PyRecorder {
    /// Checks every option (a bad one raises `ArgumentError` naming it); starts nothing.
    #[new]
    fn new(options: &Bound<'_, PyAny>) -> PyResult<Self> {
        let options: RecorderOptions = super::options_from(options)?;
        let config = RecorderConfig::from_options(&options).map_err(arg_err)?;
        Ok(PyRecorder {
            config,
            inner: Mutex::new(None),
            shared: Mutex::new(None),
            summary: Mutex::new(None),
        })
    }

    /// Allocates the ring, binds the socket, starts the threads; returns the bound (host, port).
    fn start(&self, py: Python<'_>) -> PyResult<(String, u16)> {
        self.locked(py, |inner| {
            if inner.is_some() || self.summary.lock().unwrap().is_some() {
                return Err(RecorderError::new_err(
                    "this recorder has been started already; make a new Recorder for a new recording",
                ));
            }
            let rec = CoreRecorder::start_with(
                self.config.clone(),
                Some(crate::analysis::live::analyser()),
            )
            .map_err(record_err)?;
            let addr = rec.local_addr();
            *self.shared.lock().unwrap() = Some(rec.shared());
            *inner = Some(rec);
            Ok((addr.ip().to_string(), addr.port()))
        })
    }

    /// Every stream's bound (host, port), in the order given (empty before start).
    fn addresses(&self, py: Python<'_>) -> Vec<(String, u16)> {
        self.locked(py, |inner| {
            inner.as_ref().map_or_else(Vec::new, |r| {
                r.local_addrs()
                    .into_iter()
                    .map(|a| (a.ip().to_string(), a.port()))
                    .collect()
            })
        })
    }

    /// Stops (drains the ring to disk) and returns the summary as JSON; again: the same one.
    fn stop(&self, py: Python<'_>) -> PyResult<Option<String>> {
        if let Some(s) = self.summary.lock().unwrap().clone() {
            return Ok(Some(s));
        }
        let taken = self.locked(py, |inner| inner.take());
        let Some(mut rec) = taken else {
            return Ok(None);
        };
        let summary = py.detach(move || rec.stop());
        let json = to_json(&summary)?;
        *self.summary.lock().unwrap() = Some(json.clone());
        Ok(Some(json))
    }

    /// Every counter now, as JSON (None before start or after stop).
    fn stats(&self, py: Python<'_>) -> PyResult<Option<String>> {
        let stats = self.locked(py, |inner| inner.as_ref().map(|r| r.stats()));
        stats.map(|s| to_json(&s)).transpose()
    }

    /// Waits up to `timeout` seconds for per-second rows beyond index `start`; JSON list.
    fn wait_rows(&self, py: Python<'_>, start: usize, timeout: f64) -> PyResult<String> {
        let Some(shared) = self.shared.lock().unwrap().clone() else {
            return Ok("[]".into());
        };
        let rows = py.detach(|| shared.wait_rows(start, Duration::from_secs_f64(timeout.max(0.0))));
        to_json(&rows)
    }

    /// The live monitor's newest result as JSON (None before its first, or when it is off).
    fn live(&self) -> PyResult<Option<String>> {
        let Some(shared) = self.shared.lock().unwrap().clone() else {
            return Ok(None);
        };
        shared.live().snapshot().map(|s| to_json(&s)).transpose()
    }

    /// The capture has ended by itself (frame limit reached) or the recording failed.
    fn finished(&self) -> bool {
        self.shared
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|s| s.finished())
    }

    /// (host, port) of the status endpoint, if it runs.
    fn status_address(&self, py: Python<'_>) -> Option<(String, u16)> {
        self.locked(py, |inner| {
            inner
                .as_ref()
                .and_then(|r| r.status_addr())
                .map(|a| (a.ip().to_string(), a.port()))
        })
    }

    fn notes(&self, py: Python<'_>) -> Vec<String> {
        self.locked(py, |inner| {
            inner.as_ref().map_or_else(Vec::new, |r| r.notes())
        })
    }

    /// Where the stream is taken from, for the operator (None before start).
    #[getter]
    fn source(&self, py: Python<'_>) -> Option<String> {
        self.locked(py, |inner| inner.as_ref().map(|r| r.source()))
    }

    #[getter]
    fn running(&self, py: Python<'_>) -> bool {
        self.locked(py, |inner| inner.is_some())
    }

    /// Starts a scan (`start`/`stop`: UTC text, VDIF-time bounds); returns the name used.
    #[pyo3(signature = (name, start=None, stop=None))]
    fn start_scan(
        &self,
        py: Python<'_>,
        name: String,
        start: Option<String>,
        stop: Option<String>,
    ) -> PyResult<String> {
        let time = |label: &str, t: Option<String>| {
            t.map(|t| parse_utc(&t).map_err(|why| arg_err(ArgError::new(label, why))))
                .transpose()
        };
        let req = ScanRequest {
            name,
            start: time("start", start)?,
            stop: time("stop", stop)?,
        };
        self.with_recorder(py, |r| r.start_scan(req).map_err(scan_command_err))
    }

    /// Ends the running scan now (and those queued behind it, without a frame; with `name`
    /// only that scan); waits (up to `timeout` s, None: as long as it takes) until it is on
    /// disk and returns its summary as JSON (None if still being written).
    #[pyo3(signature = (timeout=None, name=None))]
    fn stop_scan(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        name: Option<String>,
    ) -> PyResult<Option<String>> {
        let running = self.with_recorder(py, |r| {
            let running = name.clone().or(r.active_scan());
            r.end_scan(name).map_err(scan_command_err)?;
            Ok(running)
        })?;
        self.wait_scan(py, timeout, running)
    }

    /// Waits (up to `timeout` s, None: as long as it takes) for the running scan to end and be
    /// on disk; its summary as JSON, or None if it still runs. With no scan running: the last
    /// scan's summary (None if there was none). With `name`: that scan's, once it is on disk
    /// (None at once if no scan of that name was started).
    #[pyo3(signature = (timeout=None, name=None))]
    fn wait_scan(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        name: Option<String>,
    ) -> PyResult<Option<String>> {
        let deadline =
            timeout.map(|t| std::time::Instant::now() + Duration::from_secs_f64(t.max(0.0)));
        loop {
            // Short waits, so that Ctrl-C reaches Python and other calls get the recorder; none
            // past the deadline (a timeout of 0 only looks).
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            let slice = left.map_or(Duration::from_millis(100), |l| {
                l.min(Duration::from_millis(100))
            });
            // (summary, whether to wait on)
            let (got, wait_on) = self.with_recorder(py, |r| {
                Ok(match &name {
                    Some(n) => match r.wait_for_scan(n, Some(slice)) {
                        Some(s) => (Some(s), false),
                        // Finished in between, or never started: no use waiting.
                        None if !r.queued_scans().contains(n) => {
                            (r.wait_for_scan(n, Some(Duration::ZERO)), false)
                        }
                        None => (None, true),
                    },
                    None => (r.wait_scan(Some(slice)), true),
                })
            })?;
            if let Some(s) = got {
                return Ok(Some(to_json(&s)?));
            }
            if !wait_on {
                return Ok(None);
            }
            py.check_signals()?;
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Ok(None);
            }
        }
    }

    /// Tells the status what the schedule driving the recorder stands at (JSON of the
    /// `observing::Observation` document); None clears it.
    #[pyo3(signature = (document=None))]
    fn set_observation(&self, py: Python<'_>, document: Option<String>) -> PyResult<()> {
        let o = document
            .map(|d| crate::record::observing::Observation::from_json(&d))
            .transpose()
            .map_err(pyo3::exceptions::PyValueError::new_err)?;
        self.with_recorder(py, |r| {
            r.shared().set_observation(o);
            Ok(())
        })
    }

    /// Forwards the stream to `destination` from its newest frame on (`enabled` false:
    /// connected, sending nothing until `set_forward`); returns the destination's id.
    #[pyo3(signature = (destination, enabled=true))]
    fn add_forward(&self, py: Python<'_>, destination: String, enabled: bool) -> PyResult<u32> {
        self.with_recorder(py, |r| {
            r.add_forward(&destination, enabled).map_err(arg_err)
        })
    }

    /// Whether forwarding to `destination` would send the stream back to this recorder's own
    /// data port (an address of this host at a port it receives on): `add_forward` refuses it.
    fn forward_feeds_itself(&self, py: Python<'_>, destination: String) -> PyResult<bool> {
        self.with_recorder(py, |r| {
            r.forward_feeds_itself(&destination).map_err(arg_err)
        })
    }

    /// Pauses (false) or resumes (true) forwarding to destination `id`.
    fn set_forward(&self, py: Python<'_>, id: u32, enabled: bool) -> PyResult<()> {
        self.with_recorder(py, |r| r.set_forward(id, enabled).map_err(arg_err))
    }

    /// Paces destination `id` anew on the same connection (`rate=2Gbps`, `ipd=10`, "": none).
    fn pace_forward(&self, py: Python<'_>, id: u32, pacing: String) -> PyResult<()> {
        self.with_recorder(py, |r| r.pace_forward(id, &pacing).map_err(arg_err))
    }

    /// Stops forwarding to destination `id`; its counters as JSON.
    fn remove_forward(&self, py: Python<'_>, id: u32) -> PyResult<String> {
        let s = self.with_recorder(py, |r| r.remove_forward(id).map_err(arg_err))?;
        to_json(&s)
    }

    /// Every forwarding destination of the run (removed ones too) as JSON.
    fn forwards(&self, py: Python<'_>) -> PyResult<String> {
        let s = self.locked(py, |inner| {
            inner
                .as_ref()
                .map(|r| r.forward_stats())
                .unwrap_or_default()
        });
        to_json(&s)
    }

    /// Every scan running or queued, in order: the first is recording now (or still being
    /// written out), the others wait for their start.
    fn queued_scans(&self, py: Python<'_>) -> Vec<String> {
        self.locked(py, |inner| {
            inner.as_ref().map(|r| r.queued_scans()).unwrap_or_default()
        })
    }

    /// The scan running now (or still being written out), if any.
    fn active_scan(&self, py: Python<'_>) -> Option<String> {
        self.locked(py, |inner| inner.as_ref().and_then(|r| r.active_scan()))
    }

    /// A view of the newest `n` frames (fewer if fewer have arrived): (owner, first frame
    /// number); the owner's `array()` is the zero-copy view. With `hold` the frames are pinned
    /// (the capture drops new frames rather than overwrite them); without, the view yields to
    /// the capture and `stale_frames` tells what it lost. More than half the ring is refused.
    #[pyo3(signature = (n, hold=false))]
    fn pin_latest(&self, n: u64, hold: bool) -> PyResult<(RingView, u64)> {
        let ring = self.ring()?;
        ring.check_view_size(n).map_err(ring_err)?;
        let view = if hold {
            let (idx, first, count) = ring.pin_latest(n).map_err(ring_err)?;
            RingView::new(ring, Some(idx), first, count)
        } else {
            let (first, count) = ring.watch_latest(n).map_err(ring_err)?;
            RingView::new(ring, None, first, count)
        };
        let first = view.first;
        Ok((view, first))
    }

    /// A view of frames `first..first + n` (numbered from 0 in arrival order since the
    /// start), held or yielding as `pin_latest`.
    #[pyo3(signature = (first, n, hold=false))]
    fn pin_frames(&self, first: u64, n: u64, hold: bool) -> PyResult<RingView> {
        let ring = self.ring()?;
        ring.check_view_size(n).map_err(ring_err)?;
        let pin = if hold {
            Some(ring.pin(first, n).map_err(ring_err)?)
        } else {
            ring.watch(first, n).map_err(ring_err)?;
            None
        };
        Ok(RingView::new(ring, pin, first, n))
    }
}

impl PyRecorder {
    /// Runs `f` on the recorder with the GIL released. Every use of `inner` goes through here:
    /// a thread may hold it while it waits (for a scan to reach the disk, for the ring to be
    /// laid out), and another that waited for it holding the GIL would keep the first from
    /// ever getting the GIL back (`vdifrec serve` answers `record?` while `record=off` waits).
    fn locked<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Option<CoreRecorder>) -> T + Send,
    ) -> T {
        py.detach(|| f(&mut self.inner.lock().unwrap()))
    }

    fn with_recorder<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut CoreRecorder) -> PyResult<T> + Send,
    ) -> PyResult<T> {
        self.locked(py, |inner| match inner.as_mut() {
            Some(r) => f(r),
            None => Err(RecorderError::new_err(
                "the recorder is not running: call start() first (scans need a running recorder)",
            )),
        })
    }

    fn ring(&self) -> PyResult<Arc<Ring>> {
        let shared = self.shared.lock().unwrap().clone().ok_or_else(|| {
            RecorderError::new_err("the recorder has not been started: call start() first")
        })?;
        shared.ring().ok_or_else(|| {
            RecorderError::new_err("no frame has arrived yet, so the ring holds nothing to view")
        })
    }
}
