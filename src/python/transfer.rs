//! `Push` and `Receiver` (behind `vdifrec.push` and `vdifrec.Receiver`): each runs in its own
//! thread in the core; Python polls, shows progress, and stops it on Ctrl-C.

use super::errors::transfer_err;
use super::to_json;
use crate::transfer::push::{PushOptions, PushRun};
use crate::transfer::receive::{ReceiveOptions, Receiver as CoreReceiver};
use pyo3::prelude::*;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A push under way.
#[pyclass(module = "vdifrec._core", name = "Push", frozen)]
pub struct PyPush {
    inner: PushRun,
}

#[pymethods]
impl PyPush {
    /// Checks every option (a bad one raises `ArgumentError` naming it), reads the token and
    /// finds the sources, then starts.
    #[new]
    fn new(py: Python<'_>, options: &Bound<'_, PyAny>) -> PyResult<Self> {
        let options: PushOptions = super::options_from(options)?;
        let inner = py
            .detach(|| PushRun::start(&options))
            .map_err(transfer_err)?;
        Ok(PyPush { inner })
    }

    /// The summary as JSON once the push has ended; None if it is still running after
    /// `timeout` seconds.
    #[pyo3(signature = (timeout=0.0))]
    fn wait(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<String>> {
        let t = Duration::from_secs_f64(timeout.max(0.0));
        py.detach(|| self.inner.wait(t))
            .map(|s| to_json(&s))
            .transpose()
    }

    /// (bytes done, bytes in all, streams now, items done, items in all, item now).
    fn progress(&self) -> (u64, u64, usize, usize, usize, String) {
        let p = &self.inner.progress;
        (
            p.bytes_done.load(Ordering::Relaxed),
            p.bytes_total.load(Ordering::Relaxed),
            p.streams.load(Ordering::Relaxed),
            p.items_done.load(Ordering::Relaxed),
            p.items_total.load(Ordering::Relaxed),
            p.item.lock().unwrap().clone(),
        )
    }

    /// Ends the push soon; what reached the receiver stays there, resumable.
    fn stop(&self) {
        self.inner.stop();
    }
}

/// A receiver serving in a thread of its own.
#[pyclass(module = "vdifrec._core", name = "Receiver", frozen)]
pub struct PyReceiver {
    inner: Arc<CoreReceiver>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[pymethods]
impl PyReceiver {
    /// Checks the options, reads the token, binds the port and starts serving.
    #[new]
    fn new(py: Python<'_>, options: &Bound<'_, PyAny>) -> PyResult<Self> {
        let options: ReceiveOptions = super::options_from(options)?;
        let inner = Arc::new(
            py.detach(|| CoreReceiver::bind(&options))
                .map_err(transfer_err)?,
        );
        let serving = Arc::clone(&inner);
        let thread = std::thread::Builder::new()
            .name("vdifrec-receive".into())
            .spawn(move || serving.serve())
            .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))?;
        Ok(PyReceiver {
            inner,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// `HOST:PORT` it listens on (the port the system chose, when 0 was asked).
    #[getter]
    fn address(&self) -> String {
        self.inner.address().to_string()
    }

    /// The transfers that ended since the last call, as JSON (a list).
    fn events(&self) -> PyResult<String> {
        to_json(&self.inner.take_events())
    }

    /// Stops serving: open connections are closed; partial copies keep their manifests.
    fn stop(&self, py: Python<'_>) {
        self.inner.stop();
        let t = self.thread.lock().unwrap().take();
        if let Some(t) = t {
            py.detach(|| {
                let _ = t.join();
            });
        }
    }
}

/// Checks where pushes would go before any starts (`vdifrec observe --ship-to`): the receiver
/// `to` (HOST:PORT), the token in `token_file`, the `rate`; a bad one raises `ArgumentError`
/// naming it (or `TransferError` for the token).
#[pyfunction]
#[pyo3(signature = (to, token_file, rate=None))]
fn check_push_destination(
    to: String,
    token_file: std::path::PathBuf,
    rate: Option<String>,
) -> PyResult<()> {
    crate::transfer::push::destination(Some(&to), Some(&token_file), rate.as_deref())
        .map(|_| ())
        .map_err(transfer_err)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPush>()?;
    m.add_class::<PyReceiver>()?;
    m.add_function(wrap_pyfunction!(check_push_destination, m)?)?;
    Ok(())
}
