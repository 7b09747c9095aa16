"""Shared fixtures. baseband (from PyPI) is the independent oracle for VDIF decoding."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_udp_port() -> int:
    """A UDP port on 127.0.0.1 that nothing listens on (free at the time of asking)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


def run_cli(*args: str, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Runs the installed `vdifrec` command line in a subprocess (bounded in time)."""
    cmd = [sys.executable, "-m", "vdifrec.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=check)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(autouse=True)
def _quiet_astropy(monkeypatch: pytest.MonkeyPatch) -> None:
    # Keep astropy from reaching for the network to refresh its leap-second table.
    monkeypatch.setenv("ASTROPY_SKIP_CONFIG_UPDATE", "1")


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        from astropy.utils import iers

        iers.conf.auto_download = False
        iers.conf.auto_max_age = None
    except Exception:  # pragma: no cover - astropy is a test dependency
        pass
