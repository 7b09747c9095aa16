"""Two network namespaces of our own joined by a veth pair, for the raw-socket backends.

Used by tests/test_backends.py and benches/bench_backends.py. Traffic stays inside the pair:
addresses come from the benchmarking (198.18.0.0/15) and unique-local (fd00::/8) ranges, and
both namespaces are removed afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator

SENDER_V4, RECEIVER_V4 = "198.18.0.1", "198.18.0.2"
SENDER_V6, RECEIVER_V6 = "fd00:5de::1", "fd00:5de::2"
RECEIVER_VLAN_V4 = "198.18.1.2"


class NamespacesUnavailable(RuntimeError):
    """This host (or this user) cannot make network namespaces; the message says why."""


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=30)


@contextlib.contextmanager
def veth_pair() -> Iterator[dict[str, str]]:
    """Yields {ns_s, ns_r, if_s, if_r, no_vlan, no_ipv6}: the sender's and the receiver's
    namespace and interface (MTU 9000, IPv4, and IPv6 where the kernel has it), and, when the
    kernel cannot make VLAN devices or IPv6 addresses, why (otherwise a VLAN 42 with
    198.18.1.0/30 sits on top, and each interface has its fd00:5de:: address)."""
    if shutil.which("ip") is None:
        raise NamespacesUnavailable("iproute2's `ip` is not installed (apt-get install iproute2)")
    tag = str(os.getpid() % 100000)
    ns_s, ns_r = f"vdifrec-s{tag}", f"vdifrec-r{tag}"
    if_s, if_r = f"vs{tag}", f"vr{tag}"
    made = sh("ip", "netns", "add", ns_s, check=False)
    if made.returncode != 0:
        raise NamespacesUnavailable(f"cannot make network namespaces here: {made.stderr.strip()}")
    try:
        sh("ip", "netns", "add", ns_r)
        sh("ip", "link", "add", if_s, "netns", ns_s, "mtu", "9000", "type", "veth", "peer", "name", if_r,
           "netns", ns_r, "mtu", "9000")
        no_ipv6 = ""
        for ns, dev, v4, v6 in ((ns_s, if_s, SENDER_V4, SENDER_V6), (ns_r, if_r, RECEIVER_V4, RECEIVER_V6)):
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", f"{v4}/30", "dev", dev)
            if not no_ipv6:
                # A kernel booted with ipv6.disable=1 (or IPv6 turned off) refuses the address.
                made = sh("ip", "-n", ns, "addr", "add", f"{v6}/64", "dev", dev, "nodad", check=False)
                if made.returncode != 0:
                    no_ipv6 = f"IPv6 is not available in these namespaces ({made.stderr.strip()})"
            sh("ip", "-n", ns, "link", "set", dev, "up")
        # Static neighbour entries: with no ARP/ND to wait for (and no tentative link-local
        # address to hold IPv6 solicitation back), the first frame of a stream is delivered
        # rather than parked in the kernel's short unresolved-neighbour queue.
        mac_r = json.loads(sh("ip", "-n", ns_r, "-j", "link", "show", if_r).stdout)[0]["address"]
        for addr in (RECEIVER_V4,) if no_ipv6 else (RECEIVER_V4, RECEIVER_V6):
            sh("ip", "-n", ns_s, "neigh", "replace", addr, "lladdr", mac_r, "dev", if_s, "nud", "permanent")
        vlan = ""
        for ns, dev, v4vlan in ((ns_s, if_s, "198.18.1.1/30"), (ns_r, if_r, f"{RECEIVER_VLAN_V4}/30")):
            made = sh("ip", "-n", ns, "link", "add", "link", dev, "name", f"{dev}.42", "mtu", "8996", "type", "vlan",
                      "id", "42", check=False)
            if made.returncode != 0:
                vlan = f"this kernel cannot make VLAN devices ({made.stderr.strip()}; module 8021q)"
                break
            sh("ip", "-n", ns, "addr", "add", v4vlan, "dev", f"{dev}.42")
            sh("ip", "-n", ns, "link", "set", f"{dev}.42", "up")
        if not vlan:
            mac_rv = json.loads(sh("ip", "-n", ns_r, "-j", "link", "show", f"{if_r}.42").stdout)[0]["address"]
            sh("ip", "-n", ns_s, "neigh", "replace", RECEIVER_VLAN_V4, "lladdr", mac_rv, "dev", f"{if_s}.42",
               "nud", "permanent")
        yield {"ns_s": ns_s, "ns_r": ns_r, "if_s": if_s, "if_r": if_r, "no_vlan": vlan, "no_ipv6": no_ipv6}
    finally:
        sh("ip", "netns", "del", ns_s, check=False)
        sh("ip", "netns", "del", ns_r, check=False)


def port_sink(ns: str, port: int, python: str) -> subprocess.Popen[bytes]:
    """A socket bound to `port` in `ns`, never read, so the receiver's kernel does not answer a
    stream meant for a raw-socket recorder with "port unreachable" (AF_PACKET sees the
    packets whatever the kernel does with them). IPv4 and IPv6 on one socket, or IPv4 alone
    where the kernel has no IPv6. Kill it when done."""
    return subprocess.Popen(["ip", "netns", "exec", ns, python, "-c",
                             "import socket,time\n"
                             "try:\n"
                             "    s=socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
                             "    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n"
                             f"    s.bind(('::', {port}))\n"
                             "except OSError:\n"
                             "    s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                             f"    s.bind(('0.0.0.0', {port}))\n"
                             "time.sleep(120)"])
