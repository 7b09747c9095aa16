//! The test sources (`crate::sources`): `Sender` (behind `vdifrec.Sender`), the generator of
//! synthetic recordings, and the frame-by-frame comparison of a recording with what was sent.

use super::errors::{arg_err, generate_err, send_err, SenderError};
use super::header::PyHeader;
use super::to_json;
use crate::sources::generate::{write_file, GenerateOptions, SignalSpec};
use crate::sources::sender::{verify_recording, SendConfig, SendOptions, Sender as CoreSender};
use pyo3::prelude::*;
use std::sync::Mutex;
use std::time::Duration;

/// The VDIF sender (wrapped by `vdifrec.send` and `vdifrec.Sender`).
#[pyclass(module = "vdifrec._core", name = "Sender", frozen)]
pub struct PySender {
    inner: Mutex<CoreSender>,
}

#[pymethods]
impl PySender {
    /// Checks every option (a bad one raises `ArgumentError` naming it), prepares and starts.
    #[new]
    fn new(py: Python<'_>, options: &Bound<'_, PyAny>) -> PyResult<Self> {
        let options: SendOptions = super::options_from(options)?;
        let cfg = SendConfig::from_options(&options).map_err(arg_err)?;
        let sender = py.detach(|| CoreSender::start(cfg)).map_err(send_err)?;
        Ok(PySender {
            inner: Mutex::new(sender),
        })
    }

    /// Waits up to `timeout` seconds (forever if None); the summary as JSON once finished.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<String>> {
        let result = py.detach(|| {
            self.inner
                .lock()
                .unwrap()
                .wait(timeout.map(|t| Duration::from_secs_f64(t.max(0.0))))
        });
        match result {
            None => Ok(None),
            Some(Ok(s)) => Ok(Some(to_json(&s)?)),
            Some(Err(e)) => Err(SenderError::new_err(e)),
        }
    }

    /// Stops sending; returns the summary as JSON.
    fn stop(&self, py: Python<'_>) -> PyResult<String> {
        let result = py.detach(|| self.inner.lock().unwrap().stop());
        match result {
            Ok(s) => to_json(&s),
            Err(e) => Err(SenderError::new_err(e)),
        }
    }

    fn finished(&self) -> bool {
        self.inner.lock().unwrap().is_finished()
    }
}

/// Writes a synthetic recording (`options`: seconds and signal); returns the first frame's
/// header.
#[pyfunction]
fn generate(
    py: Python<'_>,
    path: std::path::PathBuf,
    options: &Bound<'_, PyAny>,
) -> PyResult<PyHeader> {
    let options: GenerateOptions = super::options_from(options)?;
    let header = py
        .detach(|| write_file(&path, &options))
        .map_err(generate_err)?;
    Ok(PyHeader { inner: header })
}

/// Compares a recording with what a send of `signal` (pool of `pool` frame sets) sent, frame
/// by frame (headers and payloads regenerated, nothing stored); JSON: frames, matching,
/// differing, out_of_order, first_difference.
#[pyfunction]
#[pyo3(signature = (path, signal, pool=None))]
fn verify_sent(
    py: Python<'_>,
    path: std::path::PathBuf,
    signal: &Bound<'_, PyAny>,
    pool: Option<usize>,
) -> PyResult<String> {
    let spec: SignalSpec = super::options_from(signal)?;
    let pool = pool.unwrap_or(SendOptions::default().pool as usize);
    let v = py
        .detach(|| verify_recording(&path, &spec, pool))
        .map_err(send_err)?;
    to_json(&v)
}

/// Registers the sender, the generator and the comparison on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add(
        "TWO_BIT_THRESHOLD_SIGMA",
        crate::sources::generate::TWO_BIT_THRESHOLD_SIGMA,
    )?;
    m.add_class::<PySender>()?;
    m.add_function(wrap_pyfunction!(generate, m)?)?;
    m.add_function(wrap_pyfunction!(verify_sent, m)?)?;
    Ok(())
}
