"""``warrant run answer``: answer the question a run stopped on (``needs_input``)."""

from __future__ import annotations

from typing import Annotated

import typer

from warrant.runner.cli import ids
from warrant.runner.cli.common import ByOpt, JsonOpt, console, guard, make_client, print_json
from warrant.runner.cli.runs import RunIdArg, run_app

__all__ = ["run_answer"]


@run_app.command("answer")
def run_answer(
    run_id: RunIdArg,
    text: Annotated[str, typer.Option("--text", help="The answer, as the user would give it.")],
    by: ByOpt,
    as_json: JsonOpt = False,
) -> None:
    """Answer a run's clarifying question; the run goes on from needs_input."""
    client = guard(as_json, make_client)
    run_id = guard(as_json, lambda: ids.run_id(client, run_id))
    info = guard(as_json, lambda: client.answer(run_id, text=text, by=by).to_dict())
    if as_json:
        print_json(info)
    else:
        console.print(f"run {run_id} is {info['status']} again (version {info['version']})")
