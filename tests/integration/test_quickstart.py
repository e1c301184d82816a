"""The README's quick start, run verbatim in bash from the repository's root, as a new user
would: no broker or database configured (the embedded servers start), its own data folder."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

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
