"""The control-room page (`GET /` of the status server) in a headless Chromium.

First against a stand-in server (the page file itself, a /status shaped like the recorder's,
/history): the page is checked for what it draws from a known document. Then against a real
recorder fed a stream with a tone: the page must find the tone where the sender put it, show
the counters the recorder served, and say plainly when the recorder stops answering.

Chromium is driven over the DevTools protocol (tests/browser.py); without it these tests are
skipped (apt-get install chromium). A screenshot of each run is left in tests/artifacts/; with
VDIFREC_PAGE_SCREENSHOT=docs the real one is also copied to docs/_static/page.png for the docs
(docs/operator/control-room.md).
"""

from __future__ import annotations

import copy
import http.server
import json
import math
import os
import shutil
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("websocket", reason="pip install websocket-client (in the test extra)")

from browser import INSTALL_HINT, Browser, find_chromium  # noqa: E402
from conftest import first_live_look  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "src" / "record" / "status_page.html"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"

pytestmark = [
    pytest.mark.network,
    pytest.mark.skipif(find_chromium() is None, reason=INSTALL_HINT),
]

#: What the page shows, from one /status document, as the test computes it (the page must agree).
SHOWN = """(() => {
  const v = (id) => Number(document.getElementById(id).dataset.value);
  return {
    shown: {network: v('lost-network'), kernel: v('lost-kernel'), ring: v('lost-ring'),
            malformed: v('lost-malformed'), received: v('frames-received')},
    stats: window.vdifrecPage.lastStatus.stats,
    polls: window.vdifrecPage.polls,
  };
})()"""

#: Each tone marker: its data, and where it sits across its spectrum's plot (0 .. 1).
MARKERS = """[...document.querySelectorAll('.tone-marker')].map((m) => {
  const plot = m.closest('.plot').getBoundingClientRect(), r = m.getBoundingClientRect();
  return {thread: Number(m.dataset.thread), channel: Number(m.dataset.channel),
          frequency: Number(m.dataset.frequency), visible: r.height > 0,
          at: (r.left + r.width / 2 - plot.left) / plot.width, width: plot.width};
})"""


def expected_loss(stats: dict[str, Any]) -> dict[str, int]:
    """Loss by cause as /metrics defines it, from a /status document's `stats`."""
    return {
        "network": max(stats["frames_lost"] - stats["kernel_drops"], 0),
        "kernel": stats["kernel_drops"],
        "ring": stats["ring_overflows"],
        "malformed": stats["datagrams_malformed"],
        "received": stats["frames_received"],
    }


@pytest.fixture
def browser() -> Iterator[Browser]:
    with Browser() as b:
        yield b


# -- the stand-in recorder ---------------------------------------------------------------------

MOCK_NFFT = 256
MOCK_BANDWIDTH = 32e6
#: (thread, channel, tone frequency in Hz).
MOCK_TONES = [(0, 0, 10e6), (0, 1, 23.5e6)]
MOCK_START = 1796143000


def mock_live(second: int, brief: bool = False) -> dict[str, Any]:
    """A `live` block: a gently sloped band with one tone per channel, 2-bit sampler states. As
    the engine serialises it (`bits` the bits per sample, the states in `bit_states`), or with
    `brief` as first specified (the states in `bits`)."""
    spectra, states, tones = [], [], []
    for thread, channel, f in MOCK_TONES:
        k = round(f / MOCK_BANDWIDTH * MOCK_NFFT)
        power = [1.0 + 0.3 * math.sin(math.pi * i / MOCK_NFFT) + (20.0 if i == k else 0.0) for i in range(MOCK_NFFT)]
        spectra.append({"thread": thread, "channel": channel, "power": power})
        states.append({"thread": thread, "channel": channel, "fractions": [0.17, 0.33, 0.34, 0.16],
                       "expected": [0.16, 0.34, 0.34, 0.16], "deviation_pp": 1.0})
        tones.append({"thread": thread, "channel": channel, "frequency": f, "power_ratio": 21.0})
    doc = {"ref_epoch": 53, "seconds": 13279000 + second, "vdif_second": "2026-12-01T16:36:40",
           "unix_second": MOCK_START + second, "frames": 20000, "fraction": 1.0, "computed": second, "skips": 1,
           "cpu_s": 0.01 * second, "last_skip": None, "nfft": MOCK_NFFT, "bits": 2, "complex": False,
           "sample_rate_hz": 2 * MOCK_BANDWIDTH, "bandwidth_hz": MOCK_BANDWIDTH, "spectra": spectra,
           "bit_states": states, "tones": tones}
    if brief:
        doc["bits"] = doc.pop("bit_states")
    return doc


def mock_latency(brief: bool = False) -> dict[str, Any]:
    """A `latency` block, as the engine serialises it: each stage's non-empty buckets as (upper
    edge, count) on edges 0.1 µs × 10^(k/4), the last one open-ended (its edge null: JSON has no
    infinity), quantiles as bucket edges; the stages under `stages`. With `brief`, the stages at
    the top level, as first specified."""
    def edge(k: int) -> float:
        return 1e-7 * 10 ** (k / 4)

    stages = {}
    for i, stage in enumerate(["kernel", "capture", "write", "durable", "off"]):
        counts = {k: int(5000 * math.exp(-((k - 12 - 2 * i) ** 2) / 6)) for k in range(40)}
        buckets: list[list[Any]] = [[edge(k), n] for k, n in counts.items() if n > 0]
        buckets.append([None, 3])
        stages[stage] = {"count": sum(b[1] for b in buckets), "p50": edge(12 + 2 * i), "p99": edge(16 + 2 * i),
                         "p999": edge(17 + 2 * i), "max": None, "mean": edge(12 + 2 * i),
                         "negative": 2 if stage == "off" else 0, "buckets": buckets}
    if brief:
        return stages
    return {"sample_every": 64, "stages": stages, "traces": []}


def mock_row(second: int) -> dict[str, Any]:
    """The row of one second: a little loss of each kind now and then."""
    return {"stream": 40592, "unix_second": MOCK_START + second, "ref_epoch": 53,
            "vdif_seconds": 13279000 + second, "frames_per_second": 20000,
            "received": 20000 - (40 if second % 50 == 7 else 0), "expected": 20000,
            "lost": 40 if second % 50 == 7 else 0, "out_of_order": 0, "duplicates": 0, "invalid": 0,
            "ring_overflow": 25 if second % 90 == 30 else 0, "malformed": 1 if second % 70 == 3 else 0,
            "kernel_drops": 10 if second % 50 == 7 else 0, "total_frames": 20000 * second,
            "bytes_buffered": 0, "bytes_written": 0, "threads": []}


class Mock:
    """A stand-in for the recorder's status server: the page, /status and /history.

    Each /status is the next second: frames_received grows and last_second moves on. The
    document's skeleton is the recorder's own shape (a /status captured from a run)."""

    def __init__(self) -> None:
        self.second = 1000
        self.live = True
        self.brief = False
        self.history = True
        self.state = "recording"
        self.rows = True
        self.lock = threading.Lock()
        mock = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
                path = self.path.split("?")[0]
                if path == "/":
                    self.reply(200, "text/html; charset=utf-8", PAGE.read_bytes())
                elif path == "/status":
                    self.reply(200, "application/json", json.dumps(mock.status()).encode())
                elif path == "/history" and mock.history:
                    rows = [mock_row(s) for s in range(max(mock.second - 600, 0), mock.second)]
                    self.reply(200, "application/json", json.dumps(rows).encode())
                else:
                    self.reply(404, "text/plain", b"not found\n")

            def reply(self, code: int, kind: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d/" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})
        self.thread.start()

    def status(self) -> dict[str, Any]:
        with self.lock:
            self.second += 1
            s = self.second
        doc = copy.deepcopy(STATUS_SKELETON)
        doc["state"] = self.state
        st = doc["stats"]
        st["state"] = self.state
        if self.state == "failed":
            st["error"] = "writing /mnt/disk0/ev001_Kv_no0042.vdif: No space left on device (os error 28)"
        st.update(frames_received=20000 * s, datagrams=20000 * s + 7, frames_lost=1234, kernel_drops=34,
                  ring_overflows=5, datagrams_malformed=7, elapsed_s=float(s))
        st["streams"][0].update(frames_received=20000 * s, frames_lost=1234, kernel_drops=34, ring_overflows=5,
                                datagrams_malformed=7, datagrams=20000 * s + 7)
        doc["last_second"] = mock_row(s - 1) if self.rows else None
        if not self.rows:  # just started: no stream has reported, no second has completed
            st["streams"] = []
        doc["disk_fill"] = 0.62
        doc["disks"] = [
            {"path": "/mnt/disk0", "size_bytes": 4_000_000_000_000, "used_bytes": 2_480_000_000_000,
             "free_bytes": 1_520_000_000_000, "fill": 0.62, "error": None},
            {"path": "/mnt/disk1", "size_bytes": None, "used_bytes": None, "free_bytes": None, "fill": None,
             "error": "No such file or directory (os error 2)"},
        ]
        doc["scan"] = "ev001_Kv_no0042"
        doc["live"] = mock_live(s, self.brief) if self.live else None
        doc["latency"] = mock_latency(self.brief) if self.live else None
        return doc

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


#: The recorder's /status as it served one second of a 20000 frames/s stream (trimmed of the
#: per-thread detail the page does not show).
STATUS_SKELETON: dict[str, Any] = {
    "state": "recording", "scan": None, "disk_fill": None, "disks": [],
    "start_time": "2026-12-01T16:48:11.017730713", "start_unix": 1796143691.0177307,
    "vdif_time": "2026-12-01T16:48:14.860800028", "current_file": "/mnt/disk0/ev001_Kv_no0042.vdif",
    "current_file_bytes": 123_456_789, "ring_fill": 0.12,
    "rates": {"frames_per_second": 20000.0, "receive_gbps": 1.31584, "write_gbps": 1.31}, "last_second": None,
    "stats": {
        "state": "recording", "elapsed_s": 3.86, "datagrams": 0, "frames_received": 0, "frames_lost": 0,
        "frames_out_of_order": 0, "frames_duplicate": 0, "frames_invalid": 0, "frames_out_of_window": 0,
        "frames_late": 0, "time_jumps": 0, "frames_expected": 20000, "threads": 1, "datagrams_malformed": 0,
        "datagrams_malformed_by_kind": {"too_short": 0, "too_long": 0, "bad_frame_length": 0, "legacy_mismatch": 0,
                                        "format_mismatch": 0, "bad_sync": 0, "fragmented": 0},
        "kernel_drops": 0, "ring_overflows": 0, "psn_lost": 0, "psn_out_of_order": 0, "frame_size": 8224,
        "frames_per_second": 20000, "bytes_received": 0, "bytes_buffered": 0, "bytes_written": 0,
        "ring_frames": 0, "ring_slots": 130560, "ring_fill": 0.12, "current_file": None, "current_file_bytes": 0,
        "files_closed": 0, "latest_frame": {"ref_epoch": 53, "seconds": 13279694, "frame_nr": 17216, "thread_id": 0},
        "seconds_since_datagram": 1.6e-06, "socket_errors": 0, "last_socket_error": None,
        "capture_cpu_s": 0.19, "capture_setup_cpu_s": 9.2e-05, "error": None,
        "streams": [{"port": 40592, "frames_received": 0, "frames_lost": 0, "datagrams": 0,
                     "datagrams_malformed": 0, "kernel_drops": 0, "ring_overflows": 0, "ring_fill": 0.12}],
    },
}


@pytest.mark.slow
def test_mock_page_shows_tones_losses_and_a_lost_recorder(browser: Browser) -> None:
    mock = Mock()
    try:
        browser.open(mock.url)
        browser.wait_for("document.body.dataset.connection === 'ok' && document.querySelectorAll('.tone-marker').length === 2")
        assert browser.evaluate("document.body.dataset.state") == "recording"
        # Each tone where the mock put it: its own data, and its place across the plot.
        markers = sorted(browser.evaluate(MARKERS), key=lambda m: (m["thread"], m["channel"]))
        assert [(m["thread"], m["channel"], m["frequency"]) for m in markers] == MOCK_TONES
        for m in markers:
            assert m["visible"]
            assert abs(m["at"] - m["frequency"] / MOCK_BANDWIDTH) * m["width"] < 2, m  # within 2 px
        # The counters shown are the document's.
        got = browser.evaluate(SHOWN)
        assert got["shown"] == expected_loss(got["stats"])
        assert got["shown"]["network"] == 1200 and got["shown"]["malformed"] == 7
        # The history: the recorder's 600 rows (one window), then one more per poll.
        assert browser.wait_for("window.vdifrecPage.historyRows.length >= 599")
        assert browser.evaluate("document.querySelectorAll('.latency canvas').length") == 5
        browser.screenshot(ARTIFACTS / "page-mock.png")
        # The shapes first specified (states in `bits`, stages at the top of `latency`) draw the same.
        mock.brief = True
        polls = browser.evaluate("window.vdifrecPage.polls")
        browser.wait_for(f"window.vdifrecPage.polls >= {polls + 1} && Array.isArray(window.vdifrecPage.lastStatus.live.bits)")
        assert browser.evaluate("document.querySelectorAll('.tone-marker').length") == 2
        assert browser.evaluate("document.querySelectorAll('.latency canvas').length") == 5
        assert browser.evaluate("document.querySelectorAll('.bits canvas').length") == 2
        browser.drain()
        assert browser.errors == []

        # An older recorder: no /history, no live spectrum, no latency; just started, so no
        # second has completed yet. Then the chart fills from polling.
        mock.history, mock.live, mock.rows = False, False, False
        browser.open(mock.url)
        browser.wait_for("window.vdifrecPage.polls >= 1")
        assert browser.evaluate("window.vdifrecPage.historyRows.length") == 0
        mock.rows = True
        browser.wait_for("window.vdifrecPage.historyRows.length >= 2")
        assert browser.evaluate("document.querySelectorAll('.tone-marker, .spectrum, .latency').length") == 0
        browser.drain()
        # Only the browser's own note of the 404 (a network log entry, not the page's).
        assert [e for e in browser.errors if not (e["source"] == "network" and "/history" in e["text"])] == []
        browser.errors.clear()
        # The recording ends, or fails: said plainly, the reason with it.
        mock.state = "failed"
        browser.wait_for("document.body.dataset.state === 'failed'", timeout=15)
        banner = browser.evaluate("document.getElementById('banner').innerText")
        assert "FAILED" in banner and "No space left on device" in banner
        mock.state = "stopped"
        browser.wait_for("document.body.dataset.state === 'stopped'", timeout=15)
        assert "recorder stopped" in browser.evaluate("document.getElementById('banner').innerText")
    finally:
        mock.close()
    # The recorder goes away: the page says so, and keeps asking. (Each wait ends as soon as the
    # page shows it; the bounds leave room for a Chromium sharing a busy host's cores.)
    browser.wait_for("document.body.dataset.connection === 'lost'", timeout=20)
    banner = browser.evaluate("document.getElementById('banner').innerText")
    assert "recorder not answering since" in banner
    failures = browser.evaluate("window.vdifrecPage.failures")
    browser.wait_for(f"window.vdifrecPage.failures > {failures}", timeout=15)
    # The failed requests are the browser's network notes, never an exception of the page.
    assert [e for e in browser.errors if e["kind"] == "exception" or e["source"] != "network"] == []


# -- the real recorder -------------------------------------------------------------------------

def get_status(base: str) -> dict[str, Any]:
    with urllib.request.urlopen(base + "/status", timeout=5) as r:
        doc: dict[str, Any] = json.loads(r.read())
    return doc


@pytest.mark.slow
def test_page_of_a_real_recorder(browser: Browser) -> None:
    import vdifrec

    tone_hz = 10e6
    # Monitoring: 128 MiB holds most of a second of this stream, room for the live monitor's looks.
    rec = vdifrec.Recorder(port=0, ring="128MiB", status_listen="127.0.0.1:0", latency=True)
    rec.start()
    sender = None
    try:
        assert rec.address is not None and rec.status_address is not None
        base = "http://%s:%d" % rec.status_address
        sender = vdifrec.Sender(rec.address, duration=300, fps=20000, tone_mhz=tone_hz / 1e6)  # stopped below
        browser.open(base + "/")
        # A live spectrum needs a second of frames and a look by the monitor (bounded; it looks
        # only with idle CPU, and says so when it has none); then the page shows it (bounded).
        first_live_look(rec.live, base)
        browser.wait_for("(() => { const l = window.vdifrecPage.lastStatus && window.vdifrecPage.lastStatus.live;"
                         " return l && l.bandwidth_hz && l.tones.length > 0"
                         " && document.querySelectorAll('.tone-marker').length >= l.tones.length; })()",
                         timeout=20)
        live = browser.evaluate("window.vdifrecPage.lastStatus.live")
        # The sender's band: 8192 bytes of 2-bit samples in 4 channels per frame, real sampling.
        samples_per_frame = (8224 - 32) * 8 // 2 // 4
        # The recorder learns the frame rate as the highest frame number seen + 1: short of 20000
        # only where the kernel dropped the tail of each second (a small socket buffer drops the
        # ends of the sender's bursts, and a second ends with one), by at most what it dropped.
        fps_seen = round(live["sample_rate_hz"] / samples_per_frame)
        drops = rec.stats().to_dict()["kernel_drops"]
        assert live["sample_rate_hz"] == fps_seen * samples_per_frame
        assert fps_seen == 20000 or (drops > 0 and 20000 - drops <= fps_seen < 20000), (fps_seen, drops)
        assert live["bandwidth_hz"] == pytest.approx(live["sample_rate_hz"] / 2)
        assert live["complex"] is False
        bin_hz = live["bandwidth_hz"] / live["nfft"]
        # A marker at the tone in every channel's spectrum, where the sender put it.
        markers = browser.evaluate(MARKERS)
        channels = {(s["thread"], s["channel"]) for s in live["spectra"]}
        assert channels
        for key in channels:
            at = [m for m in markers if (m["thread"], m["channel"]) == key and abs(m["frequency"] - tone_hz) <= bin_hz]
            assert at, f"no tone marker near {tone_hz / 1e6} MHz for (thread, channel) {key}: {markers}"
            for m in at:
                assert m["visible"] and abs(m["at"] - m["frequency"] / live["bandwidth_hz"]) * m["width"] < 2, m
        # The counters shown are those of the page's own last document, which lies between two
        # documents the test asks for itself (counters only grow). The page's second poll after
        # `before` was asked after `before` was answered (its first may have been under way).
        before = get_status(base)["stats"]
        polls = browser.evaluate("window.vdifrecPage.polls")
        browser.wait_for(f"window.vdifrecPage.polls >= {polls + 2}", timeout=20)
        got = browser.evaluate(SHOWN)
        after = get_status(base)["stats"]
        shown = got["shown"]
        assert shown == expected_loss(got["stats"])
        for cause, field in [("received", "frames_received"), ("kernel", "kernel_drops"), ("ring", "ring_overflows"),
                             ("malformed", "datagrams_malformed")]:
            assert before[field] <= shown[cause] <= after[field], (cause, before[field], shown[cause], after[field])
        assert browser.evaluate("document.body.dataset.state") == "recording"
        assert browser.evaluate("document.querySelectorAll('.latency canvas').length") >= 1
        docs = os.environ.get("VDIFREC_PAGE_SCREENSHOT") == "docs"
        if docs:
            # For the docs' picture: some seconds of history in the chart.
            browser.wait_for("window.vdifrecPage.historyRows.length >= 8", timeout=20)
        shot = browser.screenshot(ARTIFACTS / "page.png")
        browser.drain()
        assert browser.errors == []
        sender.stop()
        sender = None
        # The status server goes with the recorder: the page must say so within seconds.
        rec.stop()
        browser.wait_for("document.body.dataset.connection === 'lost'", timeout=20)
        assert "recorder not answering since" in browser.evaluate("document.getElementById('banner').innerText")
        if docs:
            (ROOT / "docs" / "_static").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, ROOT / "docs" / "_static" / "page.png")
    finally:
        if sender is not None:
            sender.stop()
        if rec.running:
            rec.stop()


@pytest.mark.slow
def test_the_header_names_the_disks_a_scan_is_written_to(browser: Browser, tmp_path: Path) -> None:
    import vdifrec

    disks = [tmp_path / f"disk{i}" for i in range(3)]
    for d in disks:
        d.mkdir()
    rec = vdifrec.Recorder(port=0, ring="64MiB", frame_size=8224, disks=[str(d) for d in disks],
                           status_listen="127.0.0.1:0", live=False)
    rec.start()
    sender = None
    try:
        assert rec.address is not None and rec.status_address is not None
        base = "http://%s:%d" % rec.status_address
        browser.open(base + "/")
        browser.wait_for("window.vdifrecPage.polls >= 1", timeout=20)
        # Between scans nothing is written.
        assert browser.evaluate("document.getElementById('current-file').textContent") == "–"
        name = rec.start_scan("page_scan")
        sender = vdifrec.Sender(rec.address, duration=60, fps=2000)  # stopped below
        # A vbs scan has no one file: its chunks go to the three disks, and the header says so.
        want = "3 disks: " + ", ".join(str(d) for d in disks)
        browser.wait_for(f"document.getElementById('current-file').textContent === {json.dumps(want)}", timeout=20)
        assert get_status(base)["scan_disks"] == [str(d) for d in disks]
        assert browser.evaluate("document.getElementById('scan').textContent") == name
        sender.stop()
        sender = None
        rec.stop_scan()
        browser.wait_for("document.getElementById('current-file').textContent === '–'", timeout=20)
        assert get_status(base)["scan_disks"] == []
        browser.drain()
        assert browser.errors == []
    finally:
        if sender is not None:
            sender.stop()
        if rec.running:
            rec.stop()


def test_the_scans_on_the_disks_come_a_page_at_a_time(browser: Browser, tmp_path: Path) -> None:
    import vdifrec

    disks = [tmp_path / f"disk{i}" for i in range(2)]
    for i, d in enumerate(disks):
        for k in range(130):
            (d / f"r41_kv_no{k:04d}").mkdir(parents=True)
            (d / f"r41_kv_no{k:04d}" / f"r41_kv_no{k:04d}.{i:08d}").write_bytes(b"")
    rec = vdifrec.Recorder(port=0, ring="64MiB", frame_size=8224, disks=[str(d) for d in disks],
                           status_listen="127.0.0.1:0", live=False)
    rec.start()
    try:
        assert rec.status_address is not None
        base = "http://%s:%d" % rec.status_address
        doc = get_status(base)
        assert doc["catalogue"]["names"] >= 130 and doc["catalogue"]["disks"] >= 2
        browser.open(base + "/")
        browser.wait_for("document.getElementById('disk-scans-range').textContent.includes('of 130')", timeout=20)
        names = browser.evaluate("document.getElementById('disk-scans-names').textContent").split()
        assert names == [f"r41_kv_no{k:04d}" for k in range(40)]
        browser.evaluate("document.getElementById('disk-scans-next').click()")
        browser.wait_for("document.getElementById('disk-scans-range').textContent.startsWith('41')", timeout=20)
        names = browser.evaluate("document.getElementById('disk-scans-names').textContent").split()
        assert names == [f"r41_kv_no{k:04d}" for k in range(40, 80)]
        # A pattern, as an operator types it: only the matching names, counted.
        browser.evaluate("const e = document.getElementById('disk-scans-name'); e.value = 'r41_kv_no00[0-1]?';"
                         "e.dispatchEvent(new Event('change'))")
        browser.wait_for("document.getElementById('disk-scans-range').textContent === '1–20 of 20'", timeout=20)
        # A page of what was asked for (the engine's test holds /scans to 500 names an answer).
        with urllib.request.urlopen(base + "/scans?offset=125&limit=10", timeout=10) as r:
            assert json.loads(r.read())["names"] == [f"r41_kv_no{k:04d}" for k in range(125, 130)]
        browser.drain()
        assert browser.errors == []
    finally:
        rec.stop()


def test_the_schedule_shows_the_scan_now_the_next_and_the_results(browser: Browser, tmp_path: Path) -> None:
    import time

    import vdifrec

    rec = vdifrec.Recorder(port=0, ring="64MiB", frame_size=8224, disks=[str(tmp_path)],
                           status_listen="127.0.0.1:0", live=False)
    rec.start()
    try:
        assert rec.status_address is not None
        base = "http://%s:%d" % rec.status_address
        browser.open(base + "/")
        browser.wait_for("window.vdifrecPage.polls >= 1", timeout=20)
        # No schedule drives the recorder: no schedule section.
        assert browser.evaluate("document.getElementById('observation').hidden") is True
        soon = time.time() + 3725  # 1 h 02 min 05 s from now
        scan = lambda name, **kw: {"name": name, "disk_name": f"VT26A_Ky_{name}", "window_start": "2026-12-02T10:00:00Z",  # noqa: E731
                                   "window_stop": "2026-12-02T10:00:02Z", "frames_expected": 250000, **kw}
        rec.set_observation({
            "schedule": "vt26a.vex", "experiment": "VT26A", "station": "Ky",
            "recording": scan("s2", progress=0.5),
            "next": scan("s3", window_start_unix=soon),
            "finished": [scan("s1", frames_recorded=249990, frames_lost=10, result="NOT OK", why="frames lost (kernel 10)",
                              shipped="verified")],
            "scans_planned": 3, "scans_recorded": 0, "scans_missed": 1, "scans_mismatched": 0,
            "warnings": ["clock: the stream's VDIF time is 2.000 s ahead of the host clock"],
        })
        browser.wait_for("!document.getElementById('observation').hidden", timeout=20)
        text = lambda id_: browser.evaluate(f"document.getElementById({json.dumps(id_)}).textContent")  # noqa: E731
        assert text("obs-now") == "s2" and text("obs-next") == "s3"
        assert text("obs-countdown").startswith("starts in 1 h 02 min")
        assert text("obs-counts") == "0 / 3"
        assert "2.000 s ahead of the host clock" in text("obs-warnings")
        row = browser.evaluate("[...document.querySelectorAll('#obs-table tbody td')].map((td) => td.textContent)")
        assert row[0] == "s1" and row[1] == "VT26A_Ky_s1" and row[5] == "NOT OK: frames lost (kernel 10)" and row[6] == "verified"
        assert get_status(base)["observation"]["finished"][0]["frames_recorded"] == 249990
        rec.set_observation(None)
        browser.wait_for("document.getElementById('observation').hidden", timeout=20)
        browser.drain()
        assert browser.errors == []
    finally:
        rec.stop()


def test_the_forwarding_destinations_are_listed_with_their_state(browser: Browser, tmp_path: Path) -> None:
    import socket

    import vdifrec

    # One destination takes the stream; the other has nobody listening (refused: down).
    far = vdifrec.Recorder(port=0, ring="32MiB", frame_size=8224, live=False).start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    assert far.address is not None
    rec = vdifrec.Recorder(port=0, ring="32MiB", frame_size=8224, status_listen="127.0.0.1:0", live=False,
                           forward=[f"udp://127.0.0.1:{far.address[1]}", f"tcp://127.0.0.1:{dead}"])
    rec.start()
    sender = None
    try:
        assert rec.address is not None and rec.status_address is not None
        base = "http://%s:%d" % rec.status_address
        browser.open(base + "/")
        browser.wait_for("window.vdifrecPage.polls >= 1", timeout=20)
        sender = vdifrec.Sender(rec.address, duration=60, fps=2000)  # stopped below
        rows = "[...document.querySelectorAll('#forward-table tbody tr')].map((r) => [...r.cells].map((c) => c.textContent))"
        browser.wait_for(f"!document.getElementById('forwarding').hidden && {rows}.length === 2 && {rows}[0][1] === 'sending'"
                         f" && Number({rows}[0][2].replace(/\\D/g, '')) > 0", timeout=20)
        shown = browser.evaluate(rows)
        assert shown[0][0] == f"udp://127.0.0.1:{far.address[1]}"
        assert shown[1][:2] == [f"tcp://127.0.0.1:{dead}", "down"]
        assert "refused" in shown[1][7].lower()
        forward = get_status(base)["stats"]["forward"]
        assert [f["state"] for f in forward] == ["sending", "down"]
        browser.drain()
        assert browser.errors == []
    finally:
        if sender is not None:
            sender.stop()
        rec.stop()
        far.stop()
