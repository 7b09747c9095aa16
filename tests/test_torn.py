"""Scans a recorder stopped mid-write (power lost, `kill -9`) left torn, read back by every
reader to the last whole frame of each file: layouts written here by hand from `vdifrec.generate`
output as in test_scans.py, then torn as writers leave them (a file cut inside a frame, a Mark6
block or block header cut short, a chunk created and left empty; one writer per disk, so torn
pieces in the middle of a scan too). The original file's bytes are the oracle for the frames,
baseband reading it the oracle for the samples, and the bytes on disk that are not whole frames
the oracle for what each reader says it left out."""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_scans import FS, STARTS, baseband_samples, make_disks, original, write_mk6, write_vbs
from test_transfer import digest_of

import vdifrec

#: Mark6 blocks over the three disks in turn: disk k holds blocks k and k + 3.
MK6_TURNS = [0, 1, 2, 0, 1, 2]
#: vbs chunks over the disks as test_scans lays them: chunks 3, 4 and 5 on disks 1, 2 and 0.
VBS_ORDER = [2, 0, 1, 1, 2, 0]


@dataclasses.dataclass
class Torn:
    """A torn scan as written here, and what every reader must make of it."""

    name: str
    fmt: str
    disks: list[Path]
    #: The frames read, as runs (first frame of the original, count), in stream order.
    runs: list[tuple[int, int]]
    #: Torn pieces written.
    pieces: int
    #: Bytes on disk that are Mark6 headers of the blocks kept and of the files (0: vbs, file).
    headers: int = 0

    @property
    def d(self) -> list[str]:
        return [str(x) for x in self.disks]

    @property
    def frames(self) -> int:
        return sum(n for _, n in self.runs)

    @property
    def at_end_only(self) -> bool:
        """Torn at the end of the scan alone: no frame missing before the last one read."""
        return len(self.runs) == 1

    @property
    def lost(self) -> int:
        """Frames never written between the runs (torn in the middle of the scan)."""
        return sum(b[0] - (a[0] + a[1]) for a, b in zip(self.runs, self.runs[1:]))

    def kept(self, data: bytes) -> bytes:
        return b"".join(data[a * FS:(a + n) * FS] for a, n in self.runs)

    def files(self) -> list[Path]:
        out = []
        for d in self.disks:
            if self.fmt == "vbs":
                out += sorted((d / self.name).glob(f"{self.name}.????????"))
            elif self.fmt == "mk6":
                out += [d / self.name] if (d / self.name).is_file() else []
            else:
                out += sorted(d.glob(f"{self.name}*.vdif"))
        return out

    def torn_on_disk(self) -> int:
        """The oracle: bytes of the scan's files that are neither whole frames read nor the
        Mark6 headers kept."""
        return sum(p.stat().st_size for p in self.files()) - self.frames * FS - self.headers


def cut(path: Path, length: int) -> None:
    os.truncate(path, length)


def make(kind: str, tmp_path: Path, data: bytes) -> Torn:
    disks = make_disks(tmp_path)
    name = "kv_torn"
    if kind == "file":
        # A `file` scan rotated by size: its second part stopped 777 bytes into frame 331.
        (disks[1] / f"{name}.vdif").write_bytes(data[:200 * FS])
        (disks[1] / f"{name}.0001.vdif").write_bytes(data[200 * FS:331 * FS + 777])
        return Torn(name, "file", disks, [(0, 331)], 1)
    if kind.startswith("vbs"):
        write_vbs(data, disks, name, VBS_ORDER)

        def chunk(k: int, disk: int, first: int, frames: int, extra: int) -> None:
            (disks[disk] / name / f"{name}.{k:08d}").write_bytes(data[first * FS:(first + frames) * FS + extra])

        if kind == "vbs_end":
            # The last chunk stopped 333 bytes into its 24th frame; the next one created, empty.
            chunk(5, 0, 350, 23, 333)
            (disks[1] / name / f"{name}.00000006").write_bytes(b"")
            return Torn(name, "vbs", disks, [(0, 373)], 2)
        # Three writers, one per disk, each stopped in its chunk (3, 4 and 5).
        chunk(3, 1, 201, 60, 100)
        chunk(4, 2, 300, 30, 1000)
        chunk(5, 0, 350, 7, 5)
        return Torn(name, "vbs", disks, [(0, 261), (300, 30), (350, 7)], 3)
    paths = write_mk6(data, disks, name, MK6_TURNS)
    # Disk 2's last block (5: frames 350..400) holds 20 frames and 500 bytes of the 50 its
    # header claims; disk 1 ends after block 4 with 5 bytes of the next block header.
    cut(paths[2], paths[2].stat().st_size - 50 * FS + 20 * FS + 500)
    with paths[1].open("ab") as f:
        f.write(struct.pack("<i", 6)[:4] + b"\x00")
    headers = 3 * 20 + 6 * 8
    if kind == "mk6_end":
        return Torn(name, "mk6", disks, [(0, 370)], 2, headers)
    # A third writer: disk 0's last block (3: frames 201..300) holds 40 frames and 17 bytes.
    cut(paths[0], paths[0].stat().st_size - 99 * FS + 40 * FS + 17)
    return Torn(name, "mk6", disks, [(0, 241), (300, 70)], 3, headers)


KINDS = ["file", "vbs_end", "vbs_writers", "mk6_end", "mk6_writers"]


@pytest.fixture(params=KINDS)
def torn(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Torn, Path, bytes]:
    orig = original(tmp_path)
    data = orig.read_bytes()
    return make(request.param, tmp_path, data), orig, data


def assert_torn_listed(pieces: list[dict[str, Any]], t: Torn) -> None:
    assert len(pieces) == t.pieces, pieces
    assert sum(p["bytes"] for p in pieces) == t.torn_on_disk()
    for p in pieces:
        # Each piece reaches its file's end, and names it.
        assert p["offset"] + p["bytes"] == Path(p["path"]).stat().st_size
        assert p["path"] in p["description"]


def test_every_reader_reads_the_whole_frames_and_says_what_was_torn(torn: tuple[Torn, Path, bytes], cli) -> None:
    t, orig, data = torn
    kept = t.kept(data)
    # open: the whole frames in order, byte for byte; the samples as baseband reads them.
    with vdifrec.open(t.name, disks=t.d) as fh:
        assert_torn_listed(fh.torn, t)
        assert np.concatenate(fh.frame_parts).tobytes() == kept
        assert "torn=" in repr(fh) and "bytes left out" in repr(fh)
        want = baseband_samples(orig)
        spf = fh.samples_per_frame
        # Up to the first torn piece the stream is the original's (frame sets of 2 threads).
        first = t.runs[0][1] // 2 * spf
        if t.at_end_only:
            assert fh.shape[0] == first
        samples = fh.read()
        np.testing.assert_array_equal(samples[:first], want[:first])

    # scans: sizes and times of whole frames; the torn pieces and their bytes.
    (s,) = vdifrec.scans(t.d)
    assert (s["name"], s["format"], s["bytes"], s["error"], s["missing"]) == (t.name, t.fmt, t.frames * FS, None, [])
    assert s["torn_bytes"] == t.torn_on_disk()
    assert_torn_listed(s["torn"], t)
    last = t.runs[-1][0] + t.runs[-1][1] - 1
    assert (s["last"]["seconds"], s["last"]["frame"], s["last"]["thread"]) == (1000 + last // 100, last // 2 % 50, last % 2)
    res = cli("scans", "--disk", str(t.disks[0].parent / "disk*"))
    assert res.returncode == 1, res.stdout + res.stderr
    n = t.pieces
    assert f"torn: {n} piece{'' if n == 1 else 's'}, {t.torn_on_disk():,} bytes (" in res.stdout

    # check: the whole frames counted; the frames never written between torn pieces lost.
    r = vdifrec.check(t.name, disks=t.d)
    assert (r["frames"], r["totals"]["lost"], r["clean"]) == (t.frames, t.lost, False)
    assert r["trailing_bytes"] == 0 and r["corrupt_bytes"] == 0
    assert r["scan"]["torn_bytes"] == t.torn_on_disk()
    assert_torn_listed(r["scan"]["torn"], t)
    res = cli("check", t.name, "--disk", *t.d[:1], *[x for d in t.d[1:] for x in ("--disk", d)])
    assert res.returncode == 1
    assert f"torn         {n} piece{'' if n == 1 else 's'}, {t.torn_on_disk():,} bytes left out" in res.stdout
    assert res.stdout.count("torn         ") == n + 1

    # gather: the whole frames written, what was left out said; no error.
    out = t.disks[0].parent / "gathered.vdif"
    g = vdifrec.gather(t.name, t.d, out)
    assert out.read_bytes() == kept
    assert (g["bytes"], g["torn_bytes"], g["complete"]) == (len(kept), t.torn_on_disk(), True)
    out.unlink()
    res = cli("gather", t.name, "--disk", str(t.disks[0].parent / "disk*"), "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == kept
    assert f"left out     {t.torn_on_disk():,} torn bytes: " in res.stdout


def test_dask_reads_a_torn_scan_as_the_reader_does(torn: tuple[Torn, Path, bytes]) -> None:
    pytest.importorskip("dask")
    import vdifrec.dask as vd

    t, _, _ = torn
    x = vd.open(t.name, chunk_frames=16, disks=t.d)
    with vdifrec.open(t.name, disks=t.d) as fh:
        assert x.shape == fh.shape
        np.testing.assert_array_equal(x.compute(scheduler="synchronous"), fh.read())
        assert x.torn == fh.torn


def push(t: Torn, token: Path, into: Path, **kw: Any) -> dict[str, Any]:
    with vdifrec.Receiver(into, listen="127.0.0.1:0", token_file=token) as r:
        return vdifrec.push(t.name, disks=t.d, to=r.address, token_file=token, block_size=64 << 10, **kw)


def test_push_ships_the_whole_frames_and_says_what_it_left_out(torn: tuple[Torn, Path, bytes], token: Path,
                                                               tmp_path: Path) -> None:
    t, _, data = torn
    kept = t.kept(data)
    s = push(t, token, tmp_path / "incoming")
    (item,) = s["items"]
    assert s["ok"] and item["state"] == "sent" and item["bytes"] == len(kept), s
    # The receiver's checksums and its read-back cover exactly the whole frames.
    assert (tmp_path / "incoming" / t.name).read_bytes() == kept
    assert item["digest"] == digest_of([kept], 64 << 10)
    assert len(item["notes"]) == t.pieces
    left = [n for n in item["notes"] if n.startswith("left out ") and " torn bytes at byte " in n]
    assert len(left) == len([n for n in item["notes"] if "empty" not in n]), item["notes"]
    if t.fmt == "vbs":
        # As chunks: one file per part holding whole frames, each exactly those frames.
        s = push(t, token, tmp_path / "as_vbs", layout="vbs")
        chunks = sorted((tmp_path / "as_vbs" / t.name).iterdir())
        assert b"".join(c.read_bytes() for c in chunks) == kept
        assert s["items"][0]["notes"] == item["notes"]


def test_repair_leaves_whole_frames_only_and_says_what_it_cut(torn: tuple[Torn, Path, bytes], token: Path,
                                                             tmp_path: Path, cli) -> None:
    t, _, data = torn
    kept = t.kept(data)
    to_cut = t.torn_on_disk()
    glob = str(t.disks[0].parent / "disk*")
    res = cli("scans", "--repair", t.name, "--disk", glob, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    r = json.loads(res.stdout)
    assert (len(r["cut"]), r["bytes_cut"], r["bytes"], r["missing"], r["notes"]) == (
        t.pieces, to_cut, len(kept), [], [])
    assert sum(c["frames_kept"] for c in r["cut"]) <= t.frames
    # Nothing but whole frames (and the Mark6 headers) is left on disk, the same frames.
    assert t.torn_on_disk() == 0
    (s,) = vdifrec.scans(t.d)
    assert (s["torn"], s["torn_bytes"], s["bytes"]) == ([], 0, len(kept))
    with vdifrec.open(t.name, disks=t.d) as fh:
        assert fh.torn == []
        assert np.concatenate(fh.frame_parts).tobytes() == kept
    # A second repair cuts nothing.
    assert vdifrec.repair(t.name, t.d)["cut"] == []
    res = cli("scans", "--repair", t.name, "--disk", glob)
    assert res.returncode == 0
    assert "nothing torn, nothing cut" in res.stdout
    # Checked: clean where only the scan's end was torn; else the frames never written count
    # as lost, and nothing as torn.
    c = vdifrec.check(t.name, disks=t.d)
    assert (c["clean"], c["totals"]["lost"], c["scan"]["torn"]) == (t.at_end_only, t.lost, [])
    res = cli("check", t.name, "--disk", glob)
    assert res.returncode == (0 if t.at_end_only else 1)
    assert not [line for line in res.stdout.splitlines() if line.startswith("torn ")]
    # Pushed: verified, nothing left out.
    s = push(t, token, tmp_path / "incoming")
    (item,) = s["items"]
    assert (item["state"], item["notes"]) == ("sent", [])
    assert (tmp_path / "incoming" / t.name).read_bytes() == kept


def test_repair_says_what_it_cut_in_words(tmp_path: Path, cli) -> None:
    data = original(tmp_path).read_bytes()
    t = make("vbs_writers", tmp_path, data)
    res = cli("scans", "--repair", t.name, "--disk", str(tmp_path / "disk*"))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"repaired     {t.name} (vbs on {', '.join(t.d)}): cut 3 torn pieces, 1,105 bytes"
    chunk3 = t.disks[1] / t.name / f"{t.name}.00000003"
    assert lines[1] == (f"cut          chunk 3 of {chunk3}: 100 bytes from byte 63,360, 60 whole frames kept: "
                        "truncated to 63,360 bytes (60 whole frames)")
    assert lines[-4] == f"now          {t.frames * FS:,} bytes of whole frames in 6 part(s)"
    # The report is left beside the scan on each disk, which marks it closed.
    assert lines[-3:] == [f"report       {d / t.name / t.name}.repair.json" for d in t.disks]
    assert json.loads((t.disks[0] / t.name / f"{t.name}.repair.json").read_text())["bytes_cut"] == 1105
    (s,) = vdifrec.scans(t.d)
    assert s["closed"]


def test_a_middle_chunk_with_no_whole_frame_is_removed_and_known_to_have_held_nothing(tmp_path: Path,
                                                                                      token: Path) -> None:
    data = original(tmp_path).read_bytes()
    disks = make_disks(tmp_path)
    write_vbs(data, disks, "s1", VBS_ORDER)
    # Chunk 3's writer had written 40 bytes when chunk 4's had whole frames.
    chunk3 = disks[1] / "s1" / "s1.00000003"
    chunk3.write_bytes(data[201 * FS:201 * FS + 40])
    d = [str(x) for x in disks]
    with vdifrec.open("s1", disks=d) as fh:
        (p,) = fh.torn
        assert (p["part"], p["kind"], p["offset"], p["bytes"], p["frames"]) == (3, "partial_frame", 0, 40, 0)
        before = np.concatenate(fh.frame_parts).tobytes()
        assert len(fh.frame_parts) == 5
    r = vdifrec.repair("s1", d)
    assert not chunk3.exists()
    assert (r["missing"], r["emptied"], r["bytes_cut"]) == ([], [3], 40)
    assert "chunk(s) 3 held no whole frame and were removed" in r["notes"][0]
    # The report beside the scan says chunk 3 held nothing: no gap, the same frames, and the
    # scan ships; the frames it would have held were never written, and check counts them lost.
    (s,) = vdifrec.scans(d)
    assert (s["missing"], s["torn"], s["closed"], s["chunks"]) == ([], [], True, 5)
    with vdifrec.open("s1", disks=d) as fh:
        assert fh.torn == [] and np.concatenate(fh.frame_parts).tobytes() == before
    c = vdifrec.check("s1", disks=d)
    assert (c["totals"]["lost"], c["scan"]["missing"]) == (STARTS[4] - 201, [])
    p = push(Torn("s1", "vbs", disks, [], 0), token, tmp_path / "incoming")
    assert p["ok"] and (tmp_path / "incoming" / "s1").read_bytes() == before
    # A second repair cuts nothing and leaves the first one's report, which names chunk 3.
    again = vdifrec.repair("s1", d)
    assert (again["cut"], again["emptied"], again["written"]) == ([], [3], [])
    assert json.loads(Path(r["written"][0]).read_text())["emptied"] == [3]


def test_a_file_cut_short_says_so_when_opened(tmp_path: Path) -> None:
    orig = original(tmp_path)
    with orig.open("ab") as f:
        f.write(orig.read_bytes()[:100])
    with vdifrec.open(orig) as fh:
        (p,) = fh.torn
        assert (p["offset"], p["bytes"], p["frames"], p["part"]) == (400 * FS, 100, 400, None)
        assert fh.shape[0] == 200 * fh.samples_per_frame
    with vdifrec.open(original(tmp_path, name="whole.vdif")) as fh:
        assert fh.torn == []


@pytest.mark.parametrize("fmt", ["file", "vbs", "mk6"])
def test_a_scan_killed_as_it_began_is_empty_and_every_tool_reads_it(fmt: str, tmp_path: Path, token: Path,
                                                                     cli) -> None:
    """A recorder killed after it created the scan's first file and before it wrote a frame: an
    empty file (vbs chunk 0, the `file` scan, a Mark6 file with its header alone)."""
    disks = make_disks(tmp_path)
    d = [str(x) for x in disks]
    name = "began"
    if fmt == "vbs":
        (disks[0] / name).mkdir()
        (disks[0] / name / f"{name}.00000000").write_bytes(b"")
    elif fmt == "file":
        (disks[0] / f"{name}.vdif").write_bytes(b"")
    else:
        (disks[0] / name).write_bytes(struct.pack("<Iiiii", 0xFEED6666, 2, 8 + 100 * FS, 0, FS))
    (s,) = vdifrec.scans(d)
    assert (s["name"], s["format"], s["bytes"], s["chunks"], s["error"], s["closed"]) == (name, fmt, 0, 0, None, False)
    # Every tool reads it: no frame, and the file begun named (empty, or a Mark6 header alone).
    pieces = 1
    assert (len(s["torn"]), s["torn_bytes"], s["torn"][0]["kind"]) == (pieces, 0, "empty")
    assert s["torn"][0]["description"].endswith(
        "holds its 20-byte Mark6 file header alone: created, no block written" if fmt == "mk6"
        else "is empty: created, nothing written"), s["torn"]
    c = vdifrec.check(name, disks=d)
    assert (c["frames"], c["totals"]["lost"], c["clean"], len(c["scan"]["torn"])) == (0, 0, False, pieces)
    res = cli("check", name, "--disk", d[0], "--disk", d[1], "--disk", d[2])
    assert res.returncode == 1 and "frames       0: the scan holds no whole frame" in res.stdout, res.stdout
    g = vdifrec.gather(name, d, tmp_path / "g.vdif")
    assert (g["bytes"], (tmp_path / "g.vdif").stat().st_size) == (0, 0)
    with pytest.raises(vdifrec.FormatError, match=f"{name} .* holds no whole frame, nothing to read"):
        vdifrec.open(name, disks=d)
    with vdifrec.Receiver(tmp_path / "in", listen="127.0.0.1:0", token_file=token) as r:
        p = vdifrec.push(name, disks=d, to=r.address, token_file=token)
    (item,) = p["items"]
    assert (p["ok"], item["state"], item["bytes"], (tmp_path / "in" / name).stat().st_size) == (True, "sent", 0, 0)
    # Repair takes the empty file away (a Mark6 file with no block too): no scan is left.
    r = vdifrec.repair(name, d)
    assert (r["bytes"], r["parts"], r["written"]) == (0, 0, [])
    assert vdifrec.scans(d) == []
