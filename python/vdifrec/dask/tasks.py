"""What every Dask task of vdifrec shares in the worker (open readers, the count of what it read)
and where tasks are placed (``hosts=``). Its own module, so that the task functions of
``vdifrec.dask`` and of the fringe test import it without importing each other."""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

from dask.base import annotate

from .. import _core
from ..reader import Reader
from ..reader import open as open_reader

#: Where each file or scan lies: {path or scan name: host}, as the ``hosts=`` keyword takes it.
Hosts = Mapping[str | os.PathLike[str], str]

#: Readers a worker thread keeps open (the oldest is closed first).
MAX_OPEN_READERS = 16

#: Readers kept open in each worker thread (a reader has a position, so threads do not share
#: one), so that a file is mapped and its rate learned once, not once per chunk.
_readers = threading.local()
#: Tasks this process has run per file or scan: where the data were read (see `files_read`).
_tasks_per_file: collections.Counter[str] = collections.Counter()
_tasks_lock = threading.Lock()


def files_read() -> dict[str, int]:
    """How many vdifrec tasks this process has run on each file or scan. On a cluster,
    ``client.run(vdifrec.dask.files_read)`` shows which worker read what: that ``hosts=``
    placed the work where the data lie."""
    with _tasks_lock:
        return dict(_tasks_per_file)


def count_read(path: str) -> None:
    with _tasks_lock:
        _tasks_per_file[path] += 1


@contextlib.contextmanager
def reading(path: str, open_kwargs: dict[str, Any]) -> Iterator[Reader]:
    """One task's use of the worker thread's open reader of ``path``, counted, its analysis on
    this one thread. When the task is
    done the reader lets go of the pages it touched: they stay in the page cache, but no longer
    count in the worker's resident memory, which its memory limit (pause at 80 %, restart at
    95 %) would otherwise read as a leak after a few GB of files."""
    fh = _reader(path, open_kwargs)
    # Dask runs a task per thread it has (as many as CPUs, or as the worker was given): the
    # task's Rust analysis keeps to its own thread, rather than start one per CPU again.
    before = _core.set_analysis_threads(1)
    try:
        yield fh
    finally:
        _core.set_analysis_threads(before)
        fh._core.release_pages()


def _reader(path: str, open_kwargs: dict[str, Any]) -> Reader:
    """The worker thread's open reader of ``path``, counted as one task's read of it."""
    count_read(path)
    cache: dict[Any, tuple[Reader, Any]] = getattr(_readers, "cache", None) or {}
    _readers.cache = cache
    key = (path, repr(sorted(open_kwargs.items())))
    stamp = _file_stamp(path)
    if key in cache and cache[key][1] != stamp:  # replaced or grown since: read it afresh
        cache.pop(key)[0].close()
    if key not in cache:
        if len(cache) >= MAX_OPEN_READERS:
            cache.pop(next(iter(cache)))[0].close()
        cache[key] = (open_reader(path, **open_kwargs), stamp)
    return cache[key][0]


def _file_stamp(path: str) -> tuple[int, int, int] | None:
    """What tells a file replaced or grown (inode, size, mtime); None for a scan's name."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def set_time(fh: Reader, j: int) -> int:
    """The time of frame set ``j`` of the reader on an absolute axis, frame-exact: samples since
    the POSIX epoch at the stream's sample rate, from the header's whole seconds and frame
    number (of the set's first frame)."""
    k = j * len(fh.thread_ids)
    for part in fh.frame_parts:
        if k < len(part):
            h = _core.Header.from_bytes(bytes(part[k, :32]), verify=False)
            whole, _ = h.unix_time(fh.frame_rate)
            return int(whole) * round(fh.sample_rate) + h.frame_nr * int(fh.samples_per_frame)
        k -= len(part)
    raise IndexError(f"frame set {j} is past the end of {fh.name}")


def first_sample(fh: Reader) -> int:
    """The reader's first sample on the absolute axis of `set_time`."""
    return set_time(fh, 0)


def _workers_on(host: str) -> list[str] | None:
    """The workers of the current ``distributed`` client on ``host``: those started with a
    resource of that name (``dask worker --resources "rec1=1"``), else those whose address is
    on that host. None without a distributed client (the threaded scheduler has one host)."""
    try:
        from distributed import get_client

        client = get_client()
    except (ImportError, ValueError):
        return None
    try:
        info = client.scheduler_info(n_workers=-1)  # all workers (newer distributed lists 5 by default)
    except TypeError:
        info = client.scheduler_info()
    workers: dict[str, Any] = info["workers"]
    named = [addr for addr, w in workers.items() if host in (w.get("resources") or {})]
    if named:
        return named
    on_host = [addr for addr, w in workers.items() if host in (w.get("host"), urllib.parse.urlsplit(addr).hostname)]
    return on_host or None


def host_table(hosts: Hosts | None) -> dict[str, str]:
    if hosts is None:
        return {}
    if not isinstance(hosts, Mapping):
        raise ValueError(f"hosts: {hosts!r} - give a mapping {{path or scan: host}}")
    return {os.fspath(k): str(v) for k, v in hosts.items()}


@contextlib.contextmanager
def placed(hosts: dict[str, str], name: str) -> Iterator[None]:
    """Tasks made inside prefer the workers on the host that holds ``name`` (and may run
    elsewhere when those are gone or busy: data read over the network beat data not read)."""
    host = hosts.get(name)
    workers = _workers_on(host) if host is not None else None
    if workers is None:
        yield
    else:
        with annotate(workers=workers, allow_other_workers=True):
            yield
