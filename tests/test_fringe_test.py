"""The station-to-station fringe test (`vdifrec.dask.fringe_test`, `vdifrec fringe-test`) and the
fringe verdict and tone exclusion of `vdifrec.fringe` / `vdifrec fringe`.

The "stations" are generated under one sky (`vdifrec generate --sky-seed`): each sees the same
noise at the same VDIF time, `--delay` samples late, plus its own noise; their recordings start
at different seconds. The delays are known by construction and the correlation is checked
against numpy's, on samples decoded by baseband.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from baseband import vdif

import vdifrec

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
import vdifrec.dask as vd  # noqa: E402 - after the skip

FPS = 2000
RATE = FPS * 8192  # samples per second per channel: 8192-byte payloads of 4 channels x 2 bits
RHO = 0.5
#: (start second, seconds, delay in samples, own seed) per station.
STATIONS = {"Kv": (1000, 1.5, 0, 11), "Ku": (1000, 1.5, 7, 12), "Ky": (1001, 1.0, 3, 13)}


def make_station(cli, path: Path, start: int, seconds: float, delay: int, seed: int, *, sky: int = 42,
                 station: str = "Kv", extra: tuple[str, ...] = ()) -> Path:
    """A station's recording; no tone, so that numpy's correlation of the samples is the
    fringe's amplitude (the tone tests are below)."""
    r = cli("generate", str(path), "--fps", str(FPS), "--seconds", str(seconds), "--edv", "1",
            "--ref-epoch", "53", "--start-second", str(start), "--correlation", str(RHO), "--delay", str(delay),
            "--sky-seed", str(sky), "--seed", str(seed), "--station", station, "--tone-amplitude", "0", *extra)
    assert r.returncode == 0, r.stderr
    return path


@pytest.fixture(scope="module")
def stations(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from conftest import run_cli

    d = tmp_path_factory.mktemp("stations")
    return {name: make_station(run_cli, d / f"{name}.vdif", s, secs, delay, seed, station=name)
            for name, (s, secs, delay, seed) in STATIONS.items()}


def numpy_correlation(a: Path, b: Path, skip_a: int, skip_b: int, n: int, lag: int) -> float:
    """The correlation coefficient of input 0 of a and b, b `lag` samples behind a, from
    samples decoded by baseband."""
    with vdif.open(str(a), "rs") as fa, vdif.open(str(b), "rs") as fb:
        # b[n + lag] pairs with a[n]: the later of the two starts where the other is at 0.
        fa.seek(skip_a + max(-lag, 0))
        fb.seek(skip_b + max(lag, 0))
        x = fa.read(n)[:, 0].astype(np.float64)
        y = fb.read(n)[:, 0].astype(np.float64)
    return float(np.mean(x * y) / math.sqrt(np.mean(x * x) * np.mean(y * y)))


@pytest.mark.slow
def test_three_stations_show_their_delays_and_correlation_whatever_their_start(stations: dict[str, Path]) -> None:
    df = vd.fringe_test(stations, seconds=0.5, nfft=256)
    assert list(df["baseline"]) == ["Kv-Ku", "Kv-Ky", "Ku-Ky"]
    for row in df.itertuples():
        (sa, _, da, _), (sb, _, db, _) = STATIONS[row.station_a], STATIONS[row.station_b]
        assert row.delay_samples == db - da
        assert row.delay_seconds == pytest.approx((db - da) / RATE, rel=1e-12)
        assert row.detected and row.snr > 50
        # Aligned by VDIF time: the overlap starts at the later station's first second.
        assert row.start == max(sa, sb) + vdifrec.Header(ref_epoch=53).unix_time()[0]
        assert row.seconds == pytest.approx(0.5, abs=1e-3)
        # No rate: the peak sits in the zero-rate bin.
        assert row.fringe_rate == 0.0
        # The amplitude is numpy's correlation coefficient of the same samples.
        n = int(row.seconds * RATE)
        oracle = numpy_correlation(stations[row.station_a], stations[row.station_b],
                                   (max(sa, sb) - sa) * RATE, (max(sa, sb) - sb) * RATE, n - 64, db - da)
        assert row.amplitude == pytest.approx(oracle, abs=0.01)
        # Two-bit quantisation of both keeps about 0.88 of the analogue RHO.
        assert row.amplitude == pytest.approx(0.88 * RHO, abs=0.02)


def test_a_station_of_another_sky_shows_no_fringe(stations: dict[str, Path], tmp_path: Path, cli) -> None:
    other = make_station(cli, tmp_path / "Kx.vdif", 1000, 1.0, 0, 14, sky=43, station="Kx")
    df = vd.fringe_test({"Kv": stations["Kv"], "Kx": other}, nfft=256)
    (row,) = df.itertuples()
    assert not row.detected and row.snr < 7
    assert row.seconds == pytest.approx(1.0, abs=1e-3)


def test_clock_offsets_max_delay_and_channels(stations: dict[str, Path]) -> None:
    pair = {"Kv": stations["Kv"], "Ku": stations["Ku"]}
    # Ku's stamps 7 samples ahead of the truth: taken off, the delay left is 0.
    (row,) = vd.fringe_test(pair, seconds=0.3, nfft=256, clock_offset={"Ku": 7 / RATE}).itertuples()
    assert row.delay_samples == 0 and row.detected
    (row,) = vd.fringe_test(pair, seconds=0.3, nfft=256, clock_offset={"Kv": -7 / RATE}).itertuples()
    assert row.delay_samples == 0 and row.detected
    # Searched to ±7 samples the fringe is found; to ±3 only a sidelobe of it (real data's
    # lag function falls off as 1/lag around the peak), a fraction of its amplitude.
    (row,) = vd.fringe_test(pair, seconds=0.3, nfft=256, max_delay=7).itertuples()
    assert row.delay_samples == 7
    (near,) = vd.fringe_test(pair, seconds=0.3, nfft=256, max_delay=3).itertuples()
    assert abs(near.delay_samples) <= 3 and near.amplitude < row.amplitude / 4
    # Every input carries the sky: each channel shows it, and the best is reported.
    (row,) = vd.fringe_test(pair, seconds=0.3, nfft=256, channels=[1, 3], stretches=1).itertuples()
    assert row.channel in (1, 3) and set(row.snr_by_channel) == {1, 3}
    assert row.delay_samples == 7 and row.fringe_rate is None
    assert all(s > 50 for s in row.snr_by_channel.values())


def test_bad_arguments_name_themselves(stations: dict[str, Path]) -> None:
    pair = {"Kv": stations["Kv"], "Ku": stations["Ku"]}
    for kwargs, name in [
        (dict(stations={"Kv": stations["Kv"]}), "stations"),
        (dict(stations=pair, clock_offset={"Kq": 1.0}), "clock_offset"),
        (dict(stations=pair, channels=[4]), "channels"),
        (dict(stations=pair, max_delay=-1), "max_delay"),
        (dict(stations=pair, seconds=0.0), "seconds"),
        (dict(stations=pair, stretches=0), "stretches"),
        (dict(stations=pair, snr_threshold=0), "snr_threshold"),
    ]:
        with pytest.raises(ValueError, match=name):
            vd.fringe_test(**kwargs)


@pytest.mark.slow
def test_a_station_of_another_time_is_a_row_saying_so_and_the_others_are_correlated(
        stations: dict[str, Path], tmp_path: Path, cli) -> None:
    late = make_station(cli, tmp_path / "Kz.vdif", 1010, 0.5, 0, 16, station="Kz")
    df = vd.fringe_test({"Kv": stations["Kv"], "Ku": stations["Ku"], "Kz": late}, seconds=0.2, nfft=256)
    rows = {r.baseline: r for r in df.itertuples()}
    assert rows["Kv-Ku"].detected and rows["Kv-Ku"].delay_samples == 7 and rows["Kv-Ku"].note == ""
    for name in ("Kv-Kz", "Ku-Kz"):
        assert not rows[name].detected and rows[name].fringe is None and rows[name].seconds == 0
        assert rows[name].note.startswith("no overlap in time")
    r = cli("fringe-test", str(stations["Kv"]), str(stations["Ku"]), str(late), "--seconds", "0.2", "--nfft", "256")
    assert r.returncode == 1
    assert "Kv-Kz      no data: no overlap in time" in r.stdout


def drop_frames(src: Path, dst: Path, first: int, count: int, frame_size: int = 8224) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: first * frame_size] + data[(first + count) * frame_size :])
    return dst


def test_frames_lost_shift_nothing_and_their_stretches_are_left_out(stations: dict[str, Path], tmp_path: Path) -> None:
    # Ku loses 10 frames early on and 40 in the middle. Counted by position, every sample
    # after a gap would be out of step with Kv; found by time, only the stretches holding a
    # gap are left out.
    lossy = drop_frames(stations["Ku"], tmp_path / "Ku_a.vdif", 10, 10)
    lossy = drop_frames(lossy, tmp_path / "Ku_b.vdif", 1000, 40)
    whole = vd.fringe_test({"Kv": stations["Kv"], "Ku": stations["Ku"]}, nfft=256).iloc[0]
    (row,) = vd.fringe_test({"Kv": stations["Kv"], "Ku": lossy}, nfft=256).itertuples()
    assert row.detected and row.delay_samples == 7 and row.fringe_rate == 0.0
    assert row.amplitude == pytest.approx(whole.amplitude, abs=0.01)
    # 16 stretches of 1.5 s: the two gaps fall in two of them.
    assert row.note == "2 of 16 stretches left out: frames missing"
    assert row.seconds == pytest.approx(whole.seconds * 14 / 16, rel=1e-9)
    # Every stretch lacking frames: a row that says so.
    (row,) = vd.fringe_test({"Kv": stations["Kv"], "Ku": lossy}, nfft=256, seconds=0.2, stretches=1).itertuples()
    assert row.fringe is None and not row.detected and row.note.startswith("every stretch")


@pytest.mark.slow
def test_on_a_local_cluster_the_same_rows_and_the_cli(stations: dict[str, Path], tmp_path: Path, cli) -> None:
    here = vd.fringe_test(stations, seconds=0.25, nfft=256)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  host="127.0.0.1") as cluster:
        with distributed.Client(cluster):
            there = vd.fringe_test(stations, seconds=0.25, nfft=256)
        for col in ("delay_samples", "amplitude", "phase", "snr", "detected"):
            assert list(there[col]) == list(here[col]), col
        # The command line, on the same cluster, with a plot per baseline.
        plot = tmp_path / "lags.png"
        r = cli("fringe-test", *map(str, stations.values()), "--seconds", "0.25", "--nfft", "256",
                "--scheduler", cluster.scheduler_address, "--plot", str(plot))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for row, line in zip(here.itertuples(), lines[1:4]):
        assert line.split()[:2] == [row.baseline, str(row.delay_samples)] and "FRINGE DETECTED" in line
    assert lines[4].startswith("3 baseline(s), 3 with fringes")
    assert sorted(p.name for p in tmp_path.glob("lags-*.png")) == ["lags-Ku-Ky.png", "lags-Kv-Ku.png", "lags-Kv-Ky.png"]


@pytest.mark.slow
def test_cli_json_and_exit_status_when_a_baseline_has_no_fringe(stations: dict[str, Path], tmp_path: Path, cli) -> None:
    other = make_station(cli, tmp_path / "Kx.vdif", 1000, 0.5, 0, 15, sky=44, station="Kx")
    r = cli("fringe-test", str(stations["Kv"]), str(stations["Ku"]), str(other), "--nfft", "256", "--json")
    assert r.returncode == 1, r.stderr
    rows = {row["baseline"]: row for row in json.loads(r.stdout)}
    assert set(rows) == {"Kv-Ku", "Kv-Kx", "Ku-Kx"}
    assert rows["Kv-Ku"]["detected"] and rows["Kv-Ku"]["delay_samples"] == 7
    assert not rows["Kv-Kx"]["detected"] and not rows["Ku-Kx"]["detected"]
    # Names from the headers; --names overrides them.
    r = cli("fringe-test", str(stations["Kv"]), str(stations["Ku"]), "--names", "A,B", "--seconds", "0.1", "--nfft", "256")
    assert r.returncode == 0 and r.stdout.splitlines()[1].startswith("A-B ")


@pytest.mark.slow
def test_a_common_tone_is_left_out_and_no_longer_hides_a_weak_fringe(tmp_path: Path, cli) -> None:
    # Two inputs of one file: noise plus a strong tone common to both, and a weak correlation
    # (0.005, 5 samples apart). Kept, the tone's flat lag function buries the fringe.
    path = tmp_path / "tone.vdif"
    r = cli("generate", str(path), "--nchan", "2", "--fps", str(FPS), "--seconds", "1", "--edv", "1",
            "--correlation", "0.005", "--delay", "5", "--tone-amplitude", "1")
    assert r.returncode == 0, r.stderr
    with vdifrec.open(path) as fh:
        kept = vdifrec.fringe(fh, exclude_tones=False)
        fh.seek(0)
        left = vdifrec.fringe(fh)
        tone = vdifrec.find_tones(vdifrec.spectrum(fh, nfft=1024))[0]
    assert not kept.detected and kept.snr < 3 and len(kept.excluded_channels) == 0
    assert left.detected and left.delay_samples == 5
    # The channels left out are the tone's (and its nearest neighbours), nothing else.
    at = int(np.argmin(np.abs(left.freq - tone.frequency)))
    assert at in left.excluded_channels
    assert all(abs(c - at) < 4 for c in left.excluded_channels)
    out = cli("fringe", str(path)).stdout
    assert "FRINGE DETECTED" in out and "with tones left out" in out
    assert "no fringe" in cli("fringe", str(path), "--keep-tones").stdout


@pytest.mark.slow
def test_noise_with_a_common_tone_alone_is_no_fringe(tmp_path: Path, cli) -> None:
    # The case that used to print "delay -621 samples, SNR 1.0" and nothing more.
    path = tmp_path / "noise.vdif"
    assert cli("generate", str(path), "--nchan", "2", "--fps", str(FPS), "--seconds", "1", "--edv", "1").returncode == 0
    with vdifrec.open(path) as fh:
        f = vdifrec.fringe(fh)
    assert not f.detected and f.snr < 7 and len(f.excluded_channels) >= 1
    r = cli("fringe", str(path))
    assert r.returncode == 0 and r.stdout.splitlines()[-1].startswith("no fringe (SNR ")


@pytest.mark.slow
def test_hosts_place_each_files_tasks_on_the_workers_of_its_host(tmp_path: Path) -> None:
    files = []
    for k in range(2):
        p = tmp_path / f"rec{k}.vdif"
        vdifrec.generate(p, seconds=0.1, fps=FPS, edv=1, ref_epoch=53, start_second=1000, seed=k + 1)
        files.append(str(p))
    workers = {f"worker-{h}": {"cls": distributed.Nanny,
                               "options": {"resources": {h: 1}, "nthreads": 1, "host": "127.0.0.1",
                                           "dashboard_address": ":0"}}
               for h in ("rec0", "rec1")}
    scheduler = {"cls": distributed.Scheduler, "options": {"host": "127.0.0.1", "dashboard_address": ":0"}}
    # Placement is a preference: an idle worker may steal a task from a busy one. Without
    # stealing, each task runs where the hint puts it, which is what is tested here.
    with dask.config.set({"distributed.scheduler.work-stealing": False}), \
            distributed.SpecCluster(workers=workers, scheduler=scheduler) as cluster, distributed.Client(cluster) as client:
        client.wait_for_workers(2, timeout=60)
        host_of = {addr: next(iter(w["resources"])) for addr, w in client.scheduler_info(n_workers=-1)["workers"].items()}

        def read_by_host() -> dict[str, dict[str, int]]:
            return {host_of[addr]: counts for addr, counts in client.run(vd.files_read).items()}

        for hosts in ({files[0]: "rec0", files[1]: "rec1"}, {files[0]: "rec1", files[1]: "rec0"}):
            before = read_by_host()
            got = vd.spectrum(files, nfft=64, chunk_ffts=16, hosts=hosts)
            with vdifrec.open(files[0]) as fh:
                want = vdifrec.spectrum(fh, nfft=64)
            np.testing.assert_allclose(got[0].power, want.power, rtol=1e-6)
            after = read_by_host()
            # Every task of a file ran on its host's worker, and there were many.
            for path, host in hosts.items():
                new = {p: n - before.get(host, {}).get(p, 0) for p, n in after[host].items()}
                assert {p for p, n in new.items() if n} == {path} and new[path] > 10, (host, new)
