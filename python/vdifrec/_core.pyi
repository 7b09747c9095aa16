"""Type stubs for the Rust extension ``vdifrec._core`` (private: use the ``vdifrec`` package)."""

from collections.abc import Sequence
from os import PathLike
from typing import Any, TypedDict, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "ArgumentError",
    "DiscardReceiver",
    "CrossAccumulator",
    "FileReader",
    "FormatError",
    "GapError",
    "Header",
    "HeaderError",
    "OutputError",
    "PortInUseError",
    "Push",
    "Receiver",
    "Recorder",
    "RingView",
    "RecorderError",
    "Sender",
    "SenderError",
    "SpectrumAccumulator",
    "StaleViewError",
    "TransferError",
    "TWO_BIT_THRESHOLD_SIGMA",
    "bit_states",
    "build_profile",
    "check",
    "check_scan",
    "check_push_destination",
    "convert",
    "corner_turn",
    "cross_frames",
    "decode_payloads",
    "defaults",
    "expand_disks",
    "disk_write_test",
    "find_tones",
    "fringe_of_parts",
    "set_analysis_threads",
    "gather",
    "generate",
    "parse_size_arg",
    "plain_lut_decode",
    "sendmmsg_loop",
    "repair",
    "scan_info",
    "scan_names",
    "scan_name_problem",
    "scans",
    "spectrum_frames",
    "two_bit_state_fractions",
    "verify_sent",
    "writer_throughput",
    "scan_writer_throughput",
    "capture_stage_costs",
    "__version__",
]

__version__: str
TWO_BIT_THRESHOLD_SIGMA: float

class ArgumentError(ValueError):
    """An option's value cannot be used. The message starts with the option's name (``ring: ...``)."""

class HeaderError(ValueError):
    """A VDIF header is malformed or a field value does not fit."""

class FormatError(ValueError):
    """A file is not readable as the VDIF stream it claims to be."""

class GapError(FormatError):
    """A scan lacks parts (vbs chunks, Mark6 blocks) between its first and its last; the message names them and the VDIF time they leave out."""

class RecorderError(RuntimeError):
    """The recorder could not start or failed."""

class PortInUseError(RecorderError):
    """The UDP port is taken by another program."""

class OutputError(RecorderError):
    """The recording cannot be written where asked (exists, no directory, not writable)."""

class SenderError(RuntimeError):
    """The sender could not start or failed."""

class StaleViewError(RecorderError):
    """A ring view's frames were overwritten while it was used (views yield to the recording)."""

class TransferError(RuntimeError):
    """A push or receive could not be done (nobody listening, a wrong token, a refused or failed item)."""

# The options each part of the engine takes, as keywords. Every default is the engine's own
# (``defaults()``); a name left out takes it. Sizes are bytes or text such as "8GiB".
_Size = int | str
_Path = str | PathLike[str]

class RecorderOptions(TypedDict, total=False):
    port: int | str
    ports: list[int | str]
    bind: str
    multicast: str | None
    path: _Path | None
    directory: _Path | None
    prefix: str
    ring: _Size
    frame_size: int | None
    offset: int
    psn: bool
    fps: int | None
    file_size: _Size | None
    capture_cpu: int | None
    writer_cpu: int | None
    direct: bool
    rcvbuf: _Size
    huge_pages: bool
    mlock: bool
    max_frames: int | None
    backend: str
    interface: str | None
    pfring_library: _Path | None
    pfring_check_module: bool
    throttle: _Size | None
    disk_limit: _Size | None
    big_endian: bool
    status_listen: str | None
    live: bool | None
    live_fraction: float | None
    live_nfft: int
    latency: bool
    disks: list[_Path]
    format: str | None
    chunk_size: _Size | None
    writers: int | None
    disk_faults: dict[_Path, str]
    split: str | None
    forward: list[str]

class SignalOptions(TypedDict, total=False):
    frame_size: int
    fps: int
    nchan: int
    bits: int
    threads: int
    tone_mhz: float | None
    tone_amplitude: float
    correlation: float
    delay: int
    seed: int
    sky_seed: int | None
    station: int | str
    edv: int
    ref_epoch: int | None
    start_second: int | None

class SenderOptions(TypedDict, total=False):
    # HOST:PORT or udp://HOST:PORT, udps://HOST:PORT (a 64-bit PSN before each frame),
    # tcp://HOST:PORT (frames back to back on one connection).
    to: str
    duration: float | None
    frames: int | None
    psn: bool
    drop: str | None
    reorder: int | None
    garbage: int
    file: _Path | None
    scan: str | None
    disks: list[_Path]
    format: str | None
    # A data rate of frames ("4Gbps", "500MB/s") to replay at, instead of the recording's own.
    rate: str | None
    record_sent: _Path | None
    pool: int
    cpu: int | None
    signal: SignalOptions

class GenerateOptions(TypedDict, total=False):
    seconds: float
    signal: SignalOptions

class CheckOptions(TypedDict, total=False):
    fps: int | None
    frame_size: int | None

def expand_disks(disks: list[str]) -> list[str]:
    """Disk directories with globs expanded (sorted, each once); ArgumentError for a glob matching none."""
def defaults() -> dict[str, dict[str, Any]]:
    """Every option's default, by part: ``recorder``, ``sender``, ``signal``, ``generate``, ``check``."""

@final
class Recorder:
    """The recording engine; see ``vdifrec.Recorder`` for the options."""

    def __new__(cls, options: RecorderOptions) -> Recorder:
        """Checks every option (ArgumentError names a bad one); starts nothing."""
    def start(self) -> tuple[str, int]:
        """Allocates the ring, binds, starts the threads; the bound (host, port)."""
    def addresses(self) -> list[tuple[str, int]]:
        """Every stream's bound (host, port), in the order given."""
    @property
    def source(self) -> str | None:
        """Where the stream is taken from (``127.0.0.1:46227``, ``eth2:46227 (afpacket)``)."""
    def stop(self) -> str | None:
        """Drains to disk; the summary as JSON (None if never started)."""
    def stats(self) -> str | None:
        """Every counter as JSON (None when not running)."""
    def wait_rows(self, start: int, timeout: float) -> str:
        """Rows after index ``start`` as a JSON list, waiting up to ``timeout`` seconds."""
    def live(self) -> str | None:
        """The live monitor's newest look as JSON (None before its first, or when it is off)."""
    def finished(self) -> bool: ...
    def start_scan(self, name: str, start: str | None = None, stop: str | None = None) -> str:
        """Starts a scan (bounds as UTC text); the name used on disk."""
    def stop_scan(self, timeout: float | None = None, name: str | None = None) -> str | None:
        """Ends the running scan (and those queued; with ``name`` only that one); its summary as JSON once on disk (None: timeout first)."""
    def wait_scan(self, timeout: float | None = None, name: str | None = None) -> str | None:
        """Waits for the running scan (or scan ``name``) to end; its summary as JSON (None: still running, or no such scan)."""
    def active_scan(self) -> str | None:
        """The scan running (or being written out), if any."""
    def queued_scans(self) -> list[str]:
        """Every scan running or queued, in order."""
    def set_observation(self, document: str | None = None) -> None:
        """The observation document (JSON) the status serves; None clears it."""
    def add_forward(self, destination: str, enabled: bool = True) -> int:
        """Forwards to ``destination`` from the newest frame on; its id (ArgumentError names ``forward``)."""
    def forward_feeds_itself(self, destination: str) -> bool:
        """Whether forwarding to ``destination`` would send the stream to this recorder's own data port."""
    def set_forward(self, id: int, enabled: bool) -> None:
        """Pauses (False) or resumes (True) forwarding to destination ``id``."""
    def pace_forward(self, id: int, pacing: str) -> None:
        """Paces destination ``id`` anew on the same connection (``rate=2Gbps``, ``ipd=10``, ``""``: none)."""
    def remove_forward(self, id: int) -> str:
        """Stops forwarding to destination ``id``; its counters as JSON."""
    def forwards(self) -> str:
        """Every forwarding destination of the run (removed ones too), counters as JSON."""
    def notes(self) -> list[str]: ...
    def status_address(self) -> tuple[str, int] | None: ...
    @property
    def running(self) -> bool: ...
    def pin_latest(self, n: int, hold: bool = False) -> tuple[RingView, int]:
        """A view of the newest ``n`` frames, pinned with ``hold`` (else yielding): (owner, first frame number)."""
    def pin_frames(self, first: int, n: int, hold: bool = False) -> RingView:
        """A view of frames ``first .. first + n - 1``; IndexError if no longer in the ring."""

@final
class RingView:
    """Owner of viewed ring frames (pinned with ``hold``); ``array()`` is the zero-copy view."""

    @property
    def first(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def hold(self) -> bool: ...
    @property
    def pinned(self) -> bool: ...
    @property
    def stale_frames(self) -> int: ...
    @property
    def ring_slots(self) -> int: ...
    def array(self) -> npt.NDArray[np.uint8]: ...
    def release(self) -> None: ...
    def check_fresh(self, what: str) -> None:
        """Raises StaleViewError if the capture took back any of the view's frames."""

@final
class DiscardReceiver:
    """Benchmark baseline (bench builds only): a plain recvmmsg-and-discard loop."""

    def __new__(cls, bind: str = "127.0.0.1", port: int = 0, rcvbuf: int = 268435456, span: int = 0) -> DiscardReceiver: ...
    @property
    def port(self) -> int: ...
    def received(self) -> int: ...
    def stop(self) -> str: ...

@final
class SpectrumAccumulator:
    """Averaged power spectra of every input (wrapped by ``vdifrec.spectrum``)."""

    def __new__(cls, nfft: int, inputs: int, complex: bool) -> SpectrumAccumulator: ...
    @property
    def segment_len(self) -> int: ...
    @property
    def segments(self) -> int: ...
    def add(self, x: npt.NDArray[np.float32], n_samples: int, max_segments: int | None = None) -> int: ...
    def power(self) -> npt.NDArray[np.float64]: ...

@final
class CrossAccumulator:
    """Cross-correlation of two streams (wrapped by ``vdifrec.fringe``)."""

    def __new__(cls, nfft: int, complex: bool) -> CrossAccumulator: ...
    @property
    def segment_len(self) -> int: ...
    def add(
        self,
        a: npt.NDArray[np.float32],
        a_off: int,
        a_row: int,
        b: npt.NDArray[np.float32],
        b_off: int,
        b_row: int,
        n_samples: int,
    ) -> int: ...
    def fringe(self, exclude_tones: bool = False, max_lag: int | None = None) -> _Fringe: ...

_Fringe = tuple[
    int,
    float,
    float,
    float,
    npt.NDArray[np.int64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    int,
    float,
    list[int],
]
"""(delay_samples, amplitude, phase, snr, lags, lag_amplitude, cross spectrum re/im (n, 2), FFTs,
fringe rate in turns per stretch, spectral channels left out as tones (ascending frequency))."""

_Sums = tuple[npt.NDArray[np.complex128], npt.NDArray[np.float64], npt.NDArray[np.float64], int]
"""One stretch of a fringe search: cross spectrum, power of a, power of b (FFT order), FFTs."""

def fringe_of_parts(
    parts: list[_Sums], complex: bool, exclude_tones: bool = False, max_lag: int | None = None
) -> _Fringe:
    """The fringe in stretches of time (in time order), searched over delay and fringe rate."""

def find_tones(power: npt.NDArray[np.float64], threshold: float) -> list[tuple[float, float]]: ...
def set_analysis_threads(threads: int) -> int:
    """Limits the analyses this thread starts to ``threads`` threads (0: every CPU); returns the old limit."""
def spectrum_frames(
    frames: npt.NDArray[np.uint8], nfft: int, nint: int | None = None
) -> tuple[npt.NDArray[np.float64], int, list[int]]:
    """Spectra of whole frames: (power (inputs, nfft), FFTs averaged, thread ids)."""
def cross_frames(
    a: npt.NDArray[np.uint8],
    b: npt.NDArray[np.uint8] | None,
    ia: int,
    ib: int,
    nfft: int,
    nint: int | None = None,
    exclude_tones: bool = False,
    max_lag: int | None = None,
) -> _Fringe:
    """Fringe between input ``ia`` of frames ``a`` and input ``ib`` of ``b`` (or of ``a``)."""
def bit_states(
    frames: npt.NDArray[np.uint8], header_size: int, bits: int, nchan: int, complex: bool
) -> npt.NDArray[np.uint64]: ...
def verify_sent(path: str | PathLike[str], signal: SignalOptions, pool: int | None = None) -> str:
    """Compares a recording frame by frame with what a send of ``signal`` sent (JSON)."""
def disk_write_test(
    directory: str | PathLike[str], block: int, threads: int, max_bytes: int, seconds: float
) -> tuple[float, bool]:
    """Host probe: (bytes per second, O_DIRECT used) of a short write test."""
def capture_stage_costs(frames: int = 4000000, span: int = 1073741824) -> str:
    """Benchmark probe (``bench`` builds): the capture's CPU time per frame on frames in memory; JSON."""
def scan_writer_throughput(
    disks: list[str | PathLike[str]], total_bytes: int, format: str = "vbs", chunk_size: int = 268435456,
    writers: int = 3, frame_size: int = 8224,
) -> str:
    """Benchmark probe (``bench`` builds): the scan writers alone, fed from memory; JSON."""
def writer_throughput(directory: str | PathLike[str], total_bytes: int, frame_size: int = 8224, direct: bool = True) -> str:
    """Benchmark baseline (bench builds only): the writer alone, fed from memory (JSON)."""

class PushOptions(TypedDict, total=False):
    sources: list[str]
    to: str
    token_file: str
    disks: list[str]
    layout: str
    streams: int | str
    max_streams: int
    block_size: _Size
    rate: str | None
    nice: bool
    retry_seconds: float

class ReceiveOptions(TypedDict, total=False):
    listen: str
    dir: str
    token_file: str
    max_connections: int
    max_memory: _Size

@final
class Push:
    """A push running in its own thread; see ``vdifrec.push``."""

    def __new__(cls, options: PushOptions) -> Push:
        """Checks every option (ArgumentError names a bad one), reads the token, finds the sources, starts."""
    def wait(self, timeout: float = 0.0) -> str | None:
        """The summary as JSON once the push has ended, else None after ``timeout`` seconds."""
    def progress(self) -> tuple[int, int, int, int, int, str]:
        """(bytes done, bytes in all, streams now, items done, items in all, item now)."""
    def stop(self) -> None:
        """Ends the push soon; what reached the receiver stays there, resumable."""

@final
class Receiver:
    """A receiver serving pushes in its own thread; see ``vdifrec.Receiver``."""

    def __new__(cls, options: ReceiveOptions) -> Receiver:
        """Checks the options, reads the token, binds the port and starts serving."""
    @property
    def address(self) -> str: ...
    def events(self) -> str:
        """Transfers that ended since the last call, as a JSON list."""
    def stop(self) -> None:
        """Stops serving; partial copies keep their manifests."""

@final
class Sender:
    """A paced VDIF sender running in its own thread; see ``vdifrec.Sender``."""

    def __new__(cls, options: SenderOptions) -> Sender:
        """Checks every option (ArgumentError names a bad one), opens what is replayed (a scan
        as ``FileReader.scan`` does: FileNotFoundError, GapError, ...), connects (a refused
        ``tcp://`` connection is a SenderError starting ``to:``) and starts sending."""
    def wait(self, timeout: float | None = None) -> str | None:
        """The summary as JSON once finished, else None after ``timeout`` seconds."""
    def stop(self) -> str: ...
    def finished(self) -> bool: ...

def scan_name_problem(name: str) -> str | None:
    """Why the recorder would refuse ``name`` for a scan; None when it takes it."""

def check_push_destination(to: str, token_file: str, rate: str | None = None) -> None:
    """Checks a push's receiver (HOST:PORT), token file and rate before any push starts."""

@final
class Header:
    """A VDIF frame header (words 0-3, and 4-7 by EDV; legacy headers have four words).

    Build one with keyword arguments, or parse with :meth:`from_bytes`. Raw fields are read
    and written by name with ``header['frame_nr']``; ``keys()`` lists them.
    """

    def __new__(
        cls,
        *,
        edv: int | None = 0,
        frame_size: int = 8224,
        nchan: int = 1,
        bits: int = 2,
        complex: bool = False,
        seconds: int = 0,
        ref_epoch: int = 0,
        frame_nr: int = 0,
        thread_id: int = 0,
        station_id: int = 0,
        invalid: bool = False,
        version: int = 1,
        sample_rate: float | None = None,
    ) -> Header: ...
    @staticmethod
    def from_bytes(data: bytes, verify: bool = True) -> Header:
        """Parses the header at the start of ``data``; ``verify`` raises HeaderError on a bad one."""
    def to_bytes(self) -> bytes: ...
    def validate(self) -> None:
        """Raises HeaderError naming what is wrong."""
    def __getitem__(self, name: str, /) -> int: ...
    def __setitem__(self, name: str, value: int, /) -> None: ...
    def keys(self) -> list[str]: ...
    @property
    def words(self) -> list[int]: ...
    @property
    def invalid(self) -> bool: ...
    @property
    def legacy(self) -> bool: ...
    @property
    def edv(self) -> int | None:
        """Extended data version; None for a legacy header."""
    @property
    def seconds(self) -> int: ...
    @property
    def ref_epoch(self) -> int:
        """Half-years since 2000-01-01."""
    @property
    def frame_nr(self) -> int: ...
    @property
    def version(self) -> int: ...
    @property
    def nchan(self) -> int: ...
    @property
    def bits(self) -> int: ...
    @property
    def complex(self) -> bool: ...
    @property
    def thread_id(self) -> int: ...
    @property
    def station_id(self) -> int: ...
    @property
    def station(self) -> str:
        """Two ASCII characters where the id spells them, else the number."""
    @property
    def frame_size(self) -> int:
        """Bytes, header included."""
    @property
    def header_size(self) -> int: ...
    @property
    def payload_size(self) -> int: ...
    @property
    def samples_per_frame(self) -> int: ...
    @property
    def sample_rate(self) -> float | None:
        """Hz per channel, from EDV 1/3 headers."""
    @property
    def validity_mask(self) -> int | None:
        """EDV 4 validity mask."""
    def unix_time(self, frame_rate: float | None = None) -> tuple[int, float]:
        """(whole POSIX seconds, fraction) of the frame's first sample."""
    def __eq__(self, other: object, /) -> bool: ...

@final
class FileReader:
    def __new__(cls, path: str | PathLike[str], sample_rate: float | None = None) -> FileReader: ...
    @staticmethod
    def scan(
        name: str, disks: list[str], format: str | None = None, sample_rate: float | None = None
    ) -> FileReader:
        """Scan ``name`` on ``disks``, its parts in order (``format``: file, vbs, mk6; None detects it),
        each to its last whole frame. A scan with a missing part raises GapError."""
    @property
    def header0(self) -> Header: ...
    @property
    def thread_ids(self) -> list[int]: ...
    @property
    def samples_per_frame(self) -> int: ...
    @property
    def sample_rate(self) -> float: ...
    @property
    def sample_rate_source(self) -> str: ...
    @property
    def frame_rate(self) -> float: ...
    @property
    def n_samples(self) -> int: ...
    @property
    def n_frames(self) -> int: ...
    @property
    def frame_size(self) -> int: ...
    @property
    def values_per_sample(self) -> int: ...
    def read_into(self, start: int, count: int, out: npt.NDArray[np.float32]) -> None: ...
    def spectrum(self, nfft: int, start: int = 0, nint: int | None = None) -> tuple[npt.NDArray[np.float64], int]: ...
    def cross(
        self,
        other: FileReader | None,
        ia: int,
        ib: int,
        nfft: int,
        start: int = 0,
        nint: int | None = None,
        exclude_tones: bool = False,
        max_lag: int | None = None,
    ) -> _Fringe: ...
    def cross_sums(
        self, other: FileReader, ia: int, ib: int, nfft: int, start_a: int, start_b: int, nint: int | None = None
    ) -> _Sums:
        """Input ``ia`` of this file from sample ``start_a`` against input ``ib`` of ``other``
        from ``start_b``, over at most ``nint`` FFTs: one stretch of a fringe search."""
    def release_pages(self) -> None:
        """Drops this process's resident pages of the mapped data; they stay in the page cache."""
    def frame_parts(self) -> list[npt.NDArray[np.uint8]]:
        """Each part's whole frames (one part for a file; chunks or blocks for a scan) as
        read-only (n_frames, frame_size) uint8 arrays over the memory maps themselves."""
    def torn(self) -> str:
        """The torn pieces left out (a scan's, or a file's partial last frame), as JSON (a list)."""

def decode_payloads(
    frames: npt.NDArray[np.uint8], header_size: int, bits: int, out: npt.NDArray[np.float32]
) -> None: ...
def plain_lut_decode(data: npt.NDArray[np.uint8], out: npt.NDArray[np.float32]) -> None:
    """Benchmark baseline (bench builds only): 2-bit lookup-table decode of raw bytes."""
def sendmmsg_loop(host: str, port: int, frames: int, frame_size: int = 8224, per_second: float = 125000.0) -> str:
    """Benchmark baseline (bench builds only): a plain sendmmsg loop paced to ``per_second``; JSON with frames, bytes, cpu_s, wall_s."""
def check(path: str | PathLike[str], options: CheckOptions | None = None) -> str:
    """Checks a file in one pass; the report as JSON."""
def check_scan(name: str, disks: list[str], format: str | None = None, options: CheckOptions | None = None) -> str:
    """Checks a scan over its parts in order; the report as JSON, with ``scan`` naming any missing part."""
def scans(
    disks: list[str], name: str | None = None, format: str | None = None, progress: bool = False
) -> str:
    """The scans on ``disks`` (names matching the pattern ``name``, in ``format``), as JSON."""
def scan_names(disks: list[str], pattern: str | None = None, offset: int = 0, limit: int | None = None) -> str:
    """The names on ``disks`` as the catalogue holds them (matching ``pattern``, a page of
    ``limit`` from ``offset``), as JSON: ``total``, ``offset``, ``names``. No disk is walked."""
def scan_info(name: str, disks: list[str], format: str | None = None) -> str:
    """Scan ``name`` on ``disks`` as ``scans`` lists it (JSON), found by its name alone."""
def gather(name: str, disks: list[str], out: str, format: str | None = None, allow_gaps: bool = False) -> str:
    """Writes scan ``name``'s frames in order into the new file ``out``; the report as JSON."""
def repair(name: str, disks: list[str], format: str | None = None) -> str:
    """Cuts scan ``name``'s torn pieces back to whole frames; the report as JSON."""
def convert(
    path: str,
    out: str | PathLike[str],
    threads: str | Sequence[int] | None = None,
    channels: str | Sequence[int] | None = None,
    payload: int | None = None,
    disks: list[str] | None = None,
    format: str | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Writes the file ``path`` (with ``disks``: the scan of that name) into the new file ``out``,
    its threads kept, channels corner-turned into single-channel threads, frames cut to
    ``payload`` bytes; the report. ArgumentError names a bad option."""
def corner_turn(
    frames: npt.NDArray[np.uint8], channels: list[int], out: npt.NDArray[np.uint8] | None = None
) -> npt.NDArray[np.uint8]:
    """The single-channel frames of ``channels`` made from ``frames`` (whole frames, flat), as
    ``convert`` makes them: a new array, or ``out`` (exactly the output's size) filled."""
def generate(path: str | PathLike[str], options: GenerateOptions) -> Header:
    """Writes a synthetic recording; the header of its first frame."""
def parse_size_arg(name: str, text: str) -> int: ...
def two_bit_state_fractions(threshold_sigma: float) -> tuple[float, float, float, float]: ...
def build_profile() -> str: ...
