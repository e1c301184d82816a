"""Working memory: the bounded, disposable view a planner gets each step (pure).

The planner never gets "all history". Each step it receives a view rebuilt from the ledger:
the goal, the most recent observations (bounded in count and size), evidence summaries that
keep ids, numbers, negations, times and source pointers, the tools it may propose with their
schemas, the remaining budgets, and the subject's preferences as structured data. Every item
carries its source (``user``, ``trusted-tool``, ``untrusted-content``, ``policy``); untrusted
text is delimited as data. Dropping the view loses nothing: it is rebuilt from the ledger.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from warrant.runner.canonical import sha256_hex

__all__ = [
    "DEFAULT_MAX_ITEMS",
    "DEFAULT_MAX_ITEM_CHARS",
    "MemoryItem",
    "ObservationRecord",
    "WorkingMemoryView",
    "build_view",
    "delimit_untrusted",
]

#: Most recent observations kept in the view.
DEFAULT_MAX_ITEMS = 8
#: Characters per item after summarizing.
DEFAULT_MAX_ITEM_CHARS = 1_500
#: Longest string kept whole inside a summary (ids are always kept whole).
SUMMARY_STRING_CHARS = 400
#: Longest list kept whole inside a summary (a marker says how many items were left out).
SUMMARY_LIST_ITEMS = 20
#: A tool output's paging fields: kept in the view even when the item is cut.
PAGING_FIELDS = ("truncated", "next_cursor")

#: What the plan shown to the planner is: its own notes (neither user nor tool said it).
PLAN_SOURCE = "planner-notes"

UNTRUSTED_OPEN = "<untrusted-data"
UNTRUSTED_CLOSE = "</untrusted-data>"


class MemoryItem(BaseModel):
    item_id: str
    """Stable id (the observation id it summarizes)."""
    kind: str
    """``goal``, ``observation`` or ``evidence-summary``."""
    source: str
    """``user``, ``trusted-tool``, ``untrusted-content`` or ``policy``."""
    content: str
    """Rendered text; untrusted content is wrapped in ``<untrusted-data>`` delimiters."""
    source_ids: list[str] = Field(default_factory=list)
    """Observation ids this item points back to."""
    created_at_step: int
    """Step at which the underlying observation was made."""
    observed_at: str | None = None
    """When the ledger recorded the observation: ISO 8601 in UTC, on the database's clock
    (``None`` for an item not read from the ledger)."""
    expires_after_step: int | None = None
    """Last step at which the item is shown; ``None`` = while in the window."""


class WorkingMemoryView(BaseModel):
    run_id: str
    step: int
    """The step this view is built for."""
    goal: MemoryItem
    """The user-visible goal (observation ``user-1``)."""
    items: list[MemoryItem]
    """Recent observations, oldest first."""
    tools: list[dict[str, Any]]
    """Tools the run may propose (name, version, description, inputSchema)."""
    budgets: dict[str, Any]
    preferences: dict[str, dict[str, Any]]
    """Long-term preferences of the subject: ``{key: {value, source, version}}``."""
    omitted_items: int = 0
    """Older observations left out of ``items`` (the window keeps the most recent ones)."""
    done_when: list[dict[str, Any]] = []
    """The spec's success conditions (``success.all_of``): what the program checks before it
    accepts a final answer, so the planner knows what done means."""
    plan: dict[str, Any] | None = None
    """The planner's latest plan (``kind: plan``: ``nodes``, ``revision``, ``step``): its own
    notes, a model assumption, never evidence nor a trusted source of any argument value."""
    open_questions: list[str] = []
    """The latest plan's open questions (the planner's own)."""
    pending_effects: list[dict[str, Any]] = []
    """This run's calls whose effect is not settled yet: ``command_id``, ``tool``, ``step`` and
    ``status`` (``issued``, ``in_flight``, ``job_running``, ``unknown``: the reconciler finds
    out). A ``wait`` with ``until: pending_effects_settled`` wakes once this is empty."""
    approved_actions: list[dict[str, Any]] = []
    """Actions a person approved that are not used yet: ``kind`` (``confirmation`` or
    ``pre_approval``), ``tool``, ``proposal_hash`` (the exact proposal it covers) and ``id``."""

    def view_hash(self) -> str:
        """A fingerprint of exactly what the planner was shown (the view's JSON, whose field
        order is fixed by the model; not RFC 8785, which costs more and is not needed for a
        value only ever compared with itself)."""
        return sha256_hex(self.model_dump_json())[:16]


@dataclass(frozen=True, kw_only=True)
class ObservationRecord:
    observation_id: str
    kind: str
    source: str
    step: int
    content: dict[str, Any]
    expires_after_step: int | None = None
    observed_at: str | None = None
    """When the ledger recorded it (ISO 8601, UTC)."""


def _summarize(value: Any, key: str = "") -> Any:
    """Keep structure, ids and numbers; shorten long prose and long lists, each cut marked
    with what was left out."""
    if isinstance(value, dict):
        return {k: _summarize(v, k) for k, v in value.items()}
    if isinstance(value, list):
        kept = [_summarize(v, key) for v in value[:SUMMARY_LIST_ITEMS]]
        if len(value) > SUMMARY_LIST_ITEMS:
            kept.append(f"…[{len(value) - SUMMARY_LIST_ITEMS} more items]")
        return kept
    if isinstance(value, str) and len(value) > SUMMARY_STRING_CHARS and not key.endswith("id"):
        return value[:SUMMARY_STRING_CHARS] + f"…[{len(value) - SUMMARY_STRING_CHARS} more chars]"
    return value


def delimit_untrusted(text: str, observation_id: str) -> str:
    """Wrap untrusted text as data; a forged closing delimiter inside is neutralized."""
    safe = text.replace(UNTRUSTED_CLOSE, "<\\/untrusted-data>").replace(
        UNTRUSTED_OPEN, "<\\untrusted-data"
    )
    return f'{UNTRUSTED_OPEN} observation="{observation_id}">\n{safe}\n{UNTRUSTED_CLOSE}'


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _paging(content: dict[str, Any]) -> dict[str, Any]:
    """``truncated`` / ``next_cursor`` of the content, its output or an MCP result's
    structured content (the tool said there is more)."""
    output = _mapping(content.get("output"))
    structured = _mapping(output.get("structured"))
    found: dict[str, Any] = {}
    for place in (structured, output, content):
        found.update({k: place[k] for k in PAGING_FIELDS if k in place})
    return found


def _render(obs: ObservationRecord, max_chars: int) -> str:
    text = json.dumps(_summarize(obs.content), ensure_ascii=False, sort_keys=True)
    if len(text) > max_chars:
        text = text[:max_chars] + f"…[{len(text) - max_chars} more chars]"
        if paging := _paging(obs.content):
            text += " paging: " + json.dumps(paging, ensure_ascii=False, sort_keys=True)
    if obs.source == "untrusted-content":
        return delimit_untrusted(text, obs.observation_id)
    return text


def build_view(
    *,
    run_id: str,
    step: int,
    observations: Sequence[ObservationRecord],
    tools: Sequence[dict[str, Any]],
    budgets: dict[str, Any],
    preferences: dict[str, dict[str, Any]],
    max_items: int = DEFAULT_MAX_ITEMS,
    max_item_chars: int = DEFAULT_MAX_ITEM_CHARS,
    plan: dict[str, Any] | None = None,
    pending_effects: Sequence[Sequence[Any]] = (),
    approved_actions: Sequence[Sequence[Any]] = (),
) -> WorkingMemoryView:
    """``plan``, ``pending_effects`` and ``approved_actions``: as the planner's load reads them."""
    goal_obs = next(o for o in observations if o.observation_id == "user-1")
    goal = MemoryItem(
        item_id="user-1",
        kind="goal",
        source="user",
        content=str(goal_obs.content.get("goal", "")),
        source_ids=["user-1"],
        created_at_step=goal_obs.step,
        observed_at=goal_obs.observed_at,
    )
    live = [
        o
        for o in observations
        if o.observation_id != "user-1"
        and (o.expires_after_step is None or o.expires_after_step >= step)
    ]
    items = [
        MemoryItem(
            item_id=o.observation_id,
            kind="evidence-summary" if o.kind == "tool-result" else "observation",
            source=o.source,
            content=_render(o, max_item_chars),
            source_ids=[o.observation_id],
            created_at_step=o.step,
            expires_after_step=o.expires_after_step,
            observed_at=o.observed_at,
        )
        for o in live[-max_items:]
    ]
    return WorkingMemoryView(
        omitted_items=max(0, len(live) - max_items),
        run_id=run_id,
        step=step,
        goal=goal,
        items=items,
        tools=list(tools),
        budgets=budgets,
        preferences=preferences,
        **_working_state(plan, pending_effects, approved_actions),
    )


def _working_state(
    plan: dict[str, Any] | None,
    pending_effects: Sequence[Sequence[Any]],
    approved_actions: Sequence[Sequence[Any]],
) -> dict[str, Any]:
    """The view's ``plan`` (the stored plan's nodes, revision and step, marked as the model's
    own notes), ``open_questions``, ``pending_effects`` and ``approved_actions``."""
    shown: dict[str, Any] | None = None
    if plan:
        kept = ("revision", "step", "nodes", "reason_summary")
        shown = {"source": PLAN_SOURCE, **{k: plan[k] for k in kept if k in plan}}
    return {
        "plan": shown,
        "open_questions": list((plan or {}).get("open_questions") or []),
        "pending_effects": [
            {"command_id": c[0], "tool": c[1], "step": c[2], "status": c[3]}
            for c in pending_effects
        ],
        "approved_actions": [
            {"kind": a[0], "tool": a[1], "proposal_hash": a[2], "id": str(a[3])}
            for a in approved_actions
        ],
    }
