"""The Python client: what a producer, an approver or an operator calls.

``contract`` (:class:`~warrant.runner.client.contract.RunnerClient`, also
``warrant.RunnerClient``): what both clients offer, with the same signatures and records;
``api`` (:class:`~warrant.runner.client.api.Client`, also ``warrant.Client``), with its parts
``runs``, ``approvals``, ``handoffs``, ``proposals`` and ``inbox``;
``remote`` (:class:`~warrant.runner.client.remote.RemoteClient`, the same methods over the HTTP
API); the operator's tools (``tokens``,
``retention``, ``ledger_verify``, ``gate_report``, ``mcp_accept``). The server, the CLI and
the local stack are beside it: ``runner.server``, ``runner.cli``, ``runner.stack``.
"""

__layer__ = "client, server, CLI and stack"
