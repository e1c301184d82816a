"""``warrant run propose`` and ``warrant run decision``: the caller's side of a run whose
planner kind is ``external`` (:mod:`warrant.runner.client.proposals`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from warrant.runner.cli import ids
from warrant.runner.cli.common import JsonOpt, console, guard, make_client, print_json
from warrant.runner.cli.runs import RunIdArg, run_app
from warrant.runner.errors import InvalidRequest

__all__ = ["run_decision", "run_propose"]

WaitOpt = Annotated[
    float, typer.Option("--wait", min=0, max=600, help="Seconds to wait for the decision.")
]


def _read(source: str) -> Any:
    text = typer.get_text_stream("stdin").read() if source == "-" else Path(source).read_text()
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidRequest(f"the proposal is not JSON: {exc}", code="PROPOSAL_INVALID") from None


def _show(decision: Any, as_json: bool) -> None:
    if as_json:
        print_json(decision.to_dict())
        return
    line = f"step {decision.step}: {decision.state}"
    if decision.code:
        line += f" [{decision.code}]"
    if decision.outcome:
        line += f" outcome {decision.outcome}"
    if decision.proposal_hash and decision.state == "awaiting_confirmation":
        line += f" (confirm proposal hash {decision.proposal_hash})"
    console.print(line)
    if decision.message:
        console.print(decision.message)


@run_app.command("propose")
def run_propose(
    run_id: RunIdArg,
    proposal: Annotated[str, typer.Argument(help="A JSON file with one proposal, or - (stdin).")],
    by: Annotated[str, typer.Option("--by", help="Who proposes (recorded on the step).")],
    step: Annotated[
        int | None, typer.Option(min=1, help="The step it fills (a retry replays).")
    ] = None,
    wait: WaitOpt = 30.0,
    as_json: JsonOpt = False,
) -> None:
    """Submit the next proposal of a run whose planner kind is external; print its decision."""
    client = guard(as_json, make_client)
    run_id = guard(as_json, lambda: ids.run_id(client, run_id))
    raw = guard(as_json, lambda: _read(proposal))
    decision = guard(as_json, lambda: client.propose(run_id, raw, by=by, step=step, wait_s=wait))
    _show(decision, as_json)


@run_app.command("decision")
def run_decision(
    run_id: RunIdArg,
    step: Annotated[int, typer.Argument(min=1, help="The step whose proposal to read.")],
    wait: WaitOpt = 0.0,
    seen: Annotated[
        str, typer.Option(help="Return as soon as the state is not this one.")
    ] = "pending",
    as_json: JsonOpt = False,
) -> None:
    """What became of a step's proposal (refused, awaiting confirmation, executed, ...)."""
    client = guard(as_json, make_client)
    run_id = guard(as_json, lambda: ids.run_id(client, run_id))
    _show(guard(as_json, lambda: client.decision(run_id, step, wait_s=wait, seen=seen)), as_json)
