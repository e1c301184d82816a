"""The client, the CLI and the local stack: the top layer, over the broker and the ledger.

``api`` (:class:`~warrant.runner.client.api.Client`, also ``warrant.runner.Client``), with its
parts ``runs``, ``approvals`` and ``handoffs``; ``cli`` (the ``warrant`` command); ``stack``
with ``embedded``, ``supervisor`` and ``roles``; ``demo`` and its ``scenarios``.
"""
