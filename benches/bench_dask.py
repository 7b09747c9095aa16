"""vdifrec.dask on a 2-process LocalCluster against vdifrec in one process, in the same run.

(1) Spectrum of BENCH_DASK_FILES (default 8) files of BENCH_DASK_GB (default 1) GB each of the
    reference stream (2-bit x 4 channels, 8224-byte frames, 125000 frames/s, EDV 1 so the
    1.024 GHz rate is in the headers), consecutive start seconds:
    (a) ``vdifrec.dask.spectrum(files, nfft=1024)`` on a LocalCluster of 2 worker processes
        (1 thread each), started before the timing;
    (b) the baseline, one process: ``vdifrec.spectrum(vdifrec.open(f), nfft=1024)`` per file;
    (c) baseband's reader + numpy.fft on BENCH_DASK_BASEBAND_FRACTION (default 1/8) of the
        first file (rates per sample).
    (a) and (b) must give the same spectra (rtol 1e-6), or the benchmark fails. Target:
    (a)/(b) >= 0.9, the cost of distributing over 2 cores. Medians of BENCH_DASK_REPEATS (3),
    each side warmed up on the first file; every file is read once before any timing, so both
    sides read from the page cache.
(2) Fringe test of three stations of BENCH_DASK_FRINGE_SECONDS (default 1) each, one sky,
    delays 0, 7, 3 samples: ``vdifrec.dask.fringe_test`` (whole overlap, 3 baselines) on the
    threaded scheduler and on the same LocalCluster, against ``vdifrec.fringe`` of one baseline
    over the same samples in one process; rates are samples correlated per second per
    baseline. The delays found must be 7, 3, -4 and detected, or the benchmark fails. One
    timed run each (BENCH_DASK_FRINGE_REPEATS), after a warm-up on a short stretch.

Files go to a temporary folder under BENCH_DIR (else the system's), removed at the end.
At the default sizes: about 11 GB of disk and of page cache, under 10 minutes on 2 CPUs.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

import vdifrec

from common import env_float, env_int, median_seconds, report

NFFT = 1024
FPS = 125_000
FRAME_SIZE = 8224
RATE = 1.024e9  # samples per second per channel: 8192-byte payloads, 4 channels x 2 bits, 125000 frames/s
CHANNELS = 4
SEG = 2 * NFFT  # samples per FFT (real data)
WORKERS = 2
#: (delay in samples, own seed) per station; every station at the same start second.
STATIONS = {"A": (0, 101), "B": (7, 102), "C": (3, 103)}
EXPECTED_DELAYS = {"A-B": 7, "A-C": 3, "B-C": -4}


def cpus() -> int:
    return len(os.sched_getaffinity(0))


def rust_threads(ffts: int) -> int:
    """Threads vdifrec's Rust spectrum/cross code runs one call of `ffts` FFTs on (as
    `parallel` in src/analysis/spectrum.rs decides: the CPUs, at least 8 FFTs a thread)."""
    return max(1, min(cpus(), ffts // 8))


def generate_one(path: str, seconds: float, options: dict[str, Any]) -> None:
    """In a pool process: one file (vdifrec.generate holds one core; files are made in parallel)."""
    vdifrec.generate(path, seconds=seconds, fps=FPS, frame_size=FRAME_SIZE, ref_epoch=53, edv=1, **options)


def generate_all(jobs: list[tuple[str, float, dict[str, Any]]]) -> None:
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=cpus(), mp_context=ctx) as pool:
        for f in [pool.submit(generate_one, *job) for job in jobs]:
            f.result()


def read_once(paths: list[str]) -> int:
    """Reads every file through, so that both sides of each comparison read from the page cache."""
    total = 0
    buf = bytearray(16 << 20)
    for p in paths:
        with open(p, "rb", buffering=0) as fh:
            while n := fh.readinto(buf):
                total += n
    return total


def mem_available() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def worker_rss(client: Any) -> dict[str, float]:
    """Each worker's resident memory in GB: the files its readers have mapped count in it."""

    def rss() -> float:
        with open("/proc/self/status") as fh:
            kb = next(line.split()[1] for line in fh if line.startswith("VmRSS:"))
        return int(kb) * 1024 / 1e9

    return dict(client.run(rss))


def baseband_spectrum(path: str, samples: int) -> float:
    """Seconds for baseband's reader + numpy.fft to make the spectrum of the first `samples`."""
    from baseband import vdif  # type: ignore[import-untyped]

    t0 = time.perf_counter()
    with vdif.open(path, "rs") as bb:
        acc = np.zeros((NFFT, CHANNELS))
        done = 0
        while done < samples:
            chunk = bb.read(min(SEG * 256, samples - done))
            x = chunk.reshape(-1, SEG, CHANNELS)
            acc += (np.abs(np.fft.rfft(x, axis=1)[:, :NFFT]) ** 2).sum(axis=0)
            done += len(chunk)
    return time.perf_counter() - t0


def check_same_spectra(dist: list[Any], single: list[Any], files: list[str]) -> None:
    for f, a, b in zip(files, dist, single, strict=True):
        name = os.path.basename(f)
        if a.nint != b.nint or a.power.shape != b.power.shape:
            raise RuntimeError(f"{name}: vdifrec.dask.spectrum took {a.nint} FFTs, shape {a.power.shape}; "
                               f"vdifrec.spectrum {b.nint}, shape {b.power.shape}: the distributed plan is wrong")
        if not np.allclose(a.power, b.power, rtol=1e-6, atol=0):
            worst = float(np.max(np.abs(a.power / b.power - 1)))
            raise RuntimeError(f"{name}: vdifrec.dask.spectrum and vdifrec.spectrum differ by up to {worst:.3g} "
                               "(relative; 1e-6 allowed): the distributed sum is wrong")


def check_fringes(df: Any, how: str) -> None:
    found = {row.baseline: (int(row.delay_samples), bool(row.detected), float(row.snr)) for row in df.itertuples()}
    want = {b: (d, True) for b, d in EXPECTED_DELAYS.items()}
    if {b: v[:2] for b, v in found.items()} != want:
        raise RuntimeError(f"fringe_test ({how}): (delay, detected, snr) by baseline {found}, expected delays "
                           f"{EXPECTED_DELAYS}, all detected")


def spectrum_part(files: list[str], client: Any, repeats: int) -> dict[str, float]:
    import vdifrec.dask as vd

    size = sum(os.path.getsize(f) for f in files)
    with vdifrec.open(files[0]) as fh:
        samples_per_file = fh.shape[0] // SEG * SEG

    def single(paths: list[str]) -> list[Any]:
        out = []
        for f in paths:
            with vdifrec.open(f) as fh:
                out.append(vdifrec.spectrum(fh, nfft=NFFT))
        return out

    # Warm-ups on the first file: worker imports, readers, FFT plans.
    vd.spectrum(files[:1], nfft=NFFT)
    single(files[:1])
    results: dict[str, list[Any]] = {}

    def run(name: str, fn: Callable[[list[str]], list[Any]]) -> Callable[[], None]:
        def go() -> None:
            results[name] = fn(files)

        return go

    t_single = median_seconds(run("single", single), repeats=repeats, warmup=0)
    t_dist = median_seconds(run("dist", lambda p: vd.spectrum(p, nfft=NFFT)), repeats=repeats, warmup=0)
    check_same_spectra(results["dist"], results["single"], files)
    samples = sum(s.nint for s in results["single"]) * SEG * CHANNELS  # those the FFTs took, all channels
    rss = worker_rss(client)

    fraction = env_float("BENCH_DASK_BASEBAND_FRACTION", 0.125)
    bb_samples = max(SEG, int(samples_per_file * fraction) // SEG * SEG)
    t_bb = baseband_spectrum(files[0], bb_samples)
    bb_bytes = bb_samples / samples_per_file * os.path.getsize(files[0])

    dist, one, bb = samples / t_dist, samples / t_single, bb_samples * CHANNELS / t_bb
    ffts_per_task = min(vd.DEFAULT_CHUNK_FFTS, samples_per_file // SEG)
    ffts_per_file = samples_per_file // SEG
    gb = size / len(files) / 1e9
    report(
        f"spectrum of {len(files)} files x {gb:.3g} GB of 2-bit x 4-channel VDIF, nfft {NFFT} ({cpus()} CPUs; "
        f"median of {repeats}, page cache warm)",
        [
            (f"(a) vdifrec.dask.spectrum, {WORKERS} workers x 1 thread", size / t_dist / 1e9, "GB/s"),
            ("(a) in samples (4 channels)", dist / 1e9, "Gsamples/s"),
            ("(b) vdifrec.spectrum per file, one process", size / t_single / 1e9, "GB/s"),
            ("(b) in samples", one / 1e9, "Gsamples/s"),
            (f"(c) baseband + numpy.fft, {fraction:g} of one file", bb_bytes / t_bb / 1e9, "GB/s"),
            ("(c) in samples", bb / 1e9, "Gsamples/s"),
            ("(a) wall time", t_dist, "s"),
            ("(b) wall time", t_single, "s"),
            ("largest worker RSS after (a)", max(rss.values()), "GB"),
        ],
        [
            ("(a) / (b): cost of distribution", dist / one, ">= 0.9"),
            ("(a) / (c)", dist / bb, "none: for scale"),
        ],
    )
    print(
        f"  threads: (a) {WORKERS} processes x 1 task at a time, each task's Rust spectrum on its own thread "
        f"({ffts_per_task} FFTs a task): {WORKERS} busy threads on {cpus()} CPUs; (b) one process, Rust on "
        f"{rust_threads(ffts_per_file)} threads; (c) one thread (baseband and numpy.fft)"
    )
    print("  (a) and (b) give the same spectra (rtol 1e-6); every file was read once before the timings")
    return {"dist": dist, "single": one, "baseband": bb}


def fringe_part(stations: dict[str, str], client: Any) -> dict[str, float]:
    import dask
    from dask.system import CPU_COUNT

    import vdifrec.dask as vd

    repeats = env_int("BENCH_DASK_FRINGE_REPEATS", 1)
    frames: dict[str, Any] = {}

    def dask_run(how: str) -> Callable[[], None]:
        def go() -> None:
            frames[how] = vd.fringe_test(stations, nfft=NFFT)

        return go

    def tasks_here() -> int:
        """Tasks run in this process (the threaded scheduler's), not in the cluster's workers."""
        return sum(vd.files_read().values())

    # On the cluster (the client is the default scheduler), then on the threaded scheduler.
    warm = min(0.01, float(os.environ.get("BENCH_DASK_FRINGE_SECONDS", 1.0)) / 2)
    here = tasks_here()
    vd.fringe_test(stations, seconds=warm, nfft=NFFT)
    t_cluster = median_seconds(dask_run("cluster"), repeats=repeats, warmup=0)
    if tasks_here() != here:
        raise RuntimeError("fringe_test meant for the LocalCluster ran tasks in this process")
    with dask.config.set(scheduler="threads"):
        vd.fringe_test(stations, seconds=warm, nfft=NFFT)
        t_threads = median_seconds(dask_run("threads"), repeats=repeats, warmup=0)
    if tasks_here() == here:
        raise RuntimeError("fringe_test meant for the threaded scheduler ran no task in this process")
    check_fringes(frames["cluster"], "LocalCluster")
    check_fringes(frames["threads"], "threaded scheduler")
    for col in ("delay_samples", "amplitude", "snr"):
        if list(frames["cluster"][col]) != list(frames["threads"][col]):
            raise RuntimeError(f"fringe_test: {col} differs between the LocalCluster and the threaded scheduler")

    df = frames["threads"]
    baselines = len(df)
    first = df.iloc[0]
    ffts = round(float(first["seconds"]) * RATE / SEG)
    samples = ffts * SEG  # per baseline: the whole overlap, cut into equal stretches
    fringe: dict[str, Any] = {}
    with vdifrec.open(stations[first["station_a"]]) as ra, vdifrec.open(stations[first["station_b"]]) as rb:
        vdifrec.fringe(ra, rb, nfft=NFFT, nint=min(ffts, 1000))

        def single() -> None:
            fringe["f"] = vdifrec.fringe(ra, rb, nfft=NFFT, nint=ffts)

        t_single = median_seconds(single, repeats=repeats, warmup=0)
    f = fringe["f"]
    if f.delay_samples != EXPECTED_DELAYS[first["baseline"]] or not f.detected:
        raise RuntimeError(f"vdifrec.fringe {first['baseline']}: delay {f.delay_samples}, detected {f.detected}; "
                           f"expected {EXPECTED_DELAYS[first['baseline']]}, detected")

    threads, cluster, one = baselines * samples / t_threads, baselines * samples / t_cluster, samples / t_single
    rows: list[tuple[str, float, str]] = [
        (f"fringe_test, threaded scheduler ({baselines} baselines)", t_threads, "s"),
        (f"fringe_test, LocalCluster {WORKERS} x 1 ({baselines} baselines)", t_cluster, "s"),
        (f"vdifrec.fringe {first['baseline']}, one process", t_single, "s"),
        ("threaded: per baseline", threads / 1e9, "Gsamples/s"),
        ("LocalCluster: per baseline", cluster / 1e9, "Gsamples/s"),
        ("vdifrec.fringe: one baseline", one / 1e9, "Gsamples/s"),
    ]
    rows += [(f"{r.baseline} delay (SNR {r.snr:.0f})", float(r.delay_samples), "samples") for r in df.itertuples()]
    report(
        f"fringe test of {len(stations)} stations, {samples / RATE:.3g} s each correlated, input 0, nfft {NFFT} "
        f"({cpus()} CPUs; {'median of ' + str(repeats) if repeats > 1 else 'one run'})",
        rows,
        [
            ("threaded / vdifrec.fringe, per baseline", threads / one, "none set"),
            ("LocalCluster / vdifrec.fringe, per baseline", cluster / one, "none set"),
        ],
    )
    print(f"  per baseline: {baselines} baselines x {samples} samples correlated / wall time (fringe_test's "
          "alignment and delay/rate search in the client included); vdifrec.fringe on the same samples")
    print(f"  threads: threaded scheduler {CPU_COUNT} tasks at a time, each on its own thread; "
          f"LocalCluster {WORKERS} processes x 1 task; vdifrec.fringe {rust_threads(ffts)} Rust "
          f"threads; on {cpus()} CPUs")
    print("  delays 7, 3, -4, all detected, on both schedulers and by vdifrec.fringe")
    return {"threads": threads, "cluster": cluster, "single": one}


def main() -> dict[str, float]:
    import distributed

    gb = env_float("BENCH_DASK_GB", 1.0)
    nfiles = env_int("BENCH_DASK_FILES", 8)
    repeats = env_int("BENCH_DASK_REPEATS", 3)
    fringe_seconds = env_float("BENCH_DASK_FRINGE_SECONDS", 1.0)
    started = time.perf_counter()
    frames = int(gb * 1e9 / FRAME_SIZE)
    with tempfile.TemporaryDirectory(prefix="bench-dask-", dir=os.environ.get("BENCH_DIR")) as tmp:
        files = [os.path.join(tmp, f"spec{k}.vdif") for k in range(nfiles)]
        stations = {name: os.path.join(tmp, f"{name}.vdif") for name in STATIONS}
        jobs: list[tuple[str, float, dict[str, Any]]] = [
            (f, frames / FPS, {"start_second": 1000 + k, "seed": k + 1}) for k, f in enumerate(files)
        ]
        jobs += [
            (stations[name], fringe_seconds,
             {"start_second": 2000, "correlation": 0.5, "delay": delay, "sky_seed": 42, "seed": seed,
              "tone_amplitude": 0})
            for name, (delay, seed) in STATIONS.items()
        ]
        t0 = time.perf_counter()
        generate_all(jobs)
        t_gen = time.perf_counter() - t0
        total = read_once(files + list(stations.values()))
        print(f"\n(generated {total / 1e9:.2f} GB in {t_gen:.0f} s with {cpus()} processes, read once since)")
        if total > mem_available():
            print(f"  WARNING: {total / 1e9:.1f} GB of files, {mem_available() / 1e9:.1f} GB of memory available: "
                  "they cannot all stay in the page cache, so the figures include disk reads")
        # Dask's default memory limit holds: each task lets go of the file pages it touched, so
        # a worker's RSS does not grow with the files it reads (the largest RSS is printed).
        with distributed.LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=WORKERS, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0",
        ) as cluster, distributed.Client(cluster) as client:  # type: ignore[no-untyped-call]
            client.wait_for_workers(WORKERS)
            out = spectrum_part(files, client, repeats)
            out.update({f"fringe_{k}": v for k, v in fringe_part(stations, client).items()})
    print(f"\n(bench_dask: {time.perf_counter() - started:.0f} s in all, files removed)")
    return out


if __name__ == "__main__":
    main()
