"""Recordings as Dask arrays (`vdifrec.dask.open`): the same values as `read()` for single- and
multi-thread files, across file and chunk boundaries, for files and for a scan on several
disks, under the threaded scheduler and on a `LocalCluster` of worker processes; and
`import vdifrec` never imports Dask."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vdifrec

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
import vdifrec.dask as vd  # noqa: E402 - after the skip

FPS = 2000


def stream(tmp_path: Path, threads: int, n: int = 2, seconds: float = 0.3) -> list[Path]:
    """`n` consecutive files of one stream, `seconds` each: one recording cut at frame-set
    boundaries, so that each file starts where the one before ends."""
    whole = tmp_path / "whole.vdif"
    vdifrec.generate(whole, seconds=n * seconds, fps=FPS, threads=threads, ref_epoch=53, start_second=1000)
    data = whole.read_bytes()
    per = round(seconds * FPS) * threads * 8224
    files = []
    for k in range(n):
        p = tmp_path / f"part{k}.vdif"
        p.write_bytes(data[k * per : (k + 1) * per])
        files.append(p)
    whole.unlink()
    return files


def rate(path: Path) -> float:
    with vdifrec.open(path, sample_rate=1.0) as fh:
        return float(FPS * fh.samples_per_frame)


def read_all(files: list[Path]) -> np.ndarray:
    out = []
    for f in files:
        with vdifrec.open(f, sample_rate=rate(f)) as fh:
            out.append(fh.read())
    return np.concatenate(out)


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_values_equal_read_across_file_and_chunk_boundaries(tmp_path: Path, threads: int) -> None:
    files = stream(tmp_path, threads)
    want = read_all(files)
    # Given out of order: put in time order. 250 frame sets per chunk: chunks end inside each
    # file (600 frame sets) and at its end, never across two files.
    x = vd.open([files[1], files[0]], chunk_frames=250, sample_rate=rate(files[0]))
    assert x.shape == want.shape and x.dtype == want.dtype
    spf = want.shape[0] // (2 * int(0.3 * FPS))
    assert x.chunks[0] == (250 * spf, 250 * spf, 100 * spf) * 2
    np.testing.assert_array_equal(x.compute(), want)
    # A slice across the file boundary reads only the chunks it needs, and right.
    edge = int(0.3 * FPS) * spf
    np.testing.assert_array_equal(x[edge - 1000 : edge + 1000].compute(), want[edge - 1000 : edge + 1000])
    with vdifrec.open(files[0], sample_rate=rate(files[0])) as fh:
        assert x.vdif_time == fh.start_time and x.sample_rate == fh.sample_rate


def test_squeeze_and_a_single_path(tmp_path: Path) -> None:
    (f,) = stream(tmp_path, 2, n=1, seconds=0.1)
    with vdifrec.open(f, sample_rate=rate(f), squeeze=False) as fh:
        want = fh.read()
    x = vd.open(f, chunk_frames=64, sample_rate=rate(f), squeeze=False)
    assert x.shape == want.shape
    np.testing.assert_array_equal(x.compute(), want)


def test_a_scan_on_several_disks_reads_as_its_file(tmp_path: Path) -> None:
    (f,) = stream(tmp_path, 1, n=1, seconds=0.2)
    data = f.read_bytes()
    fs = 8224
    frames = len(data) // fs
    cuts = [0, frames // 3, 2 * frames // 3, frames]
    disks = [tmp_path / f"disk{i}" for i in range(2)]
    for k in range(3):
        d = disks[k % 2] / "s1"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"s1.{k:08d}").write_bytes(data[cuts[k] * fs : cuts[k + 1] * fs])
    x = vd.open("s1", disks=[str(d) for d in disks], chunk_frames=100, sample_rate=rate(f))
    np.testing.assert_array_equal(x.compute(), read_all([f]))


@pytest.mark.slow
def test_on_a_local_cluster_of_worker_processes(tmp_path: Path) -> None:
    files = stream(tmp_path, 2)
    want = read_all(files)
    # The dashboard on a port of its own (":0"): None means Dask's 8787, which a cluster of a
    # test running at the same time (make test runs two at once) may hold.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        x = vd.open(files, chunk_frames=200, sample_rate=rate(files[0]))
        got = client.compute(x).result()
        # Only names and numbers went through the scheduler: the graph holds no samples
        # (pickled, as it travels: a chunk of samples would be megabytes).
        graph_bytes = len(pickle.dumps(dict(x.__dask_graph__())))
        assert graph_bytes < 100_000 < got.nbytes / len(x.chunks[0])
    np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_spectrum_by_map_reduce_equals_the_single_process_one(tmp_path: Path) -> None:
    files = stream(tmp_path, 2, seconds=0.3)
    kw = dict(sample_rate=rate(files[0]))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster):
        # 333 FFTs a task: the last task of each file is short.
        got = vd.spectrum(files, nfft=256, chunk_ffts=333, **kw)
        # The bit statistics and the one-pass check on the cluster, too.
        states = vd.bstate(files, chunk_frames=70, **kw)
        checks = vd.check(files)
    for f, b, c in zip(files, states, checks):
        with vdifrec.open(f, **kw) as fh:
            np.testing.assert_array_equal(b.counts, vdifrec.bstate(fh).counts)
        assert c == vdifrec.check(f)
    for f, s in zip(files, got):
        with vdifrec.open(f, **kw) as fh:
            want = vdifrec.spectrum(fh, nfft=256)
        assert s.nint == want.nint and s.thread_ids == want.thread_ids
        np.testing.assert_allclose(s.power, want.power, rtol=1e-6)
        np.testing.assert_array_equal(s.freq, want.freq)
        # The generated tone (0.390625 of the band) is found in the map-reduced spectrum too.
        tone = vdifrec.find_tones(s)[0]
        assert abs(tone.frequency / (s.sample_rate / 2) - 0.390625) < 2 / 256
    with pytest.raises(ValueError, match="chunk_ffts"):
        vd.spectrum(files[0], chunk_ffts=0, **kw)


def test_bstate_and_the_session_table(tmp_path: Path) -> None:
    files = stream(tmp_path, 2, seconds=0.3)
    kw = dict(sample_rate=rate(files[0]))
    # 70 frames a task: runs that end inside a thread's frames.
    got = vd.bstate(files, chunk_frames=70, **kw)
    for f, b in zip(files, got):
        with vdifrec.open(f, **kw) as fh:
            want = vdifrec.bstate(fh)
        assert b.thread_ids == want.thread_ids and b.bits == want.bits
        np.testing.assert_array_equal(b.counts, want.counts)
    # One file with 50 frames of thread 1 left out: the table says so.
    raw = bytearray(files[1].read_bytes())
    fs = 8224
    frames = [raw[k * fs : (k + 1) * fs] for k in range(len(raw) // fs)]
    kept = [fr for k, fr in enumerate(frames) if not (400 <= k < 500 and k % 2 == 1)]
    gappy = tmp_path / "gappy.vdif"
    gappy.write_bytes(b"".join(kept))
    table = vd.session([files[0], gappy], nfft=256, **kw)
    assert list(table["path"]) == [str(files[0]), str(gappy)]
    assert list(table["frames"]) == [len(frames), len(kept)]
    assert list(table["lost"]) == [0, 50] and list(table["clean"]) == [True, False]
    for tones in table["tones"]:
        assert len(tones) == 8  # the tone in each of 2 threads x 4 channels
        assert all(abs(hz / (rate(files[0]) / 2) - 0.390625) < 2 / 256 for _, _, hz, _ in tones)
    assert (table["bstate_deviation"] < 0.01).all()


def test_files_of_different_streams_and_bad_chunks_are_refused(tmp_path: Path) -> None:
    a = tmp_path / "a.vdif"
    b = tmp_path / "b.vdif"
    vdifrec.generate(a, seconds=0.1, fps=FPS, threads=1, nchan=4, ref_epoch=53, start_second=1000)
    vdifrec.generate(b, seconds=0.1, fps=FPS, threads=1, nchan=8, ref_epoch=53, start_second=1001)
    with pytest.raises(ValueError, match="not of the same stream"):
        vd.open([a, b], sample_rate=rate(a))
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="chunk_frames"):
            vd.open(a, chunk_frames=bad, sample_rate=rate(a))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="paths_or_scans"):
        vd.open([])


def test_files_with_a_gap_between_or_twice_are_not_one_stream(tmp_path: Path) -> None:
    first, second = stream(tmp_path, 1, n=2, seconds=0.1)
    # One frame set missing between the files: the time axis would be wrong after it.
    data = second.read_bytes()
    gapped = tmp_path / "gapped.vdif"
    gapped.write_bytes(data[8224:])
    with pytest.raises(ValueError, match=r"gapped.vdif starts \+0.000500000 s from where .*part0.vdif ends \(a gap\)"):
        vd.open([first, gapped], sample_rate=rate(first))
    with pytest.raises(ValueError, match="an overlap"):
        vd.open([first, first], sample_rate=rate(first))
    assert vd.open([second, first], sample_rate=rate(first)).shape[0] == 2 * 0.1 * rate(first)


def test_importing_vdifrec_never_imports_dask() -> None:
    r = subprocess.run([sys.executable, "-c", "import sys, vdifrec; print('dask' in sys.modules)"],
                       capture_output=True, text=True, timeout=60, check=True)
    assert r.stdout.strip() == "False"


def _file_pages_resident() -> int:
    """Bytes of mapped files resident in this process (RssFile of /proc/self/status)."""
    for line in open("/proc/self/status"):
        if line.startswith("RssFile:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no RssFile in /proc/self/status")


@pytest.mark.slow
def test_a_worker_does_not_keep_the_files_it_read_in_its_resident_memory(tmp_path: Path) -> None:
    # A worker keeps its readers open between tasks; had it kept the pages too, its resident
    # memory would grow by every byte of every file read, and Dask would pause and restart it
    # at its memory limit after a few GB.
    path = tmp_path / "big.vdif"
    vdifrec.generate(path, seconds=1.0, fps=10_000, edv=1, ref_epoch=53, start_second=1000)
    size = path.stat().st_size
    assert size > 80e6
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  host="127.0.0.1") as cluster, distributed.Client(cluster) as client:
        before = client.run(_file_pages_resident)
        (s,) = vd.spectrum([path], nfft=256, chunk_ffts=2048)
        after = client.run(_file_pages_resident)
        assert s.nint > 0 and list(client.run(vd.files_read).values())[0][str(path)] > 10
    (addr,) = after
    assert after[addr] - before[addr] < size / 10, (before, after, size)
