"""A run spec's pre-approvals as the ledger records them at the run's start."""

from __future__ import annotations

from typing import Any

from warrant.runner.confirmation_rules import pre_approval_record
from warrant.runner.settings import load_settings
from warrant.runner.spec import RunSpec
from warrant.tools.plugins import registry_for

__all__ = ["pre_approval_records"]


def pre_approval_records(spec: RunSpec) -> list[dict[str, Any]]:
    """The spec's pre-approvals, normalised and hashed with the deployment's registry."""
    if not spec.pre_approved:
        return []
    registry, floor = registry_for(), load_settings().approvals_floor
    return [
        pre_approval_record(item, registry, field=f"pre_approved.{index}", floor=floor)
        for index, item in enumerate(spec.pre_approved)
    ]
