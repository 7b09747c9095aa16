//! Python bindings (`vdifrec._core`): argument conversion, `py.detach` around the work,
//! conversion back. Nothing else lives here; `python/vdifrec/` wraps it in typed classes.

use crate::check::{check_file, CheckError, CheckOptions};
use crate::generate::{write_frames, GenerateError, SignalSpec};
use crate::recorder::{BackendKind, RecordError, Recorder as CoreRecorder, RecorderConfig, Shared};
use crate::sender::{parse_drops, SendConfig, SendError, Sender as CoreSender};
use crate::units::{parse_size, SizeError};
use crate::vdif::decode::{DecodeError, Decoder};
use crate::vdif::file::{FileError, VdifFile};
use crate::vdif::header::{Header as CoreHeader, HeaderError as CoreHeaderError};
use crate::writer::Target;
use numpy::ndarray::ArrayView2;
use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray2};
use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

create_exception!(
    vdifrec,
    HeaderError,
    PyValueError,
    "A VDIF header is malformed or a field value does not fit."
);
create_exception!(
    vdifrec,
    FormatError,
    PyValueError,
    "A file is not readable as the VDIF stream it claims to be."
);

create_exception!(
    vdifrec,
    RecorderError,
    pyo3::exceptions::PyRuntimeError,
    "The recorder could not start or failed."
);
create_exception!(
    vdifrec,
    PortInUseError,
    RecorderError,
    "The UDP port is taken by another program."
);
create_exception!(
    vdifrec,
    OutputError,
    RecorderError,
    "The recording cannot be written where asked (exists, no directory, not writable)."
);
create_exception!(
    vdifrec,
    SenderError,
    pyo3::exceptions::PyRuntimeError,
    "The sender could not start or failed."
);

fn record_err(e: RecordError) -> PyErr {
    use crate::capture::udp::UdpError;
    match &e {
        RecordError::BadArgument { .. }
        | RecordError::AfPacket(crate::capture::afpacket::AfPacketError::NoInterface)
        | RecordError::PfRing(crate::capture::pfring::PfRingError::NoInterface) => {
            PyValueError::new_err(e.to_string())
        }
        RecordError::Udp(UdpError::PortInUse { .. }) => PortInUseError::new_err(e.to_string()),
        RecordError::Status { source, .. } if source.kind() == std::io::ErrorKind::AddrInUse => {
            PortInUseError::new_err(e.to_string())
        }
        RecordError::OutputExists(_)
        | RecordError::NoDirectory(_)
        | RecordError::NotWritable { .. } => OutputError::new_err(e.to_string()),
        _ => RecorderError::new_err(e.to_string()),
    }
}

fn send_err(e: SendError) -> PyErr {
    match &e {
        SendError::BadArgument { .. } | SendError::Generate(_) => {
            PyValueError::new_err(e.to_string())
        }
        _ => SenderError::new_err(e.to_string()),
    }
}

fn header_err(e: CoreHeaderError) -> PyErr {
    HeaderError::new_err(e.to_string())
}

fn io_err(e: &std::io::Error, msg: String, path: &std::path::Path) -> PyErr {
    PyOSError::new_err((
        e.raw_os_error().unwrap_or(0),
        msg,
        path.display().to_string(),
    ))
}

fn file_err(e: FileError) -> PyErr {
    match &e {
        FileError::Open { path, source } => io_err(source, e.to_string(), path),
        FileError::BadSampleRate(_) => PyValueError::new_err(e.to_string()),
        _ => FormatError::new_err(e.to_string()),
    }
}

fn decode_err(e: DecodeError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn size_err(e: SizeError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn generate_err(e: GenerateError) -> PyErr {
    match &e {
        GenerateError::Write { source, path } => {
            io_err(source, e.to_string(), std::path::Path::new(path))
        }
        _ => PyValueError::new_err(e.to_string()),
    }
}

fn check_err(e: CheckError) -> PyErr {
    match &e {
        CheckError::Io { path, source } => io_err(source, e.to_string(), path),
        CheckError::NoFrame { .. } => FormatError::new_err(e.to_string()),
        CheckError::BadFrameSize(_) => PyValueError::new_err(e.to_string()),
    }
}

fn json_err(e: serde_json::Error) -> PyErr {
    PyValueError::new_err(format!("cannot serialise report: {e}"))
}

/// A VDIF frame header.
#[pyclass(module = "vdifrec._core", name = "Header", eq, from_py_object)]
#[derive(Clone, PartialEq)]
pub struct PyHeader {
    inner: CoreHeader,
}

#[pymethods]
impl PyHeader {
    #[new]
    #[pyo3(signature = (*, edv=Some(0), frame_size=8224, nchan=1, bits=2, complex=false,
        seconds=0, ref_epoch=0, frame_nr=0, thread_id=0, station_id=0, invalid=false,
        version=1, sample_rate=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        edv: Option<u32>,
        frame_size: usize,
        nchan: u32,
        bits: u32,
        complex: bool,
        seconds: u32,
        ref_epoch: u32,
        frame_nr: u32,
        thread_id: u32,
        station_id: u32,
        invalid: bool,
        version: u32,
        sample_rate: Option<f64>,
    ) -> PyResult<Self> {
        use crate::vdif::header::field;
        let mut h = CoreHeader::new(edv, frame_size, nchan, bits, complex).map_err(header_err)?;
        for (f, v) in [
            (field::SECONDS, seconds),
            (field::REF_EPOCH, ref_epoch),
            (field::FRAME_NR, frame_nr),
            (field::THREAD_ID, thread_id),
            (field::STATION_ID, station_id),
            (field::INVALID, invalid as u32),
            (field::VERSION, version),
        ] {
            h.set(f, v).map_err(header_err)?;
        }
        if let Some(sr) = sample_rate {
            h.set_sample_rate_hz(sr).map_err(header_err)?;
        }
        Ok(PyHeader { inner: h })
    }

    /// Parses a header from the start of `data` (16 or 32 bytes); `verify` checks it.
    #[staticmethod]
    #[pyo3(signature = (data, verify=true))]
    fn from_bytes(data: &[u8], verify: bool) -> PyResult<Self> {
        let h = if verify {
            CoreHeader::parse(data)
        } else {
            CoreHeader::parse_unchecked(data)
        }
        .map_err(header_err)?;
        Ok(PyHeader { inner: h })
    }

    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, pyo3::types::PyBytes> {
        pyo3::types::PyBytes::new(py, &self.inner.to_bytes())
    }

    fn validate(&self) -> PyResult<()> {
        self.inner.validate().map_err(header_err)
    }

    /// Raw field value by name (see `keys()`).
    fn __getitem__(&self, name: &str) -> PyResult<u32> {
        let f = self
            .inner
            .field_by_name(name)
            .map_err(|e| pyo3::exceptions::PyKeyError::new_err(e.to_string()))?;
        Ok(self.inner.get(f))
    }

    fn __setitem__(&mut self, name: &str, value: u32) -> PyResult<()> {
        let f = self
            .inner
            .field_by_name(name)
            .map_err(|e| pyo3::exceptions::PyKeyError::new_err(e.to_string()))?;
        self.inner.set(f, value).map_err(header_err)
    }

    /// Names of the fields this header's EDV defines.
    fn keys(&self) -> Vec<&'static str> {
        self.inner.fields().iter().map(|f| f.name).collect()
    }

    #[getter]
    fn words(&self) -> Vec<u32> {
        self.inner.words().to_vec()
    }
    #[getter]
    fn invalid(&self) -> bool {
        self.inner.is_invalid()
    }
    #[getter]
    fn legacy(&self) -> bool {
        self.inner.is_legacy()
    }
    #[getter]
    fn edv(&self) -> Option<u32> {
        self.inner.edv()
    }
    #[getter]
    fn seconds(&self) -> u32 {
        self.inner.seconds()
    }
    #[getter]
    fn ref_epoch(&self) -> u32 {
        self.inner.ref_epoch()
    }
    #[getter]
    fn frame_nr(&self) -> u32 {
        self.inner.frame_nr()
    }
    #[getter]
    fn version(&self) -> u32 {
        self.inner.version()
    }
    #[getter]
    fn nchan(&self) -> u32 {
        self.inner.nchan()
    }
    #[getter]
    fn bits(&self) -> u32 {
        self.inner.bits()
    }
    #[getter]
    fn complex(&self) -> bool {
        self.inner.is_complex()
    }
    #[getter]
    fn thread_id(&self) -> u32 {
        self.inner.thread_id()
    }
    #[getter]
    fn station_id(&self) -> u32 {
        self.inner.station_id()
    }
    #[getter]
    fn station(&self) -> String {
        self.inner.station_name()
    }
    #[getter]
    fn frame_size(&self) -> usize {
        self.inner.frame_size()
    }
    #[getter]
    fn header_size(&self) -> usize {
        self.inner.header_size()
    }
    #[getter]
    fn payload_size(&self) -> usize {
        self.inner.payload_size()
    }
    #[getter]
    fn samples_per_frame(&self) -> usize {
        self.inner.samples_per_frame()
    }
    /// Sample rate per channel in Hz from an EDV 1/3 header, else None.
    #[getter]
    fn sample_rate(&self) -> Option<f64> {
        self.inner.sample_rate_hz()
    }
    #[getter]
    fn validity_mask(&self) -> Option<u64> {
        self.inner.validity_mask()
    }

    /// Seconds since 1970 (POSIX, UTC) of the frame's start; `frame_rate` in frames per second
    /// is needed for a non-zero frame number unless the header carries the sample rate.
    #[pyo3(signature = (frame_rate=None))]
    fn unix_time(&self, frame_rate: Option<f64>) -> PyResult<(i64, f64)> {
        let t = self.inner.time(frame_rate).map_err(header_err)?;
        Ok((t.unix_seconds, t.fraction))
    }

    fn __repr__(&self) -> String {
        let h = &self.inner;
        format!(
            "<Header edv={} seconds={} ref_epoch={} frame_nr={} thread_id={} frame_size={} nchan={} bits={} complex={} invalid={} station={}>",
            h.edv().map_or("legacy".into(), |e| e.to_string()),
            h.seconds(),
            h.ref_epoch(),
            h.frame_nr(),
            h.thread_id(),
            h.frame_size(),
            h.nchan(),
            h.bits(),
            py_bool(h.is_complex()),
            py_bool(h.is_invalid()),
            h.station_name()
        )
    }
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

/// Memory-mapped VDIF file (wrapped by `vdifrec.open`).
#[pyclass(module = "vdifrec._core", frozen)]
pub struct FileReader {
    file: VdifFile,
}

#[pymethods]
impl FileReader {
    #[new]
    #[pyo3(signature = (path, sample_rate=None))]
    fn new(py: Python<'_>, path: std::path::PathBuf, sample_rate: Option<f64>) -> PyResult<Self> {
        let file = py
            .detach(|| VdifFile::open(&path, sample_rate))
            .map_err(file_err)?;
        Ok(FileReader { file })
    }

    #[getter]
    fn header0(&self) -> PyHeader {
        PyHeader {
            inner: self.file.info().header0,
        }
    }
    #[getter]
    fn thread_ids(&self) -> Vec<u32> {
        self.file.info().thread_ids.clone()
    }
    #[getter]
    fn samples_per_frame(&self) -> usize {
        self.file.info().samples_per_frame
    }
    #[getter]
    fn sample_rate(&self) -> f64 {
        self.file.info().sample_rate
    }
    #[getter]
    fn sample_rate_source(&self) -> &'static str {
        self.file.info().sample_rate_source
    }
    #[getter]
    fn frame_rate(&self) -> f64 {
        self.file.info().frame_rate
    }
    #[getter]
    fn n_samples(&self) -> usize {
        self.file.info().n_samples()
    }
    #[getter]
    fn n_frames(&self) -> usize {
        self.file.info().n_frames
    }
    #[getter]
    fn frame_size(&self) -> usize {
        self.file.info().frame_size
    }
    #[getter]
    fn values_per_sample(&self) -> usize {
        self.file.info().values_per_sample()
    }

    /// Decodes `count` samples from `start` into the float32 array `out` (flat, C order).
    fn read_into(
        &self,
        py: Python<'_>,
        start: usize,
        count: usize,
        out: &Bound<'_, PyArray1<f32>>,
    ) -> PyResult<()> {
        let mut rw = out.readwrite();
        let slice = rw
            .as_slice_mut()
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        py.detach(|| self.file.read_parallel(start, count, slice))
            .map_err(file_err)
    }

    /// Spectra of every input from sample `start`: (power (inputs, nfft), segments).
    #[pyo3(signature = (nfft, start=0, nint=None))]
    fn spectrum<'py>(
        &self,
        py: Python<'py>,
        nfft: usize,
        start: usize,
        nint: Option<u64>,
    ) -> PyResult<(Bound<'py, PyArray2<f64>>, u64)> {
        let info = self.file.info();
        let layout = layout_of(&info.header0)?;
        let inputs = info.thread_ids.len() * layout.nchan;
        let mut acc = crate::spectrum::SpectrumAccumulator::new(nfft, inputs, layout.complex)
            .map_err(spectrum_err)?;
        let segments = py.detach(|| acc.add_frames(&self.file, &layout, start, nint));
        Ok((power_array(py, &acc, inputs, nfft)?, segments))
    }

    /// Fringe between input `ia` of this file and input `ib` of `other` (or of this file).
    #[pyo3(signature = (other, ia, ib, nfft, start=0, nint=None))]
    #[allow(clippy::too_many_arguments)]
    fn cross<'py>(
        &self,
        py: Python<'py>,
        other: Option<PyRef<'py, FileReader>>,
        ia: usize,
        ib: usize,
        nfft: usize,
        start: usize,
        nint: Option<u64>,
    ) -> PyResult<FringeTuple<'py>> {
        let la = layout_of(&self.file.info().header0)?;
        let lb = other
            .as_ref()
            .map(|o| layout_of(&o.file.info().header0))
            .transpose()?;
        let mut acc =
            crate::spectrum::CrossAccumulator::new(nfft, la.complex).map_err(spectrum_err)?;
        let other_file = other.as_ref().map(|o| &o.file);
        let f = py
            .detach(|| {
                let b = other_file
                    .zip(lb.as_ref())
                    .map(|(f, l)| (f as &dyn crate::spectrum::FrameSource, l, ib));
                acc.add_frames((&self.file, &la, ia), b, ib, start, nint);
                acc.fringe()
            })
            .map_err(spectrum_err)?;
        fringe_tuple(py, f)
    }

    /// The file's whole frames as a read-only (n_frames, frame_size) uint8 array over the
    /// memory map itself; the array keeps this reader (and the map) alive.
    fn frames<'py>(slf: Bound<'py, Self>) -> Bound<'py, PyArray2<u8>> {
        let reader = slf.get();
        let bytes = reader.file.frame_bytes();
        let (rows, cols) = (reader.file.info().n_frames, reader.file.info().frame_size);
        // SAFETY: the map lives as long as `slf`, which becomes the array's base object; it is
        // never remapped.
        unsafe { readonly_view(bytes.as_ptr(), rows, cols, slf.into_any()) }
    }
}

/// A read-only NumPy view of `rows × cols` bytes at `ptr`, kept alive by `owner`.
///
/// # Safety
/// The memory must stay valid and unmoved for as long as `owner` lives.
unsafe fn readonly_view<'py>(
    ptr: *const u8,
    rows: usize,
    cols: usize,
    owner: Bound<'py, PyAny>,
) -> Bound<'py, PyArray2<u8>> {
    unsafe {
        let view = ArrayView2::from_shape_ptr((rows, cols), ptr);
        let array = PyArray2::borrow_from_array(&view, owner);
        drop(array.readwrite().make_nonwriteable());
        array
    }
}

/// Decodes the payloads of frames (rows of uint8, one frame each, all of one thread layout)
/// into `out` (float32, flat): values of frame 0, then frame 1, ...
#[pyfunction]
fn decode_payloads(
    py: Python<'_>,
    frames: PyReadonlyArray2<'_, u8>,
    header_size: usize,
    bits: u32,
    out: &Bound<'_, PyArray1<f32>>,
) -> PyResult<()> {
    let decoder = Decoder::new(bits).map_err(decode_err)?;
    let frames = frames.as_array();
    let (n, fs) = (frames.shape()[0], frames.shape()[1]);
    let payload = fs.checked_sub(header_size).ok_or_else(|| {
        PyValueError::new_err(format!(
            "frames of {fs} bytes are shorter than the {header_size}-byte header"
        ))
    })?;
    let per = decoder.values_in(payload);
    let mut rw = out.readwrite();
    let dst = rw
        .as_slice_mut()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    if dst.len() < n * per {
        return Err(decode_err(DecodeError::OutputTooSmall {
            needed: n * per,
            got: dst.len(),
        }));
    }
    let rows: Vec<&[u8]> = frames
        .rows()
        .into_iter()
        .map(|r| {
            r.to_slice()
                .ok_or_else(|| PyValueError::new_err("frames must be C-contiguous rows"))
        })
        .collect::<PyResult<_>>()?;
    py.detach(|| {
        for (i, row) in rows.iter().enumerate() {
            decoder.decode(&row[header_size..], &mut dst[i * per..(i + 1) * per])?;
        }
        Ok(())
    })
    .map_err(decode_err)
}

/// The benchmark baseline: a plain lookup-table loop over bytes (2-bit, 4 values a byte), no
/// frames, no headers: the memory-bandwidth limit a decoder can approach.
#[pyfunction]
fn plain_lut_decode(
    py: Python<'_>,
    data: numpy::PyReadonlyArray1<'_, u8>,
    out: &Bound<'_, PyArray1<f32>>,
) -> PyResult<()> {
    let lut: Vec<[f32; 4]> = (0..256u32)
        .map(|b| {
            let lv = crate::vdif::decode::levels(2).expect("2-bit levels");
            [0, 1, 2, 3].map(|k| lv[(b >> (2 * k) & 3) as usize])
        })
        .collect();
    let src = data
        .as_slice()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let mut rw = out.readwrite();
    let dst = rw
        .as_slice_mut()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    if dst.len() < 4 * src.len() {
        return Err(PyValueError::new_err(
            "out must hold 4 values per input byte",
        ));
    }
    py.detach(|| {
        for (b, o) in src.iter().zip(dst.chunks_exact_mut(4)) {
            o.copy_from_slice(&lut[*b as usize]);
        }
    });
    Ok(())
}

/// Checks a file; returns the report as JSON text.
#[pyfunction]
#[pyo3(signature = (path, fps=None, frame_size=None))]
fn check(
    py: Python<'_>,
    path: std::path::PathBuf,
    fps: Option<u32>,
    frame_size: Option<usize>,
) -> PyResult<String> {
    let opts = CheckOptions { fps, frame_size };
    let report = py.detach(|| check_file(&path, &opts)).map_err(check_err)?;
    serde_json::to_string(&report).map_err(json_err)
}

/// Writes a synthetic recording; returns the first frame's header.
#[pyfunction]
#[pyo3(signature = (path, *, seconds=1.0, fps=125000, frame_size=8224, nchan=4, bits=2,
    threads=1, tone_mhz=None, tone_amplitude=0.3, correlation=0.0, delay=0, seed=1,
    station=0, edv=0, ref_epoch=None, start_second=None))]
#[allow(clippy::too_many_arguments)]
fn generate(
    py: Python<'_>,
    path: std::path::PathBuf,
    seconds: f64,
    fps: u32,
    frame_size: usize,
    nchan: u32,
    bits: u32,
    threads: u32,
    tone_mhz: Option<f64>,
    tone_amplitude: f64,
    correlation: f64,
    delay: usize,
    seed: u64,
    station: u16,
    edv: u32,
    ref_epoch: Option<u32>,
    start_second: Option<u32>,
) -> PyResult<PyHeader> {
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(PyValueError::new_err(format!(
            "seconds must be a positive duration, got {seconds}"
        )));
    }
    let start = start_time(ref_epoch, start_second);
    let spec = SignalSpec {
        frame_size,
        fps,
        nchan,
        bits,
        threads,
        tone_mhz,
        tone_amplitude,
        correlation,
        delay,
        seed,
        station,
        edv,
        start,
    };
    spec.template().map_err(generate_err)?;
    let frame_sets = (seconds * fps as f64).round().max(1.0) as u64;
    let header = py
        .detach(|| -> Result<CoreHeader, GenerateError> {
            let file = std::fs::File::create(&path).map_err(|source| GenerateError::Write {
                path: path.display().to_string(),
                source,
            })?;
            let mut w = std::io::BufWriter::with_capacity(4 << 20, file);
            let h = write_frames(&spec, frame_sets, &mut w, &path.display().to_string())?;
            use std::io::Write;
            w.flush().map_err(|source| GenerateError::Write {
                path: path.display().to_string(),
                source,
            })?;
            Ok(h)
        })
        .map_err(generate_err)?;
    Ok(PyHeader { inner: header })
}

fn to_json<T: serde::Serialize>(v: &T) -> PyResult<String> {
    serde_json::to_string(v).map_err(json_err)
}

/// `HOST:PORT`, or `:PORT` / `PORT` for localhost (the status endpoint never listens on the
/// network unless an address says so).
fn parse_listen(text: &str) -> PyResult<std::net::SocketAddr> {
    let t = text.trim();
    let with_host = if t.parse::<u16>().is_ok() {
        format!("127.0.0.1:{t}")
    } else if let Some(port) = t.strip_prefix(':') {
        format!("127.0.0.1:{port}")
    } else {
        t.replace("localhost", "127.0.0.1")
    };
    with_host.parse().map_err(|_| {
        PyValueError::new_err(format!(
            "status_listen: {text:?} is not HOST:PORT (e.g. 127.0.0.1:8089, or 8089 for localhost)"
        ))
    })
}

fn parse_ip(name: &str, text: &str) -> PyResult<std::net::IpAddr> {
    text.parse().map_err(|_| {
        PyValueError::new_err(format!(
            "{name}: {text:?} is not an IP address (e.g. 0.0.0.0, 127.0.0.1, 239.1.2.3)"
        ))
    })
}

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
    #[new]
    #[pyo3(signature = (*, port, bind="127.0.0.1", multicast=None, path=None, directory=None,
        prefix="vdifrec", ring=1073741824, frame_size=None, offset=0, psn=false, fps=None,
        file_size=None, capture_cpu=None, writer_cpu=None, direct=true, rcvbuf=268435456,
        huge_pages=true, mlock=true, max_frames=None, backend="udp", throttle=None,
        disk_limit=None, big_endian=false, status_listen=None, interface=None,
        pfring_library=None, pfring_check_module=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        port: u16,
        bind: &str,
        multicast: Option<&str>,
        path: Option<std::path::PathBuf>,
        directory: Option<std::path::PathBuf>,
        prefix: &str,
        ring: u64,
        frame_size: Option<usize>,
        offset: usize,
        psn: bool,
        fps: Option<u32>,
        file_size: Option<u64>,
        capture_cpu: Option<usize>,
        writer_cpu: Option<usize>,
        direct: bool,
        rcvbuf: u64,
        huge_pages: bool,
        mlock: bool,
        max_frames: Option<u64>,
        backend: &str,
        throttle: Option<u64>,
        disk_limit: Option<u64>,
        big_endian: bool,
        status_listen: Option<&str>,
        interface: Option<String>,
        pfring_library: Option<std::path::PathBuf>,
        pfring_check_module: bool,
    ) -> PyResult<Self> {
        let target = match (path, directory) {
            (Some(_), Some(_)) => {
                return Err(PyValueError::new_err(
                    "path and directory: give one (path for one named file, directory + prefix for time-stamped names)",
                ))
            }
            (Some(p), None) => Some(Target::File(p)),
            (None, Some(d)) => Some(Target::Dir {
                dir: d,
                prefix: prefix.to_string(),
            }),
            (None, None) => None,
        };
        let backend = match backend {
            "udp" => BackendKind::Udp,
            "afpacket" => BackendKind::AfPacket {
                interface: interface.unwrap_or_default(),
            },
            "pfring" => BackendKind::PfRing {
                interface: interface.unwrap_or_default(),
                library: pfring_library,
                check_module: pfring_check_module,
            },
            other => {
                return Err(PyValueError::new_err(format!(
                "backend: {other:?} is not a backend; choose \"udp\", \"afpacket\" or \"pfring\""
            )))
            }
        };
        let config = RecorderConfig {
            bind: parse_ip("bind", bind)?,
            port,
            multicast: multicast.map(|m| parse_ip("multicast", m)).transpose()?,
            target,
            ring_bytes: ring,
            frame_size,
            offset,
            psn,
            fps,
            file_size,
            capture_cpu,
            writer_cpu,
            auto_pin: true,
            direct,
            rcvbuf,
            huge_pages,
            mlock,
            max_frames,
            backend,
            throttle,
            disk_limit,
            big_endian,
            status_listen: status_listen.map(parse_listen).transpose()?,
        };
        Ok(PyRecorder {
            config,
            inner: Mutex::new(None),
            shared: Mutex::new(None),
            summary: Mutex::new(None),
        })
    }

    /// Binds the socket, reserves the ring, starts the threads; returns the bound (host, port).
    fn start(&self, py: Python<'_>) -> PyResult<(String, u16)> {
        let mut inner = self.inner.lock().unwrap();
        if inner.is_some() || self.summary.lock().unwrap().is_some() {
            return Err(RecorderError::new_err(
                "this recorder has been started already; make a new Recorder for a new recording",
            ));
        }
        let cfg = self.config.clone();
        let rec = py.detach(|| CoreRecorder::start(cfg)).map_err(record_err)?;
        let addr = rec.local_addr();
        *self.shared.lock().unwrap() = Some(rec.shared());
        *inner = Some(rec);
        Ok((addr.ip().to_string(), addr.port()))
    }

    /// Stops (drains the ring to disk) and returns the summary as JSON; again: the same one.
    fn stop(&self, py: Python<'_>) -> PyResult<Option<String>> {
        if let Some(s) = self.summary.lock().unwrap().clone() {
            return Ok(Some(s));
        }
        let taken = self.inner.lock().unwrap().take();
        let Some(mut rec) = taken else {
            return Ok(None);
        };
        let summary = py.detach(move || rec.stop());
        let json = to_json(&summary)?;
        *self.summary.lock().unwrap() = Some(json.clone());
        Ok(Some(json))
    }

    /// Every counter now, as JSON (None before start or after stop).
    fn stats(&self) -> PyResult<Option<String>> {
        match self.inner.lock().unwrap().as_ref() {
            Some(r) => Ok(Some(to_json(&r.stats())?)),
            None => Ok(None),
        }
    }

    /// Waits up to `timeout` seconds for per-second rows beyond index `start`; JSON list.
    fn wait_rows(&self, py: Python<'_>, start: usize, timeout: f64) -> PyResult<String> {
        let Some(shared) = self.shared.lock().unwrap().clone() else {
            return Ok("[]".into());
        };
        let rows = py.detach(|| shared.wait_rows(start, Duration::from_secs_f64(timeout.max(0.0))));
        to_json(&rows)
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
    fn status_address(&self) -> Option<(String, u16)> {
        self.inner
            .lock()
            .unwrap()
            .as_ref()
            .and_then(|r| r.status_addr())
            .map(|a| (a.ip().to_string(), a.port()))
    }

    fn notes(&self) -> Vec<String> {
        self.inner
            .lock()
            .unwrap()
            .as_ref()
            .map_or_else(Vec::new, |r| r.notes())
    }

    #[getter]
    fn running(&self) -> bool {
        self.inner.lock().unwrap().is_some()
    }

    /// Pins the newest `n` frames and returns (owner, first frame number); the owner's
    /// `array()` is the zero-copy view.
    fn pin_latest(&self, n: u64) -> PyResult<(RingView, u64)> {
        let ring = self.ring()?;
        let (idx, first) = ring.pin_latest(n).map_err(ring_err)?;
        Ok((RingView::new(ring, idx, first, n), first))
    }

    /// Pins frames `first..first + n` (numbered from 0 in arrival order since the start).
    fn pin_frames(&self, first: u64, n: u64) -> PyResult<RingView> {
        let ring = self.ring()?;
        let idx = ring.pin(first, n).map_err(ring_err)?;
        Ok(RingView::new(ring, idx, first, n))
    }
}

impl PyRecorder {
    fn ring(&self) -> PyResult<Arc<crate::ring::Ring>> {
        let shared = self.shared.lock().unwrap().clone().ok_or_else(|| {
            RecorderError::new_err("the recorder has not been started: call start() first")
        })?;
        shared.ring().ok_or_else(|| {
            RecorderError::new_err("no frame has arrived yet, so the ring holds nothing to view")
        })
    }
}

fn ring_err(e: crate::ring::RingError) -> PyErr {
    use crate::ring::RingError;
    match e {
        RingError::NotInRing { .. } | RingError::ViewTooLarge { .. } => {
            pyo3::exceptions::PyIndexError::new_err(e.to_string())
        }
        _ => RecorderError::new_err(e.to_string()),
    }
}

/// Owner of a zero-copy view of ring frames: keeps the ring mapped and the frames pinned
/// (the capture will not overwrite them) until released or garbage-collected.
#[pyclass(module = "vdifrec._core", frozen)]
pub struct RingView {
    ring: Arc<crate::ring::Ring>,
    pin: Mutex<Option<usize>>,
    #[pyo3(get)]
    first: u64,
    #[pyo3(get)]
    count: u64,
}

impl RingView {
    fn new(ring: Arc<crate::ring::Ring>, pin: usize, first: u64, count: u64) -> RingView {
        RingView {
            ring,
            pin: Mutex::new(Some(pin)),
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
        // SAFETY: pinned frames are published and not overwritten while the pin holds; the
        // mapping lives as long as the Arc<Ring> this owner keeps. Frames up to nslots are
        // contiguous through the mirrored mapping.
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
}

impl Drop for RingView {
    fn drop(&mut self) {
        if let Some(idx) = self.pin.lock().unwrap().take() {
            self.ring.unpin(idx);
        }
    }
}

/// The VDIF sender (wrapped by `vdifrec.send` and `vdifrec.Sender`).
#[pyclass(module = "vdifrec._core", name = "Sender", frozen)]
pub struct PySender {
    inner: Mutex<CoreSender>,
}

#[pymethods]
impl PySender {
    #[new]
    #[pyo3(signature = (host, port, *, duration=None, frames=None, fps=125000, frame_size=8224,
        nchan=4, bits=2, threads=1, tone_mhz=None, tone_amplitude=0.3, seed=1, station=0,
        edv=0, ref_epoch=None, start_second=None, psn=false, drop=None, reorder=None,
        garbage=0, file=None, record_sent=None, pool=1024, cpu=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        host: &str,
        port: u16,
        duration: Option<f64>,
        frames: Option<u64>,
        fps: u32,
        frame_size: usize,
        nchan: u32,
        bits: u32,
        threads: u32,
        tone_mhz: Option<f64>,
        tone_amplitude: f64,
        seed: u64,
        station: u16,
        edv: u32,
        ref_epoch: Option<u32>,
        start_second: Option<u32>,
        psn: bool,
        drop: Option<&str>,
        reorder: Option<u64>,
        garbage: u64,
        file: Option<std::path::PathBuf>,
        record_sent: Option<std::path::PathBuf>,
        pool: usize,
        cpu: Option<usize>,
    ) -> PyResult<Self> {
        let ip = parse_ip("to", host)?;
        let spec = SignalSpec {
            frame_size,
            fps,
            nchan,
            bits,
            threads,
            tone_mhz,
            tone_amplitude,
            correlation: 0.0,
            delay: 0,
            seed,
            station,
            edv,
            start: start_time(ref_epoch, start_second),
        };
        let mut cfg = SendConfig::new(std::net::SocketAddr::new(ip, port), spec);
        cfg.duration = duration;
        cfg.frames = frames;
        cfg.psn = psn;
        cfg.drops = drop
            .map(parse_drops)
            .transpose()
            .map_err(send_err)?
            .unwrap_or_default();
        cfg.reorder = reorder;
        cfg.garbage = garbage;
        cfg.file = file;
        cfg.record_sent = record_sent;
        cfg.pool = pool;
        cfg.cpu = cpu;
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

fn start_time(ref_epoch: Option<u32>, start_second: Option<u32>) -> Option<(u32, u32)> {
    match (ref_epoch, start_second) {
        (None, None) => None,
        (e, s) => {
            let (now_e, now_s) = crate::vdif::time::epoch_and_seconds(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64),
            );
            Some((e.unwrap_or(now_e), s.unwrap_or(now_s)))
        }
    }
}

/// Benchmark baseline: a plain recvmmsg-and-discard receiver on `bind:port`.
#[pyclass(module = "vdifrec._core", frozen)]
pub struct DiscardReceiver {
    inner: Mutex<crate::baseline::DiscardReceiver>,
    #[pyo3(get)]
    port: u16,
}

#[pymethods]
impl DiscardReceiver {
    #[new]
    #[pyo3(signature = (bind="127.0.0.1", port=0, rcvbuf=268435456))]
    fn new(bind: &str, port: u16, rcvbuf: usize) -> PyResult<Self> {
        let r = crate::baseline::DiscardReceiver::start(parse_ip("bind", bind)?, port, rcvbuf)
            .map_err(|e| RecorderError::new_err(e.to_string()))?;
        let port = r.local.port();
        Ok(DiscardReceiver {
            inner: Mutex::new(r),
            port,
        })
    }

    fn received(&self) -> u64 {
        self.inner.lock().unwrap().received()
    }

    /// Stops; JSON with datagrams, bytes, kernel_drops, cpu_s, wall_s.
    fn stop(&self, py: Python<'_>) -> PyResult<String> {
        let r = py.detach(|| self.inner.lock().unwrap().stop());
        to_json(&r)
    }
}

/// Host probe for `vdifrec doctor`: (bytes per second, O_DIRECT used) writing `max_bytes` (or
/// for `seconds`) into `directory` with `threads` writers of `block`-byte writes.
#[pyfunction]
fn disk_write_test(
    py: Python<'_>,
    directory: std::path::PathBuf,
    block: usize,
    threads: usize,
    max_bytes: u64,
    seconds: f64,
) -> PyResult<(f64, bool)> {
    py.detach(|| crate::baseline::disk_write_test(&directory, block, threads, max_bytes, seconds))
        .map_err(|e| {
            io_err(
                &e,
                format!("write test in {}: {e}", directory.display()),
                &directory,
            )
        })
}

/// Benchmark probe: the writer alone, fed from memory; JSON with bytes, seconds, cpu_s, direct.
#[pyfunction]
#[pyo3(signature = (directory, total_bytes, frame_size=8224, direct=true))]
fn writer_throughput(
    py: Python<'_>,
    directory: std::path::PathBuf,
    total_bytes: u64,
    frame_size: usize,
    direct: bool,
) -> PyResult<String> {
    let r = py
        .detach(|| crate::baseline::writer_throughput(&directory, total_bytes, frame_size, direct))
        .map_err(RecorderError::new_err)?;
    to_json(&r)
}

fn spectrum_err(e: crate::spectrum::SpectrumError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn flat<'a>(a: &'a numpy::PyReadonlyArray1<'_, f32>) -> PyResult<&'a [f32]> {
    a.as_slice()
        .map_err(|_| PyValueError::new_err("samples must be a C-contiguous float32 array"))
}

/// Averaged power spectra (wrapped by `vdifrec.spectrum`).
#[pyclass(module = "vdifrec._core", name = "SpectrumAccumulator")]
pub struct PySpectrumAccumulator {
    inner: crate::spectrum::SpectrumAccumulator,
    inputs: usize,
    nfft: usize,
}

#[pymethods]
impl PySpectrumAccumulator {
    #[new]
    fn new(nfft: usize, inputs: usize, complex: bool) -> PyResult<Self> {
        let inner = crate::spectrum::SpectrumAccumulator::new(nfft, inputs, complex)
            .map_err(spectrum_err)?;
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
    inner: crate::spectrum::CrossAccumulator,
}

#[pymethods]
impl PyCrossAccumulator {
    #[new]
    fn new(nfft: usize, complex: bool) -> PyResult<Self> {
        Ok(PyCrossAccumulator {
            inner: crate::spectrum::CrossAccumulator::new(nfft, complex).map_err(spectrum_err)?,
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

    /// (delay_samples, amplitude, phase, snr, lags, lag_amplitude, cross_spectrum re/im (n, 2), segments)
    fn fringe<'py>(&self, py: Python<'py>) -> PyResult<FringeTuple<'py>> {
        let inner = &self.inner;
        let f = py.detach(|| inner.fringe()).map_err(spectrum_err)?;
        fringe_tuple(py, f)
    }
}

type FringeTuple<'py> = (
    i64,
    f64,
    f64,
    f64,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray2<f64>>,
    u64,
);

fn fringe_tuple(py: Python<'_>, f: crate::spectrum::Fringe) -> PyResult<FringeTuple<'_>> {
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
    ))
}

fn layout_of(h: &CoreHeader) -> PyResult<crate::spectrum::FrameLayout> {
    crate::spectrum::FrameLayout::new(
        h.samples_per_frame(),
        h.nchan() as usize,
        h.bits(),
        h.is_complex(),
    )
    .map_err(decode_err)
}

fn power_array<'py>(
    py: Python<'py>,
    acc: &crate::spectrum::SpectrumAccumulator,
    inputs: usize,
    nfft: usize,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let arr = numpy::ndarray::Array2::from_shape_vec((inputs, nfft), acc.power())
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(numpy::IntoPyArray::into_pyarray(arr, py))
}

/// Groups rows of whole frames by thread: the frame source, the thread ids and the header.
fn frame_rows<'a>(
    rows: &'a [&'a [u8]],
) -> PyResult<(crate::spectrum::FrameRows<'a>, Vec<u32>, CoreHeader)> {
    let first = rows
        .first()
        .ok_or_else(|| PyValueError::new_err("frames is empty: nothing to analyse"))?;
    let h = CoreHeader::parse_unchecked(first).map_err(header_err)?;
    let (src, ids) = crate::spectrum::FrameRows::new(rows, h.header_size());
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
    let layout = layout_of(&h)?;
    let inputs = ids.len() * layout.nchan;
    let mut acc = crate::spectrum::SpectrumAccumulator::new(nfft, inputs, layout.complex)
        .map_err(spectrum_err)?;
    let segments = py.detach(|| acc.add_frames(&src, &layout, 0, nint));
    Ok((power_array(py, &acc, inputs, nfft)?, segments, ids))
}

/// Fringe between input `ia` of frames `a` and input `ib` of `b` (or of `a` when b is None).
#[pyfunction]
#[pyo3(signature = (a, b, ia, ib, nfft, nint=None))]
fn cross_frames<'py>(
    py: Python<'py>,
    a: PyReadonlyArray2<'_, u8>,
    b: Option<PyReadonlyArray2<'_, u8>>,
    ia: usize,
    ib: usize,
    nfft: usize,
    nint: Option<u64>,
) -> PyResult<FringeTuple<'py>> {
    let rows_a = rows_of(&a)?;
    let (src_a, _, ha) = frame_rows(&rows_a)?;
    let la = layout_of(&ha)?;
    let rows_b = b.as_ref().map(rows_of).transpose()?;
    let parsed_b = rows_b.as_deref().map(frame_rows).transpose()?;
    let lb = parsed_b
        .as_ref()
        .map(|(_, _, h)| layout_of(h))
        .transpose()?;
    let mut acc = crate::spectrum::CrossAccumulator::new(nfft, la.complex).map_err(spectrum_err)?;
    let f = py
        .detach(|| {
            let other = parsed_b
                .as_ref()
                .zip(lb.as_ref())
                .map(|((src, _, _), l)| (src as &dyn crate::spectrum::FrameSource, l, ib));
            acc.add_frames((&src_a, &la, ia), other, ib, 0, nint);
            acc.fringe()
        })
        .map_err(spectrum_err)?;
    fringe_tuple(py, f)
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
    Ok(crate::spectrum::find_tones(p, threshold)
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
    if !matches!(bits, 1 | 2 | 4 | 8) {
        return Err(decode_err(DecodeError::UnsupportedBits(bits)));
    }
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
    let counts = py.detach(|| crate::spectrum::bit_states(&rows, bits, nchan, complex));
    let arr = numpy::ndarray::Array2::from_shape_vec((nchan, 1usize << bits), counts)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(numpy::IntoPyArray::into_pyarray(arr, py))
}

/// Compares a recording with what `vdifrec send` with these options sent, frame by frame
/// (headers and payloads regenerated, nothing stored); JSON: frames, matching, differing,
/// first_difference.
#[pyfunction]
#[pyo3(signature = (path, *, ref_epoch, start_second, fps=125000, frame_size=8224, nchan=4,
    bits=2, threads=1, tone_mhz=None, tone_amplitude=0.3, seed=1, station=0, edv=0, pool=1024))]
#[allow(clippy::too_many_arguments)]
fn verify_sent(
    py: Python<'_>,
    path: std::path::PathBuf,
    ref_epoch: u32,
    start_second: u32,
    fps: u32,
    frame_size: usize,
    nchan: u32,
    bits: u32,
    threads: u32,
    tone_mhz: Option<f64>,
    tone_amplitude: f64,
    seed: u64,
    station: u16,
    edv: u32,
    pool: usize,
) -> PyResult<String> {
    let spec = SignalSpec {
        frame_size,
        fps,
        nchan,
        bits,
        threads,
        tone_mhz,
        tone_amplitude,
        correlation: 0.0,
        delay: 0,
        seed,
        station,
        edv,
        start: Some((ref_epoch, start_second)),
    };
    let v = py
        .detach(|| crate::sender::verify_recording(&path, &spec, pool))
        .map_err(send_err)?;
    to_json(&v)
}

/// Parses a byte size such as "8GiB"; `name` names the argument in the error.
#[pyfunction]
fn parse_size_arg(name: &str, text: &str) -> PyResult<u64> {
    parse_size(name, text).map_err(size_err)
}

/// Expected 2-bit state fractions for Gaussian input quantised at ±threshold σ.
#[pyfunction]
fn two_bit_state_fractions(threshold_sigma: f64) -> (f64, f64, f64, f64) {
    let outer = crate::generate::normal_cdf(-threshold_sigma);
    (outer, 0.5 - outer, 0.5 - outer, outer)
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
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("HeaderError", py.get_type::<HeaderError>())?;
    m.add("FormatError", py.get_type::<FormatError>())?;
    m.add(
        "TWO_BIT_THRESHOLD_SIGMA",
        crate::generate::TWO_BIT_THRESHOLD_SIGMA,
    )?;
    m.add_class::<PyHeader>()?;
    m.add_class::<FileReader>()?;
    m.add_class::<PyRecorder>()?;
    m.add_class::<PySender>()?;
    m.add_class::<DiscardReceiver>()?;
    m.add_class::<RingView>()?;
    m.add_class::<PySpectrumAccumulator>()?;
    m.add_class::<PyCrossAccumulator>()?;
    m.add_function(wrap_pyfunction!(find_tones, m)?)?;
    m.add_function(wrap_pyfunction!(spectrum_frames, m)?)?;
    m.add_function(wrap_pyfunction!(cross_frames, m)?)?;
    m.add_function(wrap_pyfunction!(bit_states, m)?)?;
    m.add_function(wrap_pyfunction!(writer_throughput, m)?)?;
    m.add_function(wrap_pyfunction!(disk_write_test, m)?)?;
    m.add_function(wrap_pyfunction!(verify_sent, m)?)?;
    m.add("RecorderError", py.get_type::<RecorderError>())?;
    m.add("PortInUseError", py.get_type::<PortInUseError>())?;
    m.add("OutputError", py.get_type::<OutputError>())?;
    m.add("SenderError", py.get_type::<SenderError>())?;
    m.add_function(wrap_pyfunction!(decode_payloads, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(plain_lut_decode, m)?)?;
    m.add_function(wrap_pyfunction!(generate, m)?)?;
    m.add_function(wrap_pyfunction!(parse_size_arg, m)?)?;
    m.add_function(wrap_pyfunction!(two_bit_state_fractions, m)?)?;
    m.add_function(wrap_pyfunction!(build_profile, m)?)?;
    Ok(())
}
