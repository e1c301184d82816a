"""The run spec a producer submits, and the shapes a planner may output.

A run spec is validated before anything is written or enqueued; a bad one raises
:class:`~warrant.runner.errors.SpecError` naming each offending field. Planner outputs are *not*
validated here: they are untrusted and go through the policy gate's parse layer, so a
fixture may script malformed proposals on purpose.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from warrant.runner.errors import InvalidRequest, SpecError
from warrant.runner.planning import DEFAULT_MAX_WAIT_S, MAX_WAIT_S, Plan, Wait

__all__ = [
    "DEFAULT_DEADLINE_S",
    "DEFAULT_MAX_CYCLE_PERIOD",
    "DEFAULT_MAX_MODEL_CALLS",
    "DEFAULT_MAX_PARALLEL_CALLS",
    "DEFAULT_MAX_REFUSED_FINALS",
    "DEFAULT_MAX_REPEATED_PROPOSAL",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_MAX_STEPS_WITHOUT_NEW_OBSERVATION",
    "DEFAULT_MAX_TOOL_CALLS",
    "EXTERNAL_DEADLINE_S",
    "MAX_PARALLEL_CALLS",
    "ArtifactExists",
    "AtLeast",
    "Budgets",
    "ClarifyRequest",
    "EscalateRequest",
    "ExternalPlannerSpec",
    "FinalAnswer",
    "FixturePlannerSpec",
    "Grant",
    "GrantConstraints",
    "HandoffPolicy",
    "NoAnswer",
    "OpenAIPlannerSpec",
    "ParallelProposal",
    "PlannerOutput",
    "PluginPlannerSpec",
    "RunSpec",
    "SuccessCondition",
    "SuccessSpec",
    "ToolProposal",
    "ToolSucceeded",
    "Usage",
    "Webhook",
    "external_budgets",
    "granted_capabilities",
    "parse_run_spec",
]

#: Decision loops a run may take (each planner answer, including a refused one, is a step).
DEFAULT_MAX_STEPS = 8
#: Planner (model) calls, retries included.
DEFAULT_MAX_MODEL_CALLS = 8
#: Tool executions that passed the gate, retries included.
DEFAULT_MAX_TOOL_CALLS = 4
#: How often the same fingerprint may be proposed without a new observation.
DEFAULT_MAX_REPEATED_PROPOSAL = 2
#: Proposals in a row that may add no new observation before the run stops.
DEFAULT_MAX_STEPS_WITHOUT_NEW_OBSERVATION = 8
#: Final answers refused (and planned again) before one fails the run.
DEFAULT_MAX_REFUSED_FINALS = 2
#: Longest proposal cycle the gate looks for.
DEFAULT_MAX_CYCLE_PERIOD = 4
#: Absolute wall-clock budget of the whole run, from its creation.
DEFAULT_DEADLINE_S = 120.0
#: Seconds a confirmation request stays answerable (never past the run deadline).
DEFAULT_CONFIRMATION_TTL_S = 900.0
#: Steps after the request during which a given confirmation may still be used.
DEFAULT_CONFIRMATION_STEPS = 2
#: Planner kind ``external`` (an agent's own loop, a session): its defaults where the spec
#: does not set the field (:func:`external_budgets`). The deadline, one hour ...
EXTERNAL_DEADLINE_S = 3600.0
#: ... and tool calls per step allowed for (``max_tool_calls`` = this times ``max_steps``:
#: retries count as tool calls).
EXTERNAL_TOOL_CALLS_PER_STEP = 2
#: Calls a parallel step may carry by default (``RunPolicy.max_parallel_calls``) ...
DEFAULT_MAX_PARALLEL_CALLS = 4
#: ... and at most.
MAX_PARALLEL_CALLS = 16
#: Hops of sub-runs a run may start below it by default (``RunPolicy.max_delegation_depth``) ...
DEFAULT_MAX_DELEGATION_DEPTH = 1
#: ... and sub-runs one run may start (``RunPolicy.max_children``).
DEFAULT_MAX_CHILDREN = 8


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: The largest value an integer column of the ledger holds.
MAX_INT = 2**31 - 1


#: A source a task-scoped grant names (:attr:`Grant.destinations_from`).
DestinationSource = Annotated[
    str,
    Field(
        pattern=r"^(goal|spec|answers|named|authors|listed|observations:[^\s]{1,200})$",
        max_length=213,
    ),
]


#: An argument a grant's constraint names: a top-level input field of the tool.
ConstrainedArgument = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")]
#: A value an ``in`` constraint allows (a JSON string, integer or boolean).
AllowedValue = Annotated[str, Field(max_length=200)] | StrictBool | StrictInt


def _same(value: Any, allowed: Any) -> bool:
    """Equal and of the same JSON type (``true`` is not ``1``)."""
    return isinstance(value, bool) is isinstance(allowed, bool) and value == allowed


def _values(arguments: Mapping[str, Any], name: str) -> list[Any] | None:
    """The argument's value, each element of a list (None: the call has no such argument)."""
    if name not in arguments:
        return None
    value = arguments[name]
    return list(value) if isinstance(value, list | tuple) else [value]


class GrantConstraints(_Strict):
    """Limits a grant puts on a call's argument values, beyond its resource scope (000 §5's
    ``constraints``): ``{"max": {"amount_cents": 10000}, "in": {"currency": ["EUR"]}}``. Each
    names a top-level argument of the tools of the grant's capability; a list's every element
    is checked. Fail closed: a call without the named argument, or whose value is of another
    type (not a number for ``max``), breaks the constraint."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, serialize_by_alias=True
    )

    at_most: dict[
        ConstrainedArgument, StrictInt | Annotated[StrictFloat, Field(allow_inf_nan=False)]
    ] = Field(default_factory=dict, alias="max", max_length=20)
    """``max``: the largest value (inclusive) of each named number argument."""
    one_of: dict[ConstrainedArgument, list[AllowedValue]] = Field(
        default_factory=dict, alias="in", max_length=20
    )
    """``in``: the values each named argument may take."""

    def __hash__(self) -> int:
        return hash(json.dumps(self.model_dump(mode="json"), sort_keys=True))

    def violation(self, arguments: Mapping[str, Any]) -> str | None:
        """Why the call's validated ``arguments`` break a constraint (the argument's name and
        the limit, never its value); None when they keep every one."""
        for name, cap in sorted(self.at_most.items()):
            values = _values(arguments, name)
            if values is None or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and v <= cap for v in values
            ):
                return f"{name}: over this grant's limit (max {cap}), or not a number"
        for name, allowed in sorted(self.one_of.items()):
            values = _values(arguments, name)
            if values is None or not all(any(_same(v, a) for a in allowed) for v in values):
                return f"{name}: not one of the values this grant allows (in {allowed})"
        return None

    def within(self, parent: GrantConstraints | None) -> bool:
        """Does a grant with these constraints allow only what ``parent``'s allow (the same
        constraints or tighter: a lower or equal ``max``, a subset of ``in``; more constraints
        may be added)? A parent without constraints holds any."""
        if parent is None:
            return True
        return all(
            name in self.at_most and self.at_most[name] <= cap
            for name, cap in parent.at_most.items()
        ) and all(
            name in self.one_of
            and all(any(_same(v, a) for a in allowed) for v in self.one_of[name])
            for name, allowed in parent.one_of.items()
        )


class Grant(_Strict):
    """A capability the run holds; the only source of permission besides an API call."""

    capability: str = Field(min_length=1, max_length=100)
    """Capability name, e.g. ``search:public``."""
    resource_scope: str = Field(default="*", min_length=1, max_length=500)
    """Resources it covers: exact, ``*`` for all, or a prefix ending in ``*``."""
    expires_at_step: int | None = Field(default=None, ge=0, le=MAX_INT)
    """Last step (inclusive) at which the grant is valid; ``None`` = the whole run."""
    expires_at: AwareDatetime | None = None
    """Wall-clock end (exclusive), with its UTC offset; judged on the database's clock, never a
    host's. ``None`` = no wall-clock end."""
    max_uses: int | None = Field(default=None, ge=1, le=MAX_INT)
    """How many executions it may authorize; ``None`` = unlimited."""
    destinations_from: list[DestinationSource] | None = Field(
        default=None, min_length=1, max_length=20
    )
    """A task-scoped grant: it covers a call only if each of its resource values is also
    mentioned (whole token) in one of these: ``goal``, ``spec``, ``answers``,
    ``observations:<tool>`` (a tool whose output is trusted), ``named`` (items of untrusted
    outputs whose author the user named: ``Tool.attribution``), ``authors`` (the authors of
    those outputs' items, as the service reports them: a reply to a sender), ``listed`` (the
    user's own resources a listing named: ``Tool.listing``). ``None`` = not narrowed."""
    constraints: GrantConstraints | None = None
    """Limits on the call's argument values (an amount cap, the currencies allowed): a call
    that breaks one is refused ``GRANT_CONSTRAINT_VIOLATED``. ``None`` = none."""


class Budgets(_Strict):
    """Separate counters; each has its own stop reason."""

    max_steps: int = Field(default=DEFAULT_MAX_STEPS, ge=1, le=10_000)
    """Decision loops, see :data:`DEFAULT_MAX_STEPS`."""
    max_model_calls: int | None = Field(default=DEFAULT_MAX_MODEL_CALLS, ge=0, le=10_000)
    """Planner calls, see :data:`DEFAULT_MAX_MODEL_CALLS`; ``None`` = no model-call budget
    (only for planner kind ``external``, where it is the default: the agent's model calls are
    not warrant's to count)."""
    max_tool_calls: int = Field(default=DEFAULT_MAX_TOOL_CALLS, ge=0, le=10_000)
    """Tool executions, see :data:`DEFAULT_MAX_TOOL_CALLS`."""
    max_repeated_proposal: int = Field(default=DEFAULT_MAX_REPEATED_PROPOSAL, ge=1, le=100)
    """Same-fingerprint proposals allowed without a new observation."""
    max_steps_without_new_observation: int = Field(
        default=DEFAULT_MAX_STEPS_WITHOUT_NEW_OBSERVATION, ge=1, le=10_000
    )
    """Proposals in a row, whatever they are, allowed to add no new observation."""
    max_refused_finals: int = Field(default=DEFAULT_MAX_REFUSED_FINALS, ge=0, le=100)
    """Final answers that fail their citation check, or come while the spec's ``success``
    conditions do not hold, and are refused (an observation, and the step planned again)
    before one ends the run (``FINAL_CITATION_VALIDATION_FAILED``,
    ``SUCCESS_CONDITION_NOT_MET``)."""
    max_cycle_period: int = Field(default=DEFAULT_MAX_CYCLE_PERIOD, ge=2, le=20)
    """Longest cycle of proposals (A-B, A-B-C, ...) detected when it repeats with no new
    observation."""
    on_loop: Literal["stop", "refuse"] = "stop"
    """What a repeated proposal (``max_repeated_proposal``) or a cycle (``max_cycle_period``)
    does: ``stop`` ends the run (``REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION``,
    ``PROPOSAL_OSCILLATION_DETECTED``); ``refuse`` refuses that proposal with the same code
    and the run goes on (the default for planner kind ``external``)."""
    deadline_s: float = Field(default=DEFAULT_DEADLINE_S, gt=0, le=7 * 24 * 3600)
    """Seconds from creation after which no new work starts."""
    deadline_pauses_for_confirmation: bool = False
    """The deadline does not count the time the run waits for a person's confirmation: when
    the wait ends (approved or declined) the deadline moves later by the time waited, and a
    run that waits is not stopped at its deadline (its request still expires after
    ``confirmation_ttl_s``). The default for planner kind ``external``."""
    max_tool_calls_per_tool: dict[str, Annotated[int, Field(ge=0, le=10_000)]] = Field(
        default_factory=dict
    )
    """Optional per-tool caps, by tool name."""
    max_tokens: int | None = Field(default=None, ge=0)
    """Prompt + completion tokens charged by the planner's model calls and by tools that
    report usage (``ToolContext.report_usage``); ``None`` = unlimited."""
    max_cost: float | None = Field(default=None, ge=0)
    """Cost in the price table's currency, charged like ``max_tokens``; ``None`` = unlimited.
    A run whose model has no price in ``WARRANT_MODEL_PRICES`` is refused at start
    (``SPEC_INVALID``) unless ``unpriced_calls_free``."""
    unpriced_calls_free: bool = False
    """Let a run with ``max_cost`` use a model the price table does not name (its calls cost
    0): without it such a run is refused at start, since the cap would protect nothing."""
    confirmation_ttl_s: float = Field(default=DEFAULT_CONFIRMATION_TTL_S, gt=0, le=7 * 24 * 3600)
    """How long a confirmation request (and the confirmation) stays valid."""
    confirmation_steps: int = Field(default=DEFAULT_CONFIRMATION_STEPS, ge=0, le=10_000)
    """Steps after the request during which a confirmation may be used."""
    max_wait_s: float = Field(default=DEFAULT_MAX_WAIT_S, gt=0, le=MAX_WAIT_S)
    """The longest a planner's ``wait`` may last (its ``seconds``, or an event wait's
    ``max_seconds``); a longer one is refused (``WAIT_TOO_LONG``). The deadline keeps running
    while the run waits."""


class Usage(_Strict):
    """What one planner call consumed."""

    prompt_tokens: int = Field(default=0, ge=0)
    """Tokens sent to the model."""
    completion_tokens: int = Field(default=0, ge=0)
    """Tokens the model produced."""
    cost: float = Field(default=0.0, ge=0)
    """Price of the call."""
    estimated: bool = False
    """Some of it is an estimate (the endpoint reported no usage, or the call was abandoned;
    see :mod:`warrant.runner.costs`)."""


class FixturePlannerSpec(_Strict):
    """A scripted planner: answer ``n`` is ``outputs[n]``. Used by tests and the demo."""

    kind: Literal["fixture"]
    outputs: list[Any] = Field(max_length=10_000)
    """Raw planner outputs; malformed ones are allowed and refused by the gate."""
    usage_per_call: Usage | None = None
    """Usage charged per call, to exercise the token and cost budgets."""


class OpenAIPlannerSpec(_Strict):
    """Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, llama.cpp, Ollama, ...)."""

    kind: Literal["openai"]
    model: str = Field(min_length=1, max_length=200)
    """Model name sent to the endpoint (and the key of the price table)."""
    base_url: str = Field(pattern=r"^https?://[^\s/]+(/[^\s]*)?$", max_length=500)
    """Endpoint root, e.g. ``http://127.0.0.1:8000/v1``."""
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Z_][A-Z0-9_]{0,99}$")
    """Name of the environment variable holding the key (read by the worker only)."""
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    """Sampling temperature."""
    timeout_s: float = Field(default=30.0, gt=0, le=600)
    """Per-request timeout (cut further by the run deadline)."""
    max_retries: int = Field(default=3, ge=0, le=10)
    """Retries of 429/5xx/connection errors; each attempt is a model call."""
    max_completion_tokens: int = Field(default=4096, ge=32, le=1_000_000)
    """Per-call cap on the reply: each request carries ``max_tokens`` = this, cut to what the
    run's token and cost budgets leave."""


class ExternalPlannerSpec(_Strict):
    """The caller is the planner: an agent that runs its own loop (an MCP client, an OpenAI
    Agents SDK or pydantic-ai agent) submits one proposal at a time
    (``POST /v1/runs/{id}/proposals``, :meth:`Client.propose`) and reads the gate's decision.
    No worker asks any model for this run."""

    kind: Literal["external"]
    agent: str = Field(default="", max_length=200)
    """Who proposes (an MCP client's name, a framework): shown in the run's trace."""


class PluginPlannerSpec(_Strict):
    """A planner kind registered by a plug-in (entry-point group ``warrant.planners`` or
    ``WARRANT_PLANNERS``). The spec only names it: it can never make a worker import code."""

    kind: str = Field(pattern=r"^[a-z][a-z0-9_.-]{0,63}$")
    """The registered kind's name."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """Validated by the kind's own settings model, at start and in the planner worker."""


#: A router's label names (``RouterPlannerSpec.routes``); ``unknown`` is never one of them.
RouteLabel = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")]


class Route(_Strict):
    """One branch of a router: the fixed sub-run a label starts (its goal is the router run's
    goal), through the same ``delegate`` call and narrowing as any sub-run."""

    planner: FixturePlannerSpec | OpenAIPlannerSpec | ExternalPlannerSpec = Field(
        discriminator="kind"
    )
    """The branch's planner."""
    grants: list[Grant] = Field(default_factory=list, max_length=100)
    """The branch's grants: each narrower than one the router run holds."""
    budgets: dict[str, Any] = Field(default_factory=dict, max_length=30)
    """The branch's budgets (carved out of the router run's, like any sub-run's)."""
    high_risk: bool = False
    """A branch that can write (a refund, a payment): a misroute into it is counted on its own
    (``warrant_route_misroutes_total{high_risk="true"}``)."""


class RouterPlannerSpec(_Strict):
    """Routing: a classifier (a model, or a script) names one label of a finite set; the
    program maps it to a fixed branch. ``unknown``, a label not in the set, and a label under
    ``confidence_floor`` never fall into the nearest branch: they go to ``fallback``."""

    kind: Literal["router"]
    classifier: FixturePlannerSpec | OpenAIPlannerSpec = Field(discriminator="kind")
    """Asked once for ``{"label": ..., "confidence": 0..1}``."""
    routes: dict[RouteLabel, Route] = Field(min_length=1, max_length=50)
    """Label → branch."""
    confidence_floor: float = Field(default=0.7, ge=0.0, le=1.0)
    """A label given with less confidence goes to ``fallback``."""
    fallback: str = Field(default="person", max_length=64)
    """``person`` (the default): the run asks a person to pick the label (``needs_input``);
    or a label whose branch only reads (checked at start: never a write-capable branch)."""
    expected_label: str | None = Field(default=None, max_length=64)
    """An evaluation run's true label: a route to another branch is counted as a misroute."""

    @field_validator("routes")
    @classmethod
    def _no_unknown(cls, routes: dict[str, Route]) -> dict[str, Route]:
        if "unknown" in routes or "person" in routes:
            raise ValueError("'unknown' and 'person' are not labels a route may have")
        return routes

    @field_validator("fallback")
    @classmethod
    def _fallback_named(cls, fallback: str, info: ValidationInfo) -> str:
        routes = info.data.get("routes") or {}
        if fallback != "person" and fallback not in routes:
            raise ValueError("fallback must be 'person' or one of the routes' labels")
        return fallback


BUILTIN_PLANNER_KINDS = ("fixture", "openai", "external", "router")


def _planner_tag(value: Any) -> str:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if kind in BUILTIN_PLANNER_KINDS else "plugin"


PlannerSpec = Annotated[
    Annotated[FixturePlannerSpec, Tag("fixture")]
    | Annotated[OpenAIPlannerSpec, Tag("openai")]
    | Annotated[ExternalPlannerSpec, Tag("external")]
    | Annotated[RouterPlannerSpec, Tag("router")]
    | Annotated[PluginPlannerSpec, Tag("plugin")],
    Discriminator(_planner_tag),
]


class HandoffPolicy(_Strict):
    """When to hand the run to a person instead of failing it."""

    on_repeated_proposal: bool = False
    """Repeated proposals without a new observation (and oscillation) -> handoff."""
    on_unclassified_policy: bool = False
    """A policy situation the gate cannot classify (an internal error) -> handoff."""
    after_untrusted_refusals: int | None = Field(default=None, ge=1, le=1000)
    """This many tool proposals refused after the run first read untrusted content (a
    persistent injection keeps proposing what the gate refuses) -> handoff
    (``UNTRUSTED_INFLUENCE``) instead of burning the step budget; ``None`` = off."""


class RunPolicy(_Strict):
    """How the gate's refusals are handled."""

    on_missing_grant: Literal["replan", "ask"] = "replan"
    """A proposal refused for a grant the run lacks (``MISSING_CAPABILITY``,
    ``RESOURCE_OUT_OF_SCOPE``): ``replan`` gives the planner the refusal as an observation;
    ``ask`` pauses the run in ``waiting_grant`` until an operator grants it (the same proposal
    then goes through the gate again) or cancels the run. ``ask`` also covers a tool's own
    permission refusal (``TOOL_PERMISSION_DENIED``: docs/refusals-that-ask.md)."""
    max_parallel_calls: int = Field(default=DEFAULT_MAX_PARALLEL_CALLS, ge=1, le=MAX_PARALLEL_CALLS)
    """Calls one parallel step may carry (``kind: parallel``); 1 forbids parallel steps (the
    OpenAI-compatible planner then sends ``parallel_tool_calls: false``)."""
    max_delegation_depth: int = Field(default=DEFAULT_MAX_DELEGATION_DEPTH, ge=0, le=8)
    """How many hops of sub-runs may start below this run (the ``delegate`` tool, which also
    needs a grant of ``runs:delegate``): 0 forbids it, 1 lets this run start children that
    start none. A child's own is its parent's less one, whatever it asks."""
    max_children: int = Field(default=DEFAULT_MAX_CHILDREN, ge=0, le=100)
    """Sub-runs this run may start in its whole life (``DELEGATION_FAN_OUT`` after)."""
    confirm_writes: bool = False
    """Every call of a tool that is not read-only waits for a person's confirmation, whatever
    its own policy or the deployment's relaxations say (a router's high-risk branch runs with
    it; a child inherits it from its parent)."""


class PreApproval(_Strict):
    """One exact proposal a person approved ahead of time: the gate takes a proposal with the
    same tool, version and (normalised) arguments as confirmed, once. It never covers a call
    whose arguments only untrusted content supplied."""

    tool: str = Field(min_length=1, max_length=200)
    """The tool's name."""
    tool_version: str = Field(min_length=1, max_length=50)
    """The tool's version."""
    arguments: dict[str, Any]
    """The exact arguments, as the tool's input schema reads them."""
    approved_by: str = Field(min_length=1, max_length=200)
    """Who approved it (recorded with the time)."""


class Webhook(_Strict):
    """Where the producer is told that the run waits for a person (``waiting``: a
    confirmation, a clarification or a handoff) or has ended (``ended``). Each call is signed
    with the deployment's ``WARRANT_WEBHOOK_SECRET`` (never part of the spec)."""

    url: str = Field(pattern=r"^https?://[^\s/]+(/[^\s]*)?$", max_length=2000)
    """The ``http``/``https`` URL that receives a signed JSON ``POST`` per event."""


# --- ``success``: what done means, checked by the program on the ledger's facts when the
# planner gives a final answer (warrant.runner.step_decisions checks it)


class ToolSucceeded(_Strict):
    """Done means: a call of ``tool`` succeeded in this run (the ledger's outcome, not the
    planner's word), and each listed argument had exactly the given value."""

    kind: Literal["tool_succeeded"]
    tool: str = Field(min_length=1, max_length=200)
    """The tool's name, as the registry has it."""
    tool_version: str | None = Field(default=None, min_length=1, max_length=50)
    """Only calls of this version count; ``None`` = any version."""
    arguments: dict[str, Any] = Field(default_factory=dict, max_length=50)
    """Fields of the call's validated arguments and the values they must have (exact JSON
    equality); fields not listed may hold anything."""
    verified: bool | None = None
    """``true``: only a call whose success is more than the tool's word counts (a read, or a
    write with ``verify`` or ``reconcile``). Not set: an ``unverified`` write's success
    counts too, and the completion says so (``verified: false``)."""


class ArtifactExists(_Strict):
    """Done means: the run's artifact store holds an artifact at ``path`` (``write_artifact``
    stores them; checked in the store, whatever the planner cites)."""

    kind: Literal["artifact_exists"]
    path: str = Field(min_length=1, max_length=300, pattern=r"^[^/]")
    """The artifact's relative path, e.g. ``run-output/report.md`` (no ``..`` segment)."""

    @field_validator("path")
    @classmethod
    def _no_parent(cls, value: str) -> str:
        if ".." in value.split("/"):
            raise ValueError("a path without '..' segments")
        return value


SuccessCondition = Annotated[ToolSucceeded | ArtifactExists, Field(discriminator="kind")]


class SuccessSpec(_Strict):
    """What done means, checked by the program when the planner gives a final answer: every
    condition must hold, else the final is refused (``SUCCESS_CONDITION_NOT_MET``)."""

    all_of: list[SuccessCondition] = Field(min_length=1, max_length=20)
    """Conditions that must all hold."""


class RunSpec(_Strict):
    """What a producer submits to start one run."""

    goal: str = Field(min_length=1, max_length=8_000)
    """The user-visible goal; becomes observation ``user-1``."""
    subject: str = Field(min_length=1, max_length=200)
    """Whose run this is (memory and resource scopes are bound to it)."""
    planner: PlannerSpec
    """Which planner proposes actions."""
    grants: list[Grant] = Field(default_factory=list, max_length=100)
    """Capabilities granted to this run."""
    budgets: Budgets = Field(default_factory=Budgets, validate_default=True)
    """Limits; every exhaustion stops the run with its own reason. Planner kind ``external``
    has session defaults of its own (:func:`external_budgets`)."""
    handoff: HandoffPolicy = Field(default_factory=HandoffPolicy)
    """Situations that go to a person rather than end the run."""
    policy: RunPolicy = Field(default_factory=RunPolicy)
    """How refusals are handled (``on_missing_grant``)."""
    pre_approved: list[PreApproval] = Field(default_factory=list, max_length=100)
    """Exact proposals approved ahead of time, each usable once (an unattended run's plan)."""
    webhook: Webhook | None = None
    """Notify the producer when the run waits for a person or ends; ``None`` = no calls."""
    success: SuccessSpec | None = None
    """What done means beyond a cited final answer; ``None`` = a cited final answer is done."""

    @field_validator("budgets")
    @classmethod
    def _planner_budgets(cls, budgets: Budgets, info: ValidationInfo) -> Budgets:
        """An agent's own loop (planner kind ``external``) gets the session defaults; any
        other planner calls a model warrant counts: it keeps a model-call budget."""
        if isinstance(info.data.get("planner"), ExternalPlannerSpec):
            return external_budgets(budgets)
        if budgets.max_model_calls is None:
            raise ValueError("max_model_calls may be null only for planner kind 'external'")
        return budgets


def granted_capabilities(spec: Any) -> list[str]:
    """The capabilities a (stored) run spec's grants name, sorted: what an agent's session is
    offered (the gate still checks each call's grant, scope and uses)."""
    grants = spec.get("grants") if isinstance(spec, dict) else None
    named = {g["capability"] for g in grants or [] if isinstance(g, dict) and "capability" in g}
    return sorted(str(c) for c in named)


def external_budgets(budgets: Budgets) -> Budgets:
    """The session defaults of planner kind ``external``, for each field ``budgets`` does not
    set (``model_fields_set``): no model-call budget (each proposal is still counted, with the
    usage the caller reports), ``max_tool_calls`` twice ``max_steps``, a deadline of
    :data:`EXTERNAL_DEADLINE_S` that pauses while a person is asked to confirm, loops refused
    rather than ending the run, and no steps-without-new-observation stop (``max_steps``)."""
    given = budgets.model_fields_set
    steps = budgets.max_steps
    defaults: dict[str, Any] = {
        "max_model_calls": None,
        "max_tool_calls": min(10_000, EXTERNAL_TOOL_CALLS_PER_STEP * steps),
        "deadline_s": EXTERNAL_DEADLINE_S,
        "deadline_pauses_for_confirmation": True,
        "on_loop": "refuse",
        "max_steps_without_new_observation": steps,
    }
    update = {k: v for k, v in defaults.items() if k not in given}
    if not update:
        return budgets
    return Budgets.model_validate({**budgets.model_dump(include=given), **update})


class ToolProposal(_Strict):
    """The planner asks for one tool call. Proposal is not permission."""

    kind: Literal["tool"]
    proposal_id: str = Field(min_length=1, max_length=200)
    tool: str = Field(min_length=1, max_length=200)
    tool_version: str = Field(min_length=1, max_length=50)
    arguments: Any = None
    reason_summary: str = Field(default="", max_length=1_000)
    source_observation_ids: list[str] = Field(default_factory=list, max_length=100)
    repeat_effect: bool = False
    """Repeat a call whose business effect (``Tool.effect_key``) an earlier call already
    has (succeeded, unknown or in flight): instead of ``DUPLICATE_EFFECT``, the call waits
    for a person's confirmation (no pre-approval stands in for it). Not part of the
    proposal's hash."""


class AtLeast(_Strict):
    """The merge rule ``{"at_least": k}``: the step holds when k of its calls succeeded."""

    at_least: int = Field(ge=1, le=MAX_PARALLEL_CALLS)


class ParallelProposal(_Strict):
    """The planner asks for several independent tool calls in one step. Each call (a
    :class:`ToolProposal`, untrusted: the gate parses each on its own) goes through the whole
    gate; the accepted ones run concurrently, and the step's ``merge`` rule gives its verdict
    (``complete``, ``partial`` or ``invalid``: docs/execution.md)."""

    kind: Literal["parallel"]
    proposal_id: str = Field(min_length=1, max_length=200)
    calls: list[Any] = Field(min_length=1, max_length=MAX_PARALLEL_CALLS)
    """The calls, each shaped as a ``kind: tool`` proposal."""
    merge: Literal["all", "any"] | AtLeast = "all"
    """``all``: every call must succeed; ``any``: one; ``{"at_least": k}``: k of them."""
    branch_deadline_s: float | None = Field(default=None, gt=0, le=24 * 3600)
    """Each call's attempt ends by then (its deadline cut to it); ``None``: the tools' own."""
    cancel_when_met: bool = True
    """Cut the calls still running once the rule holds (else they run to the deadline)."""
    reason_summary: str = Field(default="", max_length=1_000)


class FinalAnswer(_Strict):
    kind: Literal["final"]
    answer: str = Field(min_length=1, max_length=20_000)
    citations: list[str] = Field(default_factory=list, max_length=100)


class ClarifyRequest(_Strict):
    kind: Literal["clarify"]
    question: str = Field(min_length=1, max_length=2_000)


class NoAnswer(_Strict):
    """The planner says the goal cannot be answered from the evidence it has: an honest
    abstention (the run ends ``completed``, ``NO_ANSWER``, its stated reason kept)."""

    kind: Literal["no_answer"]
    reason: str = Field(default="", max_length=2_000)


class EscalateRequest(_Strict):
    """The planner hands the run to a person: its evidence is insufficient or conflicting
    (handoff ``EVIDENCE_INSUFFICIENT`` or ``EVIDENCE_CONFLICTING``, ``reason`` in the bundle)."""

    kind: Literal["escalate"]
    reason: str = Field(min_length=1, max_length=2_000)
    evidence: Literal["insufficient", "conflicting"] = "insufficient"


PlannerOutput = Annotated[
    ToolProposal
    | ParallelProposal
    | FinalAnswer
    | ClarifyRequest
    | NoAnswer
    | EscalateRequest
    | Plan
    | Wait,
    Field(discriminator="kind"),
]


def _field_errors(exc: ValidationError) -> list[dict[str, str]]:
    return [
        {"field": ".".join(str(p) for p in err["loc"]) or "(root)", "message": err["msg"]}
        for err in exc.errors(include_url=False)
    ]


def _nul_path(value: Any, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """Where a NUL character hides (PostgreSQL JSON cannot store one)."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, child in value.items():
            found = _nul_path(key, (*path, str(key))) or _nul_path(child, (*path, str(key)))
            if found is not None:
                return found
    if isinstance(value, list):
        for i, child in enumerate(value):
            found = _nul_path(child, (*path, str(i)))
            if found is not None:
                return found
    return None


#: The largest run spec read, as JSON text (the CLI's file and the API's body alike): a larger
#: one is ``REQUEST_TOO_LARGE`` (HTTP 413).
MAX_SPEC_BYTES = 1_000_000


def parse_run_spec(data: Any) -> RunSpec:
    """Validate ``data`` (a dict or JSON text) into a :class:`RunSpec` or raise SpecError
    (``REQUEST_TOO_LARGE`` for a text over :data:`MAX_SPEC_BYTES`)."""
    size = (
        len(data.encode()) if isinstance(data, str) else len(data) if isinstance(data, bytes) else 0
    )
    if size > MAX_SPEC_BYTES:
        raise InvalidRequest(
            f"a run spec is at most {MAX_SPEC_BYTES} bytes ({size} given)", code="REQUEST_TOO_LARGE"
        )
    try:
        if isinstance(data, str | bytes):
            spec = RunSpec.model_validate_json(data)
        else:
            spec = RunSpec.model_validate(data)
    except ValidationError as exc:
        errors = _field_errors(exc)
        fields = ", ".join(e["field"] for e in errors)
        raise SpecError(f"invalid run spec: {fields}", errors=errors) from None
    nul = _nul_path(spec.model_dump(mode="json"))
    if nul is not None:
        field = ".".join(nul) or "(root)"
        raise SpecError(
            f"invalid run spec: {field}",
            errors=[{"field": field, "message": "NUL characters are not allowed"}],
        )
    return spec
