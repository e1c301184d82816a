"""The weather plug-in's tools: ``get_weather`` (read) and ``send_message`` (confirmed write).

Both call the service through ``ctx.deps`` (a :class:`~warrant_weather.client.WeatherClient`
built by the plug-in's deps factory); neither reads settings or globals.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from warrant.tools import (
    ConfirmationPolicy,
    ObservationSource,
    ReconcileResult,
    SideEffect,
    Tool,
    ToolContext,
    ToolInput,
    ToolOutput,
)

__all__ = ["GET_WEATHER", "SEND_MESSAGE", "WEATHER_TOOLS"]


# --- get_weather ---------------------------------------------------------------------------


class WeatherInput(ToolInput):
    city: str = Field(min_length=1, max_length=80, pattern=r"^[A-Za-z][A-Za-z .'-]*$")
    """The city to get the forecast for, e.g. ``Paris``."""


class WeatherOutput(ToolOutput):
    city: str
    """The city the forecast is for."""
    conditions: Literal["sunny", "cloudy", "rain", "showers", "snow", "fog", "wind"]
    """Expected conditions."""
    temperature_c: int
    """Expected temperature in degrees Celsius."""
    wind_kph: int
    """Expected wind speed in km/h."""
    precipitation_mm: float
    """Expected precipitation in millimetres."""


def _get_weather(args: WeatherInput, ctx: ToolContext) -> WeatherOutput:
    data = ctx.deps.get_weather(args.city, timeout_s=max(0.1, ctx.remaining_s()))
    return WeatherOutput.model_validate(data)


GET_WEATHER: Tool[WeatherInput, WeatherOutput] = Tool(
    name="get_weather",
    version="1",
    description="Get today's weather forecast for a city.",
    input_model=WeatherInput,
    output_model=WeatherOutput,
    capabilities=("weather:read",),
    side_effect=SideEffect.READ,
    execute=_get_weather,
    timeout_s=5.0,
    resource=lambda args, subject: args.city.lower(),
    # The forecast comes from outside: the planner sees it delimited as data.
    output_source=ObservationSource.UNTRUSTED_CONTENT,
)


# --- send_message --------------------------------------------------------------------------


class MessageInput(ToolInput):
    to: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,39}$")
    """The recipient's user name, e.g. ``alice``."""
    text: str = Field(min_length=1, max_length=500)
    """The message text (at most 500 characters)."""


class MessageOutput(ToolOutput):
    message_id: str
    """The service's id of the stored message."""
    to: str
    """The recipient."""
    duplicate: bool
    """True when the service already had this message (a retry of the same call)."""


def _send_message(args: MessageInput, ctx: ToolContext) -> MessageOutput:
    # The idempotency token is the same for every attempt of this command: the service
    # stores one message per token, so a retry never sends twice.
    data = ctx.deps.send_message(
        key=ctx.idempotency_token,
        to=args.to,
        text=args.text,
        timeout_s=max(0.1, ctx.remaining_s()),
    )
    return MessageOutput.model_validate(data)


def _verify_message(args: MessageInput, out: MessageOutput, ctx: ToolContext) -> bool:
    seen = ctx.deps.find_message(ctx.idempotency_token)
    return seen is not None and seen["to"] == args.to and seen["text"] == args.text


def _reconcile_message(token: str, ctx: ToolContext) -> ReconcileResult:
    seen = ctx.deps.find_message(token)
    if seen is None:
        return ReconcileResult(applied=False)
    return ReconcileResult(
        applied=True,
        output={"message_id": seen["message_id"], "to": seen["to"], "duplicate": True},
    )


SEND_MESSAGE: Tool[MessageInput, MessageOutput] = Tool(
    name="send_message",
    version="1",
    description="Send a short message to a user. Each call needs the user's confirmation.",
    input_model=MessageInput,
    output_model=MessageOutput,
    capabilities=("messages:send",),
    side_effect=SideEffect.IDEMPOTENT_WRITE,
    execute=_send_message,
    confirmation=ConfirmationPolicy.PER_CALL,
    timeout_s=5.0,
    resource=lambda args, subject: args.to,
    verify=_verify_message,
    reconcile=_reconcile_message,
    sensitive_fields=frozenset({"text"}),
)

WEATHER_TOOLS: tuple[Tool[Any, Any], ...] = (GET_WEATHER, SEND_MESSAGE)
