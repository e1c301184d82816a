"""Where tools and planners come from: built-ins, entry points, WARRANT_TOOLS/PLANNERS, deps."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from warrant.runner.errors import PluginError, SpecError
from warrant.runner.settings import WarrantSettings
from warrant.tools._deployment import WorkerInfo, disagreements, lacking_role
from warrant.tools._plugins import BUILTIN_SOURCE, DEMO_PLUGIN, build_registry

BUILTIN = {"search_public@1", "write_artifact@1", "save_preference@1", "delegate@1"}
FIX = "tests.plugin_fixtures"


def registry(tools: str = "", *, entry_points: bool = False, **kw):
    return build_registry(WarrantSettings(tools=tools, plugin_entry_points=entry_points, **kw))


def test_without_plugins_only_the_builtin_tools_are_registered():
    reg = registry()
    assert set(reg.keys()) == BUILTIN
    assert {reg.source_of(t) for t in reg} == {BUILTIN_SOURCE}


def test_the_demo_is_a_plugin_that_is_off_unless_named():
    assert "issue_refund@1" not in registry().keys()  # noqa: SIM118
    reg = registry(DEMO_PLUGIN)
    assert {"issue_refund@1", "send_notice@1", "noop_read@1", "sleep_read@1"} <= set(reg.keys())
    assert reg.source_of(reg.get("issue_refund", "1")) == f"WARRANT_TOOLS {DEMO_PLUGIN}"


@pytest.mark.parametrize(
    ("ref", "keys"),
    [
        ("single_tool", {"echo@7"}),
        ("tool_list", {"echo@8", "echo@9"}),
        ("registry", {"echo@10"}),
        ("echo_v2", {"echo@1", "echo@2"}),
    ],
)
def test_a_reference_may_name_a_tool_a_list_a_registry_or_a_plugin(ref, keys):
    reg = registry(f"{FIX}:{ref}")
    assert set(reg.keys()) == BUILTIN | keys


def test_one_name_and_version_from_two_sources_is_an_error_naming_both():
    with pytest.raises(PluginError) as caught:
        registry(f"{FIX}:echo_v1,{FIX}:clash")
    assert caught.value.code == "TOOL_CONFLICT"
    assert f"WARRANT_TOOLS {FIX}:echo_v1" in str(caught.value)
    assert f"WARRANT_TOOLS {FIX}:clash" in str(caught.value)


@pytest.mark.parametrize("ref", [f"{FIX}:not_a_tool", f"{FIX}:missing", "no.such.module:x", "x"])
def test_a_bad_reference_is_a_load_error(ref):
    with pytest.raises(PluginError) as caught:
        registry(ref)
    assert caught.value.code == "PLUGIN_LOAD_FAILED"


def test_the_fingerprint_follows_the_contracts_not_the_order():
    a = registry(f"{FIX}:single_tool,{FIX}:tool_list")
    b = registry(f"{FIX}:tool_list,{FIX}:single_tool")
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint != registry(f"{FIX}:single_tool").fingerprint


def _worker(node: str, queues: tuple[str, ...], tools: set[str]) -> WorkerInfo:
    return WorkerInfo(node, ("tool",), queues, str(sorted(tools)), frozenset(tools))


def test_a_tool_no_worker_on_its_queue_has_names_the_role_that_lacks_it():
    old = _worker("tool@a", ("tool.echo",), {"echo@1"})
    new = _worker("tool@b", ("tool.echo",), {"echo@1", "echo@2"})
    assert lacking_role([old], "echo", "1") is None
    message = lacking_role([old], "echo", "2")
    assert message is not None and "role tool lacks echo@2" in message and "tool@a" in message
    assert lacking_role([old, new], "echo", "2") is None
    assert lacking_role([], "echo", "2") is None  # nobody consumes the queue yet: it waits
    assert disagreements([old, new]) == ["tool@a (tool) lacks echo@2"]
    assert disagreements([new, new]) == []


def test_planner_kinds_come_from_warrant_planners_and_are_checked_at_start():
    from warrant.runner.planners.kinds import check_planner, planner_kinds
    from warrant.runner.spec import parse_run_spec

    kinds = planner_kinds(refs=f"{FIX}:script_planner", entry_points=False)
    assert set(kinds) == {"script"}
    spec = {"goal": "g", "subject": "s", "planner": {"kind": "script", "settings": {"texts": []}}}
    with pytest.raises(SpecError) as caught:
        check_planner(parse_run_spec(spec), kinds)
    assert caught.value.errors[0]["field"] == "planner.settings.texts"
    spec["planner"]["settings"] = {"texts": ["a"]}
    check_planner(parse_run_spec(spec), kinds)
    with pytest.raises(PluginError):
        planner_kinds(refs=f"{FIX}:single_tool", entry_points=False)


def test_deps_are_built_once_per_plugin_and_closed_at_shutdown(tmp_path, monkeypatch):
    from warrant.broker.deps import ToolDepsSet

    closed = tmp_path / "closed"
    monkeypatch.setenv("WARRANT_TEST_DEPS_CLOSED_FILE", str(closed))
    settings = WarrantSettings(
        tools=f"{FIX}:echo_v2,{FIX}:single_tool",
        plugin_entry_points=False,
        tool_deps=f"{FIX}:deployment_deps",
    )
    reg = build_registry(settings)
    deps = ToolDepsSet(reg, engine=None, settings=settings)  # type: ignore[arg-type]
    v1, v2 = deps.for_tool(reg.get("echo", "1")), deps.for_tool(reg.get("echo", "2"))
    assert v1 is v2 and v1.label == "echo-deps"  # the plug-in's own factory, once
    assert deps.for_tool(reg.get("echo", "7")).label == "deployment-deps"  # no factory of its own
    assert deps.for_tool(reg.get("search_public", "1")) is deps.ledger  # built-ins: the ledger's
    deps.close()
    assert closed.read_text() == "closed\n"


@pytest.mark.slow
def test_the_wheel_has_exactly_one_top_level_package(tmp_path):
    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(root),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("warrant_runner-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"warrant"}
    for sub in (
        "runner/cli/_app.py",
        "tools/_plugins.py",
        "broker/app.py",
        "ledger/models.py",
        "ledger/migrations/env.py",
        "ledger/migrations/script.py.mako",
        "ledger/migrations/versions/0009_worker_registrations.py",
    ):
        assert f"warrant/{sub}" in names, sub
    # the demo is a distribution of its own (examples/demo_plugin), not in the product's wheel
    # (the `warrant demo` command is the product's: it loads the distribution when it runs)
    assert [n for n in names if "demo" in n and n != "warrant/runner/cli/demo.py"] == []


def test_warrant_demo_without_the_demo_distribution_says_so_before_starting_anything():
    """The demo is a distribution of its own (examples/demo_plugin): without it, `warrant
    demo` exits 2 with a stable code, before any service or worker is started."""
    code = (
        "import sys\n"
        "class Absent:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] == 'warrant_demo':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Absent())\n"
        "from warrant.runner.cli import main\n"
        "main(['demo', '--json'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert '"code": "DEMO_NOT_INSTALLED"' in done.stdout
