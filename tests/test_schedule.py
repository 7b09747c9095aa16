"""VEX schedules: the reader (VEX 1.5 and 2.0, the constructs real SCHED and drudg files hold),
the formats it finds, a station's plan, and `vdifrec plan`. Every expected number is worked out
here from the schedule's own lines, not by the code under test."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from vexgen import make_large_vex, make_vex

from vdifrec.cli import main
from vdifrec.schedule import Schedule, ScheduleError, VexError, make_plan
from vdifrec.schedule.names import scan_name_problem
from vdifrec.schedule.plan import free_bytes
from vdifrec.schedule.values import parse_duration, parse_rate, parse_time
from vdifrec.schedule.vex import parse_vex

DATA = Path(__file__).parent / "data" / "vex"
V15 = DATA / "three_stations.vex"
V20 = DATA / "three_stations_v2.vex"
UTC = dt.timezone.utc
BEFORE = dt.datetime(2026, 3, 5, 11, 0, tzinfo=UTC)


def at(h: int, m: int, s: int) -> dt.datetime:
    """A time on 2026-03-05 = 2026y064d (31 days of January + 28 of February + 5)."""
    return dt.datetime(2026, 3, 5, h, m, s, tzinfo=UTC)


def rows(schedule: Schedule, station: str) -> list[tuple[object, ...]]:
    return [(s.name, s.disk_name, s.source, s.mode, s.window_start, s.window_stop, s.seconds, s.record,
             s.expected_frames, s.expected_bytes) for s in schedule.scans(station)]


# -- the three-station schedule ----------------------------------------------------------------

# Ky, vr.4g: track_frame_format = VDIF_8224-4096-16-2: 4096e6 bit/s / (8 x 8192 payload bytes)
# = 62,500 frames/s, one thread. vr.1g: VDIF5032 with 8 chan_defs at 64 Ms/sec and fanout_def
# sign bits only (1 bit): 8 x 1 x 64e6 / (8 x 5000) = 12,800 frames/s.
KY_4G, KY_1G = 62_500, 12_800
KY = [
    ("No0001", "VR26A_Ky_No0001", "3C345", "vr.4g", at(12, 0, 0), at(12, 1, 0), 60.0, True, KY_4G * 60, KY_4G * 60 * 8224),
    ("No0002", "VR26A_Ky_No0002", "3C345", "vr.4g", at(12, 1, 0), at(12, 2, 0), 60.0, True, KY_4G * 60, KY_4G * 60 * 8224),
    ("No0003", "VR26A_Ky_No0003", "1928+738", "vr.1g", at(12, 5, 1), at(12, 7, 0), 119.0, True, KY_1G * 119, KY_1G * 119 * 5032),
    ("No0005", "VR26A_Ky_No0005", "3C345", "vr.4g", at(12, 10, 0), at(12, 10, 30), 30.0, True, KY_4G * 30, KY_4G * 30 * 8224),
]
# Kt, four threads: vr.4g $THREADS thread = i : 1 : 1 : 1024 : 4 : 2 : : : 5000 -> 1024e6 / (8 x
# 5000) = 25,600 frames/s per thread (4 ch x 2 bit x 128 Ms/s); vr.1g 128 Mbit/s -> 3,200.
KT_4G, KT_1G = 25_600, 3_200
KT = [
    ("No0001", "VR26A_Kt_No0001", "3C345", "vr.4g", at(12, 0, 1), at(12, 1, 0), 59.0, True, 4 * KT_4G * 59, 4 * KT_4G * 59 * 5032),
    ("No0002", "VR26A_Kt_No0002", "3C345", "vr.4g", at(12, 1, 0), at(12, 2, 0), 60.0, False, 0, 0),
    ("No0004", "VR26A_Kt_No0004", "1803+784", "vr.1g", at(12, 4, 0), at(12, 5, 30), 90.0, True, 4 * KT_1G * 90, 4 * KT_1G * 90 * 5032),
    ("No0005", "VR26A_Kt_No0005", "3C345", "vr.4g", at(12, 10, 0), at(12, 10, 30), 30.0, True, 4 * KT_4G * 30, 4 * KT_4G * 30 * 5032),
]


@pytest.mark.parametrize("path", [V15, V20], ids=["vex1.5", "vex2.0"])
def test_the_plan_of_each_vdif_station_is_exact(path: Path) -> None:
    s = Schedule.read(path)
    assert s.version == ("1.5" if path == V15 else "2.0")
    assert s.experiment == "VR26A" and s.segment == (None if path == V15 else "A")
    assert [(st.code, st.name) for st in s.stations.values()] == [("Ky", "KVNYS"), ("Kt", "KVNTN"), ("Wb", "WSTRBORK")]
    assert rows(s, "Ky") == KY
    assert rows(s, "Kt") == KT
    assert s.scans("Ky")[2].sources == ("1928+738", "1926+738")
    assert KY[0][-1] == 30_840_000_000 and KT[0][-1] == 30_401_331_200  # the worked numbers, once in full

    ky, kt = s.format("Ky", "vr.4g"), s.format("Kt", "vr.4g")
    assert ky is not None and kt is not None
    assert (ky.kind, ky.frame_size, ky.payload, ky.channels, ky.bits, ky.threads, ky.sample_rate, ky.frames_per_second,
            ky.bytes_per_second) == ("VDIF", 8224, 8192, 16, 2, (0,), 128e6, 62_500, 514_000_000)
    assert (kt.frame_size, kt.channels, kt.bits, kt.threads, kt.sample_rate, kt.frames_per_second, kt.bytes_per_second) \
        == (5032, 4, 2, (0, 1, 2, 3), 128e6, 25_600, 4 * 25_600 * 5032)
    one_bit = s.format("Ky", "vr.1g")
    assert one_bit is not None and (one_bit.channels, one_bit.bits, one_bit.sample_rate) == (8, 1, 64e6)
    assert ky.describe() == "VDIF 8224-byte frames, 1 thread x 16 ch x 2 bit at 128 Ms/s: 62,500 frames/s per thread, 4.112 Gbit/s"


def test_vex_1_5_and_2_0_give_the_same_plan() -> None:
    a, b = Schedule.read(V15), Schedule.read(V20)
    for station in ("Ky", "Kt", "Wb"):
        pa, pb = make_plan(a, station, now=BEFORE).to_dict(), make_plan(b, station, now=BEFORE).to_dict()
        for d in (pa, pb):
            del d["version"], d["schedule"]
            for r in d["scans"]:
                del r["line"]
                if r["format"] is not None:
                    del r["format"]["source"]  # where each file says it: $TRACKS/$THREADS or $DATASTREAMS
        assert pa == pb, station


def test_the_mark5b_station_is_reported_not_vdif_and_not_planned() -> None:
    s = Schedule.read(V15)
    f = s.format("Wb", "vr.4g")
    assert f is not None and (f.kind, f.is_vdif, f.frames_per_second, f.frame_size) == ("MARK5B", False, None, None)
    assert f.describe() == "MARK5B: not VDIF, vdifrec records VDIF only"
    assert [(x.name, x.expected_frames, x.expected_bytes) for x in s.scans("Wb")] == [
        ("No0001", None, None), ("No0004", None, None), ("No0005", None, None)]
    v2 = Schedule.read(V20).format("Wb", "vr.1g")  # $BITSTREAMS
    assert v2 is not None and v2.kind == "MARK5B" and v2.source == "$BITSTREAMS BS8Ch2Bit"
    plan = make_plan(s, "Wb", now=BEFORE)
    assert not plan.ok and plan.total_frames == 0
    assert [(w.kind, w.message, w.blocks, w.scans) for w in plan.warnings] == [
        ("format", "mode vr.4g: station Wb records MARK5B: not VDIF, vdifrec records VDIF only; not planned: scans No0001, No0005",
         True, ("No0001", "No0005")),
        ("format", "mode vr.1g: station Wb records MARK5B: not VDIF, vdifrec records VDIF only; not planned: scan No0004",
         True, ("No0004",)),
    ]


def test_stations_are_found_in_any_case_and_an_unknown_one_is_named() -> None:
    s = Schedule.read(V15)
    assert [x.station for x in s.scans("KY")] == ["Ky"] * 4
    with pytest.raises(ScheduleError) as e:
        s.scans("Xx")
    assert str(e.value) == f"station Xx is not in the schedule of VR26A ({V15}): its stations are Ky, Kt, Wb"
    assert isinstance(e.value, ValueError)


def test_the_plan_checks_disk_space_back_to_back_and_time() -> None:
    s = Schedule.read(V15)
    # Free space for exactly No0001 + No0002 (2 x 30,840,000,000 bytes): full during No0003.
    plan = make_plan(s, "Ky", now=BEFORE, free=61_680_000_000)
    assert [(r.scan.name, r.needed_bytes, r.fits) for r in plan.scans] == [
        ("No0001", 30_840_000_000, True), ("No0002", 61_680_000_000, True),
        ("No0003", 61_680_000_000 + 7_664_742_400, False), ("No0005", 61_680_000_000 + 7_664_742_400 + 15_420_000_000, False)]
    assert plan.full_at == "No0003" and not plan.ok
    assert [w.kind for w in plan.warnings] == ["disk_full"]  # No0001 and No0002 are back to back: no overlap
    # At 12:03 the first two are past: left out of the space needed, said, but no problem.
    plan = make_plan(s, "Ky", now=at(12, 3, 0), free=61_680_000_000)
    assert [(r.scan.name, r.past, r.needed_bytes) for r in plan.scans] == [
        ("No0001", True, None), ("No0002", True, None), ("No0003", False, 7_664_742_400),
        ("No0005", False, 7_664_742_400 + 15_420_000_000)]
    assert plan.ok and plan.full_at is None
    assert [(w.kind, w.message, w.blocks) for w in plan.warnings] == [
        ("past", "2 scans already past at 2026-03-05T12:03:00Z (window ended): No0001, No0002", False)]
    # During No0003's window.
    plan = make_plan(s, "Ky", now=at(12, 6, 0))
    assert [w.message for w in plan.warnings][-1] == "scan No0003 started at 2026-03-05T12:05:01Z: the first 59 s of its window are past"


def test_the_table_is_a_dataframe() -> None:
    pd = pytest.importorskip("pandas")
    t = Schedule.read(V20).table("Kt")
    assert isinstance(t, pd.DataFrame)
    assert list(t["scan"]) == ["No0001", "No0002", "No0004", "No0005"]
    assert list(t["frames"]) == [r[8] for r in KT] and list(t["threads"]) == [4, 4, 4, 4]
    assert t["window_start"].iloc[0] == pd.Timestamp("2026-03-05T12:00:01Z")


# -- the reader, construct by construct ----------------------------------------------------------


def vex(body: str, version: str = "1.5") -> str:
    return f"VEX_rev = {version};\n{body}"


def test_statements_share_lines_span_lines_and_end_at_semicolons() -> None:
    v = parse_vex(vex("$SCHED;\nscan A; start=2022y039d23h28m00s; mode=x16; source=2007+777;\n"
                      "  station=Br: 6 sec:\n     180 sec: 1.449 GB: : &ccw : 1;\nendscan;\n"))
    scan = v.blocks["SCHED"].defs["A"]
    assert [(x.name, x.values, x.line, x.column) for x in scan.statements] == [
        ("start", ("2022y039d23h28m00s",), 3, 9),
        ("mode", ("x16",), 3, 35),
        ("source", ("2007+777",), 3, 45),
        ("station", ("Br", "6 sec", "180 sec", "1.449 GB", "", "&ccw", "1"), 4, 3),
    ]


def test_comments_quotes_angles_and_literals() -> None:
    text = vex(
        "$EXPER; * a comment after a block\n"
        "def E;  exper_name = N17C3 : C;   * a comment after a statement; with = and :\n"
        '  exper_description = "holds ; and * and : too";\n'
        "*  exper_name = NOT_ME;\n"
        "  start_literal(x);\n"
        '  enddef; "unclosed; * end_literal(y);\n'
        "  end_literal(x);\n"
        "  dec = 32d19'02.603861\"; PI_name = \"A B\";\n"
        "enddef;\n"
    )
    d = parse_vex(text).blocks["EXPER"].defs["E"]
    assert [(x.name, x.values) for x in d.statements] == [
        ("exper_name", ("N17C3", "C")),
        ("exper_description", ("holds ; and * and : too",)),
        ("dec", ("32d19'02.603861\"",)),
        ("PI_name", ("A B",)),
    ]
    dec = d.get("dec")
    assert dec is not None and (dec.line, dec.column) == (9, 3)


def test_a_commented_out_station_line_is_no_station() -> None:
    s = Schedule.read(V15)
    assert [x.name for x in s.scans("Wb")] == ["No0001", "No0004", "No0005"]  # not No0002: "*    station=Wb"


def test_refs_apply_to_all_stations_or_to_those_listed() -> None:
    v = parse_vex(vex("$MODE;\ndef m;\n ref $FREQ = all;\n ref $FREQ = mine : Ky : Kt;\n ref $BBC = b\n   : Wb;\nenddef;\n"))
    m = v.blocks["MODE"].defs["m"]
    assert [(r.block, r.name, r.stations) for r in m.refs] == [("FREQ", "all", ()), ("FREQ", "mine", ("Ky", "Kt")), ("BBC", "b", ("Wb",))]
    freq = (m.ref("FREQ", "kt"), m.ref("FREQ", "Wb"), m.ref("BBC", "Ky"))
    assert [None if r is None else r.name for r in freq] == ["mine", "all", None]


def test_nul_bytes_and_odd_characters_in_comments_are_read(tmp_path: Path) -> None:
    text = V15.read_bytes().replace(b"*    year, doy: 2026,  64", b"*    year \x00\x00\x00\xe9\xff doy")
    p = tmp_path / "odd.vex"
    p.write_bytes(text)
    assert rows(Schedule.read(p), "Ky") == KY
    assert rows(Schedule.parse(text), "Ky") == KY


def test_scans_come_in_time_order_of_their_windows() -> None:
    s = Schedule.parse(vex(_MINIMAL + "$SCHED;\n"
                           "scan late; start=2026y064d12h10m00s; mode=m; station=Ky: 0 sec: 10 sec: : : : 1; endscan;\n"
                           "scan early; start=2026y064d12h00m00s; mode=m; station=Ky: 0 sec: 10 sec; endscan;\n"
                           "scan off; start=2026y064d11h00m00s; mode=m; station=Ky: 0 sec: 10 sec: : : : 0; endscan;\n"))
    assert [(x.name, x.record) for x in s.scans("Ky")] == [("off", False), ("early", True), ("late", True)]


@pytest.mark.parametrize(
    ("text", "line", "column", "what"),
    [
        ("$EXPER;\ndef E;\n exper_name = E\nenddef;\n", 4, 16, "the statement 'exper_name' has no ';' at its end (before 'enddef' on line 5)"),
        ("$EXPER;\ndef E;\n exper_name = E;\nenddef\n$MODE;\n", 5, 7, "the statement 'enddef' has no ';' at its end (before '$MODE' on line 6)"),
        ("$EXPER;\ndef E;\n exper_name E;\nenddef;\n", 4, 13, "expected '=' after 'exper_name', found 'E'"),
        ("$SCHED;\nscan A;\n start=2022y039d23h28m00s mode=x;\nendscan;\n", 4, 31,
         "a second '=' in the statement 'start' (line 4): a ';' missing before it?"),
        ('$EXPER;\ndef E;\n exper_description = "no end;\nenddef;\n', 4, 22, "a quoted string has no closing '\"' on its line"),
        ("$EXPER;\ndef E;\n exper_name = E;\n$MODE;\n", 3, 1, "def E has no enddef before $MODE (line 5)"),
        ("$EXPER;\ndef E;\n exper_name = E;\n", 3, 1, "def E has no enddef before the end of the file"),
        ("$SCHED;\nscan A;\nenddef;\n", 4, 1, "enddef closes scan A (line 3): write endscan"),
        ("$EXPER;\n exper_name = E", 3, 2, "the statement 'exper_name' has no ';' before the end of the file"),
        ("$EXPER;\ndef E;\n start_literal(a);\n x = 1;\nenddef;\n", 4, 2, "start_literal(a) has no end_literal(a); after it"),
    ],
)
def test_syntax_errors_name_the_line_and_column(text: str, line: int, column: int, what: str) -> None:
    with pytest.raises(VexError) as e:
        parse_vex(vex(text), source="s.vex")
    assert (e.value.line, e.value.column, e.value.what) == (line, column, what)
    assert str(e.value) == f"s.vex:{line}:{column}: {what}"


def test_a_vex_file_starts_with_its_revision() -> None:
    with pytest.raises(VexError, match=r"^x:1:1: not a VEX file: a VEX file starts with VEX_rev = 1.5; or VEX_rev = 2.0;$"):
        parse_vex("$EXPER;\n", source="x")
    # Whatever the text, its first word is what is wrong: not a missing ';' further on.
    with pytest.raises(VexError, match=r"^x:2:3: not a VEX file"):
        parse_vex("* a comment\n  import os\n", source="x")
    with pytest.raises(VexError, match=r"^x:1:11: VEX_rev = 3.0: vdifrec reads VEX 1.5 and 2.0$"):
        parse_vex("VEX_rev = 3.0;\n", source="x")
    assert parse_vex("* a comment first\nVEX_rev = 2.0;\n").version == "2.0"


def test_vex_times_durations_and_rates() -> None:
    assert parse_time("2022y039d23h28m00s") == dt.datetime(2022, 2, 8, 23, 28, tzinfo=UTC)
    assert parse_time("2026y064d12h00m01.25s") == dt.datetime(2026, 3, 5, 12, 0, 1, 250_000, tzinfo=UTC)
    assert parse_time("2013y1d") == dt.datetime(2013, 1, 1, tzinfo=UTC)
    assert [parse_duration(x) for x in ("6 sec", "1.5 min", "2 hr", "0.1 sec")] == [6, 90, 7200, pytest.approx(0.1)]
    assert parse_rate("32.0 Ms/sec") == 32_000_000 and parse_rate("0.5 Gs/sec") == 500_000_000
    for bad in ("2022y400d", "2022y039d25h", "12:00:00"):
        with pytest.raises(ValueError):
            parse_time(bad)


# -- formats --------------------------------------------------------------------------------------

_MINIMAL = ("$EXPER;\ndef E; exper_name = E; enddef;\n$STATION;\ndef Ky; enddef;\n"
            "$MODE;\ndef m; ref $FREQ = F; ref $TRACKS = T; enddef;\n"
            "$FREQ;\ndef F; sample_rate = 32.0 Ms/sec;\n"
            + "".join(f" chan_def = : 8000 MHz : U : 16 MHz : &CH{i:02d} : &BBC01 : &NoCal;\n" for i in range(1, 17))
            + "enddef;\n")


def tracks_format(track_frame_format: str, fanout: str = "") -> tuple[object, ...]:
    s = Schedule.parse(vex(_MINIMAL + f"$TRACKS;\ndef T; track_frame_format = {track_frame_format};\n{fanout}enddef;\n"))
    f = s.format("Ky", "m")
    assert f is not None
    return f.kind, f.frame_size, f.channels, f.bits, f.threads, f.frames_per_second, f.problem


def test_track_frame_formats() -> None:
    mag = " fanout_def = : &CH01 : sign : 1 : 2; fanout_def = : &CH01 : mag : 1 : 3;\n"
    # 16 chan_defs x 32 Ms/s: 2 bits -> 1.024e9 bit/s; / (8 x 5000) = 25,600; / (8 x 8000) = 16,000.
    assert tracks_format("VDIF5032", mag) == ("VDIF", 5032, 16, 2, (0,), 25_600, None)
    assert tracks_format("VDIF5032", " fanout_def = : &CH01 : sign : 1 : 2;\n") == ("VDIF", 5032, 16, 1, (0,), 12_800, None)
    assert tracks_format("VDIF/8032/2") == ("VDIF", 8032, 16, 2, (0,), 16_000, None)
    assert tracks_format("VDIF_8224-4096-16-2") == ("VDIF", 8224, 16, 2, (0,), 62_500, None)  # KVN's format: 4096e6 / (8 x 8192)
    assert tracks_format("INTERLACEDVDIF/0,1,2,3/5032/2") == ("VDIF", 5032, 4, 2, (0, 1, 2, 3), 6_400, None)
    assert tracks_format("VDIFC/8032/2") == ("VDIF", 8032, 16, 2, (0,), 32_000, None)  # complex: 2 x 2 bits a sample
    assert tracks_format("MARK5B")[:1] == ("MARK5B",) and tracks_format("Mark4")[:1] == ("MARK4",)
    assert tracks_format("VDIFL/5016/2")[0] == "VDIFL"  # legacy 16-byte headers: not VDIF as recorded here
    no_bits = Schedule.parse(vex(_MINIMAL + "$TRACKS;\ndef T; track_frame_format = VDIF5032; enddef;\n")).format("Ky", "m")
    assert no_bits is not None and no_bits.bits == 2 and no_bits.note == "2 bits per sample assumed: $TRACKS T has no fanout_def lines"
    assert tracks_format("VDIF")[-1] == ("track_frame_format = VDIF names no frame size "
                                         "(write VDIF5032, VDIF/8032/2 or VDIF_8224-4096-16-2)")
    # 1.024e9 bit/s / (8 x 4984) = 25,682.18...: no whole number of frames.
    assert tracks_format("VDIF/5016/2")[-2:] == (None, "1024 Mbit/s in 5016-byte frames is 25682.2 frames per second, not a whole number")


def test_vex2_datastreams_give_reference_numbers() -> None:
    text = vex(
        "$EXPER;\ndef E; exper_name = E; enddef;\n$MODE;\ndef m; ref $DATASTREAMS = D; enddef;\n$DATASTREAMS;\n"
        "def D;\n datastream = &DS1 : VDIF;\n thread = &DS1 : &thread0 : 0 : 1 : 32 Ms/sec : 2 : real : 5000;\n enddef;\n"
        "$SCHED;\nscan s; start=2026y064d12h00m00s; mode=m; station=Ky: 0 sec: 2 sec; endscan;\n", "2.0")
    f = Schedule.parse(text).format("Ky", "m")
    # The VEX 2.0 worked example: 1 x 2 x 32e6 / (8 x 5000) = 1,600 frames per second.
    assert f is not None and (f.frame_size, f.frames_per_second, f.threads) == (5032, 1_600, (0,))
    assert Schedule.parse(text).scans("Ky")[0].expected_frames == 3_200


def test_missing_pieces_are_schedule_errors_that_name_them() -> None:
    head = _MINIMAL + "$TRACKS;\ndef T; track_frame_format = VDIF5032; enddef;\n$SCHED;\n"
    with pytest.raises(ScheduleError, match=r"^<string>:30: scan No0002 uses mode x99, which \$MODE does not define \(modes there: m\)$"):
        Schedule.parse(vex(head + "scan No0002; start=2026y064d12h00m00s; mode=x99; station=Ky: 0 sec: 1 sec; endscan;\n"))
    with pytest.raises(ScheduleError, match=r"^<string>:30: scan No0003 has no start \(write start=2026y064d12h00m00s;\)$"):
        Schedule.parse(vex(head + "scan No0003; mode=m; station=Ky: 0 sec: 1 sec; endscan;\n"))


def test_names_the_recorder_would_refuse_are_reported() -> None:
    assert scan_name_problem("e26k1_Kv_kvn_s1") is None
    assert scan_name_problem("E_Ky_No.1") == "\"E_Ky_No.1\" holds '.'; use letters, digits, '_' and '-' only (no '.', no path separators)"
    assert scan_name_problem("x" * 65) == f'"{"x" * 65}" has 65 characters; at most 64'
    s = Schedule.parse(vex(_MINIMAL + "$TRACKS;\ndef T; track_frame_format = VDIF5032; enddef;\n$SCHED;\n"
                           "scan No.1; start=2026y064d12h00m00s; mode=m; station=Ky: 0 sec: 1 sec; endscan;\n"))
    plan = make_plan(s, "Ky", now=BEFORE)
    assert [(w.kind, w.blocks) for w in plan.warnings] == [("name", True)]
    assert plan.warnings[0].message == ("scan No.1: its name on disk cannot be used: \"E_Ky_No.1\" holds '.'; use letters, "
                                        "digits, '_' and '-' only (no '.', no path separators)")


# -- the generator the benchmarks use --------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.5", "2.0"])
def test_generated_schedules_match_the_synthetic_sender(tmp_path: Path, version: str) -> None:
    t0 = dt.datetime(2026, 3, 5, 12, 0, 0, tzinfo=UTC)
    p = make_vex(tmp_path / "g.vex", version=version, experiment="T1", stations=["Kv", "Ku"],
                 scans=[("s1", t0, 2, 0), ("s2", t0 + dt.timedelta(seconds=3), 2.5, 0.5, "four")],
                 modes={"four": {"threads": 4, "fps": 31_250}})
    s = Schedule.read(p)
    assert [(x.disk_name, x.window_start, x.seconds, x.expected_frames, x.expected_bytes) for x in s.scans("Kv")] == [
        ("T1_Kv_s1", t0, 2.0, 250_000, 250_000 * 8224),
        ("T1_Kv_s2", t0 + dt.timedelta(seconds=3.5), 2.5, 4 * 31_250 * 5 // 2, 4 * 31_250 * 5 // 2 * 8224),
    ]
    f = s.format("Kv", "vdif")
    assert f is not None and (f.frame_size, f.frames_per_second, f.threads, f.channels, f.bits, f.sample_rate) == (
        8224, 125_000, (0,), 4, 2, 1.024e9)
    big = Schedule.read(make_large_vex(tmp_path / "big.vex", version=version))
    assert (len(big.stations), len(big.scans("Km")), big.scans("Km")[-1].window_stop) == (
        19, 184, t0 + dt.timedelta(seconds=183 * 150 + 120))


# -- an independent reader: pyvexfile ----------------------------------------------------------

# pyvexfile (GPL-3, a test-only dependency) parses VEX on its own; the scans' numbers are read here
# from its raw statement fields, not through vdifrec.schedule.values nor pyvexfile's own helpers.
_EPOCH = re.compile(r"(\d{4})y(\d{1,3})d(?:(\d{1,2})h)?(?:(\d{1,2})m)?(?:(\d{1,2}(?:\.\d*)?)s)?")
_SECONDS = {"": 1, "sec": 1, "min": 60, "hr": 3600}


def _vex_epoch(text: str) -> dt.datetime:
    """``2026y064d12h00m00s``: year, day of the year (1 = 1 January), hours, minutes, seconds."""
    m = _EPOCH.fullmatch(text.strip())
    assert m is not None, text
    year, day, hours, minutes, seconds = m.groups()
    micro = Fraction(seconds or "0") * 10**6
    assert micro.denominator == 1, text
    return dt.datetime(int(year), 1, 1, tzinfo=UTC) + dt.timedelta(
        days=int(day) - 1, hours=int(hours or 0), minutes=int(minutes or 0), microseconds=int(micro))


def _vex_seconds(text: str) -> Fraction:
    """``60 sec``, ``0.5 sec``, ``2 min``; an empty field is 0."""
    number, _, unit = text.strip().partition(" ")
    return Fraction(number or "0") * _SECONDS[unit.strip()]


ScanView = tuple[dt.datetime, str, tuple[str, ...], dict[str, tuple[float, float, bool]]]


def _pyvexfile_view(v: Any) -> tuple[str, str | None, dict[str, str], dict[str, ScanView]]:
    """(experiment, segment, {station code: site_name}, {scan: (start, mode, sources, {station:
    (data_good, data_stop, record)})}) from pyvexfile's tree."""
    exper = v["EXPER"][v["GLOBAL"]["$EXPER"]].statements("exper_name")[0].fields
    sites = v["SITE"]
    stations = {code: sites[d["$SITE"]]["site_name"] for code, d in v["STATION"].items()}
    scans: dict[str, ScanView] = {}
    for scan in v.scans:
        takes = {}
        for st in scan.statements("station"):
            f = st.fields  # code : data_good : data_stop : ... : record flag (7th; 0 = not recorded)
            takes[f[0]] = (float(_vex_seconds(f[1])), float(_vex_seconds(f[2])), len(f) < 7 or f[6].strip() != "0")
        [start], [mode] = scan.statements("start"), scan.statements("mode")
        sources = tuple(s.fields[0] for s in scan.statements("source"))
        scans[scan.name] = (_vex_epoch(start.fields[0]), mode.fields[0], sources, takes)
    return exper[0], (exper[1] or None) if len(exper) > 1 else None, stations, scans


def _vdifrec_view(s: Schedule) -> tuple[str, str | None, dict[str, str], dict[str, ScanView]]:
    scans: dict[str, ScanView] = {}
    for code in s.stations:
        for x in s.scans(code):
            view = scans.setdefault(x.name, (x.start, x.mode, x.sources, {}))
            assert view[:3] == (x.start, x.mode, x.sources), (x.name, code)
            view[3][code] = (x.data_good, x.data_stop, x.record)
    return s.experiment, s.segment, {code: st.name for code, st in s.stations.items()}, scans


def _generated(version: str, large: bool) -> Callable[[Path], Path]:
    def write(tmp_path: Path) -> Path:
        if large:
            return make_large_vex(tmp_path / "big.vex", version=version)
        t0 = at(12, 0, 0)
        return make_vex(tmp_path / "g.vex", version=version, experiment="T1", stations=["Kv", "Ku"],
                        scans=[("s1", t0, 2, 0), ("s2", t0 + dt.timedelta(seconds=3), 2.5, 0.5, "four")],
                        modes={"four": {"threads": 4, "fps": 31_250}})
    return write


@pytest.mark.parametrize(
    "schedule",
    [lambda _: V15, lambda _: V20, _generated("1.5", False), _generated("2.0", False), _generated("1.5", True),
     _generated("2.0", True)],
    ids=["vex1.5", "vex2.0", "make_vex-1.5", "make_vex-2.0", "make_large_vex-1.5", "make_large_vex-2.0"],
)
def test_pyvexfile_reads_the_same_schedule(tmp_path: Path, schedule: Callable[[Path], Path]) -> None:
    pyvexfile = pytest.importorskip("pyvexfile")
    path = schedule(tmp_path)
    v = pyvexfile.Vex(path)
    errors = [str(i) for i in v.verify() if i.severity == pyvexfile.Severity.ERROR]
    assert errors == []
    theirs, ours = _pyvexfile_view(v), _vdifrec_view(Schedule.read(path))
    assert ours[:3] == theirs[:3]
    assert ours[3] == theirs[3]
    assert len(theirs[3]) >= 2 and all(takes for *_, takes in theirs[3].values())


# -- vdifrec plan ---------------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(["plan", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_prints_the_table_totals_and_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, str(V15), "--station", "ky", "--now", "2026-03-05T12:01:30Z")
    assert code == 0 and err == ""
    assert out.splitlines() == [
        f"plan of Ky (KVNYS) in VR26A, VEX 1.5 ({V15}): 4 scans, 4 recorded",
        "scan    disk name        source    mode   window UTC                    length s     frames      size",
        "No0001  VR26A_Ky_No0001  3C345     vr.4g  2026-03-05 12:00:00-12:01:00        60  3,750,000  30.84 GB  past",
        "No0002  VR26A_Ky_No0002  3C345     vr.4g  2026-03-05 12:01:00-12:02:00        60  3,750,000  30.84 GB",
        "No0003  VR26A_Ky_No0003  1928+738  vr.1g  2026-03-05 12:05:01-12:07:00       119  1,523,200   7.66 GB",
        "No0005  VR26A_Ky_No0005  3C345     vr.4g  2026-03-05 12:10:00-12:10:30        30  1,875,000  15.42 GB",
        "total        4 recorded scans, 269 s, 10,898,200 frames, 84.76 GB (84,764,742,400 bytes)",
        "warning: 1 scan already past at 2026-03-05T12:01:30Z (window ended): No0001",
        "warning: scan No0002 started at 2026-03-05T12:01:00Z: the first 30 s of its window are past",
    ]


def test_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(V20), "--station", "Kt", "--json", "--now", "2026-03-05T11:00:00")
    d = json.loads(out)
    assert code == 0 and d["ok"] is True and d["warnings"] == []
    assert (d["experiment"], d["version"], d["station"], d["station_name"], d["now"]) == ("VR26A", "2.0", "Kt", "KVNTN", "2026-03-05T11:00:00Z")
    assert [(r["scan"], r["disk_name"], r["window_start"], r["window_stop"], r["record"], r["frames"], r["bytes"]) for r in d["scans"]] == [
        (r[0], r[1], r[4].strftime("%Y-%m-%dT%H:%M:%SZ"), r[5].strftime("%Y-%m-%dT%H:%M:%SZ"), r[7], r[8], r[9]) for r in KT]
    assert d["totals"] == {"scans": 4, "recorded": 3, "seconds": 179.0, "frames": 4 * (KT_4G * 89 + KT_1G * 90),
                           "bytes": 4 * (KT_4G * 89 + KT_1G * 90) * 5032, "needed_bytes": 4 * (KT_4G * 89 + KT_1G * 90) * 5032}
    assert d["scans"][0]["format"]["threads"] == [0, 1, 2, 3] and d["scans"][0]["format"]["frames_per_second"] == KT_4G


def test_plan_of_the_mark5b_station_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(V20), "--station", "WB", "--now", "2026-03-05T11:00:00")
    assert code == 1
    assert "warning: mode vr.4g: station Wb records MARK5B: not VDIF, vdifrec records VDIF only; not planned: scans No0001, No0005" in out


def test_plan_warns_of_overlapping_windows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t0 = at(12, 0, 0)
    p = make_vex(tmp_path / "o.vex", stations=["Kv"], scans=[("a", t0, 60, 0), ("b", t0 + dt.timedelta(seconds=30), 60, 0),
                                                             ("c", t0 + dt.timedelta(seconds=90), 10, 0)])
    code, out, _ = run(capsys, str(p), "--station", "Kv", "--now", "2026-03-05T11:00:00")
    assert code == 1
    assert [x for x in out.splitlines() if x.startswith("warning")] == [
        "warning: scans a (12:00:00-12:01:00) and b (12:00:30-12:01:30) overlap by 30 s: one recorder records one scan at a time"]


def test_plan_warns_when_the_disks_would_be_full(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Each scan needs about 40% of the free space of tmp_path's file system: the third overfills it.
    per_second = 125_000 * 8224
    seconds = max(1, int(0.4 * free_bytes([tmp_path]) / per_second))
    t0 = at(12, 0, 0)
    scans = [(f"s{i}", t0 + dt.timedelta(seconds=i * (seconds + 10)), seconds, 0) for i in range(1, 5)]
    p = make_vex(tmp_path / "d.vex", stations=["Kv"], scans=scans)
    free = free_bytes([tmp_path])
    full = next(i for i in range(1, 5) if i * seconds * per_second > free)
    code, out, _ = run(capsys, str(p), "--station", "Kv", "--disk", str(tmp_path), "--disk", str(tmp_path), "--now", "2026-03-05T11:00:00")
    assert code == 1
    warnings = [x for x in out.splitlines() if x.startswith("warning")]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: disks full at scan s{full}: the scans from now to its end need ")
    assert f"({full * seconds * per_second:,} bytes)" in warnings[0]
    table = out.splitlines()[2:6]
    assert [line.endswith("disks full") for line in table] == [i >= full for i in range(1, 5)]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("$EXPER;\ndef E;\n exper_name = E\nenddef;\n", "{path}:4:16: the statement 'exper_name' has no ';' at its end (before 'enddef' on line 5)"),
        (_MINIMAL + "$SCHED;\nscan No0007; start=2026y064d12h00m00s; mode=x99; station=Ky: 0 sec: 1 sec; endscan;\n",
         "{path}:28: scan No0007 uses mode x99, which $MODE does not define (modes there: m)"),
        (_MINIMAL + "$SCHED;\nscan No0008;\n mode=m; station=Ky: 0 sec: 1 sec; endscan;\n",
         "{path}:28: scan No0008 has no start (write start=2026y064d12h00m00s;)"),
    ],
    ids=["syntax", "missing-mode", "no-start"],
)
def test_plan_of_a_bad_schedule_exits_2_naming_the_fault(tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, message: str) -> None:
    p = tmp_path / "bad.vex"
    p.write_text(vex(body))
    code, out, err = run(capsys, str(p), "--station", "Ky")
    assert (code, out, err) == (2, "", f"vdifrec plan: error: {message.format(path=p)}\n")


def test_plan_for_an_unknown_station_exits_2_listing_the_stations(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, str(V20), "--station", "Ef")
    assert (code, out) == (2, "")
    assert err == f"vdifrec plan: error: station Ef is not in the schedule of VR26A ({V20}): its stations are Ky, Kt, Wb\n"


def test_plan_of_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, str(tmp_path / "none.vex"), "--station", "Ky")
    assert (code, err) == (2, f"vdifrec plan: error: {tmp_path / 'none.vex'}: No such file or directory\n")
    assert not os.path.exists(tmp_path / "none.vex")


def test_a_scan_named_twice_is_an_error_naming_both_lines() -> None:
    text = vex(_MINIMAL + "$TRACKS;\ndef T; track_frame_format = VDIF5032; enddef;\n$SCHED;\n"
                          "scan A; start=2026y064d12h00m00s; mode=m; station=Ky: 0 sec: 10 sec; endscan;\n"
                          "scan A; start=2026y064d12h01m00s; mode=m; station=Ky: 0 sec: 10 sec; endscan;\n")
    with pytest.raises(VexError) as e:
        Schedule.parse(text)
    last = text.count("\n")
    assert (e.value.line, e.value.column) == (last, 6)
    assert f"scan A is in $SCHED twice (line {last - 1} too)" in str(e.value)


def test_a_ref_naming_the_station_wins_over_one_for_all_in_another_block() -> None:
    # The mode records VDIF for all, but Ky records Mark5B: its own ref says so.
    body = _MINIMAL.replace("ref $TRACKS = T;", "ref $TRACKS = T; ref $BITSTREAMS = B : Ky;")
    s = Schedule.parse(vex(body + "$TRACKS;\ndef T; track_frame_format = VDIF5032; enddef;\n"
                                  "$BITSTREAMS;\ndef B; stream_sample_rate = 32 Ms/sec; enddef;\n"))
    f = s.format("Ky", "m")
    assert f is not None and f.kind == "MARK5B" and not f.is_vdif


# -- times out of range, empty windows, a byte-order mark ---------------------------------------

_ONE_SCAN = _MINIMAL + "$TRACKS;\ndef T; track_frame_format = VDIF5032; enddef;\n$SCHED;\n"


@pytest.mark.parametrize(
    ("scan", "message"),
    [
        ("scan A; start=9999y365d23h59m59s; mode=m; station=Ky: 0 sec: 10 sec; endscan;",
         "data_stop 10 sec after the start 9999-12-31T23:59:59Z is past the last time a date can hold (9999-12-31)"),
        ("scan A; start=2026y064d12h00m00s; mode=m; station=Ky: 0 sec: 1e300 sec; endscan;",
         "data_stop 1e+300 sec after the start 2026-03-05T12:00:00Z is past the last time a date can hold (9999-12-31)"),
        ("scan A; start=2026y064d12h00m00s; mode=m; station=Ky: 1e400 sec: 1e401 sec; endscan;",
         "data_stop 1e+401 sec after the start 2026-03-05T12:00:00Z is past the last time a date can hold (9999-12-31)"),
    ],
    ids=["year-9999", "1e300-sec", "no-float-holds-it"],
)
def test_times_past_what_a_date_holds_exit_2_naming_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            scan: str, message: str) -> None:
    p = tmp_path / "far.vex"
    p.write_text(vex(_ONE_SCAN + scan + "\n"))
    line = p.read_text().count("\n")
    code, out, err = run(capsys, str(p), "--station", "Ky")
    assert (code, out, err) == (2, "", f"vdifrec plan: error: {p}:{line}: scan A, station Ky: {message}\n")


def test_an_empty_window_is_a_warning_of_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "empty.vex"
    p.write_text(vex(_ONE_SCAN + "scan A; start=2026y064d12h00m00s; mode=m; station=Ky: 5 sec: 5 sec; endscan;\n"
                     "scan B; start=2026y064d12h01m00s; mode=m; station=Ky: 0 sec: 5 sec; endscan;\n"))
    code, out, _ = run(capsys, str(p), "--station", "Ky", "--now", "2026-03-05T11:00:00")
    assert code == 0
    assert [x for x in out.splitlines() if x.startswith("warning")] == [
        "warning: scan A: its window is empty (data_stop = data_good): there is nothing to record"]
    plan = make_plan(Schedule.read(p), "Ky", now=BEFORE)
    assert [(w.kind, w.blocks, w.scans) for w in plan.warnings] == [("empty", False, ("A",))]


def test_a_byte_order_mark_before_the_revision_is_read(tmp_path: Path) -> None:
    text = vex(_ONE_SCAN + "scan A; start=2026y064d12h00m00s; mode=m; station=Ky: 0 sec: 5 sec; endscan;\n")
    p = tmp_path / "bom.vex"
    p.write_bytes(b"\xef\xbb\xbf" + text.encode())
    plain = Schedule.parse(text)
    for s in (Schedule.read(p), Schedule.parse("\ufeff" + text), Schedule.parse(b"\xef\xbb\xbf" + text.encode())):
        assert rows(s, "Ky") == rows(plain, "Ky") and len(rows(s, "Ky")) == 1


def test_a_latin_1_comment_leaves_a_utf_8_name_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = vex(_ONE_SCAN + "* site at 37\xb0N (an old comment, in Latin-1)\n"
               "scan sc\u00e9; start=2026y064d12h00m00s; mode=m; station=Ky: 0 sec: 5 sec; endscan;\n")
    p = tmp_path / "mixed.vex"
    p.write_bytes(text.replace("\xb0", "\0").encode("utf-8").replace(b"\0", b"\xb0"))
    s = Schedule.read(p)
    assert [x.name for x in s.scans("Ky")] == ["sc\u00e9"]
    code, out, _ = run(capsys, str(p), "--station", "Ky", "--now", "2026-03-05T11:00:00")
    assert code == 1 and "warning: scan sc\u00e9: its name on disk cannot be used: \"E_Ky_sc\u00e9\" holds '\u00e9'" in out, out
