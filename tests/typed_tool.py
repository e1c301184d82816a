"""A test tool whose input uses the JSON-friendly types (Enum, Literal, datetime, date, UUID,
Decimal, 64-bit int); it echoes the Python type each argument arrived as.

Registered with ``WARRANT_TOOLS=...,tests.typed_tool:plugin``."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Literal

from warrant.tools import Plugin, SideEffect, Tool, ToolContext, ToolInput, ToolOutput

__all__ = ["REF", "TOOL", "Color", "TypedInput", "TypedOutput", "plugin"]

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

plugin = Plugin(name="typed", tools=(TOOL,))
