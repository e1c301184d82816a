"""``warrant mcp serve``: warrant's gate in front of any MCP client.

Each ``tools/call`` becomes a proposal of the MCP session's run (planner kind ``external``):
refused with its code, waiting (bounded) for a person's approval of the exact hash, or
executed by warrant's tool workers with a typed outcome; an unknown effect is reported as
unknown, never as success. See :mod:`~warrant.runner.server.mcp_gateway.gateway`.
"""

from __future__ import annotations

from warrant.runner.server.mcp_gateway.gateway import Caller, Gateway, GatewayOptions
from warrant.runner.server.mcp_gateway.listing import annotations_of, mcp_tools
from warrant.runner.server.mcp_gateway.results import WAITING_FOR_APPROVAL, result_of
from warrant.runner.server.mcp_gateway.transports import (
    RUN_KEY_HEADER,
    build_server,
    http_app,
    serve_stdio,
)

__all__ = [
    "RUN_KEY_HEADER",
    "WAITING_FOR_APPROVAL",
    "Caller",
    "Gateway",
    "GatewayOptions",
    "annotations_of",
    "build_server",
    "http_app",
    "mcp_tools",
    "result_of",
    "serve_stdio",
]
