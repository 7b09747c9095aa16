//! The checks a scientist runs: spectra and fringes of arrays or live views, tones, bit
//! states, and the whole-file check.

use super::errors::{check_err, decode_err, header_err, spectrum_err};
use super::to_json;
use crate::analysis::check::{check_file, CheckOptions};
use crate::analysis::fringe::{fringe_of, CrossAccumulator, CrossSums, Fringe};
use crate::analysis::fringe_search::{fringe_search, Search};
use crate::analysis::spectrum::{spectra_of, FrameRows, FrameSource, SpectrumAccumulator};
use crate::vdif::header::Header as CoreHeader;
use numpy::{PyArray1, PyArray2, PyReadonlyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

fn flat<'a>(a: &'a numpy::PyReadonlyArray1<'_, f32>) -> PyResult<&'a [f32]> {
    a.as_slice()
        .map_err(|_| PyValueError::new_err("samples must be a C-contiguous float32 array"))
}

/// Averaged power spectra (wrapped by `vdifrec.spectrum`).
#[pyclass(module = "vdifrec._core", name = "SpectrumAccumulator")]
pub struct PySpectrumAccumulator {
    inner: SpectrumAccumulator,
    inputs: usize,
    nfft: usize,
}

#[pymethods]
impl PySpectrumAccumulator {
    #[new]
    fn new(nfft: usize, inputs: usize, complex: bool) -> PyResult<Self> {
        let inner = SpectrumAccumulator::new(nfft, inputs, complex).map_err(spectrum_err)?;
        Ok(PySpectrumAccumulator {
            inner,
            inputs,
            nfft,
        })
    }

    #[getter]
    fn segment_len(&self) -> usize {
        self.inner.segment_len()
    }

    #[getter]
    fn segments(&self) -> u64 {
        self.inner.segments()
    }

    /// Adds the whole FFT segments among `n_samples` samples of `x` (flat float32, layout
    /// time, input, value); returns the samples used.
    #[pyo3(signature = (x, n_samples, max_segments=None))]
    fn add(
        &mut self,
        py: Python<'_>,
        x: numpy::PyReadonlyArray1<'_, f32>,
        n_samples: usize,
        max_segments: Option<u64>,
    ) -> PyResult<usize> {
        let data = flat(&x)?;
        let inner = &mut self.inner;
        Ok(py.detach(|| inner.add(data, n_samples, max_segments)))
    }

    /// Mean power, shape (inputs, nfft), ascending frequency.
    fn power<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray2<f64>>> {
        let p = self.inner.power();
        let arr = numpy::ndarray::Array2::from_shape_vec((self.inputs, self.nfft), p)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(numpy::IntoPyArray::into_pyarray(arr, py))
    }
}

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

pub(crate) fn power_array<'py>(
    py: Python<'py>,
    acc: &SpectrumAccumulator,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let shape = (acc.inputs(), acc.power().len() / acc.inputs().max(1));
    let arr = numpy::ndarray::Array2::from_shape_vec(shape, acc.power())
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(numpy::IntoPyArray::into_pyarray(arr, py))
}

/// Groups rows of whole frames by thread: the frame source, the thread ids and the header.
fn frame_rows<'a>(rows: &'a [&'a [u8]]) -> PyResult<(FrameRows<'a>, Vec<u32>, CoreHeader)> {
    let first = rows
        .first()
        .ok_or_else(|| PyValueError::new_err("frames is empty: nothing to analyse"))?;
    let h = CoreHeader::parse_unchecked(first).map_err(header_err)?;
    let (src, ids) = FrameRows::new(rows, h.header_size());
    Ok((src, ids, h))
}

fn rows_of<'a>(frames: &'a PyReadonlyArray2<'_, u8>) -> PyResult<Vec<&'a [u8]>> {
    use numpy::PyUntypedArrayMethods;
    let fs = frames.shape()[1].max(1);
    let data = frames.as_slice().map_err(|_| {
        PyValueError::new_err("frames must be a C-contiguous (n, frame_size) array")
    })?;
    Ok(data.chunks_exact(fs).collect())
}

/// Spectra of whole frames (a live view): (power (inputs, nfft), segments, thread ids).
#[pyfunction]
#[pyo3(signature = (frames, nfft, nint=None))]
fn spectrum_frames<'py>(
    py: Python<'py>,
    frames: PyReadonlyArray2<'_, u8>,
    nfft: usize,
    nint: Option<u64>,
) -> PyResult<(Bound<'py, PyArray2<f64>>, u64, Vec<u32>)> {
    let rows = rows_of(&frames)?;
    let (src, ids, h) = frame_rows(&rows)?;
    let acc = py
        .detach(|| spectra_of(&src, &h, nfft, 0, nint))
        .map_err(spectrum_err)?;
    Ok((power_array(py, &acc)?, acc.segments(), ids))
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

/// Limits the analyses this thread starts to `threads` threads (0: every CPU); returns the
/// limit it had.
#[pyfunction]
fn set_analysis_threads(threads: usize) -> usize {
    let before = crate::analysis::spectrum::threads_here();
    crate::analysis::spectrum::set_threads_here(threads);
    before
}

/// Tones in one spectrum: [(channel (fractional), power over the median)], strongest first.
#[pyfunction]
fn find_tones(
    power: numpy::PyReadonlyArray1<'_, f64>,
    threshold: f64,
) -> PyResult<Vec<(f64, f64)>> {
    let p = power
        .as_slice()
        .map_err(|_| PyValueError::new_err("power must be a contiguous float64 array"))?;
    Ok(crate::analysis::tones::find_tones(p, threshold)
        .into_iter()
        .map(|t| (t.channel, t.power_ratio))
        .collect())
}

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

/// Expected 2-bit state fractions for Gaussian input quantised at ±threshold σ.
#[pyfunction]
pub fn two_bit_state_fractions(threshold_sigma: f64) -> (f64, f64, f64, f64) {
    let [a, b, c, d] = crate::analysis::bstate::two_bit_state_fractions(threshold_sigma);
    (a, b, c, d)
}

/// Registers the analysis classes and functions on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySpectrumAccumulator>()?;
    m.add_class::<PyCrossAccumulator>()?;
    m.add_function(wrap_pyfunction!(find_tones, m)?)?;
    m.add_function(wrap_pyfunction!(spectrum_frames, m)?)?;
    m.add_function(wrap_pyfunction!(cross_frames, m)?)?;
    m.add_function(wrap_pyfunction!(fringe_of_parts, m)?)?;
    m.add_function(wrap_pyfunction!(set_analysis_threads, m)?)?;
    m.add_function(wrap_pyfunction!(bit_states, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(check_scan, m)?)?;
    m.add_function(wrap_pyfunction!(two_bit_state_fractions, m)?)?;
    Ok(())
}
