"""A run spec's ``success``: what done means, checked by the program on the ledger's facts
when the planner gives a final answer (:mod:`warrant.runner.success` checks it)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["ArtifactExists", "SuccessCondition", "SuccessSpec", "ToolSucceeded"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
