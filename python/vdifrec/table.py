"""The per-second table and the summary block, in the original recorder's form.

The first six columns are those of the original system (KASI's PF_RING recorder); the rest
split the loss by cause, which the original lumped together or did not see.
"""

from __future__ import annotations

from typing import Any, TextIO

from .reports import SecondRow, Summary

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
    )


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
