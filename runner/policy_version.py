"""Which policy decided: the *policy version* of a gate decision (issue 36 item 4).

A decision's policy version is a sha256 over the canonical JSON (RFC 8785) of three parts:

* ``contract``: the tool contract as the gate saw it (name, version, description, input
  schema, side effect, capabilities, confirmation policy, approvals, provenance policy, masks,
  resources, ...): :func:`contract_form`. ``None`` when the registry has no such tool.
* ``grants``: the run's grants of the tool's capabilities (all of the run's grants when there
  is no tool), each as capability, scope, step expiry, use limit and task sources; the grant
  ids and how often a grant was used are no policy and are left out.
* ``settings``: the deployment settings that apply to the tool (``WARRANT_RELAX_CONFIRMATION``,
  ``WARRANT_APPROVALS_REQUIRED``) and the run spec's ``policy`` section.

Anything else (the arguments, the history, the clock, the budgets) leaves it unchanged. The
contract's hash is computed once per tool object (the hot path hashes only the small rest).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from warrant.runner.canonical import canonical_json, sha256_hex
from warrant.runner.settings import Approvals
from warrant.runner.views import GrantView
from warrant.tools._contract import Tool
from warrant.tools._registry import Registry

__all__ = [
    "DeploymentPolicy",
    "PolicyVersion",
    "approval_hash",
    "contract_form",
    "contract_hash",
    "deployment_policy",
    "form_diff",
    "grants_form",
    "policy_version",
    "settings_form",
]


@dataclass(frozen=True, kw_only=True)
class PolicyVersion:
    """The version (a sha256) and the hashes of its three parts."""

    version: str
    contract: str | None
    grants: str
    settings: str

    def details(self) -> dict[str, Any]:
        """As the ``policy.versioned`` trace event records it."""
        return {
            "policy_version": self.version,
            "contract_hash": self.contract,
            "grants_hash": self.grants,
            "settings_hash": self.settings,
        }


def contract_form(tool: Tool[Any, Any]) -> dict[str, Any]:
    """Everything of a tool's contract the gate reads, as JSON (callables by presence)."""
    return {
        **tool.describe(),
        "outputSource": tool.output_source.value,
        "untrusted": {
            "destinations": tool.untrusted.destinations.value,
            "content": tool.untrusted.content.value,
        },
        "selfApprovalAllowed": tool.self_approval_allowed,
        "approvalsRequired": tool.approvals_required,
        "approvalsRule": tool.approvals_rule is not None,
        "semanticValidation": tool.validate is not None,
        "maxInputBytes": tool.max_input_bytes,
    }


#: Contract hashes by tool object (the tool is kept, so its id is never reused meanwhile).
_CONTRACTS: dict[int, tuple[Tool[Any, Any], str]] = {}


def contract_hash(tool: Tool[Any, Any]) -> str:
    """sha256 of :func:`contract_form`, computed once per tool object."""
    cached = _CONTRACTS.get(id(tool))
    if cached is not None and cached[0] is tool:
        return cached[1]
    digest = sha256_hex(canonical_json(contract_form(tool)))
    _CONTRACTS[id(tool)] = (tool, digest)
    return digest


def grants_form(grants: Iterable[GrantView], capabilities: Iterable[str] | None) -> list[Any]:
    """The grants in effect (of ``capabilities``; all when ``None``), in a stable order."""
    wanted = None if capabilities is None else frozenset(capabilities)
    return _forms(tuple(_row(g) for g in grants), wanted)


_Row = tuple[str, str, int | None, int | None, tuple[str, ...], float | None, str | None]


def _row(g: GrantView) -> _Row:
    """What of a grant is policy, hashable."""
    return (
        g.capability,
        g.resource_scope,
        g.expires_at_step,
        g.max_uses,
        tuple(sorted(g.destinations_from)),
        g.expires_at,
        None if g.constraints is None else canonical_json(g.constraints.model_dump()).decode(),
    )


def _forms(rows: tuple[_Row, ...], wanted: frozenset[str] | None) -> list[Any]:
    forms = [
        [capability, scope, step, uses, list(sources)]
        + ([expires_at] if expires_at is not None else [])  # a wall-clock end, if any
        + ([{"constraints": constraints}] if constraints is not None else [])
        for capability, scope, step, uses, sources, expires_at, constraints in rows
        if wanted is None or capability in wanted
    ]
    return sorted(forms, key=lambda form: canonical_json(form))


#: The hot path's hashes by their inputs: a run's grants and settings repeat at every step.
_HASHES = 4096


@functools.lru_cache(maxsize=_HASHES)
def _grants_hash(rows: tuple[_Row, ...], wanted: frozenset[str] | None) -> str:
    return sha256_hex(canonical_json(_forms(rows, wanted)))


def _settings_hash(relaxed: bool, floor: int | None, run_policy: Mapping[str, Any] | None) -> str:
    try:  # keyed by the spec's policy section as sorted JSON
        key = orjson.dumps(dict(run_policy or {}), option=orjson.OPT_SORT_KEYS)
    except TypeError:  # a value orjson cannot write (an integer past 64 bits): not cached
        return _settings_digest(relaxed, floor, run_policy)
    return _settings_cached(relaxed, floor, key)


@functools.lru_cache(maxsize=_HASHES)
def _settings_cached(relaxed: bool, floor: int | None, run_policy: bytes) -> str:
    return _settings_digest(relaxed, floor, orjson.loads(run_policy))


def _settings_digest(relaxed: bool, floor: int | None, run_policy: Mapping[str, Any] | None) -> str:
    form = settings_form(relaxed=relaxed, approvals_floor=floor, run_policy=run_policy)
    return sha256_hex(canonical_json(form))


@functools.lru_cache(maxsize=_HASHES)
def _version_hash(contract: str | None, granted: str, settings: str) -> str:
    return sha256_hex(
        canonical_json({"contract": contract, "grants": granted, "settings": settings})
    )


def settings_form(
    *, relaxed: bool, approvals_floor: int | None, run_policy: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The deployment settings that apply to the tool and the spec's ``policy`` section."""
    return {
        "relax_confirmation": relaxed,
        "approvals_required": approvals_floor,
        "run_policy": dict(run_policy or {}),
    }


def policy_version(
    *,
    tool: Tool[Any, Any] | None,
    grants: Iterable[GrantView],
    relaxed_tools: frozenset[str] = frozenset(),
    approvals_floor: Mapping[str, int] | None = None,
    run_policy: Mapping[str, Any] | None = None,
) -> PolicyVersion:
    """The policy version of a decision about ``tool`` (``None``: the registry has none)."""
    name = tool.name if tool is not None else None
    contract = contract_hash(tool) if tool is not None else None
    wanted = frozenset(tool.capabilities) if tool is not None else None
    granted = _grants_hash(tuple(_row(g) for g in grants), wanted)
    settings = _settings_hash(
        name in relaxed_tools, (approvals_floor or {}).get(name or ""), run_policy
    )
    version = _version_hash(contract, granted, settings)
    return PolicyVersion(version=version, contract=contract, grants=granted, settings=settings)


# -- The deployment's policy (``WARRANT_POLICY_APPROVAL``, G21): one hash over every tool
# contract of the registry and the deployment settings the gate reads. With the setting
# ``required`` a policy worker decides only under a hash an operator approved
# (``warrant policy approve``); under another it refuses every proposal ``POLICY_NOT_APPROVED``.

#: A contract's fields a policy form shows beside its hash, so a diff names what changed.
READABLE = ("confirmation", "side_effect", "capabilities")


@dataclass(frozen=True, kw_only=True)
class DeploymentPolicy:
    """The deployment's policy version (``hash``: sha256 of the canonical JSON of ``form``)."""

    hash: str
    form: dict[str, Any]


def _tool_form(tool: Tool[Any, Any]) -> dict[str, Any]:
    return {
        "contract": contract_hash(tool),
        "confirmation": tool.confirmation.value,
        "side_effect": tool.side_effect.value,
        "capabilities": sorted(tool.capabilities),
    }


def _deployment_settings(settings: Approvals) -> dict[str, Any]:
    """The settings the policy gate reads (``broker.policy.stage``: the gate's input and
    the decision's version): relaxed tools, the approvals floor, observed tools."""
    floor = settings.approvals_floor if settings.approvals_required else {}
    return {
        "relax_confirmation": sorted(settings.relaxed_tools),
        "approvals_required": dict(sorted(floor.items())),
        "observe_tools": sorted(settings.observed_tools),
    }


#: Deployment policies by registry object (kept, so its id is never reused meanwhile) and the
#: settings' form: a worker's registry and settings are fixed, so it is computed once.
_DEPLOYMENTS: dict[int, tuple[Registry, bytes, DeploymentPolicy]] = {}


def deployment_policy(registry: Registry, settings: Approvals) -> DeploymentPolicy:
    """The deployment's policy: ``form`` = ``contracts`` (``name@version`` → the contract's
    hash and its confirmation, side effect and capabilities) and ``settings``
    (:func:`_deployment_settings`); ``hash`` over its canonical JSON."""
    configured = _deployment_settings(settings)
    key = canonical_json(configured)
    cached = _DEPLOYMENTS.get(id(registry))
    if cached is not None and cached[0] is registry and cached[1] == key:
        return cached[2]
    contracts = {f"{t.name}@{t.version}": _tool_form(t) for t in registry}
    form = {"contracts": dict(sorted(contracts.items())), "settings": configured}
    policy = DeploymentPolicy(hash=sha256_hex(canonical_json(form)), form=form)
    _DEPLOYMENTS[id(registry)] = (registry, key, policy)
    return policy


def approval_hash(registry: Registry, settings: Approvals) -> str | None:
    """The deployment policy hash a policy worker checks the approval of: with
    ``WARRANT_POLICY_APPROVAL=required`` its :func:`deployment_policy`'s, else ``None``."""
    if settings.policy_approval != "required":
        return None
    return deployment_policy(registry, settings).hash


def form_diff(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> dict[str, Any]:
    """What changed from the policy form ``before`` (``None``: nothing approved yet) to
    ``after``: tools added and removed (``name@version``), tools whose contract changed (with
    the readable fields that changed, each ``[before, after]``; ``fields`` empty: another
    part of the contract), and settings changed (each ``[before, after]``)."""
    old = dict((before or {}).get("contracts") or {})
    new = dict(after.get("contracts") or {})
    changed = []
    for key in sorted(old.keys() & new.keys()):
        was, now = old[key] or {}, new[key] or {}
        if was.get("contract") == now.get("contract"):
            continue
        fields = {f: [was.get(f), now.get(f)] for f in READABLE if was.get(f) != now.get(f)}
        changed.append({"tool": key, "fields": fields})
    was_set = dict((before or {}).get("settings") or {})
    now_set = dict(after.get("settings") or {})
    settings = {
        name: [was_set.get(name), now_set.get(name)]
        for name in sorted(was_set.keys() | now_set.keys())
        if was_set.get(name) != now_set.get(name)
    }
    return {
        "tools_added": sorted(new.keys() - old.keys()),
        "tools_removed": sorted(old.keys() - new.keys()),
        "tools_changed": changed,
        "settings_changed": settings,
    }
