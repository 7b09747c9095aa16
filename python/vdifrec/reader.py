"""Reading VDIF files, and scans recorded over several disks, as a stream of samples, in the
manner of baseband's ``vdif.open(path, 'rs')``."""

from __future__ import annotations

import datetime as _dt
import json
import os
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _core
from .units import to_hz
from .views import checks_views
from .scans import Disks, expand_disks

__all__ = ["FrameSets", "Reader", "open", "decode"]


def _utc(seconds: int, fraction: float) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(seconds, tz=_dt.timezone.utc) + _dt.timedelta(seconds=fraction)


class Reader:
    """A VDIF file, or a scan on several disks, read as a continuous series of samples.

    Use :func:`vdifrec.open` to make one. Samples come out shaped ``(time, thread, channel)``
    with dimensions of length one removed (baseband's ``squeeze``), as ``float32`` for real
    data and ``complex64`` for complex data, with baseband's decoding levels. Frames flagged
    invalid read as zeros.

    Attributes
    ----------
    header0 : Header
        First header of the file.
    sample_rate : float
        Complete samples per second per channel, in Hz.
    shape : tuple of int
        ``(n_samples,) + sample_shape``.
    thread_ids : list of int
        Threads in the file, sorted; the order of the thread axis.
    disks : list of str or None
        For a scan, the disks it was opened from (None for a file).
    torn : list of dict
        What was left out as not whole frames: a scan's torn pieces (what a recorder stopped
        mid-write left at the ends of its files; see :func:`vdifrec.scans` for the keys), or a
        file's partial last frame. Empty when nothing was torn. Frames after a torn piece in
        the middle of a scan follow at once: samples are read by position, so the time after
        it is off by what the piece left out, as after any lost frame (``vdifrec.check``
        counts it).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        sample_rate: Any = None,
        squeeze: bool = True,
        *,
        disks: Disks | None = None,
        format: str | None = None,  # noqa: A002
    ) -> None:
        self.name = os.fspath(path)
        self.disks: list[str] | None = None
        if disks is not None:
            self.disks = expand_disks(disks)
            self._core = _core.FileReader.scan(self.name, self.disks, format, to_hz(sample_rate))
        elif format is not None:
            raise _core.ArgumentError(f"format: {format!r} applies to a scan; give the scan's disks with it")
        else:
            self._core = _core.FileReader(self.name, to_hz(sample_rate))
        self.torn: list[dict[str, Any]] = json.loads(self._core.torn())
        self._offset = 0
        h = self._core.header0
        self._full_sample_shape = (len(self._core.thread_ids), h.nchan)
        self.squeeze = squeeze
        self.sample_shape: tuple[int, ...] = (
            tuple(d for d in self._full_sample_shape if d != 1) if squeeze else self._full_sample_shape
        )
        self.dtype = np.dtype(np.complex64 if h.complex else np.float32)
        self._closed = False

    # -- description ------------------------------------------------------------------
    @property
    def header0(self) -> _core.Header:
        return self._core.header0

    @property
    def thread_ids(self) -> list[int]:
        return self._core.thread_ids

    @property
    def sample_rate(self) -> float:
        """Samples per second per channel (Hz): given, from the frame-number wrap, or from the header."""
        return self._core.sample_rate

    @property
    def frame_rate(self) -> float:
        """Frames per second per thread."""
        return self._core.frame_rate

    @property
    def samples_per_frame(self) -> int:
        return self._core.samples_per_frame

    @property
    def bps(self) -> int:
        """Bits per elementary sample."""
        return self.header0.bits

    @property
    def complex_data(self) -> bool:
        return self.header0.complex

    @property
    def shape(self) -> tuple[int, ...]:
        return (self._core.n_samples,) + self.sample_shape

    def __len__(self) -> int:
        return self._core.n_samples

    @property
    def start_time(self) -> _dt.datetime:
        """UTC time of the first sample."""
        return _utc(*self.header0.unix_time(self.frame_rate))

    @property
    def time(self) -> _dt.datetime:
        """UTC time of the sample at the current position."""
        return self.start_time + _dt.timedelta(seconds=self._offset / self.sample_rate)

    @property
    def stop_time(self) -> _dt.datetime:
        """UTC time just after the last sample."""
        return self.start_time + _dt.timedelta(seconds=self.shape[0] / self.sample_rate)

    @property
    def frames(self) -> npt.NDArray[np.uint8] | list[npt.NDArray[np.uint8]]:
        """The whole frames as read-only ``(n_frames, frame_size)`` uint8 arrays.

        For a file, one array; for a scan (opened with ``disks=``), a list with one array per
        part (vbs chunk, Mark6 block) in stream order, since the parts lie in separate files.
        The arrays are the memory maps themselves: no bytes are copied, and the files stay
        mapped while an array lives.
        """
        parts = self._core.frame_parts()
        return parts if self.disks is not None else parts[0]

    @property
    def frame_parts(self) -> list[npt.NDArray[np.uint8]]:
        """The whole frames part by part, always a list (one array for a file); see ``frames``."""
        return self._core.frame_parts()

    # -- position ---------------------------------------------------------------------
    def tell(self) -> int:
        """Current position, in samples from the start."""
        return self._offset

    def seek(self, offset: int, whence: int | str = 0) -> int:
        """Moves to ``offset`` samples from the start (0), the current position (1) or the end (2)."""
        names = {"start": 0, "current": 1, "end": 2}
        w = names.get(whence, whence) if isinstance(whence, str) else whence
        if w not in (0, 1, 2):
            raise ValueError(f"whence must be 0, 1, 2, 'start', 'current' or 'end', got {whence!r}")
        base = (0, self._offset, self.shape[0])[int(w)]
        new = base + int(offset)
        if new < 0:
            raise ValueError(f"cannot seek to sample {new}: before the start of the file")
        self._offset = new
        return new

    # -- data -------------------------------------------------------------------------
    def read(self, count: int | None = None, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """Reads ``count`` samples from the current position (all that remain by default).

        Parameters
        ----------
        count : int, optional
            Number of complete samples to read.
        out : numpy.ndarray, optional
            C-contiguous array of shape ``(count,) + sample_shape`` and this reader's dtype to
            decode into; ``count`` is then taken from it.

        Returns
        -------
        numpy.ndarray
            ``(count,) + sample_shape`` samples.
        """
        self._check_open()
        remaining = self.shape[0] - self._offset
        if out is None:
            if count is None:
                count = remaining
            if count < 0:
                raise ValueError(f"count must be zero or positive, got {count}")
            out = np.empty((count,) + self.sample_shape, dtype=self.dtype)
        else:
            want = (out.shape[0],) + self.sample_shape
            if out.shape != want or out.dtype != self.dtype or not out.flags.c_contiguous:
                raise ValueError(
                    f"out must be a C-contiguous {self.dtype} array of shape {want}, "
                    f"got {out.dtype} {out.shape}"
                )
            count = out.shape[0]
        if count > remaining:
            raise EOFError(f"cannot read {count} samples: only {remaining} remain after position {self._offset}")
        flat = out.reshape(-1).view(np.float32)
        self._core.read_into(self._offset, count, flat)
        self._offset += count
        return out

    # -- lifetime ---------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"I/O operation on closed reader for {self.name}")

    def close(self) -> None:
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Reader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        h = self.header0
        return (
            f"<vdifrec.Reader name={self.name} offset={self._offset}\n"
            f"    sample_rate={self.sample_rate / 1e6:g} MHz ({self._core.sample_rate_source}),"
            f" samples_per_frame={self.samples_per_frame},\n"
            f"    sample_shape={self.sample_shape}, threads={self.thread_ids},\n"
            f"    bps={h.bits}, complex_data={h.complex}, edv={h.edv}, station={h.station},\n"
            f"    start_time={self.start_time.isoformat()}{self._torn_line()}>"
        )

    def _torn_line(self) -> str:
        if not self.torn:
            return ""
        n = len(self.torn)
        places = ", ".join(
            f"{t['path']}" if t["part"] is None else f"part {t['part']} of {t['path']}" for t in self.torn
        )
        return (f",\n    torn={n} piece{'' if n == 1 else 's'}, {sum(t['bytes'] for t in self.torn):,} bytes"
                f" left out ({places})")


def open(  # noqa: A001
    path: str | os.PathLike[str],
    sample_rate: Any = None,
    squeeze: bool = True,
    *,
    disks: Disks | None = None,
    format: str | None = None,  # noqa: A002
) -> Reader:
    """Opens a VDIF file, or a scan recorded over several disks, for reading samples.

    Parameters
    ----------
    path : str or os.PathLike
        The file; with ``disks``, the scan's name (``"kvn_scan1"``).
    sample_rate : float or astropy.units.Quantity, optional
        Samples per second per channel, in Hz. Needed only for a file too short to show the
        frame-number wrap whose header (EDV 1/3) does not carry the rate; the error says so.
    squeeze : bool, optional
        Remove thread and channel dimensions of length one (default, as baseband does).
    disks : str, os.PathLike or list of them, optional
        Read the scan ``path`` from these directories (mount points), or globs such as
        ``"/mnt/disk*"`` (expanded, sorted). Its parts (FlexBuff chunks, Mark6 blocks) are put
        in order by their numbers and read as one stream. A scan with a missing part raises
        ``GapError``, naming the parts and the VDIF time they leave out. A scan a recorder
        stopped mid-write is read to the last whole frame of each file; ``Reader.torn`` says
        what was left out.
    format : {"file", "vbs", "mk6"}, optional
        The scan's layout; detected from what is on the disks by default.

    Returns
    -------
    Reader
        Context manager with ``read``, ``seek``, ``tell``, ``frames`` and the stream's properties.
    """
    return Reader(path, sample_rate=sample_rate, squeeze=squeeze, disks=disks, format=format)


_THREAD_SHIFT = np.uint32(16)
_THREAD_MASK = np.uint32(0x3FF)
_INVALID_BIT = np.uint32(1 << 31)


class FrameSets:
    """Whole frames (rows of a uint8 array) grouped by thread, decodable a few frame sets at a
    time: the k-th frame of each thread, in the order given, makes frame set k."""

    def __init__(self, frames: npt.NDArray[np.uint8]) -> None:
        frames = np.asarray(frames)
        if frames.ndim != 2 or frames.dtype != np.uint8:
            raise ValueError(
                f"frames must be a 2-d uint8 array (n_frames, frame_size), got {frames.dtype} {frames.shape}"
            )
        if frames.shape[0] == 0:
            raise ValueError("frames is empty: nothing to decode")
        self.header = _core.Header.from_bytes(bytes(frames[0, :32]), verify=False)
        if self.header.frame_size != frames.shape[1]:
            raise ValueError(f"frames are {frames.shape[1]} bytes but their header says {self.header.frame_size}")
        self.frames = frames
        words = np.ascontiguousarray(frames[:, :16]).view("<u4")
        thread = (words[:, 3] >> _THREAD_SHIFT) & _THREAD_MASK
        self.invalid = (words[:, 0] & _INVALID_BIT) != 0
        self.thread_ids: list[int] = [int(t) for t in np.unique(thread)]
        self.rows = [np.flatnonzero(thread == t) for t in self.thread_ids]
        self.n_sets = min(len(r) for r in self.rows)
        self.samples_per_frame = self.header.samples_per_frame
        self.nchan = self.header.nchan
        self.complex = self.header.complex

    def decode(self, first: int = 0, count: int | None = None) -> npt.NDArray[Any]:
        """Samples of frame sets ``first .. first + count - 1``, shaped (time, thread, channel)."""
        count = self.n_sets - first if count is None else count
        h = self.header
        spf = self.samples_per_frame
        values = h.nchan * (2 if h.complex else 1)
        out = np.zeros((count * spf, len(self.thread_ids), values), dtype=np.float32)
        buf = np.empty(count * spf * values, dtype=np.float32)
        for col, rows in enumerate(self.rows):
            idx = rows[first : first + count]
            _core.decode_payloads(np.ascontiguousarray(self.frames[idx]), h.header_size, h.bits, buf)
            block = buf.reshape(count, spf, values)
            block[self.invalid[idx]] = 0.0
            out[:, col, :] = block.reshape(count * spf, values)
        return out.view(np.complex64) if h.complex else out


@checks_views("decode")
def decode(frames: npt.NDArray[np.uint8], squeeze: bool = True) -> npt.NDArray[Any]:
    """Decodes whole frames (rows of a ``(n, frame_size)`` uint8 array) into samples.

    The layout matches :meth:`Reader.read`: ``(time, thread, channel)``, threads sorted by id,
    lengths of one squeezed away, invalid frames as zeros. Frames of each thread are taken in
    the order given; every thread contributes as many frames as the one with fewest.
    """
    result = FrameSets(frames).decode()
    if squeeze:
        shape = (result.shape[0],) + tuple(d for d in result.shape[1:] if d != 1)
        result = result.reshape(shape)
    return result
