"""A test tool that declares its business errors and checks its service before each call:
``book_seats`` books seats for a customer of a small fake booking service (a JSON file the tests
write: ``{"customers": {"c-1": {"quota": 3}}}``; each booking made appends one line to the file
``ledger`` names, the effects the tests count).

* ``precheck`` (through the plug-in's ``deps``, read only): a customer the service does not
  know is refused ``CUSTOMER_NOT_FOUND`` before the call (declared ``replan``);
* the call itself refuses seats beyond the customer's quota ``QUOTA_EXCEEDED`` (declared
  ``ask_user``: the run asks its user).

Registered with ``WARRANT_TOOLS=...,tests.booking_tool:plugin``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import Field

from warrant.tools import (
    OnError,
    Plugin,
    PreconditionContext,
    SideEffect,
    Tool,
    ToolContext,
    ToolInput,
    ToolOutput,
    ToolRejected,
)

__all__ = ["BOOK", "CAPABILITY", "bookings", "plugin", "proposal", "service"]

CAPABILITY = "bookings:write"


class BookInput(ToolInput):
    service: str = Field(min_length=1, max_length=500)
    """The fake service: its JSON file."""
    customer: str = Field(min_length=1, max_length=64)
    """The customer to book for."""
    seats: int = Field(ge=1, le=100)
    """How many seats."""
    ledger: str = Field(min_length=1, max_length=500)
    """Where each booking made is written (one line each)."""


class BookOutput(ToolOutput):
    booked: int
    """Seats booked."""


class Bookings:
    """The plug-in's ``deps``: the fake service's client."""

    def customer(self, service: str, customer: str) -> dict[str, Any] | None:
        customers = json.loads(Path(service).read_text(encoding="utf-8"))["customers"]
        found = customers.get(customer)
        return dict(found) if found is not None else None

    def used(self, ledger: str, customer: str) -> int:
        path = Path(ledger)
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        return sum(int(line.split()[1]) for line in lines if line.split()[0] == customer)

    def book(self, ledger: str, customer: str, seats: int) -> None:
        with Path(ledger).open("a", encoding="utf-8") as f:
            f.write(f"{customer} {seats}\n")


def _known_customer(args: BookInput, ctx: PreconditionContext) -> str | None:
    if ctx.deps.customer(args.service, args.customer) is None:
        return "CUSTOMER_NOT_FOUND"
    return None


def _book(args: BookInput, ctx: ToolContext) -> BookOutput:
    found = ctx.deps.customer(args.service, args.customer)
    left = found["quota"] - ctx.deps.used(args.ledger, args.customer)
    if args.seats > left:
        raise ToolRejected(
            f"customer {args.customer} has {left} of {found['quota']} seats left",
            code="QUOTA_EXCEEDED",
        )
    ctx.deps.book(args.ledger, args.customer, args.seats)
    return BookOutput(booked=args.seats)


def _booked(args: BookInput, out: BookOutput, ctx: ToolContext) -> bool:
    return ctx.deps.used(args.ledger, args.customer) >= args.seats


BOOK: Tool[BookInput, BookOutput] = Tool(
    name="book_seats",
    version="1",
    description="Book seats for a customer (tests only: declares its business errors).",
    input_model=BookInput,
    output_model=BookOutput,
    capabilities=(CAPABILITY,),
    side_effect=SideEffect.IDEMPOTENT_WRITE,
    execute=_book,
    verify=_booked,
    precheck=_known_customer,
    errors={"CUSTOMER_NOT_FOUND": OnError.REPLAN, "QUOTA_EXCEEDED": OnError.ASK_USER},
    max_attempts=1,
)

plugin = Plugin(name="bookings", tools=(BOOK,), deps=lambda _: Bookings())


def service(path: Path, **quotas: int) -> Path:
    """Open the fake service at ``path`` with these customers and quotas."""
    customers = {name.replace("_", "-"): {"quota": quota} for name, quota in quotas.items()}
    path.write_text(json.dumps({"customers": customers}))
    return path


def proposal(pid: str, service_file: Path, ledger: Path, customer: str, seats: int) -> dict:
    """A fixture planner's proposal of a booking."""
    return {
        "kind": "tool",
        "proposal_id": pid,
        "tool": "book_seats",
        "tool_version": "1",
        "arguments": {
            "service": str(service_file),
            "customer": customer,
            "seats": seats,
            "ledger": str(ledger),
        },
        "reason_summary": "",
        "source_observation_ids": [],
    }


def bookings(ledger: Path) -> list[str]:
    """The bookings the fake service made."""
    return ledger.read_text().splitlines() if ledger.exists() else []
