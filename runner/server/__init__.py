"""What warrant serves: ``http`` (the HTTP API, ``warrant serve``), ``web`` (the approval inbox
and run pages it mounts), ``metrics`` (``/metrics`` for Prometheus) and ``mcp_gateway``
(``warrant mcp serve``: the registry's tools to any MCP client, each call through the gate)."""

__layer__ = "client, server, CLI and stack"
