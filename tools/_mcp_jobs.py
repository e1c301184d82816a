"""MCP tools that answer with a job id (``job`` in their declaration): the call's result is an
:class:`~warrant.tools._jobs.Accepted`, and the declared status and cancel tools of the same
server follow the job (:mod:`warrant.tools._jobs`; the reconciler calls them, never a planner)."""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio

from warrant.runner.errors import ToolUnknown
from warrant.tools._contract import ToolContext
from warrant.tools._jobs import Accepted, JobHooks, JobState, JobStatus
from warrant.tools._mcp_client import Progress, bounded, call_tool
from warrant.tools._mcp_config import ServerDeclaration, ToolDeclaration
from warrant.tools._mcp_sessions import ServerSession

__all__ = ["accepted_of", "job_hooks"]


def accepted_of(
    declaration: ToolDeclaration, structured: dict[str, Any] | None, where: str
) -> Accepted:
    """The acceptance a job tool's result stands for; a result without the job id is unknown
    (the server may have started a job nobody can follow)."""
    assert declaration.job is not None
    job_id = (structured or {}).get(declaration.job.id_field)
    if not isinstance(job_id, str | int) or isinstance(job_id, bool) or str(job_id) == "":
        raise ToolUnknown(
            f"{where}: the result has no job id ({declaration.job.id_field})",
            code="MCP_JOB_ID_MISSING",
        )
    return Accepted(str(job_id), details=structured)


def _call(
    server: ServerDeclaration,
    name: str,
    arguments: dict[str, Any],
    ctx: ToolContext,
    limit_s: float,
) -> Any:
    progress = Progress()
    if isinstance(ctx.deps, ServerSession):
        return ctx.deps.call(name, arguments, progress, limit_s)
    return anyio.run(bounded, limit_s, partial(call_tool, server, name, arguments, progress))


def job_hooks(server: ServerDeclaration, declaration: ToolDeclaration) -> JobHooks:
    job = declaration.job
    assert job is not None
    limit = declaration.timeout_s

    def poll(job_id: str, ctx: ToolContext) -> JobStatus:
        result = _call(server, job.status_tool, {job.argument: job_id}, ctx, limit)
        structured = result.structuredContent or {}
        if result.isError:
            return JobStatus(JobState.RUNNING)  # the status query failed: asked again
        state = str(structured.get(job.state_field, ""))
        if state in job.succeeded:
            return JobStatus(JobState.SUCCEEDED, output={"structured": structured})
        if state in job.failed:
            return JobStatus(JobState.FAILED, code=f"JOB_{state.upper()}"[:64], message=state)
        return JobStatus(JobState.RUNNING)

    def cancel(job_id: str, ctx: ToolContext) -> None:
        assert job.cancel_tool is not None
        _call(server, job.cancel_tool, {job.argument: job_id}, ctx, limit)

    return JobHooks(
        poll=poll,
        cancel=cancel if job.cancel_tool else None,
        interval_s=job.interval_s,
        max_polls=job.max_polls,
        timeout_s=job.timeout_s,
    )
