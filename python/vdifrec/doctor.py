"""`vdifrec doctor`: is this host tuned to record 8 Gbit/s without loss?

The checks follow the tuning the original system's papers describe (socket buffers, jumbo
frames, NIC rings, interrupts on the NIC's NUMA node, CPUs held at full speed, huge pages,
locked memory, a disk that keeps up). Every finding says what is wrong and the command that
fixes it; a check that cannot run on this host says so instead of vanishing.
"""

from __future__ import annotations

import dataclasses
import os
import re
import resource
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from . import _core

__all__ = ["Finding", "run_checks", "RATE_BYTES"]

# The reference stream (the generator's defaults): 125000 frames/s of 8224 bytes.
FRAME_SIZE: int = _core.defaults()["signal"]["frame_size"]
RATE_BYTES: int = _core.defaults()["signal"]["fps"] * FRAME_SIZE
# Headers a frame needs around it on the wire: IPv4 20 + UDP 8 (+ an 8-byte PSN).
IP_UDP = 28


@dataclasses.dataclass
class Finding:
    """One check: ``status`` is ok, warn, fail or skip (could not run here)."""

    name: str
    status: str
    value: Any
    message: str
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _cpulist(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def check_sysctl(name: str, key: str, want: int, why: str) -> Finding:
    v = _read(f"/proc/sys/{key.replace('.', '/')}")
    if v is None:
        return Finding(name, "skip", None, f"cannot read {key} here")
    value = int(v.split()[0])
    if value >= want:
        return Finding(name, "ok", value, f"{key} = {value}")
    return Finding(name, "warn", value, f"{key} = {value} < {want}: {why}", f"sysctl -w {key}={want}")


def check_mtu(interface: str | None) -> Finding:
    if not interface:
        return Finding("mtu", "skip", None, "not checked: give --interface IF (the 10 GbE port)")
    v = _read(f"/sys/class/net/{interface}/mtu")
    if v is None:
        return Finding("mtu", "fail", None, f"interface {interface} does not exist (`ip link` lists them)")
    mtu = int(v)
    need = FRAME_SIZE + IP_UDP + 8
    if mtu >= need:
        return Finding("mtu", "ok", mtu, f"MTU {mtu} fits a {FRAME_SIZE}-byte frame (+ headers and a PSN: {need})")
    return Finding("mtu", "fail", mtu, f"MTU {mtu} < {need}: {FRAME_SIZE}-byte frames would be fragmented",
                   f"ip link set dev {interface} mtu 9000")


def check_nic_ring(interface: str | None) -> Finding:
    if not interface:
        return Finding("nic_ring", "skip", None, "not checked: give --interface IF")
    if shutil.which("ethtool") is None:
        return Finding("nic_ring", "skip", None, "cannot check the NIC ring size: ethtool is not installed",
                       "apt-get install ethtool")
    r = subprocess.run(["ethtool", "-g", interface], capture_output=True, text=True, timeout=5)
    if r.returncode != 0:
        return Finding("nic_ring", "skip", None, f"ethtool -g {interface}: {r.stderr.strip() or 'not supported by this driver'}")
    rx = re.findall(r"^RX:\s+(\d+)", r.stdout, re.M)
    if len(rx) < 2:
        return Finding("nic_ring", "skip", None, f"ethtool -g {interface} reports no RX ring sizes")
    maximum, current = int(rx[0]), int(rx[1])
    if current >= maximum:
        return Finding("nic_ring", "ok", current, f"RX ring {current} (the maximum)")
    return Finding("nic_ring", "warn", current, f"RX ring {current} of a possible {maximum}: bursts overflow it",
                   f"ethtool -G {interface} rx {maximum}")


def _numa_node(interface: str) -> int | None:
    v = _read(f"/sys/class/net/{interface}/device/numa_node")
    return int(v) if v is not None and int(v) >= 0 else None


def _node_cpus(node: int) -> list[int]:
    v = _read(f"/sys/devices/system/node/node{node}/cpulist")
    return _cpulist(v) if v else []


def _nic_irqs(interface: str) -> dict[int, list[int]]:
    irqs: dict[int, list[int]] = {}
    text = _read("/proc/interrupts") or ""
    for line in text.splitlines():
        if interface in line:
            num = line.split(":", 1)[0].strip()
            if num.isdigit():
                aff = _read(f"/proc/irq/{num}/smp_affinity_list")
                irqs[int(num)] = _cpulist(aff) if aff else []
    return irqs


def check_irq_affinity(interface: str | None) -> Finding:
    if not interface:
        return Finding("irq_affinity", "skip", None, "not checked: give --interface IF")
    irqs = _nic_irqs(interface)
    if not irqs:
        return Finding("irq_affinity", "skip", None, f"no interrupts named after {interface} in /proc/interrupts "
                       "(a virtual interface, or a driver that names them otherwise)")
    node = _numa_node(interface)
    if node is None:
        return Finding("irq_affinity", "ok", {str(k): v for k, v in irqs.items()},
                       f"{len(irqs)} interrupts; no NUMA node reported for {interface} (one memory node)")
    local = set(_node_cpus(node))
    remote = {irq: cpus for irq, cpus in irqs.items() if not set(cpus) <= local}
    if not remote:
        return Finding("irq_affinity", "ok", {str(k): v for k, v in irqs.items()},
                       f"all {len(irqs)} interrupts of {interface} on NUMA node {node}")
    first = min(local) if local else 0
    fixes = "; ".join(f"echo {first} > /proc/irq/{irq}/smp_affinity_list" for irq in list(remote)[:4])
    return Finding("irq_affinity", "warn", {str(k): v for k, v in remote.items()},
                   f"{len(remote)} interrupts of {interface} run on CPUs outside its NUMA node {node}", fixes)


def check_governor() -> Finding:
    govs = {}
    for p in sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor")):
        govs[p.parent.parent.name] = p.read_text().strip()
    if not govs:
        return Finding("governor", "skip", None, "no cpufreq on this host (a virtual machine, or frequency not "
                       "under the kernel's control): nothing to tune here")
    slow = {cpu: g for cpu, g in govs.items() if g != "performance"}
    if not slow:
        return Finding("governor", "ok", "performance", f"all {len(govs)} CPUs run the performance governor")
    return Finding("governor", "warn", sorted(set(slow.values())),
                   f"{len(slow)} CPUs are not on the performance governor: their clock drops between bursts",
                   "cpupower frequency-set -g performance")


def check_cstates() -> Finding:
    states = sorted(Path("/sys/devices/system/cpu/cpu0/cpuidle").glob("state*"))
    if not states:
        return Finding("cstates", "skip", None, "no cpuidle states exposed here (a virtual machine, or idle=poll)")
    deep = []
    for st in states:
        latency = int(_read(st / "latency") or 0)
        disabled = (_read(st / "disable") or "0") == "1"
        if latency > 10 and not disabled:
            deep.append(f"{_read(st / 'name')} ({latency} us)")
    if not deep:
        return Finding("cstates", "ok", [], "no idle state deeper than 10 us is enabled")
    return Finding("cstates", "warn", deep, f"deep idle states enabled: {', '.join(deep)}: waking costs packets",
                   "cpupower idle-set -D 10")


def check_hugepages(ring: int) -> Finding:
    text = _read("/proc/meminfo") or ""
    m = {k: int(v) for k, v in re.findall(r"^(HugePages_\w+|Hugepagesize):\s+(\d+)", text, re.M)}
    size = m.get("Hugepagesize", 2048) * 1024
    free = m.get("HugePages_Free", 0) * size
    need = -(-ring // size)
    if free >= ring:
        return Finding("hugepages", "ok", free, f"{free >> 20} MiB of huge pages free for a {ring >> 20} MiB ring")
    return Finding("hugepages", "warn", free, f"{free >> 20} MiB of huge pages free, {ring >> 20} MiB wanted for the "
                   "ring (it works without, with more TLB misses; they are used when --frame-size is given)", f"sysctl -w vm.nr_hugepages={need}")


def check_mlock(ring: int) -> Finding:
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    caps = _read("/proc/self/status") or ""
    eff = re.search(r"CapEff:\s*([0-9a-f]+)", caps)
    ipc_lock = bool(eff and int(eff.group(1), 16) >> 14 & 1)
    if ipc_lock or soft == resource.RLIM_INFINITY or soft >= ring:
        return Finding("mlock", "ok", "unlimited" if soft == resource.RLIM_INFINITY or ipc_lock else soft,
                       "the ring can be locked in memory")
    return Finding("mlock", "warn", soft, f"locked-memory limit {soft} bytes < the {ring >> 20} MiB ring: it may be "
                   "swapped out under pressure", "ulimit -l unlimited  (or memlock in /etc/security/limits.conf)")


def check_free_space(path: str) -> Finding:
    try:
        du = shutil.disk_usage(path)
    except OSError as exc:
        return Finding("free_space", "fail", None, f"cannot use {path}: {exc}")
    minutes = du.free / RATE_BYTES / 60
    status = "ok" if minutes >= 60 else ("warn" if minutes >= 10 else "fail")
    msg = f"{du.free / 1e9:.1f} GB free in {path}: {minutes:.1f} minutes at 8.224 Gbit/s"
    return Finding("free_space", status, du.free, msg, None if status == "ok" else "free space or record elsewhere (--dir)")


def check_write_speed(path: str, quick: bool) -> Finding:
    """A short blockwrite-style test: throughput by block size and number of writers."""
    if not Path(path).is_dir():
        return Finding("write_test", "fail", None, f"{path} is not a directory")
    blocks = [1 << 20, 16 << 20] if quick else [1 << 20, 4 << 20, 16 << 20]
    threads = [1] if quick else [1, 2]
    budget = 2.5 if quick else 12.0
    per = budget / (len(blocks) * len(threads))
    results = {}
    direct = True
    for b in blocks:
        for t in threads:
            rate, d = _core.disk_write_test(path, b, t, 4 << 30, per)
            direct = direct and d
            results[f"{b >> 20}MiB x{t}"] = round(rate / 1e9, 3)
    best = max(results.values())
    how = "O_DIRECT" if direct else "buffered (the file system refuses O_DIRECT)"
    need = RATE_BYTES / 1e9
    table = ", ".join(f"{k}: {v} GB/s" for k, v in results.items())
    if best >= 1.2 * need:
        return Finding("write_test", "ok", results, f"{how} writes reach {best} GB/s ({table}); the stream needs {need:.3f} GB/s")
    status = "warn" if best >= need else "fail"
    return Finding("write_test", status, results, f"{how} writes reach only {best} GB/s ({table}); the stream needs "
                   f"{need:.3f} GB/s with headroom", "record to a faster array (RAID0 of several disks), or a smaller rate")


def check_pf_ring() -> Finding:
    params = Path("/sys/module/pf_ring/parameters")
    if not Path("/proc/net/pf_ring").exists() and not params.exists():
        return Finding("pf_ring", "skip", None, "the pf_ring kernel module is not loaded (needed only for --backend pfring)")
    want = {"min_num_slots": "8192", "enable_tx_capture": "0", "enable_frag_coherence": "0", "quick_mode": "1"}
    have = {k: _read(params / k) for k in want}
    off = {k: v for k, v in have.items() if v is not None and v.strip().upper() not in (want[k], "Y" if want[k] == "1" else "N")}
    if not off:
        return Finding("pf_ring", "ok", have, "pf_ring loaded as the original system ran it (8192 slots, RX only, no "
                       "defragmentation, quick mode)")
    opts = " ".join(f"{k}={v}" for k, v in want.items())
    return Finding("pf_ring", "warn", have, f"pf_ring parameters differ from the original system's: {off}",
                   f"rmmod pf_ring; modprobe pf_ring {opts}")


def suggest_cpus(interface: str | None) -> Finding:
    allowed = sorted(os.sched_getaffinity(0))
    node = _numa_node(interface) if interface else None
    pool = [c for c in (_node_cpus(node) if node is not None else allowed) if c in allowed] or allowed
    irq_cpus = {c for cpus in (_nic_irqs(interface).values() if interface else []) for c in cpus}
    free = [c for c in pool if c not in irq_cpus and c != 0] or pool
    if len(allowed) < 3:
        return Finding("cpus", "warn", allowed, f"only {len(allowed)} CPUs: capture, writer and the rest of the system "
                       "share them; leave pinning to the scheduler", None)
    capture, writer = free[-1], (free[-2] if len(free) > 1 else pool[0])
    where = f" on {interface}'s NUMA node {node}" if node is not None else ""
    return Finding("cpus", "ok", {"capture_cpu": capture, "writer_cpu": writer},
                   f"suggested: --capture-cpu {capture} --writer-cpu {writer}{where}, away from the NIC's interrupts")


def run_checks(interface: str | None, path: str, quick: bool, ring: int | None = None) -> list[Finding]:
    t0 = time.monotonic()
    recorder = _core.defaults()["recorder"]
    ring = recorder["ring"] if ring is None else ring
    findings = [
        # rmem_max as large as the socket buffer a recording asks for.
        check_sysctl("rmem_max", "net.core.rmem_max", recorder["rcvbuf"], "the socket buffer cannot absorb a burst"),
        check_sysctl("netdev_max_backlog", "net.core.netdev_max_backlog", 250000, "packets queue up before the socket"),
        check_mtu(interface),
        check_nic_ring(interface),
        check_irq_affinity(interface),
        check_governor(),
        check_cstates(),
        check_hugepages(ring),
        check_mlock(ring),
        check_free_space(path),
        check_write_speed(path, quick),
        check_pf_ring(),
        suggest_cpus(interface),
    ]
    took = round(time.monotonic() - t0, 2)
    findings.append(Finding("duration", "ok", took, f"these checks took {took} s"))
    return findings
