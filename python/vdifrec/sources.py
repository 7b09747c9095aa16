"""Test sources: a paced FILA10G-like VDIF sender (``Sender``, ``send``) and the synthetic
recordings it shares its signal with (``generate``). The engine's side is ``src/sources/``."""

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
    """A FILA10G-like VDIF source sending to ``to`` (``"host:port"``), paced to ``fps`` × threads.

    Takes the options of ``vdifrec send`` and the signal settings of ``generate``; the defaults
    are ``vdifrec.defaults["sender"]`` and ``["signal"]``; a bad option raises
    ``vdifrec.ArgumentError`` naming it.

    Runs in its own thread from construction; ``wait()`` or ``stop()`` returns its summary
    (a dict: frames_sent, bytes_sent, frames_dropped, frames_reordered, garbage_sent, refused,
    gbps, ...). ``drop`` takes ``"S:A-B,every:N"``; ``reorder=N`` swaps every N-th frame with the
    next; ``garbage=N`` sends N stray datagrams; ``record_sent`` writes the frames sent.
    """

    def __init__(self, to: str | tuple[str, int], **options: Any) -> None:
        if isinstance(to, tuple):
            host, port = to
            to = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
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
