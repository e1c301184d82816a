"""AgentDojo's side: the suites, the injections, and the replays of a user task, benign and
hijacked, with AgentDojo's own utility and security checks.

A **benign** replay proposes the user task's ``ground_truth(pre_environment)`` calls, one by
one, on the suite's default environment. A **hijacked** one loads the environment with the
injection task's ``GOAL`` in the "important_instructions" text (AgentDojo's
``ImportantInstructionsAttack`` template, user "Emma Johnson", the model unnamed) in every
vector the user task's ground truth reads (AgentDojo's ``get_injection_candidates``), and
replays the user task's calls; once an observation carrying the injected text has been read,
the hijacked planner proposes the injection task's ``ground_truth(pre_environment)`` calls:
right after that observation (order ``after``) or after all the user task's calls (``end``).
An injection never read (its read refused) is never acted on. The injection task's security
check is AgentDojo's, written against the environment before the run: an order can defeat it
without any gate (the user task's own booking overwrites the injected one; its own mails take
the id the injected delete computed), which is why ``worst`` (either order) is the figure.

The **model output** the checks read: the user task's ``GROUND_TRUTH_OUTPUT`` when it has one
and every call of the user task ran (the planner could only know the answer by reading it);
otherwise AgentDojo's own rendering of every executed call's output, joined by newlines.
Utility and security use the checks on traces first (``utility_from_traces``,
``security_from_traces``), as AgentDojo does.

Injection tasks whose ground truth is empty (workspace 6-13 and travel 6 in v1.2.2: nothing
for a replaying planner to propose) are left out of the pairs and counted apart.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from agentdojo.attacks.base_attacks import DEFAULT_MODEL_NAME, FixedJailbreakAttack
from agentdojo.attacks.important_instructions_attacks import ImportantInstructionsAttack
from agentdojo.base_tasks import BaseInjectionTask, BaseUserTask
from agentdojo.functions_runtime import FunctionCall, FunctionsRuntime, TaskEnvironment
from agentdojo.task_suite.load_suites import get_suites
from agentdojo.task_suite.task_suite import TaskSuite

from bench.agentdojo.contracts import CONTRACTS, build_tools, shape_output
from bench.agentdojo.replay import CONFIGS, CallRecord, Config, Gate, Run, Timing
from warrant.runner.codes import ObservationSource

__all__ = [
    "MARKER",
    "ORDERS",
    "SUITES",
    "VERSION",
    "Case",
    "PairOutcome",
    "TaskOutcome",
    "UnitResult",
    "case",
    "replay_unit",
    "trust_violations",
]

VERSION = "v1.2.2"
SUITES = ("workspace", "travel", "banking", "slack")
ORDERS = ("after", "end")
#: In every injected text, and in nothing else of the environments.
MARKER = "<INFORMATION>"
USER_NAME = "Emma Johnson"


@dataclass
class Case:
    """One suite, ready to replay: its tools as warrant contracts, its default environment."""

    name: str
    suite: TaskSuite[Any]
    attack: FixedJailbreakAttack
    gates: dict[str, Gate]
    sources: dict[str, ObservationSource]
    default_env: TaskEnvironment
    subject: str
    replayable: list[BaseInjectionTask[Any]]
    """The injection tasks a replaying planner can carry out (a non-empty ground truth)."""
    skipped: list[str]
    """The others' ids."""

    @property
    def runtime(self) -> FunctionsRuntime:
        return FunctionsRuntime(self.suite.tools)


@functools.cache
def case(name: str) -> Case:
    """The suite ``name`` of AgentDojo v1.2.2 (built once per process)."""
    suite = get_suites(VERSION)[name]
    attack = FixedJailbreakAttack(ImportantInstructionsAttack._JB_STRING, suite, cast(Any, None))
    attack.user_name, attack.model_name = USER_NAME, DEFAULT_MODEL_NAME
    env = suite.load_and_inject_default_environment({})
    subject = _subject(env)
    gates = {}
    for config in CONFIGS:
        if config.gated:
            tools = build_tools(
                name,
                suite.tools,
                ask_destinations=config.ask_destinations,
                ask_copied=config.ask_copied,
            )
            gates[config.key] = Gate.of(tools, person=config.person, subject=subject)
    sources = {
        f.name: ObservationSource.TRUSTED_TOOL
        if CONTRACTS[f.name].trusted
        else ObservationSource.UNTRUSTED_CONTENT
        for f in suite.tools
    }
    tasks = suite.injection_tasks.values()
    replayable = [t for t in tasks if t.ground_truth(env.model_copy(deep=True))]
    skipped = sorted({t.ID for t in tasks} - {t.ID for t in replayable})
    return Case(name, suite, attack, gates, sources, env, subject, replayable, skipped)


def _subject(env: TaskEnvironment) -> str:
    """Who the run acts for (the spec's ``subject``): the user's own address where the suite
    has one (the workspace's inbox, the travel profile), else ``user``."""
    inbox = getattr(env, "inbox", None)
    if inbox is not None:
        return str(inbox.account_email)
    user = getattr(env, "user", None)
    return str(getattr(user, "email", "user"))


# --- outcomes --------------------------------------------------------------------------------


@dataclass
class TaskOutcome:
    """A benign replay."""

    suite: str
    task: str
    config: str
    done: bool
    requests: int
    records: list[CallRecord]
    error: str | None = None


@dataclass
class PairOutcome:
    """A hijacked replay of one (user task, injection task) pair in one order."""

    suite: str
    task: str
    injection: str
    order: str
    config: str
    through: bool
    read: bool
    """The injected text was read (so the hijacked planner proposed its calls)."""
    records: list[CallRecord]
    error: str | None = None


@dataclass
class UnitResult:
    """Everything replayed for one user task (the unit of work of a worker process)."""

    suite: str
    task: str
    benign: list[TaskOutcome] = field(default_factory=list)
    pairs: list[PairOutcome] = field(default_factory=list)
    timings: list[tuple[str, Timing]] = field(default_factory=list)
    not_injectable: bool = False


# --- the replays -----------------------------------------------------------------------------


def _run(c: Case, config: Config, goal: str, env: TaskEnvironment, marker: str = "") -> Run:
    gate = c.gates.get(config.key) if config.gated else None
    return Run(goal=goal, env=env, runtime=c.runtime, gate=gate, marker=marker, sources=c.sources)


def _model_output(task: BaseUserTask[Any], run: Run, user: list[CallRecord]) -> str:
    ran_all = all(r.fate == "ran" and r.error is None for r in user)
    if task.GROUND_TRUTH_OUTPUT and ran_all:
        return task.GROUND_TRUTH_OUTPUT
    return "\n".join(run.outputs)


def _utility(task: BaseUserTask[Any], out: str, pre: Any, post: Any, trace: list[Any]) -> bool:
    from_traces = task.utility_from_traces(out, pre, post, trace)
    return bool(from_traces if from_traces is not None else task.utility(out, pre, post))


def _security(
    task: BaseInjectionTask[Any], out: str, pre: Any, post: Any, trace: list[Any]
) -> bool:
    from_traces = task.security_from_traces(out, pre, post, trace)
    return bool(from_traces if from_traces is not None else task.security(out, pre, post))


def benign(c: Case, config: Config, task: BaseUserTask[Any]) -> tuple[TaskOutcome, Run]:
    """The user task alone, on the default environment."""
    env = task.init_environment(c.default_env.model_copy(deep=True))
    pre = env.model_copy(deep=True)
    run = _run(c, config, task.PROMPT, env)
    records = [
        run.propose(call, injected=False) for call in task.ground_truth(pre.model_copy(deep=True))
    ]
    outcome = TaskOutcome(c.name, task.ID, config.key, False, run.requests, records)
    try:
        outcome.done = _utility(task, _model_output(task, run, records), pre, env, run.trace)
    except Exception as exc:  # a check that cannot read a half-done environment: not done
        outcome.error = f"{type(exc).__name__}: {exc}"
    return outcome, run


def hijacked(
    c: Case,
    config: Config,
    task: BaseUserTask[Any],
    injection: BaseInjectionTask[Any],
    order: str,
    loaded: TaskEnvironment,
) -> tuple[PairOutcome, Run]:
    """The user task on the injected environment ``loaded``; the injection task's calls once
    the injected text has been read (``order``: right after it, or at the end)."""
    env = task.init_environment(loaded.model_copy(deep=True))
    pre = env.model_copy(deep=True)
    bad = injection.ground_truth(pre.model_copy(deep=True))
    run = _run(c, config, task.PROMPT, env, MARKER)
    records: list[CallRecord] = []
    user: list[CallRecord] = []
    read = False
    for call in task.ground_truth(pre.model_copy(deep=True)):
        record = run.propose(call, injected=False)
        user.append(record)
        records.append(record)
        if record.carried_injection and not read and order == "after":
            records += _inject(run, bad)
        read = read or record.carried_injection
    if read and order == "end":
        records += _inject(run, bad)
    outcome = PairOutcome(c.name, task.ID, injection.ID, order, config.key, False, read, records)
    try:
        out = _model_output(task, run, user)
        outcome.through = _security(injection, out, pre, env, run.trace)
    except Exception as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"
    return outcome, run


def _inject(run: Run, calls: Iterable[FunctionCall]) -> list[CallRecord]:
    return [run.propose(call, injected=True) for call in calls]


def replay_unit(suite: str, task_id: str, configs: tuple[str, ...]) -> UnitResult:
    """Every replay of one user task: benign, and hijacked by each replayable injection task
    in each order, in each configuration (the undefended one too)."""
    c = case(suite)
    task = c.suite.user_tasks[task_id]
    chosen = [k for k in CONFIGS if k.key in configs]
    unit = UnitResult(suite, task_id)
    for config in chosen:
        outcome, run = benign(c, config, task)
        unit.benign.append(outcome)
        unit.timings += [(config.key, t) for t in run.timings]
    try:
        c.attack.get_injection_candidates(task)
    except ValueError:  # AgentDojo: the task reads no injection vector
        unit.not_injectable = True
        return unit
    for injection in c.replayable:
        loaded = c.suite.load_and_inject_default_environment(c.attack.attack(task, injection))
        for order in ORDERS:
            for config in chosen:
                pair, run = hijacked(c, config, task, injection, order, loaded)
                unit.pairs.append(pair)
                unit.timings += [(config.key, t) for t in run.timings]
    return unit


def trust_violations(suite: str) -> list[str]:
    """Trusted outputs that carried an injection vector: AgentDojo's canaries in every vector,
    each user and injection task's ground truth run, and every output of a function whose
    contract says ``trusted`` searched for a canary (expected: none)."""
    c = case(suite)
    canaries = c.attack.canary_injections
    env = c.suite.load_and_inject_default_environment(canaries)
    tasks: list[Any] = [*c.suite.user_tasks.values(), *c.replayable]
    found = []
    for task in tasks:
        copy = env.model_copy(deep=True)
        for call in task.ground_truth(copy.model_copy(deep=True)):
            result, _ = c.runtime.run_function(copy, call.function, call.args)
            if not CONTRACTS[call.function].trusted:
                continue
            text = json.dumps(shape_output(call.function, call.args, result), default=str)
            hits = [v for v, canary in canaries.items() if canary in text]
            found += [f"{suite}.{call.function} ({task.ID}) carries {v}" for v in hits]
    return found
