"""Reading recorders' status endpoints from another machine (``vdifrec watch``, scripts)."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from .reports import Stats

__all__ = ["RemoteStatus", "RemoteStatuses"]

T = TypeVar("T")


class RemoteStatus:
    """The status endpoint of a recorder started with ``status_listen`` / ``--status-listen``.

    Parameters
    ----------
    url : str
        ``"HOST:PORT"`` or ``"http://HOST:PORT"``.
    timeout : float
        Seconds to wait for the connection and for each read.

    Every failure to get a document (nobody listens, no answer in time, an answer that is not
    a recorder's status) raises ``ConnectionError``, with the reason.

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

    def __repr__(self) -> str:
        return f"RemoteStatus({self.url!r})"

    def _get(self, path: str) -> bytes:
        try:
            with urllib.request.urlopen(self.url + path, timeout=self.timeout) as r:
                body: bytes = r.read()
                return body
        except urllib.error.URLError as exc:
            raise ConnectionError(f"no status from {self.url}{path}: {exc.reason}") from None
        except (OSError, http.client.HTTPException) as exc:
            # A connection that opened but did not answer in time, or was cut, or spoke no HTTP.
            raise ConnectionError(f"no status from {self.url}{path}: {exc or type(exc).__name__}") from None

    def status(self) -> dict[str, Any]:
        """The whole ``/status`` document: state, the scan being written (``scan``), its disks
        (``scan_disks``) and how much of it is known to be on disk (``scan_durable``), how full
        the disks are (``disk_fill``, ``disks``), start time, VDIF time, current file, ring
        fill, rates, the last completed second and every counter (``stats``; each forwarding
        destination's in ``stats["forward"]``)."""
        try:
            doc = json.loads(self._get("/status"))
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or not isinstance(doc.get("stats"), dict) or "state" not in doc:
            raise ConnectionError(
                f"no status from {self.url}/status: the answer is not a recorder's status document "
                "(no state and stats); is this a recorder's --status-listen address?"
            )
        return doc

    def stats(self) -> Stats:
        """The same :class:`vdifrec.Stats` a local ``Recorder.stats()`` gives (its ``forward``:
        each forwarding destination's :class:`vdifrec.ForwardStats`)."""
        return Stats.from_dict(self.status()["stats"])

    def metrics(self) -> str:
        """The Prometheus text exposition of ``/metrics``."""
        return self._get("/metrics").decode()


class RemoteStatuses:
    """The status endpoints of several recorders (a station network), asked together.

    Each call asks every recorder at once and returns a dict keyed by the urls as given. A
    recorder that does not answer does not fail the call: its entry is the
    ``ConnectionError`` that says why, so that the others are still read.

    Parameters
    ----------
    urls : iterable of str
        ``"HOST:PORT"`` or ``"http://HOST:PORT"`` of each recorder's ``--status-listen``.
    timeout : float
        Seconds to wait for each connection and each read; a call takes at most about twice
        this, however many recorders there are.

    >>> station = vdifrec.RemoteStatuses(["rec1:8089", "rec2:8089"])   # doctest: +SKIP
    >>> for url, doc in station.status().items():                      # doctest: +SKIP
    ...     if isinstance(doc, ConnectionError):
    ...         print(url, "NO ANSWER:", doc)
    ...     else:
    ...         print(url, doc["state"], doc["stats"]["frames_lost"])
    >>> station.remotes["rec1:8089"].metrics()                         # doctest: +SKIP
    """

    def __init__(self, urls: Iterable[str], timeout: float = 5.0) -> None:
        if isinstance(urls, str):
            raise TypeError(f"urls: give a list of urls, got the string {urls!r}; for one recorder use RemoteStatus(url)")
        self.remotes: dict[str, RemoteStatus] = {}
        """One :class:`RemoteStatus` per url, keyed by the url as given."""
        for url in urls:
            remote = RemoteStatus(url, timeout)
            twin = next((k for k, r in self.remotes.items() if r.url == remote.url), None)
            if twin is not None:
                raise ValueError(f"urls: {url!r} names the same recorder as {twin!r}: give each once")
            self.remotes[url] = remote
        if not self.remotes:
            raise ValueError("urls: empty; give at least one recorder's HOST:PORT")
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"RemoteStatuses({list(self.remotes)!r})"

    def _ask(self, call: Callable[[RemoteStatus], T]) -> dict[str, T | ConnectionError]:
        # One thread per recorder, so that one that does not answer costs its timeout once,
        # not once per recorder behind it. Daemon threads: a call interrupted (Ctrl-C) leaves
        # them to end by their own timeout without holding up the interpreter's exit.
        answers: dict[str, T | ConnectionError] = {}
        failures: list[Exception] = []

        def ask(url: str, remote: RemoteStatus) -> None:
            try:
                answers[url] = call(remote)
            except ConnectionError as exc:
                answers[url] = exc
            except Exception as exc:  # a fault, not a recorder's silence: raised in the caller
                failures.append(exc)

        threads = [threading.Thread(target=ask, args=item, name=f"vdifrec-status {item[0]}", daemon=True)
                   for item in self.remotes.items()]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 2 * self.timeout + 1.0
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if failures:
            raise failures[0]
        return {
            url: answers[url] if url in answers
            else ConnectionError(f"no status from {remote.url}: no answer within {2 * self.timeout + 1.0:g} s")
            for url, remote in self.remotes.items()
        }

    def status(self) -> dict[str, dict[str, Any] | ConnectionError]:
        """Each recorder's whole ``/status`` document (see :meth:`RemoteStatus.status`), or the
        ``ConnectionError`` that says why it gave none."""
        return self._ask(RemoteStatus.status)

    def stats(self) -> dict[str, Stats | ConnectionError]:
        """Each recorder's :class:`vdifrec.Stats`, or the ``ConnectionError`` that says why it
        gave none."""
        return self._ask(RemoteStatus.stats)
