"""`vdifrec watch` on several recorders (a station network) and `vdifrec.RemoteStatuses`.

The recorders are real (`vdifrec.Recorder` with a status endpoint on 127.0.0.1); the watch is a
subprocess whose lines a thread collects as they come, so that each step waits (bounded) for
the line that tells what it needs, never for a time. The one-recorder line is in test_status.

Where the host grants the recorder a small socket buffer the kernel may drop frames: the loss
expected then follows from what it dropped (conftest.delivered).
"""

from __future__ import annotations

import http.server
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import FILL_SLACK, around, delivered, run_cli

import vdifrec

START = dict(ref_epoch=53, start_second=4000)
TIMEOUT = 60.0
ROW = re.compile(
    r"^\d\d:\d\d:\d\d  (?P<address>\S+)\s+(?P<state>[a-z]+)\s+scan (?P<scan>\S+)  (?P<gbps>\d+\.\d\d) Gbit/s  "
    r"lost network (?P<network>\d+) kernel (?P<kernel>\d+) ring (?P<ring>\d+) malformed (?P<malformed>\d+)  "
    r"disk (?P<disk>\S+)$"
)
NO_ANSWER = re.compile(r"^\d\d:\d\d:\d\d  (?P<address>\S+)\s+!!! NO ANSWER: (?P<why>.+) !!!$")
CAUSES = ("network", "kernel", "ring", "malformed")


def recorder(status_listen: str = "127.0.0.1:0") -> vdifrec.Recorder:
    return vdifrec.Recorder(port=0, ring="16MiB", frame_size=8224, fps=2000, status_listen=status_listen).start()


def address(rec: vdifrec.Recorder) -> str:
    assert rec.status_address is not None
    return "%s:%d" % rec.status_address


def free_tcp_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on (free at the time of asking)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class Watch:
    """`vdifrec watch ARGS` in a subprocess; `lines` grows as it prints."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.err = tmp_path / "watch.err"
        with self.err.open("w") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "vdifrec.cli", "watch", *args],
                                         stdout=subprocess.PIPE, stderr=err, text=True)
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                with self._changed:
                    self.lines.append(line.rstrip("\n"))
                    self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, what: str, done: Callable[[list[str]], bool], timeout: float = TIMEOUT) -> None:
        """Waits (bounded) until `done(lines)`; fails, showing the lines, if it never is."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not done(list(self.lines)):
                left = deadline - time.monotonic()
                assert left > 0 and self.proc.poll() is None, f"watch never showed {what}:\n" + "\n".join(self.lines)
                self._changed.wait(min(left, 0.2))

    def end(self, sig: int | None = None) -> int:
        """Ends the watch (with `sig`, or by its --count) and returns its exit status."""
        if sig is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(TIMEOUT)
        self._reader.join(TIMEOUT)
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(TIMEOUT)
        self._reader.join(TIMEOUT)


def rows(lines: list[str]) -> list[tuple[str, re.Match[str]]]:
    """The per-recorder lines, in order: ("row", match) for an answer, ("silent", match) for none."""
    out = []
    for line in lines:
        if m := ROW.match(line):
            out.append(("row", m))
        elif m := NO_ANSWER.match(line):
            out.append(("silent", m))
    return out


def of(lines: list[str], who: str, kind: str | None = None) -> list[re.Match[str]]:
    return [m for k, m in rows(lines) if m["address"] == who and (kind is None or k == kind)]


def after_first_silent(lines: list[str], who: str) -> list[tuple[str, re.Match[str]]]:
    """The per-recorder lines from `who`'s first 'NO ANSWER' on (none if it has not come)."""
    seen = rows(lines)
    first = next((i for i, (k, m) in enumerate(seen) if k == "silent" and m["address"] == who), len(seen))
    return seen[first:]


def loss(m: re.Match[str]) -> dict[str, int]:
    return {k: int(m[k]) for k in CAUSES}


@pytest.fixture
def cleanup() -> Iterator[list[Callable[[], object]]]:
    """Things to stop whatever the test's outcome, last first."""
    todo: list[Callable[[], object]] = []
    yield todo
    for stop in reversed(todo):
        stop()


@pytest.mark.slow
def test_watch_many_recorders_one_stops_answering_and_comes_back(tmp_path, cleanup) -> None:
    a, b = recorder(), recorder()
    cleanup += [a.stop, lambda: b.running and b.stop()]
    A, B = address(a), address(b)
    watch = Watch(tmp_path, A, B, "--every", "0.2", "--count", "2000")
    cleanup.append(watch.stop)
    watch.wait_for("two answers from each", lambda ls: len(of(ls, A, "row")) >= 2 and len(of(ls, B, "row")) >= 2)

    # Polls while b stops may still be answered (state stopping, then stopped) and one may meet
    # its listener closing (reset rather than refused): from here to b's first silent line.
    answered_before_stop = len(of(list(watch.lines), B, "row"))
    b.stop()
    watch.wait_for(f"{B} not answering twice, and {A} answering on after that",
                   lambda ls: [(k, m["address"]) for k, m in after_first_silent(ls, B)][:4]
                   == [("silent", B), ("row", A), ("silent", B), ("row", A)])
    # The same status address again, a new run behind it.
    b = recorder(status_listen=B)
    # Both lines of that poll (answers again, restarted) before Ctrl-C, which may come between them.
    watch.wait_for(f"{B} answering again", lambda ls: any(" answers again" in ln for ln in ls)
                   and any(f"!!! RESTARTED at {B}" in ln for ln in ls)
                   and any(k == "row" and m["address"] == B for k, m in after_first_silent(ls, B)))
    assert watch.end(signal.SIGINT) == 0  # Ctrl-C ends it cleanly
    assert watch.err.read_text() == ""
    lines = watch.lines

    # One line per recorder per poll, in the order given, answered or not; the stopped one
    # says so in its line each poll; the other goes on answering.
    seen = rows(lines)
    assert [m["address"] for _, m in seen] == [(A, B)[i % 2] for i in range(len(seen))], "\n".join(lines)
    assert of(lines, A, "silent") == []
    kinds = [k for k, m in seen if m["address"] == B]
    first_silent = kinds.index("silent")
    back = first_silent + kinds[first_silent:].index("row")
    assert kinds == ["row"] * first_silent + ["silent"] * (back - first_silent) + ["row"] * (len(kinds) - back)
    b_rows = of(lines, B, "row")
    stopping = b_rows[answered_before_stop:first_silent]
    assert all(m["state"] in ("waiting", "stopping", "stopped") for m in stopping)
    assert all(m["state"] == "waiting" and m["scan"] == "-" and m["disk"] == "-" and loss(m) == dict.fromkeys(CAUSES, 0)
               for m in of(lines, A, "row") + b_rows[:answered_before_stop] + b_rows[first_silent:])
    assert all(m["scan"] == "-" and loss(m) == dict.fromkeys(CAUSES, 0) for m in stopping)
    b_silent = of(lines, B, "silent")
    assert all(f"http://{B}/status" in m["why"] for m in b_silent)
    assert all("Connection refused" in m["why"] for m in b_silent[1:])
    # Marked back when it answers again: how long it was silent, and that a new run answers.
    silent = back - first_silent
    again = [ln for ln in lines if " answers again" in ln]
    assert len(again) == 1 and re.fullmatch(rf"\d\d:\d\d:\d\d {re.escape(B)} answers again, after {silent} polls? without an answer", again[0])
    assert sum(f"!!! RESTARTED at {B}: a new run since " in ln for ln in lines) == 1
    assert not any("LOSS" in ln for ln in lines)


@pytest.mark.slow
def test_watch_fail_on_loss_names_the_recorder_and_the_causes(tmp_path, cleanup) -> None:
    a, b = recorder(), recorder()
    cleanup += [a.stop, b.stop]
    A, B = address(a), address(b)
    watch = Watch(tmp_path, A, B, "--every", "0.2", "--count", "2000", "--fail-on-loss")
    cleanup.append(watch.stop)
    # The first poll sees both recorders before any loss: whatever comes is new.
    watch.wait_for("a first poll", lambda ls: len(rows(ls)) >= 2)
    assert all(k == "row" and loss(m) == dict.fromkeys(CAUSES, 0) for k, m in rows(watch.lines)[:2])

    sent = vdifrec.send(a.address, frames=5000, fps=2000, drop="1:10-29", **START)
    assert sent["frames_sent"] == 4980
    assert a.address is not None
    d = delivered(a.address, 4980, lambda: a.stats().datagrams)
    s = a.stats()
    final = {"network": max(s.frames_lost - s.kernel_drops, 0), "kernel": s.kernel_drops,
             "ring": s.ring_overflows, "malformed": s.datagrams_malformed}
    watch.wait_for(f"{A}'s loss as the recorder counts it", lambda ls: loss(of(ls, A, "row")[-1]) == final)
    assert watch.end(signal.SIGTERM) == 1
    assert watch.err.read_text() == ""
    lines = watch.lines

    # The recorder's counts, by cause; its per-poll alerts add up to them.
    last = loss(of(lines, A, "row")[-1])
    assert last == final and sum(last.values()) > 0
    alerts = re.findall(rf"!!! LOSS at {re.escape(A)}: (-?\d+) frames since the last poll \((.*)\) !!!", "\n".join(lines))
    assert sum(int(n) for n, _ in alerts) == sum(last.values())
    assert not any(f"LOSS at {B}" in ln for ln in lines)
    assert all(loss(m) == dict.fromkeys(CAUSES, 0) for m in of(lines, B, "row"))
    # The last line names the recorder, its frames and their causes; not the other.
    detail = ", ".join(f"{k} {v}" for k, v in last.items() if v)
    assert re.fullmatch(rf"\d\d:\d\d:\d\d !!! FAIL: new loss during the watch: {re.escape(A)} {sum(last.values())} frames "
                        rf"\({detail}\) !!!", lines[-1]), lines[-1]
    if d.kernel_drops == 0:
        assert last == {"network": 20, "kernel": 0, "ring": 0, "malformed": 0}
        assert alerts == [("20", "network 20")]
        assert lines[-1].endswith(f"{A} 20 frames (network 20) !!!")


@pytest.mark.slow
def test_watch_fail_on_loss_exits_0_for_loss_from_before_the_watch(cleanup) -> None:
    a, b = recorder(), recorder()
    cleanup += [a.stop, b.stop]
    assert a.address is not None
    sent = vdifrec.send(a.address, frames=5000, fps=2000, drop="1:10-29", **START)
    delivered(a.address, sent["frames_sent"], lambda: a.stats().datagrams)
    assert a.stats().frames_lost >= 20  # counted before the watch begins: not new
    dead = f"127.0.0.1:{free_tcp_port()}"
    r = run_cli("watch", address(a), address(b), dead, "--every", "0.2", "--count", "3", "--fail-on-loss", timeout=TIMEOUT)
    # No new loss, but a recorder that never answered cannot show that it lost nothing.
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr == ""
    lines = r.stdout.splitlines()
    # --count bounds the polls: three lines per recorder, in the order given.
    seen = rows(lines)
    assert [(k, m["address"]) for k, m in seen] == [("row", address(a)), ("row", address(b)), ("silent", dead)] * 3
    assert all(sum(loss(m).values()) >= 20 for m in of(lines, address(a)))
    assert lines[-1].endswith(f"!!! FAIL: no new loss seen, but never answered: {dead} !!!")
    r = run_cli("watch", address(a), address(b), "--every", "0.2", "--count", "2", "--fail-on-loss", timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1].endswith("no new loss during the watch (2 recorders, 2 polls)")


def test_remote_statuses_reads_every_recorder_that_answers(cleanup) -> None:
    a = recorder()
    cleanup.append(a.stop)
    assert a.address is not None
    vdifrec.send(a.address, frames=100, fps=2000, **START)
    delivered(a.address, 100, lambda: a.stats().datagrams)
    dead = f"127.0.0.1:{free_tcp_port()}"
    station = vdifrec.RemoteStatuses([address(a), dead])
    assert repr(station) == f"RemoteStatuses({[address(a), dead]!r})"
    assert station.remotes[address(a)].url == f"http://{address(a)}"

    docs = station.status()
    assert list(docs) == [address(a), dead]
    doc = docs[address(a)]
    assert isinstance(doc, dict) and doc["state"] == "recording"
    assert isinstance(docs[dead], ConnectionError) and f"no status from http://{dead}/status" in str(docs[dead])
    stats = station.stats()
    local = stats[address(a)]
    assert isinstance(local, vdifrec.Stats) and local.frames_received == a.stats().frames_received
    assert isinstance(stats[dead], ConnectionError)
    # One recorder, one RemoteStatus: unchanged, and raising for the dead one.
    assert vdifrec.RemoteStatus(address(a)).stats().frames_received == local.frames_received
    with pytest.raises(ConnectionError, match="no status"):
        vdifrec.RemoteStatus(dead).status()

    with pytest.raises(TypeError, match="list of urls"):
        vdifrec.RemoteStatuses(address(a))
    with pytest.raises(ValueError, match="same recorder"):
        vdifrec.RemoteStatuses([address(a), f"http://{address(a)}/"])
    with pytest.raises(ValueError, match="at least one"):
        vdifrec.RemoteStatuses([])
    with pytest.raises(ValueError, match="plain http"):
        vdifrec.RemoteStatuses([address(a), "https://127.0.0.1:1"])


def test_watch_shows_each_recorders_scan_and_disk_fill(tmp_path, cleanup) -> None:
    # A scan recorder on two disks, a continuous recording, a recorder that only monitors.
    dirs = [tmp_path / "disk0", tmp_path / "disk1", tmp_path / "out"]
    for d in dirs:
        d.mkdir()
    scans = vdifrec.Recorder(port=0, ring="16MiB", frame_size=8224, fps=2000, disks=[str(d) for d in dirs[:2]],
                             status_listen="127.0.0.1:0").start()
    cleanup.append(scans.stop)
    assert scans.start_scan("ev001_Kv_no0012") == "ev001_Kv_no0012"
    plain = vdifrec.Recorder(port=0, ring="16MiB", frame_size=8224, fps=2000, path=dirs[2] / "c.vdif",
                             status_listen="127.0.0.1:0").start()
    cleanup.append(plain.stop)
    monitor = recorder()
    cleanup.append(monitor.stop)
    S, P, M = address(scans), address(plain), address(monitor)
    r, lo, hi = around(lambda: run_cli("watch", S, P, M, "--every", "0.2", "--count", "2", timeout=TIMEOUT), *dirs)
    assert isinstance(r, subprocess.CompletedProcess) and r.returncode == 0 and r.stderr == "", r
    seen = rows(r.stdout.splitlines())
    assert [(k, m["address"]) for k, m in seen] == [("row", S), ("row", P), ("row", M)] * 2, r.stdout
    for _, m in seen:
        if m["address"] == M:
            assert (m["scan"], m["disk"]) == ("-", "-")
            continue
        # The scan's name while it records (none for a continuous recording); the disk fill in
        # percent, what os.statvfs says of those disks.
        assert m["scan"] == ("ev001_Kv_no0012" if m["address"] == S else "-")
        assert m["disk"].endswith("%"), m.string
        assert 100 * (lo - FILL_SLACK) - 0.5 <= int(m["disk"][:-1]) <= 100 * (hi + FILL_SLACK) + 0.5, (m.string, lo, hi)
    scans.stop_scan()
    r = run_cli("watch", S, P, "--count", "1", timeout=TIMEOUT)
    assert [m["scan"] for _, m in rows(r.stdout.splitlines())] == ["-", "-"], r.stdout


class _NotARecorder(http.server.BaseHTTPRequestHandler):
    body = b"hello, this is no recorder\n"

    def do_GET(self) -> None:
        body = self.body
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.slow
def test_remote_statuses_a_hung_host_or_a_stranger_costs_its_timeout_not_the_call(cleanup) -> None:
    a = recorder()
    cleanup.append(a.stop)
    # A host that takes connections (the kernel's backlog) and never answers.
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)
    cleanup.append(hung.close)
    stranger = http.server.HTTPServer(("127.0.0.1", 0), _NotARecorder)
    threading.Thread(target=stranger.serve_forever, daemon=True).start()
    cleanup += [stranger.server_close, stranger.shutdown]
    H = "127.0.0.1:%d" % hung.getsockname()[1]
    S = "127.0.0.1:%d" % stranger.server_address[1]

    station = vdifrec.RemoteStatuses([H, address(a), S], timeout=0.5)
    t0 = time.monotonic()
    docs = station.status()
    took = time.monotonic() - t0
    doc = docs[address(a)]
    assert isinstance(doc, dict) and doc["state"] == "waiting"
    assert isinstance(docs[H], ConnectionError) and f"no status from http://{H}" in str(docs[H])
    assert isinstance(docs[S], ConnectionError) and "not a recorder's status document" in str(docs[S])
    # Bounded: twice the timeout and a second at most, whatever the hung host does.
    assert took < 2 * 0.5 + 1.0 + 5.0  # (and a margin for a slow host's thread start)
    with pytest.raises(ConnectionError, match="not a recorder's status document"):
        vdifrec.RemoteStatus(S).status()
    # JSON, but no recorder's: watch says so in that recorder's line and goes on.
    json_stranger = http.server.HTTPServer(("127.0.0.1", 0), type("_JSON", (_NotARecorder,), {"body": b'{"state": "recording"}'}))
    threading.Thread(target=json_stranger.serve_forever, daemon=True).start()
    cleanup += [json_stranger.server_close, json_stranger.shutdown]
    J = "127.0.0.1:%d" % json_stranger.server_address[1]
    r = run_cli("watch", J, address(a), "--every", "0.2", "--count", "1", timeout=TIMEOUT)
    assert r.returncode == 0 and r.stderr == "", r
    assert f"{J}  !!! NO ANSWER: no status from http://{J}/status: the answer is not a recorder's status document" in r.stdout
    with pytest.raises(ConnectionError, match=f"no status from http://{H}"):
        vdifrec.RemoteStatus(H, timeout=0.5).metrics()


def test_docs_station_network_names_only_metrics_that_metrics_exports(cleanup) -> None:
    # The operator guide's page on a station network: its Prometheus job and queries.
    section = (Path(__file__).resolve().parent.parent / "docs" / "operator" / "many-recorders.md").read_text()
    yaml = pytest.importorskip("yaml")
    (config,) = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", section, re.S)]
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    recorders = [(c["targets"], c["labels"]["recorder"]) for c in job["static_configs"]]
    assert len(recorders) >= 2 and all(len(t) == 1 and re.fullmatch(r"[\w.-]+:\d+", t[0]) for t, _ in recorders)
    assert len({name for _, name in recorders}) == len(recorders)
    # Every vdifrec_ name the section uses is one that a recorder receiving a stream exports.
    a = recorder()
    cleanup.append(a.stop)
    assert a.address is not None
    vdifrec.send(a.address, frames=100, fps=2000, **START)
    delivered(a.address, 100, lambda: a.stats().datagrams)
    exported = set(re.findall(r"^# TYPE (\S+) ", vdifrec.RemoteStatus(address(a)).metrics(), re.M))
    named = set(re.findall(r"\bvdifrec_[a-z_]+\b", section))
    assert named and named <= exported, sorted(named - exported)


def test_watch_follows_the_schedule_a_recorder_runs(tmp_path, cleanup) -> None:
    rec = recorder()
    cleanup.append(rec.stop)
    scan = lambda name, **kw: {"name": name, "disk_name": f"VT26A_Ky_{name}", "frames_expected": 250000, **kw}  # noqa: E731
    doc = {"experiment": "VT26A", "station": "Ky", "scans_planned": 3,
           "recording": scan("s1", progress=0.25), "next": scan("s2", window_start_unix=time.time() + 600)}
    rec.set_observation(doc)
    w = Watch(tmp_path, address(rec), "--every", "0.2", "--count", "200")
    cleanup.append(w.stop)
    w.wait_for("the scan recording", lambda lines: any("sched s1 25%" in line for line in lines))
    # s1 ends NOT OK, s2 waits; a clock warning appears: each told once, loudly.
    doc.update(recording=None, finished=[scan("s1", frames_recorded=249000, result="NOT OK", why="frames lost (kernel 1000)")],
               warnings=["clock: the stream's VDIF time is 2.000 s ahead of the host clock"])
    rec.set_observation(doc)
    w.wait_for("the next scan", lambda lines: any(re.search(r"sched next s2 in \d+ s", line) for line in lines))
    w.wait_for("the result", lambda lines: any("!!! SCAN NOT OK:" in line for line in lines))
    w.wait_for("the warning", lambda lines: any("!!! SCHEDULE: clock: the stream's VDIF time is 2.000 s ahead" in line
                                                for line in lines))
    time.sleep(1.0)
    w.stop()
    told = [line for line in w.lines if "!!! SCAN NOT OK:" in line]
    assert len(told) == 1 and "scan s1 (VT26A_Ky_s1): NOT OK: frames lost (kernel 1000), frames 249000/250000" in told[0]
    assert sum("!!! SCHEDULE:" in line for line in w.lines) == 1


FORWARD = re.compile(
    r"^\d\d:\d\d:\d\d  (?:(?P<address>\S+)\s+)?fwd(?P<id>\d+) (?P<destination>\S+)  (?P<state>[a-z]+)  "
    r"frames (?P<frames>\d+)  skipped (?P<skipped>\d+)  (?P<gbps>\d+\.\d\d) Gbit/s  reconnects (?P<reconnects>\d+)"
    r"(?:  !!! (?P<trouble>.+) !!!|  \((?P<why>.+)\))?$"
)


def test_watch_shows_each_forwarding_destination(cleanup) -> None:
    # A recorder forwarding to one destination that takes the stream (udps to a socket held
    # here), one that is down (tcp where nobody listens), one whose shaping does not fit the
    # stream (a channel it lacks), one paused and one removed.
    far = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    far.bind(("127.0.0.1", 0))
    cleanup.append(far.close)
    up, dead = far.getsockname()[1], free_tcp_port()
    rec = vdifrec.Recorder(port=0, ring="16MiB", frame_size=8224, fps=2000, status_listen="127.0.0.1:0",
                           forward=[f"udps://127.0.0.1:{up}", f"tcp://127.0.0.1:{dead}",
                                    f"udp://127.0.0.1:{up}?channels=99"]).start()
    cleanup.append(rec.stop)
    assert rec.address is not None
    vdifrec.send(rec.address, frames=100, fps=2000, **START)
    delivered(rec.address, 100, lambda: rec.stats().datagrams)
    rec.add_forward(f"udp://127.0.0.1:{up}", enabled=False)
    rec.remove_forward(rec.add_forward(f"udp://127.0.0.1:{up}"))
    got = rec.stats().frames_received
    want = {1: ("sending", got, 0), 2: ("down", 0, got), 3: ("refused", 0, 0), 4: ("paused", 0, 0), 5: ("closed", 0, 0)}
    deadline = time.monotonic() + TIMEOUT
    while {f.id: (f.state, f.frames, f.skipped) for f in rec.forwards()} != want:
        assert time.monotonic() < deadline, rec.forwards()
        time.sleep(0.05)

    # That recorder's /status, as it is now, fed to watch poll after poll (its time since the
    # last datagram frozen with it: --stalled-after keeps a slow host's wait from a stall line).
    doc = vdifrec.RemoteStatus(address(rec)).status()
    forward = {f["id"]: f for f in doc["stats"]["forward"]}
    assert list(forward) == [1, 2, 3, 4, 5]
    body = json.dumps(doc).encode()
    fed = http.server.HTTPServer(("127.0.0.1", 0), type("_Fed", (_NotARecorder,), {"body": body}))
    threading.Thread(target=fed.serve_forever, daemon=True).start()
    cleanup += [fed.server_close, fed.shutdown]
    F = "127.0.0.1:%d" % fed.server_address[1]

    def check(m: re.Match[str]) -> None:
        f = forward[int(m["id"])]
        assert (m["destination"], m["state"]) == (f["destination"], f["state"]), m.string
        assert (int(m["frames"]), int(m["skipped"]), int(m["reconnects"])) == (f["frames"], f["skipped"], f["reconnects"])
        assert m["gbps"] == f"{f['gbps']:.2f}"
        # Loud, with the reason, while down or refused; the reason in brackets otherwise.
        if f["state"] in ("down", "refused"):
            assert m["trouble"] == f["error"] and f["error"], m.string
        else:
            assert m["trouble"] is None and m["why"] == f["error"], m.string

    # One recorder: its line, then a line per destination; the closed one in the first poll only.
    r = run_cli("watch", F, "--every", "0.2", "--count", "2", "--stalled-after", "1000", timeout=TIMEOUT)
    assert r.returncode == 0 and r.stderr == "", r
    lines = r.stdout.splitlines()
    # (the recorder's line begins "HH:MM:SS  VDIF ...")
    shape = [f"fwd{m['id']}" if (m := FORWARD.match(ln)) else ln.split()[1] for ln in lines]
    assert shape == ["VDIF", "fwd1", "fwd2", "fwd3", "fwd4", "fwd5", "VDIF", "fwd1", "fwd2", "fwd3", "fwd4"], r.stdout
    for m in filter(None, map(FORWARD.match, lines)):
        assert m["address"] is None
        check(m)
    assert "cannot connect" in forward[2]["error"] and "channels" in forward[3]["error"]

    # A station network: each destination's line under its recorder's, naming it; skipped
    # frames are the forwarding's, not loss of the recording.
    other = recorder()
    cleanup.append(other.stop)
    O = address(other)
    r = run_cli("watch", F, O, "--every", "0.2", "--count", "2", "--fail-on-loss", "--stalled-after", "1000", timeout=TIMEOUT)
    assert r.returncode == 0 and r.stderr == "", r
    lines = r.stdout.splitlines()

    def kind(line: str) -> tuple[str, ...]:
        if m := ROW.match(line):
            return ("row", m["address"])
        if m := FORWARD.match(line):
            return ("fwd", m["address"], int(m["id"]))
        return (line,)

    kinds = [kind(ln) for ln in lines]
    assert kinds == [("row", F), *[("fwd", F, i) for i in range(1, 6)], ("row", O),
                     ("row", F), *[("fwd", F, i) for i in range(1, 5)], ("row", O),
                     (lines[-1],)], r.stdout
    assert lines[-1].endswith("no new loss during the watch (2 recorders, 2 polls)")
    for m in filter(None, map(FORWARD.match, lines)):
        check(m)
