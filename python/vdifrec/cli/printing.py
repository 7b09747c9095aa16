"""What the commands print: the per-second table and the summary block in the original
recorder's form, the latency table, the check report and the fringe verdict.

The table's first six columns are those of the original system (KASI's PF_RING recorder); the
rest split the loss by cause, which the original lumped together or did not see.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from ..analysis.fringe import Fringe
from ..reports import ForwardSecond, SecondRow, Summary

def runs(numbers: list[int]) -> str:
    """Sorted numbers as runs: ``0-3, 7`` (thread IDs, part numbers)."""
    out: list[str] = []
    for n in numbers:
        if out and n == int(out[-1].rpartition("-")[2]) + 1:
            out[-1] = f"{out[-1].partition('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ", ".join(out)


#: How often the header line is repeated in a long table.
HEADER_EVERY = 40

HEADER = (
    f"{'Time':<10}  {'Frame_Num/Sec':>15}  {'Total_Frame':>11}  {'Buf_Stream_Size':>15}  "
    f"{'Data_Size':>15}  {'Packet_Loss':>11}  {'OutOfOrder':>10}  {'Dup':>5}  {'Invalid':>7}  "
    f"{'RingOvfl':>8}  {'Malformed':>9}  {'KernelDrop':>10}  Station"
)


#: The table of a recording of several streams: one line per stream per second.
STREAMS_HEADER = f"{'Port':<5}  {HEADER}"


def row_line(r: SecondRow, streams: bool = False) -> str:
    """One line of the table: VDIF seconds since the reference epoch, frames received/expected, ...,
    the stations of the second's frames (``Kv``, or ``Kv+Ku`` for two in one stream). With
    ``streams``, the line starts with the stream's port."""
    frames = f"{r.received}/{r.expected}"
    port = f"{r.stream:<5}  " if streams else ""
    return port + (
        f"{r.vdif_seconds:<10}  {frames:>15}  {r.total_frames:>11}  {r.bytes_buffered:>15}  "
        f"{r.bytes_written:>15}  {r.lost:>11}  {r.out_of_order:>10}  {r.duplicates:>5}  {r.invalid:>7}  "
        f"{r.ring_overflow:>8}  {r.malformed:>9}  {r.kernel_drops:>10}  {'+'.join(r.stations)}"
    ) + "".join(forward_cell(f) for f in r.forward)


def forward_refused(summary: Summary, prog: str) -> bool:
    """Says on stderr which ``--forward`` destinations could not be shaped as asked (channels
    or threads not in the stream, a payload that does not divide its frames): a usage error
    the stream itself revealed, told after the recording, which went on untouched."""
    refused = [f for f in summary.forward if f.state == "refused"]
    for f in refused:
        print(f"{prog}: error: --forward {f.given}: {f.error} (nothing was sent there; the recording is intact)", file=sys.stderr)
    return bool(refused)


def forward_cell(f: ForwardSecond) -> str:
    """A forwarding destination's second, after the row: frames sent on, skipped, the rate."""
    again = f", {f.reconnects} reconnected" if f.reconnects else ""
    return f"  fwd{f.id} {f.frames} sent {f.skipped} skipped {f.gbps:.3f} Gb/s{again}"


def print_summary(s: Summary, out: TextIO) -> None:
    """The SUMMARY block: the original's four lines, then every cause of loss on its own line."""
    bar = "=" * 16
    print(f"{bar} SUMMARY {bar}", file=out)
    print(f"Stream Good Packet: {s.frames_received}", file=out)
    print(f"Buffered Stream Size: {s.bytes_buffered}", file=out)
    # A scan in vbs chunks has many files: those are listed per scan and disk below.
    for f in ([] if s.scans else s.files):
        print(f"Saved File Name: {f.path}", file=out)
    if not s.files and not s.scans:
        print("Saved File Name: (none)", file=out)
    for sc in s.scans:
        print(
            f"Scan {sc.name} ({sc.format}): {sc.frames} frames, {sc.bytes_written} bytes in "
            f"{sc.chunks} {'chunks' if sc.format == 'vbs' else 'pieces'}; lost {sc.frames_lost} "
            f"(at the window's edges {sc.frames_lost_at_edges}); dropped on the way to disk "
            f"{sc.bytes_dropped_disk} bytes; {'ok' if sc.ok else 'NOT OK'}",
            file=out,
        )
        for d in sc.disks:
            gone = f"  LEFT THE SET: {d.dropped}" if d.dropped else ""
            print(f"  disk {d.path}: {d.bytes} bytes, {d.chunks} {'chunks' if sc.format == 'vbs' else 'file'}{gone}", file=out)
        if sc.error:
            print(f"  Error: {sc.error}", file=out)
    if s.bytes_outside_scans:
        print(f"Between scans (received, counted, not written): {s.bytes_outside_scans} bytes", file=out)
    print(f"File Capacity: {sum(f.bytes for f in s.files)}", file=out)
    print(f"Lost (sequence gaps): {s.frames_lost}  of which kernel drops: {s.kernel_drops}", file=out)
    print(f"Out of order: {s.frames_out_of_order}  Duplicates: {s.frames_duplicate}  Invalid: {s.frames_invalid}", file=out)
    kinds = ", ".join(f"{k} {v}" for k, v in s.datagrams_malformed_by_kind.items() if v)
    print(f"Malformed datagrams: {s.datagrams_malformed}{f' ({kinds})' if kinds else ''}", file=out)
    print(f"Ring overflows: {s.ring_overflows}", file=out)
    if s.psn_lost is not None:
        print(f"PSN gaps: {s.psn_lost}  PSN out of order: {s.psn_out_of_order}", file=out)
    if s.frames_out_of_window or s.time_jumps or s.frames_late:
        print(f"Out of window: {s.frames_out_of_window}  Time jumps: {s.time_jumps}  Late: {s.frames_late}", file=out)
    print(f"Bytes written: {s.bytes_written}  dropped on the way to disk: {s.bytes_dropped_disk}", file=out)
    what = "buffered = written + dropped + between scans" if s.scans else "buffered = written + dropped = sum of file sizes"
    print(f"Invariant ({what}): {'holds' if s.invariant_holds else 'BROKEN'}", file=out)
    if s.error:
        print(f"Error: {s.error}", file=out)
    if s.live_computed is not None:
        print(f"Live monitor: {s.live_computed} looks, {s.live_skips} skipped (never a frame lost), {s.live_cpu_s or 0:.1f} CPU s", file=out)
    for fw in s.forward:
        shaped = f" ({fw.frames_out} frames out)" if fw.frames_out != fw.frames else ""
        again = f", {fw.reconnects} reconnected ({fw.connect_failures} attempts failed)" if fw.reconnects or fw.connect_failures else ""
        why = f"; {fw.error}" if fw.error else ""
        print(f"Forwarded (fwd{fw.id}) to {fw.destination}: {fw.frames} frames{shaped}, {fw.bytes} bytes; skipped {fw.skipped}{again}; {fw.state}{why}", file=out)
    print("=" * (2 * len(bar) + 9), file=out)
    if s.latency is not None:
        print_latency(s.latency, out)


#: What each latency stage measures, for the table.
LATENCY_STAGES = {
    "kernel": "kernel receive stamp -> capture thread",
    "capture": "capture thread -> published to the ring",
    "write": "published -> write call returned",
    "durable": "written -> written back (buffered writes)",
    "off": "arrival - the frame's VDIF time",
}


def _duration(v: float | None) -> str:
    if v is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v / 1e-9:.3g} ns"


def print_latency(latency: dict[str, Any], out: TextIO) -> None:
    """The per-stage latency table (``record --latency``): quantiles are the upper edges of
    log buckets (4 per decade), so read them as "at most"."""
    every = latency.get("sample_every", 64)
    print(f"LATENCY (one frame in {every}; quantiles are bucket upper edges, 4 per decade)", file=out)
    print(f"{'stage':<8} {'count':>9} {'p50':>10} {'p99':>10} {'p99.9':>10} {'max':>10}  what", file=out)
    for name, what in LATENCY_STAGES.items():
        st = latency["stages"].get(name)
        if st is None:
            continue
        neg = f" ({st['negative']} negative: the sender's clock ahead)" if st.get("negative") else ""
        print(
            f"{name:<8} {st['count']:>9} {_duration(st['p50']):>10} {_duration(st['p99']):>10} "
            f"{_duration(st['p999']):>10} {_duration(st['max']):>10}  {what}{neg}",
            file=out,
        )


def print_check_report(r: dict[str, Any], every_second: bool = False) -> None:
    """Human-readable form of a check report."""
    f = r["format"]
    t = r["totals"]
    kind = "legacy" if f["legacy"] else f"EDV {f['edv']}"
    scan = r.get("scan")
    if scan:
        print(f"scan         {r['path']}: {r['file_bytes']} bytes in {scan['parts']} {scan['part_word']}(s)")
    else:
        print(f"file         {r['path']} ({r['file_bytes']} bytes)")
    if not r["frames"] and scan:
        # A scan with no whole frame (a recorder stopped as it began it): nothing to describe.
        print("frames       0: the scan holds no whole frame")
    else:
        print(
            f"format       {f['frame_size']}-byte frames, {kind}, {f['nchan']} ch x {f['bits']} bit "
            f"{'complex' if f['complex'] else 'real'}, station {r['station']}"
        )
        print(f"frames       {r['frames']} in {len(r['threads'])} thread(s): {', '.join(map(str, r['threads']))}")
        print(f"rate         {r['frames_per_second']} frames/s per thread ({r['frames_per_second_source']})")
        print(f"time         {r['first_frame_time']} .. {r['last_frame_time']}")
    print(
        f"counts       expected {t['expected']}  received {t['received']}  lost {t['lost']}  "
        f"out-of-order {t['out_of_order']}  duplicate {t['duplicates']}  invalid {t['invalid']}"
    )
    if t["out_of_window"] or t["time_jumps"] or t["late"]:
        print(f"time         {t['out_of_window']} frames out of window, {t['time_jumps']} jumps, {t['late']} late")
    rows = [s for s in r["seconds"] if every_second or s["lost"] or s["duplicates"] or s["out_of_order"] or s["invalid"]]
    if rows:
        print("second       station  thread  received/expected  lost  out-of-order  duplicate  invalid")
        for s in rows:
            for th in s["threads"]:
                print(
                    f"{s['vdif_seconds']:<12} {th['station']:>7}  {th['thread']:>6}  {th['received']:>8}/{th['expected']:<8}  "
                    f"{th['lost']:>4}  {th['out_of_order']:>12}  {th['duplicates']:>9}  {th['invalid']:>7}"
                )
    for g in r["gaps"]:
        (s0, f0), (s1, f1) = g["first_missing"], g["last_missing"]
        print(f"gap          station {g['station']} thread {g['thread']}: {g['missing']} frames missing, {s0}:{f0} .. {s1}:{f1} (unix second:frame)")
    if r["gaps_not_listed"]:
        print(f"gap          ... {r['gaps_not_listed']} more gaps not listed")
    for c in r["corrupt"]:
        print(f"corrupt      {c['bytes']} bytes at offset {c['offset']} ({c['reason']})")
    if r["corrupt_stretches"] > len(r["corrupt"]):
        print(f"corrupt      ... {r['corrupt_stretches'] - len(r['corrupt'])} more stretches not listed")
    for g in scan["gaps"] if scan else []:
        print(f"missing      {g['description']}")
    if scan and scan["torn"]:
        n = len(scan["torn"])
        print(f"torn         {n} piece{'' if n == 1 else 's'}, {scan['torn_bytes']:,} bytes left out (not whole frames; "
              f"`vdifrec scans --repair` cuts them)")
    for t in scan["torn"] if scan else []:
        print(f"torn         {t['description']}")
    if r["trailing_bytes"]:
        print(f"trailing     {r['trailing_bytes']} bytes after the last whole frame")
    w = r["header_warnings"]
    if w["edv0_nonzero_words"]:
        print(f"header       {w['edv0_nonzero_words']} EDV 0 frames with non-zero words 4-7")
    if w["station_changes"]:
        print(f"header       {w['station_changes']} frames with another station id")
    print("result       " + ("CLEAN" if r["clean"] else "PROBLEMS FOUND"))


def verdict(f: Fringe) -> str:
    """The detection said plainly, for the operator's eye."""
    if f.detected:
        return f"FRINGE DETECTED (SNR {f.snr:.1f} >= {f.snr_threshold:g})"
    return f"no fringe (SNR {f.snr:.1f} < {f.snr_threshold:g})"
