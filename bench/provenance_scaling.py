"""The provenance layer on large inputs: does its cost grow with the input, or with its square?

    python -m bench.provenance_scaling [--json]

Each case runs the gate's provenance analysis (pure: ``sources_from`` + ``analyse``, no
services) at a base size and at eight times it; linear work gives a ratio near 8, quadratic
work near 64. The cases are the inputs a review found quadratic: a long digit-less word in a
mail (data tokens), a long argument without an ``@`` (e-mail addresses), and a reply-all to
many senders of a full inbox (the disclosure scan). The table gives each case's time at the
larger size and the ratio; the target is a ratio under 16.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from warrant.runner.provenance import analyse, sources_from
from warrant.runner.scopes import ResourceKind
from warrant.tools import Attribution

INBOX = Attribution(
    items="messages",
    author="sender",
    kind=ResourceKind.EMAIL,
    names=("sender_name",),
    replies=True,
)
GOAL = "Reply to the mail from the helpdesk and say I will call them."
ATTACKER = "helpdesk@corp-support.example"
#: The largest ratio (8 times the input) that still reads as linear.
TARGET_RATIO = 16.0


def _mail(sender: str, body: str) -> dict[str, Any]:
    return {"sender": sender, "sender_name": None, "subject": "hello", "body": body}


def _run(arguments: dict[str, Any], mails: list[dict[str, Any]]) -> None:
    observations = [
        ["user-1", "user", {"goal": GOAL}],
        ["tool-1", "untrusted-content", {"tool": "read_inbox", "output": {"messages": mails}}],
    ]
    sources = sources_from(GOAL, {}, observations, attributions={"read_inbox": INBOX})
    analyse(
        arguments, cites=[], sources=sources, resources={"to": ResourceKind.EMAIL}, replies=True
    )


def _digitless_word(size: int) -> None:
    _run(
        {"to": [ATTACKER], "body": "ok"}, [_mail(ATTACKER, "ask"), _mail("x@n.example", "x" * size)]
    )


def _long_argument(size: int) -> None:
    _run({"to": [ATTACKER], "body": "x" * size}, [_mail(ATTACKER, "ask")])


def _reply_all(size: int) -> None:
    body = "Order 48213-A shipped 2025-03-14, 1,234.56 EUR. " * 4
    mails = [_mail(f"s{i}@shop{i}.example", body) for i in range(size)]
    _run({"to": [m["sender"] for m in mails[: size // 10]], "body": "thanks"}, mails)


CASES: dict[str, tuple[Callable[[int], None], int]] = {
    "a digit-less word in a mail (characters)": (_digitless_word, 8_192),
    "an argument without '@' (characters)": (_long_argument, 8_192),
    "a reply-all to a tenth of the inbox (mails)": (_reply_all, 60),
}


def _seconds(case: Callable[[int], None], size: int, *, runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        case(size)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    args = parser.parse_args()
    rows = []
    for name, (case, base) in CASES.items():
        small, large = _seconds(case, base), _seconds(case, base * 8)
        ratio = large / small if small > 0 else float("inf")
        rows.append({"case": name, "size": base * 8, "seconds": large, "ratio": ratio})
    if args.json:
        print(json.dumps({"target_ratio": TARGET_RATIO, "cases": rows}))
        return
    print(f"{'case':48} {'size':>8} {'seconds':>9} {'ratio x8':>9}  target < {TARGET_RATIO:g}")
    for row in rows:
        verdict = "ok" if row["ratio"] < TARGET_RATIO else "OVER"
        print(
            f"{row['case']:48} {row['size']:>8} {row['seconds']:>9.3f} {row['ratio']:>9.1f}  "
            f"{verdict}"
        )


if __name__ == "__main__":
    main()
