"""Names and paths from a hostile control port (docs/reference/formats/vsi.md, "Names and
paths"): every VSI-S command that takes a scan or a path is fed random names, absolute paths,
`..`, links out of the disks and NUL bytes, and nothing outside the disks and the gather
directory is ever opened. The outside holds a sentinel file of known bytes, which must never
appear in a reply or a copy, and a sentinel Mark6 file, which must never be taken for a scan."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest
from conftest import run_cli

from test_catalogue import FS, stream, write_vbs_scan
from test_vsi import Serve

#: Bytes no scan holds: a reply that quotes a file's first bytes (as a sync word, say) shows them.
SENTINEL = b"SNTL" + bytes(range(4, 32)) + b"sentinel-bytes-outside-the-disks" * 64
MK6_SYNC = 0xFEED6666


def sentinel_forms() -> list[str]:
    """How the sentinel's first bytes could appear in a reply: as text, or as a number."""
    word = struct.unpack("<I", SENTINEL[:4])[0]
    return ["SNTL", "sentinel-bytes", f"{word:#x}", f"{word:#010x}", str(word), f"{struct.unpack('>I', SENTINEL[:4])[0]:#x}"]


def outside_tree(tmp_path: Path, disks: list[Path]) -> dict[str, Path]:
    """The sentinels outside the disks, and links from inside the disks to them."""
    out = tmp_path / "outside"
    out.mkdir()
    secret = out / "secret.vdif"
    secret.write_bytes(SENTINEL)
    mk6 = out / "sentinel_mk6"
    frames = stream(tmp_path, 8, name="mk6frames.vdif")
    mk6.write_bytes(struct.pack("<Iiiii", MK6_SYNC, 2, 8 + 8 * FS, 0, FS) + struct.pack("<ii", 0, 8 + 8 * FS) + frames)
    vbs = out / "sentinel_vbs"
    vbs.mkdir()
    (vbs / "sentinel_vbs.00000000").write_bytes(SENTINEL)
    # Links at the top of a disk, and inside a scan's directory, that lead out.
    (disks[0] / "linked_file.vdif").symlink_to(secret)
    (disks[0] / "linked_mk6").symlink_to(mk6)
    (disks[0] / "linked_dir").symlink_to(out)
    (disks[1] / "linked_vbs").symlink_to(vbs)
    return {"out": out, "secret": secret, "mk6": mk6, "vbs": vbs}


def probes(rng: random.Random, tmp_path: Path, tree: dict[str, Path], n: int) -> list[str]:
    """`n` names and paths, drawn from pieces a hostile user would put together."""
    pieces = ["..", ".", "/", "outside", "secret.vdif", "secret", "sentinel_mk6", "sentinel_vbs", "linked_file",
              "linked_mk6", "linked_dir", "linked_vbs", "linked_file.vdif", "disk0", "disk1", "r1_kv_ok", "*", "?",
              "\x00", "é", "%s", "etc", "passwd", "proc", "self", "fd", "0", "\\", "~", "$HOME", " ", "gather"]
    fixed = [str(tree["secret"]), str(tree["mk6"]), str(tree["vbs"]), "/etc/passwd", "/proc/self/environ",
             "../outside/secret.vdif", "../../outside/sentinel_mk6", "disk0/../outside/secret.vdif",
             f"{tmp_path}/disk0/linked_file.vdif", "linked_dir/secret.vdif", "linked_dir/sentinel_mk6",
             "linked_file", "linked_mk6", "linked_vbs", "sentinel_mk6", "sentinel_vbs", "r1_kv_ok\x00/etc/passwd",
             "\x00", "linked*", "*mk6*", "sentinel*", "/" * 300, "a" * 5000]
    drawn = []
    for _ in range(n):
        k = rng.randint(1, 5)
        sep = rng.choice(["/", "", "/", "_"])
        text = sep.join(rng.choice(pieces) for _ in range(k))
        if rng.random() < 0.3:
            text = rng.choice(["/", str(tmp_path) + "/", "../", str(tree["out"]) + "/"]) + text
        drawn.append(text)
    return fixed + drawn


def commands(probe: str) -> list[str]:
    """Every command that takes a scan or a path, with `probe` where the scan or path goes."""
    return [f"scan_set={probe}", f"scan_set={probe}:+{FS}", "scan_check?", f"disk2file={probe}", "disk2file?",
            f"set_disks={probe}", "set_disks?", f"record=on:{probe}", "record=off", f"scan_set={probe}:s:+1000"]


def tree_state(tmp_path: Path, serve: Serve) -> dict[str, tuple[int, int]]:
    """Every file and directory under `tmp_path` outside the disks and the gather directory
    (serve's own output and log aside), with its size and modification time."""
    inside = {*serve.disks, serve.gather}
    state = {}
    for dirpath, dirs, files in os.walk(tmp_path):
        here = Path(dirpath)
        dirs[:] = [d for d in dirs if here / d not in inside]
        for name in [*dirs, *files]:
            p = here / name
            if p in (serve.out, serve.log):
                continue
            st = p.lstat()
            state[str(p)] = (st.st_size, st.st_mtime_ns)
    return state


@pytest.mark.slow
def test_no_name_or_path_opens_anything_outside_the_disks(tmp_path: Path) -> None:
    serve = Serve(tmp_path)
    try:
        data = stream(tmp_path, 20)
        write_vbs_scan(serve.disks, "r1_kv_ok", data, 10)
        tree = outside_tree(tmp_path, serve.disks)
        assert serve.one("net_port=0").code == 0
        given = set(serve.one("set_disks?").fields[1:])
        assert len(given) == 2
        outside_before = tree_state(tmp_path, serve)
        rng = random.Random(36)
        forms = sentinel_forms()
        answered = 0
        for probe in probes(rng, tmp_path, tree, 150):
            # A probe's own text is echoed in refusals: look for the sentinel beyond it.
            for command in commands(probe.replace(";", ",").replace("\n", " ").replace("\r", " ")):
                for r in serve(command):
                    answered += 1
                    text = str(r).replace(probe, "")
                    assert not any(f in text for f in forms), (command, str(r))
                    if r.keyword == "scan_set" and r.code == 0:
                        # Only the scan on the disks is ever set, however it was named.
                        assert serve.one("scan_set?").fields[1] == "r1_kv_ok", (command, r)
                    if r.keyword == "set_disks" and not r.query and r.code == 0:
                        # Only disks the station was given can be chosen.
                        chosen = serve.one("set_disks?").fields[1:]
                        assert chosen and set(chosen) <= given, (command, chosen)
                    if r.keyword == "record" and not r.query and r.code in (0, 1):
                        assert serve.one("record=off").code in (0, 1, 4, 6)
            # Back to the disks the station was given, for the next probe.
            serve.one(f"set_disks={tmp_path}/disk*")
        assert answered > 1000
        # The station answers still, with both disks.
        assert serve.one("set_disks?").fields[0] == "2"
        # Nothing of the outside was copied into the gather directory, or anywhere on the disks.
        for root in (serve.gather, *serve.disks):
            for dirpath, _, files in os.walk(root):
                for f in files:
                    p = Path(dirpath) / f
                    if not p.is_symlink():
                        assert b"sentinel-bytes" not in p.read_bytes(), p
                        assert p.read_bytes()[:4] != struct.pack("<I", MK6_SYNC), p
        assert tree["secret"].read_bytes() == SENTINEL
        # Nothing was made, changed or removed outside the disks and the gather directory.
        assert tree_state(tmp_path, serve) == outside_before
    finally:
        serve.stop()


def test_a_scan_name_on_the_command_line_is_a_name_and_never_a_path(tmp_path: Path) -> None:
    disk = tmp_path / "disk0"
    disk.mkdir()
    for name in ("../outside", "/etc/passwd", "a/b", "..", "r1.vdif"):
        r = run_cli("record", "--port=0", "--disk", str(disk), "--scan", name, "--duration=1", timeout=60)
        assert r.returncode == 2 and r.stderr.startswith("vdifrec record: error: --scan: "), (name, r.stderr)
    assert os.listdir(disk) == [] and sorted(os.listdir(tmp_path)) == ["disk0"]


def test_a_non_ascii_name_is_echoed_as_it_was_sent(tmp_path: Path) -> None:
    serve = Serve(tmp_path)
    try:
        assert serve.one("net_port=0").code == 0
        r = serve.one("record=on:scé_1")
        assert r.code == 8 and r.fields[-1].startswith('name - "scé_1" holds \'é\''), r
        r = serve.one("scan_set=scé_1")
        assert r.code == 4 and r.fields == ("'scé_1' does not exist in Mk6/VBS format",), r
    finally:
        serve.stop()
