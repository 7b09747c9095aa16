"""A headless Chromium for the tests of the control-room page, driven over the Chrome DevTools
Protocol (CDP) with websocket-client: no Selenium, no driver binary to match to the browser.

One page, one WebSocket, one thread: each command is sent and the replies read until its own
comes back; the events read on the way (exceptions, console errors) are collected. Every wait
is bounded, so a browser that hangs fails the test instead of the run.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import websocket

#: What to install where the tests find no browser.
INSTALL_HINT = "no Chromium found: apt-get install chromium (or set VDIFREC_CHROMIUM to its path)"


def find_chromium() -> str | None:
    """The Chromium (or Chrome) to run: $VDIFREC_CHROMIUM, else the first on PATH."""
    given = os.environ.get("VDIFREC_CHROMIUM")
    if given:
        return given
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(RuntimeError):
    """The browser did not start, did not answer in time, or a script raised."""


class Browser:
    """A headless Chromium showing one page.

    ``errors`` lists what the page reported as an error, each a dict with ``kind``
    ("exception", "console" or "log"), ``source`` (for "log": "network", "javascript", ...)
    and ``text``.
    """

    def __init__(self, chromium: str | None = None, width: int = 1600, height: int = 1200,
                 timeout: float = 20.0) -> None:
        exe = chromium or find_chromium()
        if exe is None:
            raise BrowserError(INSTALL_HINT)
        self.timeout = timeout
        self.errors: list[dict[str, str]] = []
        self._next_id = 0
        self._ws: websocket.WebSocket | None = None
        self._dir = Path(tempfile.mkdtemp(prefix="vdifrec-chromium-"))
        self._log = open(self._dir / "chromium.log", "wb")
        args = [
            exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
            f"--user-data-dir={self._dir / 'profile'}", f"--window-size={width},{height}",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "about:blank",
        ]
        # Its own process group, so that close() ends the renderer and helper processes too.
        self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._connect()
        except BaseException:
            self.close()
            raise

    # -- set-up ------------------------------------------------------------------------------------
    def _connect(self) -> None:
        # Chromium writes the port it chose (and the browser's WebSocket path) once it listens.
        port_file = self._dir / "profile" / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        port = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise BrowserError(f"chromium exited with status {self._proc.returncode}: {self.log_tail()}")
            try:
                first = port_file.read_text().splitlines()[0].strip()
                port = int(first)
                break
            except (OSError, IndexError, ValueError):
                time.sleep(0.05)
        if port is None:
            raise BrowserError(f"chromium wrote no DevToolsActivePort within {self.timeout} s: {self.log_tail()}")
        target = None
        while time.monotonic() < deadline and target is None:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                targets = json.loads(r.read())
            target = next((t for t in targets if t.get("type") == "page" and "webSocketDebuggerUrl" in t), None)
            if target is None:
                time.sleep(0.05)
        if target is None:
            raise BrowserError("chromium shows no page to attach to")
        # No Origin header: Chromium refuses WebSocket clients that send one it was not told of.
        self._ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=self.timeout,
                                               suppress_origin=True)
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    # -- the protocol ------------------------------------------------------------------------------
    def call(self, method: str, timeout: float | None = None, **params: Any) -> dict[str, Any]:
        """Sends one CDP command and returns its result, collecting the events read meanwhile."""
        if self._ws is None:
            raise BrowserError("the browser is closed")
        self._next_id += 1
        ident = self._next_id
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"{method}: no answer from chromium within {timeout or self.timeout} s")
            msg = self._receive(left)
            if msg is None:
                continue
            if msg.get("id") == ident:
                if "error" in msg:
                    raise BrowserError(f"{method}: {msg['error'].get('message')} {msg['error'].get('data', '')}")
                result: dict[str, Any] = msg.get("result", {})
                return result

    def _receive(self, timeout: float) -> dict[str, Any] | None:
        assert self._ws is not None
        self._ws.settimeout(timeout)
        try:
            raw = self._ws.recv()
        except websocket.WebSocketTimeoutException:
            return None
        msg: dict[str, Any] = json.loads(raw)
        if "method" in msg:
            self._event(msg["method"], msg.get("params", {}))
        return msg

    def _event(self, method: str, p: dict[str, Any]) -> None:
        if method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            text = d.get("exception", {}).get("description") or d.get("text", "")
            self.errors.append({"kind": "exception", "source": "javascript",
                                "text": f"{text} ({d.get('url', '')}:{d.get('lineNumber', '?')})"})
        elif method == "Runtime.consoleAPICalled" and p.get("type") == "error":
            args = p.get("args", [])
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in args)
            self.errors.append({"kind": "console", "source": "console-api", "text": text})
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            e = p["entry"]
            self.errors.append({"kind": "log", "source": e.get("source", ""),
                                "text": f"{e.get('text', '')} {e.get('url', '')}".strip()})

    def drain(self, seconds: float = 0.2) -> None:
        """Reads the events that arrived while nobody asked (for `errors`), for `seconds`."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self._receive(left)

    # -- what the tests use ------------------------------------------------------------------------
    def open(self, url: str) -> None:
        """Loads `url` and waits (bounded) until the document has loaded."""
        result = self.call("Page.navigate", url=url)
        if result.get("errorText"):
            raise BrowserError(f"{url}: {result['errorText']}")
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'")

    def evaluate(self, js: str, timeout: float | None = None) -> Any:
        """The value of the JavaScript expression `js` in the page (JSON-like; promises awaited)."""
        result = self.call("Runtime.evaluate", timeout=timeout, expression=js, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            d = result["exceptionDetails"]
            raise BrowserError(f"{js!r} raised {d.get('exception', {}).get('description') or d.get('text')}")
        return result.get("result", {}).get("value")

    def wait_for(self, condition: str, timeout: float = 10.0, every: float = 0.1) -> Any:
        """Waits until the JavaScript expression `condition` is truthy and returns its value;
        BrowserError after `timeout` seconds, with its last value."""
        deadline = time.monotonic() + timeout
        value: Any = None
        while True:
            try:
                value = self.evaluate(condition, timeout=max(deadline - time.monotonic(), 1.0))
            except BrowserError as e:  # e.g. a name not defined yet while the page loads
                value = f"<{e}>"
                if self._proc.poll() is not None:
                    raise
            else:
                if value:
                    return value
            if time.monotonic() >= deadline:
                raise BrowserError(f"waited {timeout} s for {condition!r}; it was {value!r}")
            self.drain(min(every, max(deadline - time.monotonic(), 0.0)))

    def screenshot(self, path: str | Path, full_page: bool = True) -> Path:
        """Saves a PNG of the page (the whole page, not only the window, by default)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        data = self.call("Page.captureScreenshot", **params)["data"]
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(data))
        return out

    def log_tail(self, n: int = 2000) -> str:
        """The end of what Chromium printed (for messages when it fails)."""
        try:
            return (self._dir / "chromium.log").read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        """Ends Chromium (politely, then by force; each wait bounded) and removes its profile."""
        if self._ws is not None:
            try:
                self._ws.send(json.dumps({"id": self._next_id + 1, "method": "Browser.close", "params": {}}))
            except (OSError, websocket.WebSocketException):
                pass
            try:
                self._ws.close(timeout=1)
            except (OSError, websocket.WebSocketException):
                pass
            self._ws = None
        for sig, wait in ((None, 3.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
            if sig is not None:
                try:
                    os.killpg(self._proc.pid, sig)
                except ProcessLookupError:
                    pass
            try:
                self._proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # Helpers left in the group (a zygote) once the main process has gone.
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
