//! Python bindings (`vdifrec._core`), one file per part of the core they wrap:
//!
//! - `header`: a VDIF header; `file`: the file reader and decoding (`vdif`);
//! - `scan`: scans on several disks, listed and gathered (`vdif::scan`, `vdif::gather`);
//! - `convert`: a stream's threads kept, channels corner-turned, frames cut (`vdif::transform`,
//!   `vdif::convert`);
//! - `recorder`: the recorder and its views of the ring (`record`);
//! - `spectrum` (and tones), `fringe`, `bstate`, `check`: the analyses (`analysis`), one
//!   file each;
//! - `sources`: the sender, the generator and the comparison with what was sent (`sources`);
//! - `transfer`: push and receive (`transfer`); `doctor`: the host probes (`doctor`);
//! - `errors`: every exception, and the one place core errors become them;
//! - `baseline`: the benchmarks' baselines (with the `bench` feature only).
//!
//! Each converts arguments, runs the core in `py.detach`, and converts back; nothing here
//! decides what a Rust user would also need.

#[cfg(feature = "bench")]
mod baseline;
mod bstate;
mod check;
mod convert;
mod doctor;
mod errors;
mod file;
mod fringe;
mod header;
mod recorder;
mod ring_view;
mod scan;
mod sources;
mod spectrum;
mod transfer;

use pyo3::prelude::*;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Options given as a dict (or keywords gathered into one) into the core's options type:
/// unknown names and wrong types raise `ArgumentError` naming the option.
fn options_from<T: DeserializeOwned + Serialize + Default>(obj: &Bound<'_, PyAny>) -> PyResult<T> {
    let value: serde_json::Value = pythonize::depythonize(obj).map_err(|e| unreadable(obj, e))?;
    crate::options::from_value(value).map_err(errors::arg_err)
}

/// Why options could not be read, naming the option whose value is to blame (a number
/// beyond 64 bits, an object that is not a number, text, boolean or None).
fn unreadable(obj: &Bound<'_, PyAny>, e: pythonize::PythonizeError) -> PyErr {
    use pyo3::types::{PyDict, PyDictMethods};
    if let Ok(dict) = obj.cast::<PyDict>() {
        for (key, value) in dict.iter() {
            if pythonize::depythonize::<serde_json::Value>(&value).is_err() {
                if value.cast::<PyDict>().is_ok() {
                    return unreadable(&value, e);
                }
                let shown = value.repr().map_or_else(|_| "?".into(), |r| r.to_string());
                return errors::ArgumentError::new_err(format!(
                    "{key}: cannot use {shown}: give a number within 64 bits, text, a boolean or None"
                ));
            }
        }
    }
    errors::ArgumentError::new_err(format!("options: {e}"))
}

/// A result as JSON text, in the shape Python presents it.
fn to_json<T: Serialize>(v: &T) -> PyResult<String> {
    serde_json::to_string(v).map_err(errors::json_err)
}

/// Every option's default, from the core types that own them (`crate::defaults`).
#[pyfunction]
fn defaults(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    pythonize::pythonize(py, &crate::defaults::defaults())
        .map_err(|e| errors::ArgumentError::new_err(e.to_string()))
}

/// Parses a byte size such as "8GiB"; `name` names the argument in the error.
#[pyfunction]
fn parse_size_arg(name: &str, text: &str) -> PyResult<u64> {
    crate::units::parse_size(name, text).map_err(|e| errors::ArgumentError::new_err(e.to_string()))
}

/// Whether this extension was compiled with optimisations (debug builds are too slow to
/// capture at 8 Gbps).
#[pyfunction]
fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    m.add_class::<header::PyHeader>()?;
    m.add_class::<file::FileReader>()?;
    m.add_function(wrap_pyfunction!(file::decode_payloads, m)?)?;
    m.add_class::<recorder::PyRecorder>()?;
    m.add_class::<ring_view::RingView>()?;
    sources::register(m)?;
    spectrum::register(m)?;
    fringe::register(m)?;
    bstate::register(m)?;
    check::register(m)?;
    scan::register(m)?;
    convert::register(m)?;
    transfer::register(m)?;
    #[cfg(feature = "bench")]
    baseline::register(m)?;
    m.add_function(wrap_pyfunction!(defaults, m)?)?;
    m.add_function(wrap_pyfunction!(parse_size_arg, m)?)?;
    m.add_function(wrap_pyfunction!(expand_disks, m)?)?;
    m.add_function(wrap_pyfunction!(build_profile, m)?)?;
    doctor::register(m)?;
    Ok(())
}

/// The directories `disks` names (globs such as `/mnt/disk*` expanded, sorted, each disk once),
/// as the recorder reads its `disks` option; a glob that matches nothing raises ArgumentError.
#[pyfunction]
fn expand_disks(disks: Vec<String>) -> PyResult<Vec<String>> {
    let dirs = crate::options::disk_dirs("disks", &disks).map_err(errors::arg_err)?;
    Ok(dirs.into_iter().map(|p| p.display().to_string()).collect())
}
