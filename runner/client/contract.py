"""The one client contract: what :class:`~warrant.runner.client.api.Client` (over the ledger)
and :class:`~warrant.runner.client.remote.RemoteClient` (over the ``/v1`` HTTP API of
``warrant serve``) both offer, with the same signatures and the same records.

The CLI (``make_client()``), the MCP gateway and the framework adapters are typed against
:class:`RunnerClient` and never ask which client they hold. Over HTTP, who acted is always the
token's identity, recorded by the server: ``by``/``granted_by``/``approved_by`` are accepted
and ignored there, as are ``origin`` (the server records the address it saw),
``operator_token`` (the token's role is checked instead) and ``publish``/``started_by``.

Imports nothing at run time beyond :mod:`typing`: the records are named for the type checker
only, so typing the CLI against the contract costs its start-up nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from warrant.runner.client.approvals import Corrected, Origin
    from warrant.runner.client.inbox import PendingConfirmation, Revealed
    from warrant.runner.client.run_info import RunInfo
    from warrant.runner.external import Decision
    from warrant.runner.spec import RunSpec, Usage

__all__ = ["DEFAULT_INBOX_LIMIT", "RunnerClient"]

DEFAULT_INBOX_LIMIT = 100
"""How many waiting runs the inbox shows at most (the longest waiting first)."""


class RunnerClient(Protocol):
    """A client of warrant: start, read, wait for and steer runs; decide on their proposals;
    propose for a run whose planner is the caller (planner kind ``external``)."""

    # --- runs ----------------------------------------------------------------------------

    def start_run(
        self,
        spec: RunSpec | dict[str, Any] | str,
        *,
        publish: bool = True,
        idempotency_key: str | None = None,
        started_by: str | None = None,
    ) -> str:
        """Validate, record and enqueue a run; its id (``SpecError`` if the spec is bad)."""
        ...

    def fork_run(
        self,
        run_id: str,
        *,
        at: int,
        spec_patch: dict[str, Any] | None = None,
        publish: bool = True,
        started_by: str | None = None,
    ) -> str:
        """Start a new live run from ``run_id``'s record before step ``at`` (its spec merged
        with ``spec_patch``, a JSON merge patch); the fork's id."""
        ...

    def get_run(self, run_id: str) -> RunInfo: ...

    def list_runs(self, *, limit: int = 50, status: str | None = None) -> list[RunInfo]:
        """The newest runs first."""
        ...

    def ids_like(self, key: str, *, kind: str = "run", min_length: int = 6) -> list[str]:
        """``[key]`` if it is a whole id, else the ids (two at most) it is a prefix of."""
        ...

    def trace(self, run_id: str) -> list[dict[str, Any]]:
        """The run's events in order (``seq``, ``event``, ``step``, ``proposal_id``,
        ``details``, ``at``)."""
        ...

    def observations(self, run_id: str) -> list[dict[str, Any]]:
        """The run's observations in order (``observation_id``, ``kind``, ``source``,
        ``step``, ``content``, ``observation_version``)."""
        ...

    def working_memory(self, run_id: str) -> dict[str, Any]:
        """The planner's view for the run's next step."""
        ...

    def budgets(self, run_id: str) -> list[dict[str, Any]]:
        """Each budget's ``name``, ``used`` and ``limit``."""
        ...

    def wait(
        self, run_id: str, *, timeout: float = 60.0, until: frozenset[str] | set[str] | None = None
    ) -> RunInfo:
        """The run once it settles (or reaches one of ``until``), or after ``timeout``."""
        ...

    def wait_change(self, run_id: str, *, version: int | None, timeout: float) -> RunInfo:
        """The run once its version differs from ``version`` or it is settled, else after
        ``timeout`` as it was (one progress line per change)."""
        ...

    def cancel(self, run_id: str, *, by: str, reason: str = "", revoke: bool = True) -> RunInfo: ...

    def policy_tools(self, *, seen_within_s: float) -> frozenset[str] | None:
        """``name@version`` of every tool the policy workers seen within ``seen_within_s``
        registered; ``None`` when that cannot be known (none registered, or not readable
        by this client)."""
        ...

    # --- people's actions ----------------------------------------------------------------

    def confirm(
        self,
        run_id: str,
        *,
        proposal_hash: str,
        by: str,
        origin: Origin | None = None,
        precondition: str | None = None,
    ) -> int:
        """Approve exactly the pending proposal; the run's version after it."""
        ...

    def decline(
        self, run_id: str, *, proposal_hash: str, by: str, origin: Origin | None = None
    ) -> int:
        """Refuse the pending proposal; the run's version after it."""
        ...

    def decide(
        self,
        run_id: str,
        *,
        approve: Sequence[str] = (),
        decline: Sequence[str] = (),
        by: str,
        origin: Origin | None = None,
        seen: Mapping[str, str] | None = None,
    ) -> int:
        """Approve and decline, by their hashes, the pending proposal or a waiting parallel
        step's calls, in one action; the run's version after it."""
        ...

    def correct(
        self,
        run_id: str,
        *,
        proposal_hash: str,
        changes: Mapping[str, Any],
        by: str,
        reason: str = "",
        origin: Origin | None = None,
    ) -> Corrected:
        """Edit the pending proposal: a new proposal (its arguments with ``changes``), gated
        again; the original declined."""
        ...

    def answer(self, run_id: str, *, text: str, by: str) -> RunInfo: ...

    def add_grant(
        self,
        run_id: str,
        *,
        capability: str,
        resource_scope: str = "*",
        expires_at_step: int | None = None,
        max_uses: int | None = None,
        granted_by: str,
        operator_token: str | None = None,
        destinations_from: list[str] | None = None,
        expires_at: datetime | None = None,
        expires_in_s: float | None = None,
        widen: bool = False,
        constraints: dict[str, Any] | None = None,
    ) -> int:
        """Grant a capability to a running run; the grant's id."""
        ...

    def pre_approve(
        self,
        run_id: str,
        *,
        tool: str,
        tool_version: str,
        arguments: dict[str, Any],
        approved_by: str,
        operator_token: str | None = None,
    ) -> int:
        """Approve one exact proposal ahead of time; the pre-approval's id."""
        ...

    def reveal(self, run_id: str, *, by: str = "", origin: Origin | None = None) -> Revealed | None:
        """The pending proposal's sensitive values (traced ``sensitive.revealed``);
        ``None`` when the run waits for no confirmation."""
        ...

    def pending_confirmations(
        self, *, reveal_sensitive: bool, limit: int = DEFAULT_INBOX_LIMIT
    ) -> list[PendingConfirmation]:
        """The runs waiting for a confirmation, longest waiting first."""
        ...

    # --- handoffs ------------------------------------------------------------------------

    def handoffs(self, *, open_only: bool = True, limit: int = 50) -> list[dict[str, Any]]: ...

    def handoff(self, handoff_id: str) -> dict[str, Any]:
        """One handoff by its id (or the newest of a run, given the run id)."""
        ...

    def resolve_handoff(
        self, handoff_id: str, *, outcome: str, by: str, reason: str
    ) -> RunInfo: ...

    # --- a caller's own proposals --------------------------------------------------------

    def propose(
        self,
        run_id: str,
        proposal: dict[str, Any],
        *,
        by: str = "",
        step: int | None = None,
        usage: Usage | dict[str, Any] | None = None,
        wait_s: float = 0.0,
        call_id: str | None = None,
    ) -> Decision:
        """Record ``proposal`` as the run's next step; its decision (after ``wait_s`` at most).
        The same ``call_id`` again returns the same decision, never a second step."""
        ...

    def decision(
        self,
        run_id: str,
        step: int,
        *,
        branch: int = 0,
        wait_s: float = 0.0,
        seen: str = "pending",
    ) -> Decision:
        """What became of the proposal of ``step`` (once its state is not ``seen``);
        ``branch``: one call of a parallel step."""
        ...

    # --- long-term memory ----------------------------------------------------------------

    def memory_records(
        self, subject: str, *, include_inactive: bool = False
    ) -> list[dict[str, Any]]:
        """A subject's memory records (active only unless ``include_inactive``)."""
        ...

    def revoke_memory(self, record_id: int, *, by: str) -> dict[str, Any]:
        """Revoke a record: it is never returned to a planner again."""
        ...

    # --- the tools' kill switch (an operator's) -------------------------------------------

    def disable_tool(self, name: str, *, by: str, reason: str = "") -> dict[str, Any]:
        """Refuse every call of the tool ``name`` from the gate's next decision
        (``TOOL_DISABLED``) and every command issued for it, not started yet, at its next
        claim; the change as recorded (``tool``, ``disabled``, ``changed``, ``event``,
        ``by``, ``at``, ``reason``)."""
        ...

    def enable_tool(self, name: str, *, by: str) -> dict[str, Any]:
        """Let the tool's calls through the gate again (the change as recorded)."""
        ...

    # --- the deployment policy's approval (``WARRANT_POLICY_APPROVAL``) -------------------

    def policy(self) -> dict[str, Any]:
        """The deployment policy (the server's, over HTTP): ``policy_hash``, ``required``,
        ``approved``, ``approval``, ``previous``, ``diff`` and ``form``."""
        ...

    def approve_policy(
        self, policy_hash: str, *, by: str, note: str | None = None
    ) -> dict[str, Any]:
        """Approve the deployment policy ``policy_hash`` (``POLICY_HASH_MISMATCH`` unless it
        is the deployment's own): the approval, ``changed``, ``previous`` and ``diff``."""
        ...

    # --- replay and policy review (:mod:`warrant.runner.replay`) -----------------------------

    def replay_run(
        self, run_id: str, *, candidate: dict[str, Any] | None = None, by: str | None = None
    ) -> dict[str, Any]:
        """Decide the run's recorded proposals again under the policy here (or
        ``candidate``'s), tools dry; the replay is recorded (``replay_run_id``) and each step
        carries its recorded and today's decision and its ``change``."""
        ...

    def policy_diff(
        self, *, since_s: float, candidate: dict[str, Any] | None = None, limit: int = 1000
    ) -> dict[str, Any]:
        """The recent runs replayed: the decisions that would change, by tool and code."""
        ...

    def close(self) -> None:
        """Release what the client holds (its HTTP connections)."""
        ...
