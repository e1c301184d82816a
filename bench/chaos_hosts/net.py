"""Network faults on a lab host (``tests.hosts.Lab``), all silent: packets are dropped, never
refused, as when a cable is pulled or a machine loses power (nftables in the host's own
namespace; Debian's ``nftables`` package).
"""

from __future__ import annotations

import subprocess

from tests.hosts import Lab

__all__ = ["cut", "heal", "kill_host"]

TABLE = "warrant_lab"


def _nft(lab: Lab, host: str, *args: str, check: bool = True) -> None:
    done = subprocess.run(
        ["ip", "netns", "exec", lab.namespaces[host], "nft", *args],
        capture_output=True,
        text=True,
        timeout=10,
    )
    if check and done.returncode:
        raise RuntimeError(f"nft {' '.join(args)} on {host}: {done.stderr.strip()}")


def cut(lab: Lab, host: str, *, port: int | None = None) -> None:
    """Drop every packet the host sends or receives, but on loopback (``port``: only TCP to
    and from that port, e.g. Redis's while PostgreSQL stays reachable)."""
    _nft(lab, host, "add", "table", "inet", TABLE)
    for chain, hook, direction in (("out", "output", "dport"), ("in", "input", "sport")):
        _nft(
            lab, host, "add", "chain", "inet", TABLE, chain,
            f"{{ type filter hook {hook} priority 0; policy accept; }}",
        )  # fmt: skip
        match = ["tcp", direction, str(port)] if port else ["meta", "l4proto", "{ tcp, udp }"]
        iface = "oifname" if hook == "output" else "iifname"
        _nft(lab, host, "add", "rule", "inet", TABLE, chain, iface, "!=", "lo", *match, "drop")


def heal(lab: Lab, host: str) -> None:
    _nft(lab, host, "delete", "table", "inet", TABLE, check=False)


def kill_host(lab: Lab, host: str) -> None:
    """SIGKILL every process on the host (without a cut, its sockets close and peers see
    resets; after :func:`cut`, nothing reaches them: a power cut)."""
    pids = subprocess.run(
        ["ip", "netns", "pids", lab.namespaces[host]], capture_output=True, text=True
    ).stdout.split()
    for pid in pids:
        subprocess.run(["kill", "-9", pid], capture_output=True)
