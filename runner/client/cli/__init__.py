"""The ``warrant`` command line (``app``; ``main`` is the console script)."""

from warrant.runner.client.cli.app import app, main

__all__ = ["app", "main"]
