"""Reading a recorder's status endpoint from another machine (``vdifrec watch``, scripts)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from .reports import Stats

__all__ = ["RemoteStatus"]


class RemoteStatus:
    """The status endpoint of a recorder started with ``status_listen`` / ``--status-listen``.

    >>> rs = vdifrec.RemoteStatus("http://127.0.0.1:8089")     # doctest: +SKIP
    >>> rs.stats().frames_received                             # doctest: +SKIP
    """

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        if "://" not in url:
            url = "http://" + url
        if not url.startswith("http://"):
            raise ValueError(f"url: the status endpoint speaks plain http, got {url!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str) -> bytes:
        try:
            with urllib.request.urlopen(self.url + path, timeout=self.timeout) as r:
                body: bytes = r.read()
                return body
        except urllib.error.URLError as exc:
            raise ConnectionError(f"no status from {self.url}{path}: {exc.reason}") from None

    def status(self) -> dict[str, Any]:
        """The whole ``/status`` document: state, start time, VDIF time, current file, ring
        fill, rates, the last completed second and every counter (``stats``)."""
        doc: dict[str, Any] = json.loads(self._get("/status"))
        return doc

    def stats(self) -> Stats:
        """The same :class:`vdifrec.Stats` a local ``Recorder.stats()`` gives."""
        return Stats.from_dict(self.status()["stats"])

    def metrics(self) -> str:
        """The Prometheus text exposition of ``/metrics``."""
        return self._get("/metrics").decode()
