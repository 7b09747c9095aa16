//! Bit-state statistics (`analysis::bstate`): how often each quantisation level occurs, and
//! what Gaussian noise at the optimal thresholds would give.

use super::errors::decode_err;
use numpy::{PyArray2, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// State counts (nchan, 2^bits) of the payloads of `frames` (one thread's rows).
#[pyfunction]
fn bit_states<'py>(
    py: Python<'py>,
    frames: PyReadonlyArray2<'_, u8>,
    header_size: usize,
    bits: u32,
    nchan: usize,
    complex: bool,
) -> PyResult<Bound<'py, PyArray2<u64>>> {
    let view = frames.as_array();
    let fs = view.shape()[1];
    if fs <= header_size {
        return Err(PyValueError::new_err(
            "frames are not longer than their header",
        ));
    }
    let rows: Vec<&[u8]> = view
        .rows()
        .into_iter()
        .map(|r| {
            r.to_slice()
                .map(|s| &s[header_size..])
                .ok_or_else(|| PyValueError::new_err("frames must be C-contiguous rows"))
        })
        .collect::<PyResult<_>>()?;
    let counts = py
        .detach(|| crate::analysis::bstate::bit_states(&rows, bits, nchan, complex))
        .map_err(decode_err)?;
    let arr = numpy::ndarray::Array2::from_shape_vec((nchan, 1usize << bits), counts)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(numpy::IntoPyArray::into_pyarray(arr, py))
}

/// Expected 2-bit state fractions for Gaussian input quantised at ±threshold σ.
#[pyfunction]
pub fn two_bit_state_fractions(threshold_sigma: f64) -> (f64, f64, f64, f64) {
    let [a, b, c, d] = crate::analysis::bstate::two_bit_state_fractions(threshold_sigma);
    (a, b, c, d)
}

/// Registers the bit-state functions on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(bit_states, m)?)?;
    m.add_function(wrap_pyfunction!(two_bit_state_fractions, m)?)?;
    Ok(())
}
