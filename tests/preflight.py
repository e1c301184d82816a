"""What ``make test`` needs from the machine, said before the suite starts.

    python -m tests.preflight

The suite talks to real services and programs. Locally, a test whose service is missing is
skipped (under ``CI=true`` it fails); this lists what is missing and how to get it, so a skip
is never a surprise. ``.ci/run`` starts or installs each of them where it can. Exit 0 unless
``CI=true`` and something is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys

from tests.own_postgres import postgres_binaries

__all__ = ["missing"]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def missing() -> list[tuple[str, str]]:
    """``(what, how to get it)`` for each missing requirement."""
    found: list[tuple[str, str]] = []
    if not _port_open(5432):
        found.append(("PostgreSQL on 127.0.0.1:5432", "start it, or the tests start embedded ones"))
    if not _port_open(6379):
        found.append(("Redis on 127.0.0.1:6379", "start it, or the tests start embedded ones"))
    if not _port_open(5672):
        found.append(
            ("RabbitMQ on 127.0.0.1:5672 (the RabbitMQ pass)", "apt-get install rabbitmq-server")
        )
    elif not _port_open(15672):
        found.append(
            (
                "RabbitMQ's management API on :15672 (Flower's queue lengths)",
                "rabbitmq-plugins enable rabbitmq_management",
            )
        )
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        found.append(("Chromium (the inbox's browser tests)", "apt-get install chromium"))
    if shutil.which("redis-server") is None or postgres_binaries() is None:
        found.append(
            (
                "redis-server and PostgreSQL's server binaries (tests that restart their own)",
                "apt-get install redis-server postgresql",
            )
        )
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
        found.append(("root with ip and unshare (the multi-host tests)", "run as root"))
    for tool, package in (("nft", "nftables"), ("faketime", "faketime")):
        if shutil.which(tool) is None:
            found.append((f"{tool} (the multi-host tests)", f"apt-get install {package}"))
    return found


def main() -> int:
    gaps = missing()
    if not gaps:
        print("preflight: every service and program the suite uses is here")
        return 0
    ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    print(f"preflight: missing ({'the suite fails' if ci else 'their tests are skipped'}):")
    for what, how in gaps:
        print(f"  - {what}: {how}")
    return 1 if ci else 0


if __name__ == "__main__":
    sys.exit(main())
