"""The tool contract: a tool is declared once, typed, and only the program runs it.

A tool's code reports its outcome by returning its output model (``succeeded``) or raising
one of :class:`~warrant.runner.errors.ToolRejected`,
:class:`~warrant.runner.errors.ToolFailed` (with ``retryable``/``retry_after_s``) or
:class:`~warrant.runner.errors.ToolUnknown`. Any other exception is an internal error: recorded with
a stable code, the run stops, nothing is retried.
"""

from __future__ import annotations

__layer__ = "pure core"

import json
import re
import string
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from warrant.runner.canonical import canonical_json, sha256_hex
from warrant.runner.codes import ObservationSource
from warrant.runner.scopes import ResourceKind
from warrant.tools._batches import Batch
from warrant.tools._context import ToolContext, ToolUsage

__all__ = [
    "Accepted",
    "Attribution",
    "ConfirmationPolicy",
    "FlagAction",
    "Isolation",
    "JobHooks",
    "JobState",
    "JobStatus",
    "OnError",
    "PreconditionContext",
    "ReconcileResult",
    "SideEffect",
    "Tool",
    "ToolContext",
    "ToolInput",
    "ToolOutput",
    "ToolUsage",
    "UntrustedPolicy",
]

InputT = TypeVar("InputT", bound=BaseModel)
OutputT = TypeVar("OutputT", bound=BaseModel)

#: Default per-call time limit of a tool, in seconds.
DEFAULT_TOOL_TIMEOUT_S = 10.0
#: The longest business effect key kept as it is (``commands.effect_key`` holds 300).
MAX_EFFECT_KEY_CHARS = 300
#: Largest canonical-JSON input a tool accepts unless it says otherwise.
DEFAULT_MAX_INPUT_BYTES = 16_384
#: Attempts per command for retryable failures (each counts as a tool call).
DEFAULT_MAX_ATTEMPTS = 3
#: Backoff base and cap (full jitter) between attempts, unless the tool gives retry-after.
DEFAULT_RETRY_BASE_S = 0.2
DEFAULT_RETRY_CAP_S = 5.0
#: Longest message of a tool's refusal or failure the ledger keeps (the rest is cut).
MAX_OUTCOME_MESSAGE_CHARS = 1_000
#: What a confirmation request shows as the estimated impact of a tool that declares none.
IMPACT_NOT_DECLARED = "not declared"
#: ... of a tool whose ``impact`` raised or answered neither text nor a JSON object.
IMPACT_UNAVAILABLE = "(the tool could not estimate it)"
#: Longest estimated impact shown (text, or a JSON object's JSON).
MAX_IMPACT_CHARS = 500
#: Largest canonical-JSON output kept whole unless the tool says otherwise (256 KiB): a larger
#: one is kept cut, with a marker (:func:`warrant.runner.tool_outcomes.bounded_output`).
DEFAULT_MAX_OUTPUT_BYTES = 262_144


# --- long-running tools: a call that answers "accepted, job 123" and finishes later --------------
# A tool whose contract declares ``job=JobHooks(poll=...)`` may return :class:`Accepted` from its
# ``execute`` instead of its output model. The attempt then ends ``accepted`` (no worker stays
# busy): the run waits in status ``waiting_job`` and the reconciler calls
# ``poll(operation_id, ctx)`` every ``interval_s`` (at most ``max_polls`` times, for at most
# ``timeout_s`` after the acceptance, and never past the run's deadline). When the job ends, the
# run resumes with a *final* observation (``job-<step>``: succeeded with its output, or failed
# with its code); the ``accepted`` observation (``tool-<step>``) says ``final: false`` and a final
# answer may not cite it. A cancel of the run, or a job past its bounds, calls ``cancel`` once
# (if the contract has one) and keeps asking until the job says how it ended; a job that never
# says goes to a person with its operation id in the bundle.
#
# The operation id, like the idempotency token, must be stable: a call re-invoked with the same
# token returns the same job (:class:`ToolContext.idempotency_token` is what makes it so).


#: Defaults of :class:`JobHooks`.
DEFAULT_POLL_INTERVAL_S = 5.0
DEFAULT_MAX_POLLS = 720
DEFAULT_JOB_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class Accepted:
    """What a long-running tool returns when the service took the job but has not done it."""

    operation_id: str
    """The service's id of the job (what ``poll`` and ``cancel`` get)."""
    details: dict[str, Any] | None = None
    """Anything else the service said at acceptance (shown to the planner, not final)."""


class JobState(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """Ended without its effect: failed, refused or cancelled by the service."""


@dataclass(frozen=True)
class JobStatus:
    """What ``poll`` says about a job."""

    state: JobState
    output: dict[str, Any] | None = None
    """For ``succeeded``: the tool's output (validated against its output model)."""
    code: str | None = None
    """For ``failed``: a stable code (``JOB_FAILED`` if none)."""
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class JobHooks:
    """How the program follows a tool's accepted jobs (``Tool(job=JobHooks(...))``)."""

    poll: Callable[[str, Any], JobStatus]
    """``poll(operation_id, ctx)``: the job's state now (``ctx`` is a ``ToolContext``)."""
    cancel: Callable[[str, Any], None] | None = None
    """``cancel(operation_id, ctx)``: ask the service to stop the job; called at most once."""
    interval_s: float = DEFAULT_POLL_INTERVAL_S
    max_polls: int = DEFAULT_MAX_POLLS
    timeout_s: float = DEFAULT_JOB_TIMEOUT_S
    """Longest a job may take after its acceptance before it is cancelled (or handed off)."""


# --- attribution: who wrote each item of an untrusted output, as the service reports it ----------
# A mail's sender address as the mail service delivered it, a chat message's author as the
# workspace knows them, the URL a page was fetched from: a third party chose the *words* of the
# item, but not these fields. The provenance layer uses them two ways
# (:mod:`warrant.runner.provenance`):
#
# * an item whose author the user **named** (the goal or a person's answer says the
# author's address, URL or one of the ``names`` the service knows them by) is a source the
# user vouched for: its values count as trusted, and are shown as ``vouched``;
# * an item's author is a destination the service vouches for (a reply to a mail's sender, when
# ``replies`` says so and the sending tool's ``UntrustedPolicy(replies=True)`` too): it passes
# as ``author``, but a call that carries what another observation said to it is not
# (``disclosed``).


@dataclass(frozen=True, kw_only=True)
class Attribution:
    """Where, in a tool's output, the items are and who wrote each one.

    ``Attribution(items="messages", author="sender", kind=ResourceKind.EMAIL,
    names=("sender_name",), replies=True)``: the output's ``messages`` list, each message's
    ``sender`` an e-mail address the mail service authenticated, ``sender_name`` the name the
    user's address book gives that sender (a name the sender cannot choose), and a reply may
    go to the sender. ``Attribution(author="url", kind=ResourceKind.URL)``: the whole output
    is one item, its author the URL it was fetched from (named by the goal, never replied
    to)."""

    author: str = ""
    """The field of each item that says who wrote it, as the service reports it (``""``: the
    service does not say; then ``place`` must)."""
    kind: ResourceKind = ResourceKind.IDENTIFIER
    """What the author is: an ``email`` address or a ``url`` is named by the user's words
    containing it exactly; an ``identifier`` (a handle its owner picked) only through
    ``names``."""
    items: str = ""
    """The output's field holding the list of items (dotted for nested); ``""``: the whole
    output is one item."""
    names: tuple[str, ...] = ()
    """Fields of each item naming the author in words the user, not the author, chose (a
    contact's name from the user's address book). Never a display name the author sets."""
    replies: bool = False
    """May an item's author be a destination (of ``kind``) of a tool that sends replies
    (``UntrustedPolicy(replies=True)``)? A mail's sender: yes. A page's URL, a handle: no."""
    place: str = ""
    """The field of each item naming where the service says it was posted (a channel, a
    person's inbox): the user naming that place as a source ("the links posted in
    general", "the message in Alice's inbox"; a word of 3+ letters of it, not where a
    recipient goes) vouches for every item posted there. Whoever may post there is then
    believed, as a named author is. Named whole: the place's full name, not one of its
    words."""
    listed: bool = False
    """May a place a listing of the run named (``Tool.listing``: the hotels a city search
    gave) vouch as a place the user named does? For a catalogue's facts filed under a
    business's name, chosen from what the catalogue listed; never for a place anyone may
    post to (a channel)."""
    destinations: bool = True
    """May a value in an item named by its ``place`` be a destination (a recipient, an
    account, a link to follow)? Off where anyone may write into the place (a bill, a
    letter, a mail thread's subject): the user naming it ("update my address from
    'address-change.txt'") asks to use what it says, not to pay or mail whoever it names.
    An item whose author the user named is not affected."""
    vouches: tuple[str, ...] = ()
    """The fields of an item that naming it vouches for (``()``: all of it). An event named
    by its title vouches for its ``participants``, the fields the calendar fills in, and not
    for its description, free text anyone who invited the user may write:
    ``Attribution(items="items", place="title", vouches=("participants",))``."""

    def describe(self) -> dict[str, object]:
        """For the tool's published contract (``Tool.describe``)."""
        return {
            "author": self.author,
            "kind": self.kind.value,
            "items": self.items,
            "names": list(self.names),
            "replies": self.replies,
            **({"place": self.place} if self.place else {}),
            **({"listed": True} if self.listed else {}),
            **({} if self.destinations else {"destinations": False}),
            **({"vouches": list(self.vouches)} if self.vouches else {}),
        }

    def __post_init__(self) -> None:
        if not (self.author or self.place) or any(not n for n in (*self.names, *self.vouches)):
            raise ValueError(
                "Attribution: an author or a place field, and names and vouches, must be given"
            )


# --- preconditions -------------------------------------------------------------------------------
# A tool's precondition read (``Tool.precondition``): the state of the resource a person is
# asked to approve a call on (a balance, an order's status, a file's version), read from the
# tool's own service when the confirmation is requested and again just before the call runs.
#
# What the read returns (a string or a mapping of JSON values) is reduced to a
# :class:`Fingerprint`: a SHA-256 of its canonical JSON (what the approval is bound to) and a
# short readable summary (what the approver is shown). Pure: the reads themselves are made by
# the policy stage and the tool stage (``broker.tool.preconditions``).


#: The state the approver saw moved before the call ran: not run, the run asks again.
PRECONDITION_CHANGED = "PRECONDITION_CHANGED"
#: The precondition could not be read (the read raised, or returned neither a string nor a
#: mapping of JSON values): the call does not run (fail closed).
PRECONDITION_UNREADABLE = "PRECONDITION_UNREADABLE"
#: The summary shown to the approver: at most this many entries of this many characters.
MAX_SUMMARY_FIELDS = 20
MAX_SUMMARY_CHARS = 200


@dataclass(frozen=True, kw_only=True)
class PreconditionContext:
    """What a precondition read may know: the run, its subject and the tool's dependencies
    (the same ``deps`` as ``ToolContext.deps``). The read has no effect and is quick."""

    run_id: str
    subject: str
    deps: Any


@dataclass(frozen=True)
class Fingerprint:
    """The state a precondition read saw: ``digest`` binds, ``summary`` is shown."""

    digest: str
    summary: dict[str, str]

    def shown(self) -> dict[str, Any]:
        """The form kept in a confirmation request (``precondition``)."""
        return {"fingerprint": self.digest, "summary": dict(self.summary)}


def _clean(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return "".join(ch for ch in text if ch.isprintable())[:MAX_SUMMARY_CHARS]


def fingerprint_of(value: Any) -> Fingerprint:
    """The fingerprint of what a precondition read returned: a string (``{"state": ...}``
    in the summary) or a mapping. Raises :class:`ValueError` for anything else or for values
    that are not JSON data (a read that answers nonsense is no read: fail closed)."""
    if isinstance(value, str):
        state: dict[str, Any] = {"state": value}
    elif isinstance(value, Mapping):
        state = {str(k): v for k, v in value.items()}
    else:
        raise ValueError(f"a precondition read returns a string or a mapping, not {type(value)}")
    try:
        digest = sha256_hex(canonical_json(state))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a precondition read returned values that are not JSON: {exc}") from None
    items = sorted(state.items())[:MAX_SUMMARY_FIELDS]
    return Fingerprint(digest, {_clean(k)[:64]: _clean(v) for k, v in items})


def moved(approved: str | None, now: Fingerprint) -> bool:
    """Has the state moved since the approval? An approval bound to no fingerprint (the read
    failed when it was requested, or it predates the precondition) counts as moved: the
    person must be shown a state before the call runs."""
    return approved is None or approved != now.digest


class ToolInput(BaseModel):
    """Base of tool inputs: unknown fields and coercions are refused; one docstring per field
    becomes its JSON Schema description."""

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, use_attribute_docstrings=True
    )


class ToolOutput(BaseModel):
    """Base of tool outputs (field docstrings become descriptions)."""

    model_config = ConfigDict(use_attribute_docstrings=True)


class Isolation(StrEnum):
    """Where a tool's calls run. ``thread`` (the default): many calls at once in one ``tool``
    worker process (its threads pool); the deadline and a cancel interrupt the tool's Python
    code and whatever waits through the context (``ToolContext.sleep``, ``on_interrupt``, the
    HTTP client and sockets of :mod:`warrant.tools.blocking`), never a plain ``time.sleep`` or
    a socket the tool opened itself. ``process``: one call per pool process of the
    ``tool-process`` role (prefork), for a tool the process must be killable for: CPU-bound
    code, C calls that hold the GIL, I/O it cannot route through the context."""

    THREAD = "thread"
    PROCESS = "process"


class SideEffect(StrEnum):
    READ = "read"
    IDEMPOTENT_WRITE = "idempotent-write"
    COMPENSATABLE_WRITE = "compensatable-write"
    IRREVERSIBLE = "irreversible"

    @property
    def safe_to_reinvoke(self) -> bool:
        """May a delivery that finds the command ``started`` run the tool again (same token)?"""
        return self in (SideEffect.READ, SideEffect.IDEMPOTENT_WRITE)


class OnError(StrEnum):
    """What a refusal whose code the tool declares (``Tool.errors``) does to the run."""

    REPLAN = "replan"
    """The planner sees the refusal and proposes again (what any other refusal does)."""
    ASK_USER = "ask_user"
    """The run asks its user (``needs_input``, ``CLARIFICATION_REQUIRED``), the question naming
    the code and the tool's message; the answer is a user observation the planner reads next."""


class ConfirmationPolicy(StrEnum):
    NEVER = "never"
    PER_RUN = "per-run"
    PER_CALL = "per-call"


class FlagAction(StrEnum):
    """What the gate does with an argument value that no trusted text supplied."""

    ASK = "ask"
    """The call waits for a person, shown the flag; no pre-approval covers it."""
    REFUSE = "refuse"
    """The call is refused (``UNTRUSTED_DESTINATION``, or ``UNTRUSTED_CONTENT`` for a copied
    value); the planner sees why."""
    ALLOW = "allow"
    """The call goes on; the flag is traced (``policy.provenance.checked`` ``allowed``)."""


@dataclass(frozen=True, kw_only=True)
class UntrustedPolicy:
    """Per tool: what the provenance layer does with values of a write or egress call that
    the goal, the spec, a person or a trusted tool did not supply. Defaults fail closed."""

    destinations: FlagAction = FlagAction.REFUSE
    """Typed resources (``resources``: recipients, URLs, paths, accounts, IBANs) and secret
    arguments (``secret_fields``). Say ``ask`` for a tool whose destinations legitimately come
    from data (reply to a mail's sender) and let a person look."""
    copied: FlagAction = FlagAction.REFUSE
    """A whole value copied from untrusted content that nothing the user named vouches for
    (an event title, a location, a message lifted from a page or a mail): refused
    (``UNTRUSTED_CONTENT``), so an injection's words never become an effect verbatim, even
    when a person approves everything. What the task derives (the thread, the file, the
    catalogue entry the user named or a listing gave: ``Attribution``) is vouched for. Say
    ``ask`` to let a person look instead."""
    content: FlagAction = FlagAction.ASK
    """URLs, addresses and IBANs the model wrote into free text that nothing the run read
    supplied (one found only in untrusted content is a destination), and the user's own
    data a reply would carry to its sender (``disclosed``)."""
    replies: bool = False
    """It sends replies: an item's author (a mail's sender) is a destination
    (:mod:`warrant.runner.provenance`). Off: a forwarding rule to whoever mailed is no reply."""
    listed: bool = False
    """It acts on the user's own resources as a listing named them (``Tool.listing``: post in
    a channel ``get_channels`` listed, move an event the calendar search found): such an
    ``identifier`` destination is ``listed`` and passes. Off (the default, and the rule for
    anything destructive): a listed resource must still be named by trusted text, since a
    hijacked planner may pick any entry of a listing."""


@dataclass(frozen=True)
class ReconcileResult:
    """What the external system says about an idempotency token."""

    applied: bool | None
    """``True`` applied, ``False`` known not applied, ``None`` still unknown."""
    output: dict[str, Any] | None = None


def _everything(_args: Any, _subject: str) -> str:
    return "*"


@dataclass(frozen=True, kw_only=True)
class Tool(Generic[InputT, OutputT]):
    """One versioned tool and everything the gate and the worker need to know about it."""

    name: str
    version: str
    description: str
    input_model: type[InputT]
    output_model: type[OutputT]
    capabilities: tuple[str, ...]
    side_effect: SideEffect
    execute: Callable[[InputT, ToolContext], OutputT | Accepted]
    """Returns the output (succeeded), or :class:`Accepted` for a tool with
    ``job`` hooks; raises ``ToolRejected``, ``ToolFailed`` or ``ToolUnknown`` otherwise."""
    confirmation: ConfirmationPolicy = ConfirmationPolicy.NEVER
    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
    resource: Callable[[InputT, str], str] = _everything
    validate: Callable[[InputT, str], str | None] | None = None
    """``(args, subject)``: the gate's semantic layer, pure (no I/O): a code refuses the call."""
    precheck: Callable[[InputT, PreconditionContext], str | None] | None = None
    """``(args, ctx)``: a business check that reads the tool's service (``ctx.deps``, read
    only: does the customer exist, is there quota left), run by the tool stage just before
    each attempt. A code (or a raised ``ToolRejected``) refuses the call ``rejected`` with no
    effect; a read that fails fails the attempt ``PRECONDITION_UNREADABLE`` (retryable)."""
    errors: Mapping[str, OnError] = field(default_factory=dict)
    """The business refusals the tool declares, by code: ``{"CUSTOMER_NOT_FOUND":
    OnError.REPLAN, "QUOTA_EXCEEDED": OnError.ASK_USER}``. A refusal (``ToolRejected`` or
    ``precheck``) with an ``ask_user`` code asks the run's user instead of re-planning; an
    undeclared code is re-planned."""
    verify: Callable[[InputT, OutputT, ToolContext], bool] | None = None
    """``verify(args, output, ctx)``: the postcondition, read back from the service after the
    call answered (True: the effect is there). A write declares it, or ``reconcile``, or says
    ``unverified=True`` with an ``unverified_reason`` (:func:`verification_problem`)."""
    unverified: bool = False
    """A write whose effect nothing reads back (no ``verify``, no ``reconcile``): its success
    is the tool's word only. Allowed with an ``unverified_reason``; shown in ``warrant tools
    list``, on the approval page, and on success conditions it satisfies (``verified:
    false``)."""
    unverified_reason: str = ""
    """Why the write cannot be read back (``"the SMTP relay has no read API"``)."""
    verify_attempts: int = 1
    """Reads of the postcondition before it counts as failed (an eventually consistent store
    may show a write late), ``verify_interval_s`` apart, within the call's deadline."""
    verify_interval_s: float = 0.2
    reconcile: Callable[[str, ToolContext], ReconcileResult] | None = None
    compensate: Callable[[str, ToolContext], None] | None = None
    """``compensate(idempotency_token, ctx)``: undo the call's effect when its postcondition
    failed (idempotent by the token; raise to say it could not). Without one, or when it
    fails, the run goes to a person with the effect in the handoff bundle."""
    batch: Batch | None = None
    """A batch tool: which argument lists the items and each item's key; each item is applied,
    retried and reconciled on its own (:mod:`warrant.tools._batches`)."""
    job: JobHooks | None = None
    """A long-running tool: ``execute`` may return :class:`Accepted`, and
    these hooks follow the job to its end (:class:`JobHooks`)."""
    sensitive_fields: frozenset[str] = frozenset()
    """Arguments kept out of traces, handoff bundles and webhooks (``<sensitive>`` there). The
    person asked to confirm the call sees their values: that is what they approve."""
    secret_fields: frozenset[str] = frozenset()
    """Arguments nobody is shown, the approver included (a password, a key): ``<secret>``
    wherever arguments are displayed. Also kept out of traces like ``sensitive_fields``."""
    output_source: ObservationSource = ObservationSource.UNTRUSTED_CONTENT
    """Whose words the output carries. Untrusted unless the contract says otherwise (fail
    closed): ``trusted-tool`` only for output the program itself vouches for (its own state,
    a system of record no outsider writes to); a page, a mail, a search hit, a record a
    customer typed is untrusted content, and values the gate finds only there are flagged
    (:mod:`warrant.runner.provenance`)."""
    untrusted: UntrustedPolicy = field(default_factory=lambda: UntrustedPolicy())
    """What the provenance layer does with a value that no trusted text supplied."""
    attribution: Attribution | None = None
    """Untrusted output: who wrote each item, as the service reports it
    (:class:`Attribution`)."""
    private: frozenset[str] = frozenset()
    """Output fields holding the user's private data (a passport or card number, an account
    number): a write or egress call that carries such a value is refused (``disclosed``)
    unless the user's own words name the field ("send Jane my passport number"), whoever the
    destination is. Paths as in ``listing``."""
    listing: Mapping[str, ResourceKind] = field(default_factory=dict)
    """Output fields that list the user's own resources as the service names them, not as
    anyone wrote them (``{"files[].id": ResourceKind.IDENTIFIER}``, ``{"channels[]": ...}``;
    paths as in ``resources``, ``[]`` for each element of a list): an ``identifier``
    destination the run read there is ``listed``, and passes provenance for a tool whose
    ``UntrustedPolicy(listed=True)`` says so (a file, an event or a channel of the user's
    own; an address, a URL or an account is never derived this way). Declare only fields the
    service fills in itself."""
    describe_resources: Callable[[InputT, Any, str], Mapping[str, Any]] | None = None
    """``(args, deps, subject)``: what the call's resources refer to, for the person asked to
    confirm it (a file's name and size, a recipient's display name, "never mailed before"),
    read from the tool's own service when the request is made. A quick read with no
    effect; by argument name; shown as ``described`` (the service's words, bounded)."""
    precondition: Callable[[InputT, PreconditionContext], str | Mapping[str, Any]] | None = None
    """``(args, ctx)``: the state the approver is asked about (a balance, a status, a version),
    read when the confirmation is requested and again just before the call runs; a moved
    state refuses the call (``PRECONDITION_CHANGED``) and asks again
    (:func:`fingerprint_of`)."""
    impact: Callable[[InputT], str | Mapping[str, Any]] | None = None
    """``(args)``: the call's estimated impact, for the person asked to confirm it ("refund
    120.00 EUR on order ord_1", or ``{"amount": "120.00", "currency": "EUR", "target":
    "order ord_1"}``): pure, computed from the validated arguments alone, no I/O. Shown as
    ``estimated_impact`` (:meth:`estimated_impact`; ``not declared`` without one). It goes
    into the trace with the request: never a secret argument's value."""
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    """Largest output (canonical JSON, in bytes) the ledger and the planner get whole. A larger
    one is checked whole (schema, ``verify``) and then kept cut: its small fields whole, the
    rest as a prefix, with ``_truncated`` (``truncated: true``, the original size and
    SHA-256)."""
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    retry_base_s: float = DEFAULT_RETRY_BASE_S
    retry_cap_s: float = DEFAULT_RETRY_CAP_S
    resources: Mapping[str, ResourceKind] = field(default_factory=dict)
    """Arguments that name resources, by kind: the gate checks each value (each element of a
    list) against the scopes of the grants the call uses. Replaces ``resource`` for typed
    matching."""
    isolation: Isolation = Isolation.THREAD
    """``process``: this tool's calls need a pool process of their own (see :class:`Isolation`)."""
    max_in_flight: int | None = None
    """Calls of this tool (all its versions) running at once across every worker process
    and host (None: no cap); a call over it waits for a slot (``warrant.broker.limits``)."""
    max_calls_per_minute: int | None = None
    """Calls started per minute across every worker (None: no limit). Both may be replaced
    per deployment in ``WARRANT_TOOL_LIMITS``."""
    self_approval_allowed: bool = False
    """Let whoever started a run confirm this tool's calls in it (off: a second principal
    must; every use traced as ``confirmation.self_approved``)."""
    approvals_required: int = 1
    """How many distinct people must approve a call that needs a confirmation (M of N)."""
    approvals_rule: Callable[[Mapping[str, Any]], int] | None = None
    """More approvals by the validated arguments (e.g. 2 when ``amount_cents > 100_000``);
    the larger of this and ``approvals_required`` counts."""
    egress: bool = False
    """A read that sends data out (a fetch whose URL or query the caller chooses): its
    ``resources`` are destinations, scoped like a write's targets, and a value that only
    untrusted content supplied needs a person's confirmation."""
    effect_key: str | None = None
    """The call's business effect, as a format string over the validated arguments (e.g.
    ``"refund:{order_id}"``): a second call with the same key after one that succeeded, whose
    effect is unknown or that is still in flight is refused ``DUPLICATE_EFFECT`` (a proposal
    with ``repeat_effect: true`` asks a person instead). Its fields must be input fields
    (checked when the registry is built). None: every call is an effect of its own."""
    effect_window_s: float = 0.0
    """Also across runs: an earlier call with the same key in any run within this many
    seconds counts. 0: within the run only."""

    def __post_init__(self) -> None:
        for on in self.errors.values():  # a typo in a declaration fails at import
            OnError(on)

    @property
    def masked_fields(self) -> frozenset[str]:
        """Arguments masked in traces, handoff bundles and webhooks: sensitive or secret."""
        return self.sensitive_fields | self.secret_fields

    @property
    def queue(self) -> str:
        return f"tool.{self.name}"

    def outcome_message(self, message: str, arguments: Mapping[str, Any]) -> str:
        """A tool's own words on a refusal or failure (``ToolRejected("…")``), as the ledger,
        the planner and the trace get them: every value of a secret argument replaced by
        ``<secret>`` and of a sensitive one by ``<sensitive>``, control characters (NUL too)
        made U+FFFD, and at most :data:`MAX_OUTCOME_MESSAGE_CHARS` characters."""
        marks = {v: "<sensitive>" for n in self.sensitive_fields for v in _leaves(arguments.get(n))}
        marks |= {v: "<secret>" for n in self.secret_fields for v in _leaves(arguments.get(n))}
        limit, longest = MAX_OUTCOME_MESSAGE_CHARS, max(map(len, marks), default=0)
        pattern = re.compile("|".join(map(re.escape, sorted(marks, key=len, reverse=True))))
        # Replace in a head of the message only (a tool may say megabytes), long enough that a
        # value cut in half at its end lies past the final cut.
        size = limit + longest + 1
        while True:
            head = message[:size]
            text = pattern.sub(lambda m: marks[m.group()], head) if marks else head
            if len(head) == len(message) or len(text) > limit + longest:
                break
            size *= 2
        text = "".join(
            "\ufffd" if unicodedata.category(c) in ("Cc", "Cs") and c not in "\n\t" else c
            for c in text[: limit + 1]
        )
        if len(text) > limit or len(head) < len(message):
            return f"{text[:limit]}…[cut; {len(message)} characters in all]"
        return text

    def estimated_impact(self, arguments: Mapping[str, Any]) -> str | dict[str, Any]:
        """:attr:`impact` over the validated ``arguments`` (their JSON form): its text, or its
        JSON object, of at most :data:`MAX_IMPACT_CHARS`; :data:`IMPACT_NOT_DECLARED` without
        one; :data:`IMPACT_UNAVAILABLE` when it raises or answers anything else."""
        if self.impact is None:
            return IMPACT_NOT_DECLARED
        try:
            said = self.impact(self.parse_input(dict(arguments)))
            shown = said if isinstance(said, str) else json.loads(json.dumps(dict(said)))
        except Exception:  # the request goes to the person all the same, saying so
            return IMPACT_UNAVAILABLE
        if isinstance(shown, str):
            return shown[:MAX_IMPACT_CHARS] if shown.strip() else IMPACT_UNAVAILABLE
        if len(json.dumps(shown)) > MAX_IMPACT_CHARS:
            return IMPACT_UNAVAILABLE
        return dict(shown)

    def effect_key_of(self, arguments: Mapping[str, Any]) -> str | None:
        """The call's business effect key: :attr:`effect_key` formatted over the validated
        arguments (their JSON form); None without a declared key, or when a field's value
        cannot be formatted. Longer than :data:`MAX_EFFECT_KEY_CHARS`: its SHA-256."""
        if self.effect_key is None:
            return None
        try:
            key = string.Formatter().vformat(self.effect_key, (), dict(arguments))
        except (KeyError, IndexError, AttributeError, TypeError, ValueError):
            return None
        if len(key) > MAX_EFFECT_KEY_CHARS:
            return "sha256:" + sha256_hex(key.encode())
        return key

    def parse_input(self, arguments: dict[str, Any]) -> InputT:
        """Validate JSON-shaped arguments (a proposal's, or the stored normalized ones).

        Strict, in pydantic's JSON mode: each type is read from its JSON form (an ISO 8601
        string for ``datetime``/``date``, a string for ``UUID`` and ``Decimal``, the value of an
        ``Enum``), and coercions such as ``"1"`` for an integer are still refused. The standard
        ``json`` module writes the arguments, so integers of any size stay exact.
        Raises :class:`pydantic.ValidationError` (or ``TypeError``/``ValueError`` for
        arguments that are not JSON data)."""
        return self.input_model.model_validate_json(json.dumps(arguments))

    @property
    def verified(self) -> bool:
        """Is a success of this tool more than its own word? A read, or a write with a
        ``verify`` (its postcondition read back) or a ``reconcile`` (its effect looked up by
        the token)."""
        return self.side_effect is SideEffect.READ or bool(self.verify or self.reconcile)

    @property
    def verification(self) -> str:
        """How a success is checked: ``read`` (nothing to check), ``verify``, ``reconcile``
        or ``unverified`` (the tool's word only)."""
        if self.side_effect is SideEffect.READ:
            return "read"
        if self.verify is not None:
            return "verify"
        return "reconcile" if self.reconcile is not None else "unverified"

    @property
    def warnings(self) -> list[dict[str, str]]:
        """What the contract leaves to chance (``warrant tools list`` and ``tools check``
        show these; none stops a deployment)."""
        if self.verified:
            return []
        return [
            {
                "code": "WRITE_UNVERIFIED",
                "message": f"{self.name} {self.version} writes with neither verify nor "
                f"reconcile ({self.unverified_reason or 'no reason given'}): its success is "
                "its own word, and every unknown outcome goes to a person",
            }
        ]

    def describe(self) -> dict[str, Any]:
        """The contract in the shape MCP uses for tool listings, plus warrant's policy fields."""
        return {
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "inputSchema": self.input_model.model_json_schema(),
            "outputSchema": self.output_model.model_json_schema(),
            "requiredCapabilities": list(self.capabilities),
            "sideEffect": self.side_effect.value,
            "confirmation": self.confirmation.value,
            "timeoutSeconds": self.timeout_s,
            "sensitiveFields": sorted(self.sensitive_fields),
            "secretFields": sorted(self.secret_fields),
            "maxAttempts": self.max_attempts,
            "reconcilable": self.reconcile is not None,
            "compensable": self.compensate is not None,
            "verifiesPostcondition": self.verify is not None,
            "verification": self.verification,
            **({"unverifiedReason": self.unverified_reason} if not self.verified else {}),
            "maxOutputBytes": self.max_output_bytes,
            "longRunning": self.job is not None,
            "batch": {"items": self.batch.items, "key": self.batch.key} if self.batch else None,
            "queue": self.queue,
            "resources": {name: kind.value for name, kind in sorted(self.resources.items())},
            "egress": self.egress,
            "isolation": self.isolation.value,
            **({"attribution": self.attribution.describe()} if self.attribution else {}),
            **(
                {"listing": {name: kind.value for name, kind in sorted(self.listing.items())}}
                if self.listing
                else {}
            ),
            **({"private": sorted(self.private)} if self.private else {}),
            **(
                {"errors": {c: OnError(o).value for c, o in self.errors.items()}}
                if self.errors
                else {}
            ),
            **(
                {"effectKey": self.effect_key, "effectWindowSeconds": self.effect_window_s}
                if self.effect_key is not None
                else {}
            ),
        }


def verification_problem(tool: Tool[Any, Any]) -> str | None:
    """Why the registry refuses ``tool`` for how its writes are checked (None: it does not).
    A write declares ``verify`` (its postcondition read back), ``reconcile`` (its effect
    looked up by the token), or ``unverified=True`` with an ``unverified_reason``; business
    state advances only after a postcondition holds, so a write with none of them is refused
    (``WRITE_UNVERIFIED``). Also refused: ``unverified`` on a tool that does check, or
    without a reason."""
    if tool.unverified and (tool.verify is not None or tool.reconcile is not None):
        return "declares unverified=True and also verify or reconcile: say one"
    if tool.unverified and not tool.unverified_reason.strip():
        return "declares unverified=True without an unverified_reason"
    if tool.side_effect is SideEffect.READ or tool.verified or tool.unverified:
        return None
    return (
        f"writes ({tool.side_effect.value}) with no postcondition: declare verify (read the "
        "effect back), reconcile (look it up by the idempotency token), or unverified=True "
        "with an unverified_reason"
    )


def effect_key_problem(tool: Tool[Any, Any]) -> str | None:
    """Why the tool's :attr:`Tool.effect_key` cannot work (a field that is not an input
    field, a positional field, a bad format, a negative window); None when it can."""
    if tool.effect_window_s < 0:
        return f"effect_window_s is {tool.effect_window_s}: a window is 0 or more seconds"
    if tool.effect_key is None:
        return None
    if not tool.effect_key:
        return "effect_key is empty"
    try:
        parsed = list(string.Formatter().parse(tool.effect_key))
    except ValueError as exc:
        return f"effect_key {tool.effect_key!r} is no format string: {exc}"
    fields = [name for _, name, _, _ in parsed if name is not None]
    if not fields:
        return f"effect_key {tool.effect_key!r} names no argument: every call would be one effect"
    known = tool.input_model.model_fields
    for name in fields:
        root = re.split(r"[.\[]", name, maxsplit=1)[0]
        if not root or root.isdigit():
            return f"effect_key {tool.effect_key!r}: a field is named, not positional ({{{name}}})"
        if root not in known:
            return (
                f"effect_key {tool.effect_key!r} names {root!r}, which is no field of "
                f"{tool.input_model.__name__} ({', '.join(sorted(known)) or 'none'})"
            )
    return None


def _leaves(value: Any) -> list[str]:
    """The texts of an argument's value that a message could repeat (strings, numbers)."""
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int | float):
        return [str(value)]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _leaves(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _leaves(v)]
    return [str(value)]
