"""Test sources: a paced FILA10G-like VDIF sender that also replays recordings at their own
rate, over UDP, UDP with packet sequence numbers or TCP (``Sender``, ``send``), and the
synthetic recordings it shares its signal with (``generate``). The engine's side is
``src/sources/``."""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any, cast

from . import _core
from .units import plain_options

if TYPE_CHECKING:
    # typing.Unpack is 3.11+; the checker's own typing_extensions has it for 3.10 (never imported at run time).
    from typing_extensions import Unpack

    from ._core import GenerateOptions, SenderOptions, SignalOptions

__all__ = ["Sender", "generate", "send"]

# How long one blocking call into the engine waits before Python looks at signals again.
_SLICE = 0.1


class Sender:
    """A paced VDIF source: a FILA10G-like signal, or the replay of a recording at its own rate.

    Runs in its own thread from construction; ``wait()`` or ``stop()`` returns its summary.
    Every option is checked first (a bad one raises ``vdifrec.ArgumentError`` naming it); the
    defaults are ``vdifrec.defaults["sender"]`` and ``["signal"]``.

    Parameters
    ----------
    to : str or (host, port)
        Where to, and how: ``"HOST:PORT"`` or ``"udp://HOST:PORT"`` (one frame per datagram),
        ``"udps://HOST:PORT"`` (each datagram led by a 64-bit little-endian packet sequence
        number, the frame's place in the sequence; the same as ``psn=True``) or
        ``"tcp://HOST:PORT"`` (one connection, frames back to back; a refused connection
        raises ``vdifrec.SenderError`` starting ``to:``). A tuple is plain UDP.
    file : str or os.PathLike, optional
        Replay this VDIF file: its frames in recorded order, each exactly as recorded.
    scan : str, optional
        Replay this scan, recorded on ``disks`` in any layout (``format``: file, vbs, mk6;
        detected by default). A scan that cannot be read raises as :func:`vdifrec.open` does
        (``FileNotFoundError``, ``vdifrec.GapError``, ...).
    disks : str, os.PathLike or list of them
        The scan's directories (mount points), or a glob such as ``"/mnt/disk*"``.
    rate : str, optional
        Replay at this data rate of VDIF frames (``"4Gbps"``, ``"500MB/s"``; a PSN's 8 bytes
        not counted) instead of the recording's own. The own rate is frames per second per
        thread from the data (the highest frame number of a whole VDIF second + 1), or the
        headers' sample rate (EDV 1, 3) for a recording that never passes a whole second,
        times the threads; each frame is due at its place in the sequence.
    duration, frames : float, int, optional
        Seconds or frames (all threads) to send; a replay ends at the recording's end.
    drop : str, optional
        Frames to leave out: ``"S:A-B,every:N"`` (frames A..B of second S from the start).
    reorder, garbage : int, optional
        Swap every N-th frame with the next; mix in N stray datagrams (UDP only).
    record_sent : str or os.PathLike, optional
        Write exactly the frames sent, in order, to this file.
    **signal
        The generated signal's settings, as for :func:`generate` (``fps``, ``threads``, ...).

    The summary (a dict) holds ``to``, ``replayed``, ``frames_sent``, ``bytes_sent``,
    ``duration_s``, ``frame_rate`` (frames per second, all threads, that the send was paced
    at), ``rate_source`` (how: ``"signal"``, ``"frame-number wrap"``, ``"header"``, ``"rate"``),
    ``achieved_frame_rate``, ``gbps``, ``frames_per_second`` and ``threads``, and the faults
    injected (``frames_dropped``, ``frames_reordered``, ``garbage_sent``) and met (``refused``).
    """

    def __init__(self, to: str | tuple[str, int], **options: Any) -> None:
        if isinstance(to, tuple):
            host, port = to
            to = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if isinstance(options.get("disks"), (str, os.PathLike)):
            options["disks"] = [options["disks"]]
        signal_names = _core.defaults()["signal"]
        signal = {k: options.pop(k) for k in list(options) if k in signal_names}
        # The engine checks every name and value (ArgumentError names a bad one).
        self._core = _core.Sender(plain_options(cast("SenderOptions", {"to": to, **options, "signal": signal})))

    def wait(self, timeout: float | None = None) -> dict[str, Any] | None:
        """Waits for the end (at most ``timeout`` seconds); the summary, or None if still sending."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = _SLICE if deadline is None else max(0.0, min(_SLICE, deadline - time.monotonic()))
            text = self._core.wait(left)
            if text is not None:
                result: dict[str, Any] = json.loads(text)
                return result
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def stop(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self._core.stop())
        return result

    @property
    def finished(self) -> bool:
        return bool(self._core.finished())


def send(to: str | tuple[str, int], **options: Any) -> dict[str, Any]:
    """Sends and waits for the end; returns the sender's summary. See :class:`Sender`."""
    s = Sender(to, **options)
    try:
        while (result := s.wait(_SLICE)) is None:
            pass
    except KeyboardInterrupt:
        result = s.stop()
    return result


def generate(
    path: str | os.PathLike[str], *, seconds: float | None = None, **signal: Unpack[SignalOptions]
) -> _core.Header:
    """Writes a synthetic FILA10G-like recording: Gaussian noise plus a tone, 2-bit by default.

    Every setting is checked before the file is created (``vdifrec.ArgumentError`` names a
    bad one); the defaults are ``vdifrec.defaults["signal"]`` (the reference 8.224 Gbit/s
    stream) and ``["generate"]``.

    Parameters
    ----------
    seconds : float
        Length in seconds of data (``seconds * fps`` frame sets; default 1).
    fps : int
        Frames per second per thread (125000 for the reference 8.224 Gbps stream).
    frame_size : int
        Bytes per frame, 32-byte header included (8224).
    nchan, bits, threads : int
        Channels per frame, bits per sample (1, 2, 4, 8), threads.
    tone_mhz : float, optional
        Tone frequency in MHz within the band (sample rate / 2); by default 0.390625 of the
        band (200 MHz of 512 MHz).
    tone_amplitude : float
        Tone amplitude in units of the noise's standard deviation.
    correlation, delay : float, int
        Correlation of a noise component common to all inputs (channel ``c`` of thread ``t`` is
        input ``t * nchan + c``), lagged by ``delay`` samples per input.
    seed : int
        Random seed (same seed, same bytes): with ``sky_seed``, the station's own noise.
    sky_seed : int, optional
        A sky shared by several "stations": the common noise becomes a function of time alone,
        the same at the same VDIF time in every file made with this sky seed, whatever its
        start; each input of this station sees it ``delay`` samples late. Two stations with
        ``correlation`` ρa and ρb then correlate by sqrt(ρa ρb) at the difference of their delays.
    ref_epoch, start_second : int, optional
        Time of the first frame; now by default.

    Returns
    -------
    Header
        The header of the first frame.
    """
    options: GenerateOptions = {"signal": signal}
    if seconds is not None:
        options["seconds"] = seconds
    return _core.generate(os.fspath(path), options)
