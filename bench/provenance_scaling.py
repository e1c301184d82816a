"""The provenance layer on large inputs: does its cost grow with the input, or with its square?

    python -m bench.provenance_scaling [--json]

Each case runs the gate's provenance analysis (pure: ``sources_from`` + ``analyse``, no
services) at a base size and at eight times it; linear work gives a ratio near 8, quadratic
work near 64. The cases are the inputs a review found quadratic: a long digit-less word in a
mail (data tokens), a long argument without an ``@`` (e-mail addresses), and a reply-all to
many senders of a full inbox (the disclosure scan). The table gives each case's time at the
larger size and the ratio; the target is a ratio under 16. Each run starts cold (the layer's
per-text caches cleared).

Then the whole gate (``warrant.testing.ToolHarness.propose``: ``policy.evaluate`` with its
provenance layer) on a reply to a sender after the largest observation set the benchmark of
issue 51 saw (113 observations, about 840 KB: mailboxes and pages), against the same gate
with nothing read (the layer then has nothing to check): the first evaluation in a worker
that never saw the run (cold), a run's next call with one page read since its last (only that
page is new: the steady state of a run in one worker), and the same set again (its
observations' tokens cached), as medians and as ratios to that baseline. The target: the next
and the cached evaluation within 20 ms.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

from tests.adversary.tools import READ_INBOX, SEND_MAIL
from warrant.runner import disclosure, mentions, provenance
from warrant.runner.provenance import analyse, sources_from
from warrant.runner.scopes import ResourceKind
from warrant.testing import ToolHarness
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


def _cold() -> None:
    """Forget what the layer cached (a worker process that never saw the run)."""
    for cached in (
        disclosure.squeezed_tokens,
        disclosure._by_prefix,
        mentions.token,
        provenance._addresses,
    ):
        cached.cache_clear()


def _seconds(case: Callable[[int], None], size: int, *, runs: int = 3) -> float:
    best = float("inf")
    for _ in range(runs):
        _cold()
        start = time.perf_counter()
        case(size)
        best = min(best, time.perf_counter() - start)
    return best


#: The largest observation set: this many observations (a mailbox every fourth).
OBSERVATIONS = 113
#: Characters of text in each (about 840 KB in all, as JSON).
PAGE_CHARS = 7_000
#: The cached evaluation's target, in milliseconds.
TARGET_MS = 20.0


def _largest_set() -> list[tuple[Any, Any]]:
    """Mailboxes and pages: prose with a reference, an amount or a date now and then."""
    words = ["the", "of", "meeting", "quarterly", "review", "budget", "notes", "shipped"]
    observed: list[tuple[Any, Any]] = []
    for i in range(OBSERVATIONS):
        text = " ".join(
            words[(i * 7 + k) % len(words)] if k % 12 else f"REF-{i:03d}{k:05d} {k},{i:03d}.50"
            for k in range(PAGE_CHARS // 9)
        )
        if i % 4 == 0:
            mails = [
                _mail(f"s{i}-{j}@shop{i}.example", text[j * 1500 : (j + 1) * 1500])
                for j in range(4)
            ]
            observed.append((READ_INBOX, {"messages": mails}))
        else:
            observed.append((_PAGE, {"url": f"https://site{i}.example/p", "text": text}))
    return observed


def _gate_on_the_largest_set(*, runs: int = 9) -> dict[str, float]:
    """Median milliseconds: the gate with nothing read, the first evaluation after the largest
    set (cold caches) and the next ones (cached), for a reply to a sender that carries data."""
    harness = ToolHarness(SEND_MAIL, subject="alice")
    observed = _largest_set()
    sender = observed[0][1]["messages"][1]["sender"]
    arguments = {"to": [sender], "subject": "Re: order", "body": "Thanks, REF-00000012 is fine."}
    goal = "Reply to the mail about the order and say it is fine."
    grants = [{"capability": "mail:send"}]

    def once(read: list[tuple[Any, Any]]) -> float:
        start = time.perf_counter()
        harness.propose(arguments, grants=grants, goal=goal, observed=read)
        return (time.perf_counter() - start) * 1000

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    baseline = median([once([]) for _ in range(runs)])
    cold = []
    for _ in range(3):
        _cold()
        cold.append(once(observed))
    cached = median([once(observed) for _ in range(runs)])
    # a run's next call: one more page read since the last evaluation (only it is new)
    pages = observed[1:4]
    grown = []
    for n, (tool, page) in enumerate(pages * (runs // len(pages) + 1)):
        fresh = {**page, "text": page["text"].replace("REF-", f"R{n}X-")}
        observed = [*observed, (tool, fresh)]
        once(observed[:-1])
        grown.append(once(observed))
    return {
        "baseline_ms": baseline,
        "cold_ms": median(cold),
        "next_ms": median(grown[:runs]),
        "cached_ms": cached,
    }


#: A fetched page: untrusted, its author the page's URL.
_PAGE = dataclasses.replace(
    READ_INBOX, name="fetch_page", attribution=Attribution(author="url", kind=ResourceKind.URL)
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    args = parser.parse_args()
    rows = []
    for name, (case, base) in CASES.items():
        small, large = _seconds(case, base), _seconds(case, base * 8)
        ratio = large / small if small > 0 else float("inf")
        rows.append({"case": name, "size": base * 8, "seconds": large, "ratio": ratio})
    gate = _gate_on_the_largest_set()
    if args.json:
        print(json.dumps({"target_ratio": TARGET_RATIO, "cases": rows, "largest_set": gate}))
        return
    print(f"{'case':48} {'size':>8} {'seconds':>9} {'ratio x8':>9}  target < {TARGET_RATIO:g}")
    for row in rows:
        verdict = "ok" if row["ratio"] < TARGET_RATIO else "OVER"
        print(
            f"{row['case']:48} {row['size']:>8} {row['seconds']:>9.3f} {row['ratio']:>9.1f}  "
            f"{verdict}"
        )
    base = gate["baseline_ms"]
    print(f"\nthe gate, a reply after {OBSERVATIONS} observations (ms, median; x nothing read)")
    print(f"  {'nothing read':42} {base:8.2f}")
    shown = {
        "cold": "cold (a worker that never saw the run)",
        "next": "next (one page more than its last call)",
        "cached": "cached (the same set again)",
    }
    for name, label in shown.items():
        value = gate[f"{name}_ms"]
        print(f"  {label:42} {value:8.2f}  x{value / base:6.1f}")
    verdict = "ok" if max(gate["next_ms"], gate["cached_ms"]) <= TARGET_MS else "OVER"
    print(f"  next and cached target <= {TARGET_MS:g} ms: {verdict}")


if __name__ == "__main__":
    main()
