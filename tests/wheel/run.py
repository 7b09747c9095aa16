"""`make test-wheel`: the wheel in dist/ installed where a scientist would install it.

For every Python 3.10-3.13 this machine has (pyenv's versions, else python3.X on PATH; a
missing one is reported and skipped), a fresh virtual environment in a temporary folder gets
the wheel and numpy 2.x from binary wheels only, with cargo and rustc taken off PATH, and runs
smoke.py there; then numpy 1.26 replaces numpy 2 in the same environment (Pythons that numpy 1
has wheels for: 3.10-3.12) and smoke.py runs again. The wheel file itself is checked first: its
tags, its METADATA version against Cargo.toml, and the glibc symbols its extension needs.

Prints a table of Python x numpy -> result; exit status 0 when every run passed (and at least
one ran), 1 otherwise.

    python tests/wheel/run.py [--dist dist] [--jobs N] [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMOKE = Path(__file__).resolve().parent / "smoke.py"
MINORS = (10, 11, 12, 13)
# numpy 1.26, the last numpy 1, has wheels for CPython 3.9-3.12.
NUMPY_1_UP_TO_MINOR = 12
NUMPY = {2: "numpy>=2,<3", 1: "numpy>=1.26,<2"}
RUST_TOOLS = ("cargo", "rustc", "rustup")
# manylinux2014: glibc 2.17.
GLIBC = (2, 17)


def cargo_version() -> str:
    """The version in Cargo.toml's [package] table: the one place the version is written."""
    text = (ROOT / "Cargo.toml").read_text()
    package = re.search(r"^\[package\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    m = re.search(r'^version\s*=\s*"([^"]+)"', package.group(1) if package else "", re.M)
    if m is None:
        sys.exit("Cargo.toml: no version in [package]")
    return m.group(1)


def find_wheel(dist: Path, version: str) -> Path:
    wheels = sorted(dist.glob(f"vdifrec-{version}-*.whl"))
    if len(wheels) != 1:
        sys.exit(f"{dist}: expected one vdifrec {version} wheel, found {[w.name for w in wheels]} (run `make wheel`)")
    return wheels[0]


def check_wheel_file(wheel: Path, version: str) -> list[str]:
    """What is wrong with the wheel file itself (its name's tags, its METADATA and WHEEL, the
    glibc symbols its extension needs)."""
    problems = []
    tags = wheel.name[: -len(".whl")].split("-")[2:]
    if tags[:2] != ["cp310", "abi3"] or "manylinux2014_x86_64" not in tags[2].split("."):
        problems.append(f"tags {'-'.join(tags)}: expected cp310-abi3-manylinux2014_x86_64")
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(f"vdifrec-{version}.dist-info/METADATA").decode()
        wheel_info = z.read(f"vdifrec-{version}.dist-info/WHEEL").decode()
        problems += [f"vdifrec/_core.abi3.so: {p}" for p in glibc_problems(z.read("vdifrec/_core.abi3.so"))]
    headers = dict(line.split(": ", 1) for line in meta.split("\n\n", 1)[0].splitlines() if ": " in line)
    if headers.get("Version") != version:
        problems.append(f"METADATA Version {headers.get('Version')!r}, Cargo.toml {version!r}")
    if headers.get("Requires-Python") != ">=3.10":
        problems.append(f"METADATA Requires-Python {headers.get('Requires-Python')!r}")
    if "Tag: cp310-abi3-manylinux2014_x86_64" not in wheel_info:
        problems.append("WHEEL lacks Tag: cp310-abi3-manylinux2014_x86_64")
    return problems


def glibc_problems(elf: bytes, newest: tuple[int, int] = GLIBC) -> list[str]:
    """The extension's undefined symbols that a system with glibc `newest` may lack: a symbol of
    a newer glibc version, or a strong one with no version at all that is not Python's own (the
    linker leaves a function that zig's glibc 2.17 does not have unversioned; maturin's
    compliance check passes it, and the loader fails on glibc 2.17-2.26). Reads the ELF's
    dynamic symbols and their version needs (64-bit little-endian, as on x86_64)."""
    def u(fmt: str, off: int) -> tuple[int, ...]:
        return struct.unpack_from("<" + fmt, elf, off)

    def cstr(table: int, off: int) -> str:
        end = elf.index(b"\0", table + off)
        return elf[table + off:end].decode()

    shoff, = u("Q", 0x28)
    shentsize, shnum = u("HH", 0x3A)
    sections = [u("IIQQQQIIQQ", shoff + i * shentsize) for i in range(shnum)]
    by_type = {sec[1]: sec for sec in sections}
    dynsym, versym, verneed = by_type[11], by_type.get(0x6FFFFFFF), by_type.get(0x6FFFFFFE)
    dynstr = sections[dynsym[6]][4]
    versions: dict[int, str] = {}
    if verneed is not None:
        strtab, off = sections[verneed[6]][4], verneed[4]
        for _ in range(verneed[7]):
            _, count, _, aux, nxt = u("HHIII", off)
            a = off + aux
            for _ in range(count):
                _, _, index, version_name, anext = u("IHHII", a)
                versions[index] = cstr(strtab, version_name)
                a += anext
            off += nxt
    problems = []
    for i in range(1, dynsym[5] // 24):
        name_off, info, _, shndx = u("IBBH", dynsym[4] + i * 24)
        if shndx != 0:
            continue
        name = cstr(dynstr, name_off)
        index = u("H", versym[4] + 2 * i)[0] & 0x7FFF if versym is not None else 1
        version = versions.get(index, "")
        m = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", version)
        if m and (int(m.group(1)), int(m.group(2))) > newest:
            problems.append(f"{name} needs {version}, newer than glibc {newest[0]}.{newest[1]}")
        elif not version and info >> 4 != 2 and not name.startswith(("Py", "_Py")):
            problems.append(f"{name} is undefined and has no version: not in glibc {newest[0]}.{newest[1]}?")
    return problems


def find_python(minor: int) -> Path | None:
    """This machine's python3.`minor`: pyenv's newest 3.`minor`.x, else python3.`minor` on PATH;
    only one that runs, is that version and can make a virtual environment with pip."""
    candidates: list[Path] = []
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    def patch(p: Path) -> tuple[int, ...]:
        return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.\-]", p.name))
    for d in sorted(pyenv_root.glob(f"versions/3.{minor}.*"), key=patch, reverse=True):
        candidates.append(d / "bin" / f"python3.{minor}")
    on_path = shutil.which(f"python3.{minor}")
    if on_path:
        candidates.append(Path(on_path))
    for exe in candidates:
        if not exe.exists():
            continue
        try:
            r = subprocess.run([str(exe), "-c", "import sys, venv, ensurepip; print(sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0 and r.stdout.strip() == f"(3, {minor})":
            return exe
    return None


def without_rust(venv: Path) -> dict[str, str]:
    """The environment of a scientist's machine: the venv first on PATH, no directory that holds
    cargo or rustc, nothing of the development set-up."""
    keep = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not any(os.path.exists(os.path.join(d, t)) for t in RUST_TOOLS)]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CARGO", "RUSTUP", "RUSTC", "MATURIN", "PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=os.pathsep.join([str(venv / "bin"), *keep]), VIRTUAL_ENV=str(venv),
               PYTHONNOUSERSITE="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return env


@dataclass
class Run:
    python: str
    numpy: str = ""
    result: str = ""
    seconds: float = 0.0
    log: list[str] = field(default_factory=list)


def run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float, log: list[str]) -> bool:
    log.append("$ " + " ".join(cmd))
    try:
        r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        said = b"".join(x if isinstance(x, bytes) else (x or "").encode() for x in (exc.stdout, exc.stderr))
        log.append(f"timed out after {timeout:.0f} s\n{said.decode(errors='replace')}")
        return False
    log.append((r.stdout + r.stderr).rstrip())
    return r.returncode == 0


def test_python(minor: int, exe: Path, wheel: Path, version: str, tmp: Path) -> list[Run]:
    """The fresh environment for one Python and the smoke test with each numpy."""
    venv = tmp / f"py3{minor}"
    runs: list[Run] = []
    full = subprocess.run([str(exe), "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True).stdout.strip()
    start = time.monotonic()
    setup = Run(f"{full} ({exe})")
    if not run([str(exe), "-m", "venv", str(venv)], dict(os.environ), tmp, 120, setup.log):
        setup.result, setup.numpy = "FAIL (venv)", "-"
        return [setup]
    env = without_rust(venv)
    py = str(venv / "bin" / "python")
    for major in (2, 1):
        r = Run(setup.python, log=list(setup.log) if major == 2 else [])
        runs.append(r)
        if major == 1 and minor > NUMPY_1_UP_TO_MINOR:
            r.numpy, r.result = "1.x", f"n/a (numpy 1 has no wheel for 3.{minor})"
            continue
        if major == 1 and runs[0].result.startswith("FAIL (pip"):
            r.numpy, r.result = "1.x", "not run (the wheel did not install)"
            continue
        pip = [py, "-m", "pip", "install", "--quiet", "--only-binary=:all:"]
        installed = run(pip + ([str(wheel)] if major == 2 else []) + [NUMPY[major]], env, tmp, 600, r.log)
        r.numpy = subprocess.run([py, "-c", "import numpy; print(numpy.__version__)"], env=env, cwd=tmp,
                                 capture_output=True, text=True).stdout.strip() or NUMPY[major]
        if not installed:
            r.result, r.seconds = "FAIL (pip install)", time.monotonic() - start
            continue
        work = tmp / f"py3{minor}-numpy{major}"
        work.mkdir()
        # Environments are made side by side, but one loopback recording runs at a time.
        passed = run([py, "-I", str(SMOKE), "--version", version, "--numpy-major", str(major),
                      "--workdir", str(work), "--lock", str(tmp / "recording.lock")], env, work, 300, r.log)
        r.result, r.seconds = ("PASS" if passed else "FAIL"), time.monotonic() - start
        start = time.monotonic()
    return runs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dist", type=Path, default=ROOT / "dist", help="where `make wheel` put the wheel")
    p.add_argument("--jobs", type=int, default=2, help="Pythons tested at the same time (default 2)")
    p.add_argument("--keep", action="store_true", help="keep the temporary environments and print where")
    a = p.parse_args()
    version = cargo_version()
    wheel = find_wheel(a.dist, version)
    print(f"wheel: {wheel.name}")
    problems = check_wheel_file(wheel, version)
    for problem in problems:
        print(f"FAIL wheel file: {problem}")
    if not problems:
        print(f"ok   wheel file: tags cp310-abi3-manylinux2014_x86_64, METADATA version {version} (Cargo.toml), "
              f"no symbol beyond glibc {GLIBC[0]}.{GLIBC[1]}")

    found: dict[int, Path] = {}
    for minor in MINORS:
        exe = find_python(minor)
        if exe is None:
            print(f"MISSING Python 3.{minor}: no pyenv version 3.{minor}.x and no working python3.{minor} on PATH; skipped")
        else:
            found[minor] = exe

    tmp = Path(tempfile.mkdtemp(prefix="vdifrec-wheel-"))
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
            futures = {m: pool.submit(test_python, m, exe, wheel, version, tmp) for m, exe in found.items()}
            results = {m: f.result() for m, f in futures.items()}
    finally:
        if a.keep:
            print(f"environments kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    rows: list[tuple[str, str, str, str]] = []
    failed = bool(problems) or not found
    for minor in MINORS:
        if minor not in found:
            rows.append((f"3.{minor}", "-", "MISSING (skipped)", ""))
            continue
        for r in results[minor]:
            rows.append((r.python, r.numpy, r.result, f"{r.seconds:.0f} s" if r.seconds else ""))
            if r.result.startswith("FAIL"):
                failed = True
                print(f"\n--- {r.python}, numpy {r.numpy}: {r.result}")
                print("\n".join(r.log)[-6000:])
    widths = [max(len(row[i]) for row in rows + [("Python", "numpy", "result", "time")]) for i in range(4)]
    print()
    for row in [("Python", "numpy", "result", "time"), *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    print(f"\nwheel {wheel.name} on {len(found)} Python(s) in {time.monotonic() - started:.0f} s: "
          f"{'FAILED' if failed else 'all passed'}")
    if not found:
        print("no Python 3.10-3.13 found: nothing was tested")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
