"""The README's quick start, run verbatim in bash from the repository's root, as a new user
would: no broker or database configured (the embedded servers start), its own data folder."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import httpx
import pytest
from warrant_demo import scenarios as sc

from tests.conftest import wait_for

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).parents[2]
MARKER = "<!-- quick start: tests/integration/test_quickstart.py runs this block verbatim -->"


def quick_start() -> str:
    readme = (ROOT / "README.md").read_text()
    after = readme[readme.index(MARKER) + len(MARKER) :]
    found = re.match(r"\s*```bash\n(.*?)```", after, re.S)
    assert found, "the quick start block must follow its marker"
    return found.group(1)


PYTHON_MARKER = (
    "<!-- python example: tests/integration/test_quickstart.py runs this block in a fresh "
    "interpreter -->"
)


def python_example() -> str:
    readme = (ROOT / "README.md").read_text()
    after = readme[readme.index(PYTHON_MARKER) + len(PYTHON_MARKER) :]
    found = re.match(r"\s*```python\n(.*?)```", after, re.S)
    assert found, "the Python example must follow its marker"
    return found.group(1)


def test_the_readme_quick_start_works_as_written(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    script = quick_start()
    assert "warrant up --detach" in script and "warrant down" in script
    # The Python example runs against the same stack, in a fresh interpreter (`python -`: it
    # imports nothing of warrant's first), just before the stack stops.
    example = f"python - <<'PYTHON_EXAMPLE'\n{python_example()}PYTHON_EXAMPLE\n"
    head, down, tail = script.rpartition("warrant down")
    script = head + example + down + tail
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARRANT_", "VIRTUAL_ENV"))}
    env["WARRANT_DATA_DIR"] = str(tmp_path / "data")
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(ROOT / ".venv"))
    )
    try:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
        )
    finally:
        if (tmp_path / "data" / "up.pid").exists():  # a failed step must not leave a stack
            subprocess.run([str(ROOT / ".venv" / "bin" / "warrant"), "down"], env=env, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "injection-refused" in out and "as expected" in out  # the demo's table
    assert "FINAL_ANSWER_VALIDATED" in out and "completed" in out  # the run, then the list
    assert "stopped" in out
    example_line = re.search(r"^([0-9a-f-]{36}) completed FINAL_ANSWER_VALIDATED (.+)$", out, re.M)
    assert example_line, out[-3000:]  # the Python example's run, recorded and completed
    assert not (tmp_path / "data" / "up.pid").exists()


def test_a_restarted_stack_strands_neither_serve_nor_extra_workers(tmp_path):
    """`warrant up --detach; warrant serve &; warrant worker ... &; warrant down; warrant up
    --detach; curl -X POST .../v1/runs` answered 503 BROKER_UNAVAILABLE: each `up` put Redis
    on a new socket, and what was started outside `up` kept the old one for ever."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WARRANT_", "VIRTUAL_ENV"))}
    env["WARRANT_DATA_DIR"] = str(tmp_path / "data")  # the built-in tools only
    warrant = str(ROOT / ".venv" / "bin" / "warrant")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [warrant, *args], env=env, capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
        return done

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    extra: list[subprocess.Popen[bytes]] = []
    try:
        run("up", "--detach", "--json")
        token = json.loads(run("token", "create", "ci", "--role", "producer", "--json").stdout)
        for command in (["serve", "--port", str(port)], ["worker", "--role", "tool", "--tools",
                        "search_public", "--hostname", "extra@%h"]):  # fmt: skip
            with (tmp_path / f"{command[0]}.log").open("wb") as log:
                extra.append(subprocess.Popen([warrant, *command], env=env, stdout=log, stderr=log))
        wait_for(lambda: _healthy(base, tmp_path / "serve.log"), timeout=60, what="serve answers")
        run("down")
        run("up", "--detach", "--json")
        wait_for(lambda: _healthy(base, tmp_path / "serve.log"), timeout=60, what="serve again")
        spec = sc.spec([sc.search("p1"), sc.final("Three.", "tool-1")])
        auth = {"Authorization": f"Bearer {token['token']}"}
        started = httpx.post(f"{base}/v1/runs", json=spec, headers=auth, timeout=30)
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        wait_for(
            lambda: _status(base, run_id, auth) == "completed", timeout=90, what="run completed"
        )
        wait_for(lambda: _answers(env, "extra@"), timeout=60, what="the extra worker reconnected")
    finally:
        for proc in extra:
            proc.terminate()
            proc.wait(30)
        subprocess.run([warrant, "down"], env=env, capture_output=True, timeout=120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(base: str, log: Path) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        said = log.read_text(errors="replace") if log.exists() else ""
        assert "Traceback" not in said, said[-3000:]  # serve could not start: say why
        return False


def _status(base: str, run_id: str, auth: dict[str, str]) -> str | None:
    reply = httpx.get(f"{base}/v1/runs/{run_id}", headers=auth, timeout=10)
    return reply.json().get("status") if reply.status_code == 200 else None


def _answers(env: dict[str, str], prefix: str) -> bool:
    """Whether a worker whose node starts with ``prefix`` answers a ping over the broker the
    running ``up`` recorded (its services file)."""
    services = json.loads((Path(env["WARRANT_DATA_DIR"]) / "services.json").read_text())
    ping = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "celery"), "-b", services["broker_url"], "inspect", "ping",
         "--json", "--timeout", "3"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return prefix in ping.stdout
