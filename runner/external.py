"""A caller's proposal and what the gate made of it (runs whose planner kind is ``external``).

An agent that runs its own loop proposes one action at a time; each proposal is one step of
its run and goes through the same policy queue, gate, tool queue, ledger and reconciler as a
planner's. :func:`decision_of` reads what became of a step (pure: the facts come from
:func:`warrant.ledger.proposal_facts.step_facts`). A decision's ``state``:

``pending``                 still in the gate or the tool queue (ask again);
``refused``                 the gate refused it: ``code`` (stable) and ``message``; for
                            ``DUPLICATE_EFFECT``, ``earlier`` is the earlier call with the
                            same business effect (its run, step, branch, status and
                            observation);
``awaiting_confirmation``   a person must confirm exactly ``proposal_hash`` (``confirmation``
                            holds the request); after a decision it moves on;
``executed``                the tool ran: ``outcome`` is ``succeeded``, ``failed``,
                            ``rejected`` or ``unknown`` (an effect nobody can vouch for: the
                            reconciler finds out, ``resolved`` says what it found), with
                            ``observation_id`` and ``output``; or ``accepted`` (a
                            long-running job: ``resolved`` is how it ended, and the final
                            observation is ``job-<step>``);
``completed``               a final answer, validated (``answer``);
``asked``                   a clarifying question (the run needs a person's answer);
``stopped``                 the run stopped at this step without executing it (``code`` is
                            the stop reason: a budget, a loop, a deadline, a cancel, ...).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from warrant.runner.canonical import MAX_JSON_DEPTH, canonical_json, json_depth, sha256_hex
from warrant.runner.codes import Phase, RunStatus
from warrant.runner.errors import InvalidRequest, RunFinished, StateConflict
from warrant.runner.fan_in import tool_observation_id

__all__ = [
    "MAX_PROPOSAL_BYTES",
    "SETTLED_STATES",
    "WAITING_FOR_APPROVAL",
    "CallerKey",
    "Decision",
    "DecisionState",
    "Submitted",
    "call_digest",
    "caller_keys",
    "check_open",
    "check_shape",
    "decision_of",
    "explain",
    "in_flight",
]

#: The code of a call that waits for a person: call again with the same arguments.
WAITING_FOR_APPROVAL = "WAITING_FOR_APPROVAL"

DecisionState = Literal[
    "pending", "refused", "awaiting_confirmation", "executed", "completed", "asked", "stopped"
]

#: States that no longer change by themselves (``awaiting_confirmation`` waits for a person).
SETTLED_STATES: frozenset[str] = frozenset({"refused", "executed", "completed", "asked", "stopped"})

#: A proposal is what a model would have answered: as large as a planner reply may be.
MAX_PROPOSAL_BYTES = 256 * 1024

_TERMINAL_COMMAND = frozenset({"succeeded", "failed", "rejected", "unknown", "accepted"})


@dataclass(frozen=True, kw_only=True)
class Decision:
    """What the gate made of the proposal of ``step``."""

    run_id: str
    step: int
    state: DecisionState
    branch: int = 0
    """The call of a parallel step (1..N); 0: the step's one proposal."""
    proposal_id: str | None = None
    tool: str | None = None
    arguments: Any = None
    """The proposal's arguments, as submitted."""
    code: str | None = None
    message: str | None = None
    proposal_hash: str | None = None
    confirmation: dict[str, Any] | None = None
    outcome: str | None = None
    resolved: str | None = None
    observation_id: str | None = None
    output: Any = None
    answer: str | None = None
    earlier: dict[str, Any] | None = None
    """A ``DUPLICATE_EFFECT`` refusal's earlier call with the same business effect key:
    ``run_id``, ``same_run``, ``step``, ``branch``, ``command_id``, ``status`` (``succeeded``,
    ``unknown``, ``issued``, ``started``, ...), ``resolved`` and ``observation_id``."""
    run_status: str = RunStatus.RUNNING.value
    run_version: int = 0

    @property
    def settled(self) -> bool:
        return self.state in SETTLED_STATES

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["settled"] = self.settled
        return out


def decision_of(run_id: str, step: int, facts: Any, *, branch: int = 0) -> Decision:
    """The decision of ``step`` (of its call ``branch`` for a parallel step) from its facts
    (a :class:`~warrant.ledger.proposal_facts.StepFacts`)."""
    run, proposal = facts.run, facts.proposal
    base: dict[str, Any] = {
        "run_id": run_id,
        "step": step,
        "branch": branch,
        "run_status": run["status"],
        "run_version": run["version"],
    }
    if proposal is None:
        return Decision(**base, state="pending")
    raw = proposal["raw"] if isinstance(proposal["raw"], dict) else {}
    base.update(
        proposal_id=proposal["proposal_id"], tool=proposal["tool"], arguments=raw.get("arguments")
    )
    base["proposal_hash"] = proposal["proposal_hash"]
    status = proposal["status"]
    if status == "rejected" and not proposal["rejection_code"] and facts.refusal is None:
        return _ended(base, run, proposal)  # a stop decided at the step (a final answer's)
    if status == "rejected":
        refusal = facts.refusal or {}
        code = proposal["rejection_code"] or refusal.get("code")
        message = refusal.get("message") or refusal.get("reason")
        if not message and refusal.get("layer"):
            message = f"refused by the gate's {refusal['layer']} layer"
        earlier = refusal.get("earlier")
        return Decision(
            **base,
            state="refused",
            code=code,
            message=message,
            earlier=earlier if isinstance(earlier, dict) else None,
        )
    if run["pending"] and run["status"] == RunStatus.WAITING_CONFIRMATION.value:
        request = proposal["confirmation_request"] or {}
        return Decision(
            **base,
            state="awaiting_confirmation",
            code="USER_CONFIRMATION_REQUIRED",
            message=f"waiting for a person to confirm proposal hash {proposal['proposal_hash']}",
            confirmation=request,
        )
    executed = _executed(base, facts)
    if executed is not None:
        return executed
    return _ended(base, run, proposal)


def _executed(base: dict[str, Any], facts: Any) -> Decision | None:
    command, outcome = facts.command, facts.outcome
    if command is None or outcome is None or outcome["status"] not in _TERMINAL_COMMAND:
        return None
    if command["status"] != "completed":  # a retry (or a re-issue) is on its way
        return None
    observation_id = tool_observation_id(command["step"], command.get("branch"))
    if outcome["status"] == "accepted" and outcome["resolved_status"] in ("succeeded", "failed"):
        observation_id = f"job-{command['step']}"  # the job's final observation
    return Decision(
        **base,
        state="executed",
        outcome=outcome["status"],
        code=outcome["code"],
        message=outcome["message"],
        resolved=outcome["resolved_status"],
        observation_id=observation_id,
        output=outcome["output"],
    )


def _ended(base: dict[str, Any], run: dict[str, Any], proposal: dict[str, Any]) -> Decision:
    """A proposal that did not (or not yet) reach a tool."""
    status = RunStatus(run["status"])
    at_this_step = run["step"] == base["step"]
    if proposal["kind"] == "final" and status is RunStatus.COMPLETED:
        return Decision(**base, state="completed", answer=run["answer"])
    if proposal["kind"] == "clarify" and status is RunStatus.NEEDS_INPUT and at_this_step:
        return Decision(**base, state="asked", message=run["answer"])
    if at_this_step and status not in (RunStatus.RUNNING, RunStatus.CANCELLING):
        return Decision(**base, state="stopped", code=run["stop_reason"])
    return Decision(**base, state="pending")


def explain(d: Decision) -> tuple[str, str]:
    """A decision in words, for a caller that is not a program: its code (the stable one, or
    what stands for its state) and a sentence. What the MCP gateway and the adapters say."""
    where = f"(run {d.run_id}, step {d.step})"
    if d.state == "executed" and d.outcome == "unknown":
        return (
            "UNKNOWN_EFFECT",
            f"the call's effect is unknown {where}: do not assume it happened or not; "
            "warrant's reconciler finds out (or hands it to a person)"
            + (f"; cause {d.code}" if d.code else ""),
        )
    if d.state == "executed" and d.outcome == "accepted" and d.resolved is None:
        operation = (d.output or {}).get("operation_id") if isinstance(d.output, dict) else None
        return (
            "JOB_ACCEPTED",
            f"the service accepted the job {operation or ''} {where}; it has not ended: the run "
            "waits for it and goes on with its final result (observation job-" + f"{d.step})",
        )
    if d.state == "executed":
        return d.code or f"TOOL_{(d.outcome or 'failed').upper()}", d.message or d.outcome or ""
    if d.state == "awaiting_confirmation":
        return (
            WAITING_FOR_APPROVAL,
            f"a person must confirm proposal hash {d.proposal_hash} {where}; call the tool "
            "again with the same arguments to get its outcome",
        )
    if d.state == "refused":
        return d.code or "PROPOSAL_REFUSED", d.message or "refused by the gate"
    if d.state == "pending":
        return (
            "DECISION_PENDING",
            f"not decided yet {where}; call the tool again with the same arguments",
        )
    return d.code or "RUN_STOPPED", f"the run stopped {where} ({d.run_status})"


# --- submitting a proposal (the checks; the locked write is ledger.external_proposals) -----


@dataclass(frozen=True)
class Submitted:
    """What recording a caller's proposal did."""

    run_id: str
    step: int
    result: str
    """The step's result (``forwarded``, ``completed``, ``stopped:<status>:<reason>``)."""
    replayed: bool = False
    """The same proposal had already filled this step: nothing new was recorded."""
    branch: int = 0
    """The call of a parallel step a caller's key named (a retry of one call of it)."""
    stop: tuple[str, str] | None = None
    """``(status, reason)`` when the run stopped before the proposal was recorded (its
    deadline passed, a budget was spent): ``step`` was never filled."""


#: The longest caller's key (an ``Idempotency-Key``, a tool-call id, an MCP request's key).
MAX_CALL_ID_LENGTH = 200

#: Fields that name a call rather than say what it does: not part of its digest.
_NAMING = frozenset({"proposal_id", "call_id"})


@dataclass(frozen=True)
class CallerKey:
    """A caller's key of one proposal (``branch`` 0) or of one call of a parallel one."""

    key: str
    branch: int
    digest: str


def call_digest(raw: Any) -> str:
    """What a call does, hashed: the proposal without the names a caller gave it (its
    ``proposal_id``, its calls' ``call_id``), so a retry under a fresh ``proposal_id`` is the
    same call, and one call of a parallel step is the same call as that call proposed alone."""
    return sha256_hex(canonical_json(unnamed(raw)))


def unnamed(raw: Any) -> Any:
    """``raw`` without ``proposal_id`` and ``call_id`` (in a parallel proposal's calls too)."""
    if not isinstance(raw, dict):
        return raw
    out = {k: v for k, v in raw.items() if k not in _NAMING}
    if isinstance(out.get("calls"), list):
        out["calls"] = [unnamed(c) for c in out["calls"]]
    return out


def without_call_ids(raw: dict[str, Any]) -> dict[str, Any]:
    """The proposal as recorded: a parallel proposal's calls lose their ``call_id``."""
    calls = raw.get("calls")
    if not isinstance(calls, list):
        return raw
    plain = [
        {k: v for k, v in c.items() if k != "call_id"} if isinstance(c, dict) else c for c in calls
    ]
    return {**raw, "calls": plain}


def caller_keys(raw: dict[str, Any], call_id: str | None) -> list[CallerKey]:
    """The caller's keys of ``raw``: ``call_id`` for the proposal, and for a parallel one each
    call's own ``call_id`` (numbered as its branch); ``CALL_ID_INVALID`` for an empty, too long
    or repeated key."""
    keys: list[CallerKey] = []
    if call_id is not None:
        keys.append(CallerKey(_checked_key(call_id), 0, call_digest(raw)))
    calls = raw.get("calls") if raw.get("kind") == "parallel" else None
    for branch, call in enumerate(calls if isinstance(calls, list) else [], start=1):
        if isinstance(call, dict) and call.get("call_id") is not None:
            keys.append(CallerKey(_checked_key(call["call_id"]), branch, call_digest(call)))
    if len({k.key for k in keys}) != len(keys):
        raise InvalidRequest("a caller's key names one call only", code="CALL_ID_INVALID")
    return keys


def _checked_key(key: Any) -> str:
    if not isinstance(key, str) or not 0 < len(key) <= MAX_CALL_ID_LENGTH or not key.isprintable():
        raise InvalidRequest(
            f"a call id is printable text of 1 to {MAX_CALL_ID_LENGTH} characters",
            code="CALL_ID_INVALID",
        )
    return key


def replayed_key(known: dict[str, tuple[int, int, str]], keys: list[CallerKey]) -> tuple[int, int]:
    """The step and branch the caller's ``keys`` already named (``known``: key → step, branch,
    digest, as recorded): the same key with another call is ``IDEMPOTENCY_KEY_REUSED``; so is a
    parallel proposal that names some calls of an earlier one and not the rest."""
    for k in keys:
        if k.key in known and known[k.key][2] != k.digest:
            step, branch, _ = known[k.key]
            where = f"step {step}" + (f", call {branch}" if branch else "")
            raise StateConflict(
                f"call id {k.key!r} named another call ({where}): a retry sends the same call",
                code="IDEMPOTENCY_KEY_REUSED",
            )
    if len(keys) == 1 or (keys[0].branch == 0 and keys[0].key in known):
        step, branch, _ = known[keys[0].key]
        return step, branch
    members = [k for k in keys if k.branch]
    places = {known[k.key][:2] if k.key in known else None for k in members}
    steps = {p[0] for p in places if p is not None}
    if None not in places and len(steps) == 1 and all(known[k.key][1] == k.branch for k in members):
        return steps.pop(), 0
    raise StateConflict(
        "the call ids of this parallel proposal name calls of another step: propose those "
        "calls again alone (each returns its decision), the others together",
        code="IDEMPOTENCY_KEY_REUSED",
    )


def check_shape(raw: Any) -> None:
    """A caller's proposal is a JSON object, nested at most ``MAX_JSON_DEPTH`` levels, with
    no NaN or Infinity, of at most ``MAX_PROPOSAL_BYTES``; else :class:`InvalidRequest`
    (``PROPOSAL_INVALID``, ``PROPOSAL_TOO_DEEP``, ``PROPOSAL_TOO_LARGE``)."""
    if not isinstance(raw, dict):
        raise InvalidRequest("a proposal is a JSON object", code="PROPOSAL_INVALID")
    if json_depth(raw) > MAX_JSON_DEPTH:  # before anything walks it recursively
        raise InvalidRequest(
            f"a proposal nests arrays and objects at most {MAX_JSON_DEPTH} levels deep",
            code="PROPOSAL_TOO_DEEP",
        )
    try:
        size = len(canonical_json(raw))
    except ValueError as exc:  # NaN or Infinity (a JSON parser may let them through)
        raise InvalidRequest(f"a proposal is plain JSON: {exc}", code="PROPOSAL_INVALID") from None
    if size > MAX_PROPOSAL_BYTES:
        raise InvalidRequest(
            f"a proposal is at most {MAX_PROPOSAL_BYTES} bytes", code="PROPOSAL_TOO_LARGE"
        )


def check_open(run: Any, step: int | None) -> None:
    """The run (its ``id``, ``status``, ``phase``, ``step``, ``stop_reason``) waits for a
    caller's proposal of ``step`` (``None``: the next one); else why not, with its code."""
    status = RunStatus(run.status)
    if status.terminal or status is RunStatus.HANDOFF:
        raise RunFinished(
            f"run {run.id} is {status.value} ({run.stop_reason}): it takes no proposal",
            code="RUN_FINISHED",
        )
    if status is RunStatus.RECONCILING:
        raise StateConflict(
            f"run {run.id}: the effect of step {run.step} is unknown; the reconciler finds out "
            "before the run takes another proposal",
            code="RUN_RECONCILING",
        )
    if status is RunStatus.WAITING_JOB:
        raise StateConflict(
            f"run {run.id}: the job of step {run.step} has not ended; the run takes another "
            "proposal once it has",
            code="RUN_WAITING_JOB",
        )
    if status is not RunStatus.RUNNING or run.phase != Phase.PLANNING.value:
        raise in_flight(run.id, status=status.value, step=run.step)
    if step is not None and step != run.step + 1:
        raise StateConflict(
            f"run {run.id} waits for step {run.step + 1}, not {step}", code="STEP_MISMATCH"
        )


def in_flight(run_id: str, *, status: str = "running", step: int | None = None) -> StateConflict:
    """``PROPOSAL_IN_FLIGHT``: an earlier proposal of the run is still undecided."""
    at = f" (step {step}, {status})" if step is not None else ""
    return StateConflict(
        f"run {run_id} has a proposal in flight{at}: wait for its decision before the next",
        code="PROPOSAL_IN_FLIGHT",
    )
