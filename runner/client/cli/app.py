"""The ``warrant`` command line. Every command takes ``--json``; errors carry stable codes.

One module per command group: :mod:`~warrant.runner.client.cli.runs`, ``tools``, ``db``,
``memory``, ``handoffs``, ``tokens``; the commands that run processes (``worker``, ``beat``,
``reconcile``, ``up``, ``demo``) in :mod:`~warrant.runner.client.cli.stack`.
"""

from __future__ import annotations

import typer

from warrant.runner.client.cli import answers, db, handoffs, memory, runs, stack, tokens, tools
from warrant.runner.client.cli.serve import serve

__all__ = ["app", "main"]

_REGISTERED = (answers.run_answer,)  # importing it registers `warrant run answer`

app = typer.Typer(
    help="warrant: the model proposes, the program decides.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(runs.run_app, name="run")
app.add_typer(tools.tools_app, name="tools")
app.add_typer(db.db_app, name="db")
app.add_typer(memory.memory_app, name="memory")
app.add_typer(handoffs.handoff_app, name="handoff")
app.add_typer(tokens.token_app, name="token")
app.command("reconcile")(stack.reconcile_once)
app.command("beat")(stack.beat)
app.command("worker")(stack.worker)
app.command("up")(stack.up)
app.command("down")(stack.down)
app.command("demo")(stack.demo)
app.command("serve")(serve)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
