//! The whole-file check (`analysis::check`) of a file or of a scan over its parts, its report
//! handed to Python as JSON.

use super::errors::check_err;
use super::to_json;
use crate::analysis::check::{check_file, CheckOptions};
use pyo3::prelude::*;

/// Checks a file (`options`: fps, frame_size); returns the report as JSON text.
#[pyfunction]
#[pyo3(signature = (path, options=None))]
pub fn check(
    py: Python<'_>,
    path: std::path::PathBuf,
    options: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let opts: CheckOptions = match options {
        Some(o) => super::options_from(o)?,
        None => CheckOptions::default(),
    };
    let report = py.detach(|| check_file(&path, &opts)).map_err(check_err)?;
    to_json(&report)
}

/// Checks scan `name` on `disks` over its parts in order (`options` as for `check`); returns
/// the report as JSON text, with `scan` naming any missing part.
#[pyfunction]
#[pyo3(signature = (name, disks, format=None, options=None))]
pub fn check_scan(
    py: Python<'_>,
    name: &str,
    disks: Vec<std::path::PathBuf>,
    format: Option<&str>,
    options: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let opts: CheckOptions = match options {
        Some(o) => super::options_from(o)?,
        None => CheckOptions::default(),
    };
    let scan = super::scan::locate(py, name, &disks, format)?;
    let report = py
        .detach(|| crate::analysis::check::check_scan(&scan, &opts))
        .map_err(check_err)?;
    to_json(&report)
}

/// Registers the checks on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(check_scan, m)?)?;
    Ok(())
}
