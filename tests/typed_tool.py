"""A test tool whose input uses the JSON-friendly types (Enum, Literal, datetime, date, UUID,
Decimal, 64-bit int); it echoes the Python type each argument arrived as. And ``big_listing``,
a read whose output is as large as asked: over its ``max_output_bytes`` (4 KiB) when asked so.

Registered with ``WARRANT_TOOLS=...,tests.typed_tool:plugin``."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Literal

from pydantic import Field

from warrant.tools import Plugin, SideEffect, Tool, ToolContext, ToolInput, ToolOutput

__all__ = ["BIG", "REF", "TOOL", "Color", "TypedInput", "TypedOutput", "plugin"]

#: The ``WARRANT_TOOLS`` reference of this plug-in.
REF = "tests.typed_tool:plugin"


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class TypedInput(ToolInput):
    color: Color
    """An Enum, by value."""
    mode: Literal["fast", "slow"]
    """A Literal."""
    at: dt.datetime
    """An ISO 8601 date-time."""
    day: dt.date
    """An ISO 8601 date."""
    ref: uuid.UUID
    """A UUID string."""
    amount: Decimal
    """A decimal, as a string."""
    n: int
    """A (64-bit) integer."""


class TypedOutput(ToolOutput):
    types: dict[str, str]
    """Argument name -> the Python type it arrived as."""
    n: int
    """The integer, echoed."""
    amount: str
    """The decimal, echoed exactly."""


def _echo(args: TypedInput, ctx: ToolContext) -> TypedOutput:
    types = {name: type(getattr(args, name)).__name__ for name in TypedInput.model_fields}
    return TypedOutput(types=types, n=args.n, amount=str(args.amount))


TOOL: Tool[TypedInput, TypedOutput] = Tool(
    name="typed_echo",
    version="1",
    description="Echo the types of JSON-friendly arguments (tests only).",
    input_model=TypedInput,
    output_model=TypedOutput,
    capabilities=("typed:read",),
    side_effect=SideEffect.READ,
    execute=_echo,
    timeout_s=5.0,
)


class BigInput(ToolInput):
    rows: int = Field(ge=0, le=100_000)
    """How many rows to list."""


class BigOutput(ToolOutput):
    count: int
    """How many rows there are."""
    next_page: str
    """Where the listing goes on."""
    rows: list[str]
    """The rows, 100 characters each."""


BIG: Tool[BigInput, BigOutput] = Tool(
    name="big_listing",
    version="1",
    description="List as many 100-character rows as asked (tests only: a large output).",
    input_model=BigInput,
    output_model=BigOutput,
    capabilities=("typed:read",),
    side_effect=SideEffect.READ,
    execute=lambda args, ctx: BigOutput(
        count=args.rows, next_page="p2", rows=[f"{n:06d}" + "x" * 94 for n in range(args.rows)]
    ),
    timeout_s=5.0,
    max_output_bytes=4_096,
)

plugin = Plugin(name="typed", tools=(TOOL, BIG))
