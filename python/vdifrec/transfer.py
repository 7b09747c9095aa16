"""Shipping scans to the correlator: :func:`push` at the station, :class:`Receiver` at the
correlator (``vdifrec push`` and ``vdifrec receive`` on the command line).

A push moves each file or scan in checksummed blocks over several TCP connections, resumes
where an earlier one stopped, and ends with the receiver reading the whole copy back. Both
ends read the same token file (its first line, mode 600) and prove they hold it without
sending it.

>>> summary = vdifrec.push("kvn_scan1", disks=["/mnt/disk0", "/mnt/disk1"],
...                        to="correlator.example.org:2630", token_file="~/.vdifrec-token")  # doctest: +SKIP
>>> summary["items"][0]["state"], summary["rate_bps"] / 1e9  # doctest: +SKIP
('sent', 6.1)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from . import _core
from ._core import TransferError
from .scans import Disks, expand_disks

if TYPE_CHECKING:
    from ._core import PushOptions, ReceiveOptions

__all__ = ["PushProgress", "Receiver", "TransferError", "push"]


class PushProgress(NamedTuple):
    """How far a push has come, as :func:`push` hands it to its ``progress`` callback."""

    bytes_done: int
    bytes_total: int
    streams: int
    items_done: int
    items_total: int
    item: str


def _options(**given: Any) -> dict[str, Any]:
    return {k: v for k, v in given.items() if v is not None}


def push(
    *sources: str | os.PathLike[str],
    to: str,
    token_file: str | os.PathLike[str],
    disks: Disks | None = None,
    layout: str = "file",
    streams: int | str = "auto",
    max_streams: int | None = None,
    block_size: int | str | None = None,
    rate: str | None = None,
    nice: bool = False,
    retry_seconds: float | None = None,
    progress: Callable[[PushProgress], None] | None = None,
    check: bool = True,
) -> dict[str, Any]:
    """Sends files, or scans, to a :class:`Receiver` (``vdifrec receive``) at ``to``.

    Parameters
    ----------
    sources : files; or, with ``disks``, names of scans recorded on those disks.
    to : the receiver, ``"HOST:PORT"``.
    token_file : the shared token's file (its first line; readable by its owner only).
    disks : the recording disks (directories, or a glob such as ``"/mnt/disk*"``) to find
        the scans on. A scan lands as ``<dir>/<scan>``, its frames in order: its whole frames,
        what a recorder stopped mid-write left torn at the ends of files left out and named in
        the item's ``notes``.
    layout : ``"file"`` (a scan as one file) or ``"vbs"`` (``<dir>/<scan>/<scan>.NNNNNNNN``,
        one chunk per recorded part, as FlexBuff writes it).
    streams : TCP connections: a number, or ``"auto"`` to choose from measured throughput and
        the CPU use of both hosts (the summary's ``streams_reason`` says why).
    max_streams : the most ``"auto"`` may use (default 32).
    block_size : bytes per block (default 64 MiB; a multiple of 4 KiB).
    rate : a cap on the aggregate rate: ``"4Gbps"`` (bits) or ``"500MB/s"`` (bytes).
    nice : lower the push threads' CPU priority and I/O class, to share a recording host.
    retry_seconds : how long to keep trying when connections break without progress, or while the
        receiver answers busy, refuses the connection (not listening yet: starting or
        restarting) or drops it before the handshake ends (default 60). A wrong token, another
        protocol version or a refusal naming a problem fails at once.
    progress : called about four times a second with a :class:`PushProgress`.
    check : raise :class:`TransferError` (with the summary as ``.summary``) when an item
        was refused, failed or was interrupted.

    Returns
    -------
    The summary: ``ok``, ``bytes``, ``bytes_sent``, ``seconds``, ``rate_bps`` and per item
    ``state`` (``sent``, ``resumed``, ``skipped``, ``refused``, ``failed``, ``interrupted``),
    ``streams``, ``streams_reason``, ``blocks_resent``, ``digest``, ``error`` and ``notes``
    (what the item left out of its source: a scan's torn pieces).

    A Ctrl-C stops the push cleanly (the receiver keeps what arrived, to be resumed) and is
    raised again once it has stopped.
    """
    options = _options(
        sources=[os.fspath(s) for s in sources],
        to=to,
        token_file=os.path.expanduser(os.fspath(token_file)),
        disks=expand_disks(disks) if disks is not None else None,
        layout=layout,
        streams=streams,
        max_streams=max_streams,
        block_size=block_size,
        rate=rate,
        nice=nice,
        retry_seconds=retry_seconds,
    )
    run = _core.Push(cast("PushOptions", options))
    try:
        while (text := run.wait(0.25)) is None:
            if progress is not None:
                progress(PushProgress(*run.progress()))
    except KeyboardInterrupt:
        run.stop()
        run.wait(120.0)
        raise
    summary: dict[str, Any] = json.loads(text)
    if check and not summary["ok"]:
        bad = [i for i in summary["items"] if i["state"] not in ("sent", "resumed", "skipped")]
        exc = TransferError("; ".join(f"{i['name']}: {i['state']}: {i['error']}" for i in bad))
        exc.summary = summary  # type: ignore[attr-defined]
        raise exc
    return summary


class Receiver:
    """The correlator's end: serves pushes in a thread until :meth:`stop`.

    Transfers land in ``dir``: a file as ``<dir>/<name>``, a scan as ``<dir>/<scan>`` or a
    ``vbs`` directory. A partial copy (``.<name>.vdifrec-part``) and its manifest stay until
    the copy is complete and verified; only then does it get its name.

    >>> with vdifrec.Receiver("/data/incoming", listen="0.0.0.0:2630",
    ...                       token_file="~/.vdifrec-token") as r:   # doctest: +SKIP
    ...     time.sleep(3600); print(r.events())
    """

    def __init__(
        self,
        dir: str | os.PathLike[str],
        listen: str | int,
        token_file: str | os.PathLike[str],
        *,
        max_connections: int | None = None,
        max_memory: int | str | None = None,
    ) -> None:
        self._core = _core.Receiver(
            cast("ReceiveOptions", _options(
                dir=os.fspath(dir),
                listen=str(listen),
                token_file=os.path.expanduser(os.fspath(token_file)),
                max_connections=max_connections,
                max_memory=max_memory,
            ))
        )
        self.dir = os.fspath(dir)

    @property
    def address(self) -> str:
        """``HOST:PORT`` it listens on."""
        return self._core.address

    def events(self) -> list[dict[str, Any]]:
        """Transfers that ended (received, skipped, refused, interrupted) since the last call."""
        events: list[dict[str, Any]] = json.loads(self._core.events())
        return events

    def stop(self) -> None:
        """Stops serving; partial copies keep their manifests, to be resumed."""
        self._core.stop()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<vdifrec.Receiver on {self.address} into {self.dir}>"
