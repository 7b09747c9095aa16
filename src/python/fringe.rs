//! Fringes (`analysis::fringe`, `analysis::fringe_search`): the cross accumulator behind
//! `vdifrec.fringe`, the fringe of whole frames of live views, and the search over stretches of
//! time summed apart (a fringe test across stations). Sums and fringes cross to Python as
//! tuples of arrays (`SumsTuple`, `FringeTuple`), which `file.rs` uses too.

use super::errors::spectrum_err;
use super::spectrum::{flat, frame_rows, rows_of};
use crate::analysis::fringe::{fringe_of, CrossAccumulator, CrossSums, Fringe};
use crate::analysis::fringe_search::{fringe_search, Search};
use crate::analysis::spectrum::FrameSource;
use numpy::{PyArray1, PyArray2, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Cross-correlation of two streams (wrapped by `vdifrec.fringe`).
#[pyclass(module = "vdifrec._core", name = "CrossAccumulator")]
pub struct PyCrossAccumulator {
    inner: CrossAccumulator,
}

#[pymethods]
impl PyCrossAccumulator {
    #[new]
    fn new(nfft: usize, complex: bool) -> PyResult<Self> {
        Ok(PyCrossAccumulator {
            inner: CrossAccumulator::new(nfft, complex).map_err(spectrum_err)?,
        })
    }

    #[getter]
    fn segment_len(&self) -> usize {
        self.inner.segment_len()
    }

    /// Adds whole segments: sample n of a at a[a_off + n*a_row] (re, im for complex); b alike.
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        py: Python<'_>,
        a: numpy::PyReadonlyArray1<'_, f32>,
        a_off: usize,
        a_row: usize,
        b: numpy::PyReadonlyArray1<'_, f32>,
        b_off: usize,
        b_row: usize,
        n_samples: usize,
    ) -> PyResult<usize> {
        let (a, b) = (flat(&a)?, flat(&b)?);
        let inner = &mut self.inner;
        Ok(py.detach(|| inner.add(a, a_off, a_row, b, b_off, b_row, n_samples)))
    }

    /// The fringe of what was added (see `FringeTuple`).
    #[pyo3(signature = (exclude_tones=false, max_lag=None))]
    fn fringe<'py>(
        &self,
        py: Python<'py>,
        exclude_tones: bool,
        max_lag: Option<usize>,
    ) -> PyResult<FringeTuple<'py>> {
        let inner = &self.inner;
        let search = Search {
            exclude_tones,
            max_lag,
        };
        let f = py.detach(|| inner.fringe(&search)).map_err(spectrum_err)?;
        fringe_tuple(py, f)
    }
}

/// A stretch's sums as Python sees them: (cross spectrum complex128, power a, power b, FFTs).
pub(crate) type SumsTuple<'py> = (
    Bound<'py, PyArray1<numpy::Complex64>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
    u64,
);

pub(crate) fn sums_tuple<'py>(py: Python<'py>, s: &CrossSums) -> SumsTuple<'py> {
    (
        PyArray1::from_slice(py, &s.cross),
        PyArray1::from_slice(py, &s.pa),
        PyArray1::from_slice(py, &s.pb),
        s.segments,
    )
}

/// A stretch's sums handed back by Python.
type SumsArg<'py> = (
    numpy::PyReadonlyArray1<'py, numpy::Complex64>,
    numpy::PyReadonlyArray1<'py, f64>,
    numpy::PyReadonlyArray1<'py, f64>,
    u64,
);

/// The fringe in stretches of time (each as `SumsTuple`, in time order), searched over delay
/// and, for more than one stretch, fringe rate.
#[pyfunction]
#[pyo3(signature = (parts, complex, exclude_tones=false, max_lag=None))]
fn fringe_of_parts<'py>(
    py: Python<'py>,
    parts: Vec<SumsArg<'py>>,
    complex: bool,
    exclude_tones: bool,
    max_lag: Option<usize>,
) -> PyResult<FringeTuple<'py>> {
    let bad = |_| PyValueError::new_err("parts: each stretch's arrays must be contiguous");
    let sums = parts
        .iter()
        .map(|(c, a, b, n)| {
            let (c, a, b) = (
                c.as_slice().map_err(bad)?,
                a.as_slice().map_err(bad)?,
                b.as_slice().map_err(bad)?,
            );
            if a.len() != c.len() || b.len() != c.len() {
                return Err(PyValueError::new_err(
                    "parts: a stretch's cross and auto spectra differ in length",
                ));
            }
            Ok(CrossSums {
                cross: c.to_vec(),
                pa: a.to_vec(),
                pb: b.to_vec(),
                segments: *n,
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let search = Search {
        exclude_tones,
        max_lag,
    };
    let f = py
        .detach(|| fringe_search(&sums, complex, &search))
        .map_err(spectrum_err)?;
    fringe_tuple(py, f)
}

/// (delay_samples, amplitude, phase, snr, lags, lag_amplitude, cross_spectrum re/im (n, 2),
/// segments, rate_per_part, excluded channels)
pub(crate) type FringeTuple<'py> = (
    i64,
    f64,
    f64,
    f64,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray2<f64>>,
    u64,
    f64,
    Vec<usize>,
);

pub(crate) fn fringe_tuple(py: Python<'_>, f: Fringe) -> PyResult<FringeTuple<'_>> {
    let cross: Vec<f64> = f
        .cross_spectrum
        .iter()
        .flat_map(|(r, i)| [*r, *i])
        .collect();
    let n = f.cross_spectrum.len();
    let cross = numpy::ndarray::Array2::from_shape_vec((n, 2), cross)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((
        f.delay_samples,
        f.amplitude,
        f.phase,
        f.snr,
        PyArray1::from_vec(py, f.lags),
        PyArray1::from_vec(py, f.lag_amplitude),
        numpy::IntoPyArray::into_pyarray(cross, py),
        f.segments,
        f.rate_per_part,
        f.excluded,
    ))
}

/// Fringe between input `ia` of frames `a` and input `ib` of `b` (or of `a` when b is None).
#[pyfunction]
#[pyo3(signature = (a, b, ia, ib, nfft, nint=None, exclude_tones=false, max_lag=None))]
#[allow(clippy::too_many_arguments)]
fn cross_frames<'py>(
    py: Python<'py>,
    a: PyReadonlyArray2<'_, u8>,
    b: Option<PyReadonlyArray2<'_, u8>>,
    ia: usize,
    ib: usize,
    nfft: usize,
    nint: Option<u64>,
    exclude_tones: bool,
    max_lag: Option<usize>,
) -> PyResult<FringeTuple<'py>> {
    let search = Search {
        exclude_tones,
        max_lag,
    };
    let rows_a = rows_of(&a)?;
    let (src_a, _, ha) = frame_rows(&rows_a)?;
    let rows_b = b.as_ref().map(rows_of).transpose()?;
    let parsed_b = rows_b.as_deref().map(frame_rows).transpose()?;
    let f = py
        .detach(|| {
            let other = parsed_b
                .as_ref()
                .map(|(src, _, h)| (src as &dyn FrameSource, h));
            fringe_of((&src_a, &ha), other, ia, ib, nfft, 0, nint, &search)
        })
        .map_err(spectrum_err)?;
    fringe_tuple(py, f)
}

/// Registers the fringe class and functions on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCrossAccumulator>()?;
    m.add_function(wrap_pyfunction!(cross_frames, m)?)?;
    m.add_function(wrap_pyfunction!(fringe_of_parts, m)?)?;
    Ok(())
}
