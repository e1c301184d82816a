"""A test tool whose external system refuses it for a permission, as a CRM answers 403: the
call raises :class:`~warrant.tools.ToolPermissionDenied` naming the permission and the record
unless the system's access list allows the record. The fake system is a folder of files that
the tests and the worker process share:

- ``<record>.allowed``: the access list (present: the run's identity may update the record);
- ``<record>.effects``: one line per update applied (the effect the tests count);
- ``<record>.calls``: the idempotency key of every call, one line each (in order);
- ``<record>.partial``: a fault: the system applies the update *before* it checks the access
  list, so a refused call has its effect anyway (a partial application answered 403);
- ``tokens/<token>``: the system's idempotency memory of applied updates. A key it applied
  gets the same answer again and no second effect, as a real service that deduplicates does;
  a refusal applied nothing and is not remembered.

The tool reconciles by the key (``reconcile``): the tool stage asks before the command issued
again after a grant calls it.

Registered with ``WARRANT_TOOLS=...,tests.permission_tool:plugin``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pydantic import Field

from warrant.tools import (
    Plugin,
    ReconcileResult,
    SideEffect,
    Tool,
    ToolContext,
    ToolInput,
    ToolOutput,
    ToolPermissionDenied,
)

__all__ = [
    "CAPABILITY",
    "EXTERNAL_PERMISSION",
    "REF",
    "TOOL",
    "allow",
    "calls",
    "effects",
    "partial",
    "plugin",
    "proposal",
    "resource_of",
]

#: The ``WARRANT_TOOLS`` reference of this plug-in.
REF = "tests.permission_tool:plugin"
#: What the run must hold in warrant for the gate to accept a call.
CAPABILITY = "crm:write"
#: What the external system itself checks (and names when it refuses).
EXTERNAL_PERMISSION = "crm:contacts.update"
ROOT = Path(os.environ.get("WARRANT_TEST_CRM_DIR") or tempfile.gettempdir()) / "warrant-test-crm"


class UpdateInput(ToolInput):
    record: str = Field(pattern=r"^[a-z0-9-]{1,64}$")
    """The contact record to update."""
    phone: str = Field(min_length=1, max_length=40)
    """Its new phone number."""


class UpdateOutput(ToolOutput):
    record: str
    """The record updated."""


def resource_of(record: str) -> str:
    """The resource the system names in its refusal."""
    return f"contacts/{record}"


def allow(record: str) -> None:
    """The operator fixes the access list: the record may be updated from now on."""
    ROOT.mkdir(parents=True, exist_ok=True)
    (ROOT / f"{record}.allowed").touch()


def partial(record: str) -> None:
    """The fault: the system applies an update of ``record`` before it checks the access
    list (a refused call's effect happens anyway)."""
    ROOT.mkdir(parents=True, exist_ok=True)
    (ROOT / f"{record}.partial").touch()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def effects(record: str) -> list[str]:
    """The updates the system applied to ``record`` (one line each: phone and key)."""
    return _lines(ROOT / f"{record}.effects")


def calls(record: str) -> list[str]:
    """The idempotency key of every call the system got for ``record``, in order."""
    return _lines(ROOT / f"{record}.calls")


def _update(args: UpdateInput, ctx: ToolContext) -> UpdateOutput:
    (ROOT / "tokens").mkdir(parents=True, exist_ok=True)
    with (ROOT / f"{args.record}.calls").open("a") as out:
        out.write(f"{ctx.idempotency_token}\n")
    remembered = ROOT / "tokens" / ctx.idempotency_token
    if remembered.exists():  # applied under this key already: the same answer, no effect
        return UpdateOutput(record=args.record)
    allowed = (ROOT / f"{args.record}.allowed").exists()
    if allowed or (ROOT / f"{args.record}.partial").exists():
        with (ROOT / f"{args.record}.effects").open("a") as out:
            out.write(f"{args.phone} {ctx.idempotency_token}\n")
        remembered.write_text(args.record)
    if not allowed:
        raise ToolPermissionDenied(
            f"403: the integration user may not update {resource_of(args.record)}",
            capability=EXTERNAL_PERMISSION,
            resource=resource_of(args.record),
        )
    return UpdateOutput(record=args.record)


def _reconcile(token: str, ctx: ToolContext) -> ReconcileResult:
    """Did the system apply an update under ``token``? Its idempotency memory says."""
    remembered = ROOT / "tokens" / token
    if not remembered.exists():
        return ReconcileResult(applied=False)
    return ReconcileResult(applied=True, output={"record": remembered.read_text()})


TOOL: Tool[UpdateInput, UpdateOutput] = Tool(
    name="crm_update_contact",
    version="1",
    description="Update a contact's phone number in the CRM (tests only: an access list).",
    input_model=UpdateInput,
    output_model=UpdateOutput,
    capabilities=(CAPABILITY,),
    side_effect=SideEffect.IDEMPOTENT_WRITE,
    execute=_update,
    reconcile=_reconcile,
    resource=lambda args, subject: resource_of(args.record),
    timeout_s=5.0,
)

plugin = Plugin(name="permission", tools=(TOOL,))


def proposal(pid: str, record: str, phone: str = "+41 44 000 00 00") -> dict[str, object]:
    """A fixture planner's proposal of ``crm_update_contact``."""
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "crm_update_contact",
        "tool_version": "1",
        "arguments": {"record": record, "phone": phone},
        "reason_summary": "",
        "source_observation_ids": [],
    }
