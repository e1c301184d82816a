"""What a caller puts into a run: ``warrant run answer`` (the answer to the question a run
stopped on, ``needs_input``), and ``warrant run propose`` and ``warrant run decision``: the
caller's side of a run whose planner kind is ``external``
(:mod:`warrant.runner.client.proposals`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from warrant.runner.cli.common import ByOpt, JsonOpt, client_and_id, console, guard, print_json
from warrant.runner.cli.runs import RunIdArg, run_app
from warrant.runner.errors import InvalidRequest

__all__ = ["run_answer", "run_decision", "run_propose"]

WaitOpt = Annotated[
    float, typer.Option("--wait", min=0, max=600, help="Seconds to wait for the decision.")
]


@run_app.command("answer")
def run_answer(
    run_id: RunIdArg,
    text: Annotated[str, typer.Option("--text", help="The answer, as the user would give it.")],
    by: ByOpt,
    as_json: JsonOpt = False,
) -> None:
    """Answer a run's clarifying question; the run goes on from needs_input."""
    client, run_id = client_and_id(as_json, run_id)
    info = guard(as_json, lambda: client.answer(run_id, text=text, by=by).to_dict())
    print_json(info) if as_json else console.print(
        f"run {run_id} is {info['status']} again (version {info['version']})"
    )


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
    client, run_id = client_and_id(as_json, run_id)
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
    client, run_id = client_and_id(as_json, run_id)
    _show(guard(as_json, lambda: client.decision(run_id, step, wait_s=wait, seen=seen)), as_json)
