"""One version, written in Cargo.toml only: the package, the command line, the installed metadata
and the changelog say the same (the wheel's own METADATA is checked by `make test-wheel`)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import vdifrec
from conftest import ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the standard library reads TOML from 3.11 on
    tomllib = None  # type: ignore[assignment]


def toml(name: str) -> dict[str, Any]:
    if tomllib is None:
        pytest.skip("reading TOML needs Python 3.11 (tomllib)")
    return tomllib.loads((ROOT / name).read_text())


def cargo_version() -> str:
    version: str = toml("Cargo.toml")["package"]["version"]
    return version


def test_the_version_is_written_in_cargo_toml_only() -> None:
    project = toml("pyproject.toml")["project"]
    assert "version" not in project and "version" in project["dynamic"], "maturin takes the version from Cargo.toml"


def test_package_command_and_metadata_say_cargo_tomls_version() -> None:
    version = cargo_version()
    assert vdifrec.__version__ == version
    assert importlib.metadata.version("vdifrec") == version
    command = Path(sys.executable).parent / "vdifrec"
    r = subprocess.run([str(command), "--version"], capture_output=True, text=True, timeout=60, check=True)
    assert r.stdout.strip() == f"vdifrec {version}"


def test_the_changelog_has_the_version() -> None:
    version = cargo_version()
    headings = [ln for ln in (ROOT / "CHANGELOG.md").read_text().splitlines() if ln.startswith("## ")]
    assert any(h.split()[1] == version for h in headings), f"CHANGELOG.md has no '## {version}' section: {headings}"
