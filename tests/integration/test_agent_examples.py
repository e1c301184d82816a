""" "Bring your own agent": each example of docs/bring-your-own-agent.md, run as written (the
page's block is the example file) against real workers; the model is a fake OpenAI-compatible
server. The framework examples run as the docs say: over HTTP with a producer token, a person
(an approver, through the ledger as the CLI would) deciding their calls."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import facts
from tests.lost_replies import ApproverBot

pytestmark = [pytest.mark.services, pytest.mark.slow]

ROOT = Path(__file__).parents[2]
RECIPIENT = "jo@example.com"


def readme_block(example: str) -> str:
    readme = (ROOT / "docs" / "bring-your-own-agent.md").read_text()
    marker = f"<!-- example: {example} (tests/integration/test_agent_examples.py runs it) -->"
    assert marker in readme, f"docs/bring-your-own-agent.md shows {example} after its marker"
    found = re.match(r"\s*```python\n(.*?)```", readme[readme.index(marker) + len(marker) :], re.S)
    assert found, f"a python block follows the marker of {example}"
    return found.group(1)


def run_example(
    example: str, fake_openai, model: str, **env: str
) -> subprocess.CompletedProcess[str]:
    path = ROOT / example
    assert readme_block(example) == path.read_text(), (
        f"docs/bring-your-own-agent.md and {example} differ"
    )
    env = {
        **os.environ,
        "OPENAI_BASE_URL": fake_openai.base_url,
        "OPENAI_API_KEY": "not-a-real-key",
        "OPENAI_MODEL": model,
        "PYTHONPATH": str(ROOT),  # the test deployment's plug-ins live in tests/
        **env,
    }
    return subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=150,
        env=env,
        cwd=ROOT,
    )


def script_refund_notice(fake_openai, model: str) -> None:
    fake_openai.script(
        model,
        [
            {"call": ("lookup", {"query": "order 42"})},
            {"call": ("send_notice", {"recipient": RECIPIENT, "body": "Your refund is coming."})},
            {"text": "Jo knows their refund is on its way."},
        ],
    )


def run_of(out: str) -> str:
    found = re.search(r"^run (\S+) (\S+)$", out, re.M)
    assert found, out
    return found.group(1)


@pytest.mark.parametrize(
    "example", ["examples/agents/pydantic_ai_agent.py", "examples/agents/openai_agents_agent.py"]
)
def test_a_framework_agent_runs_through_the_gate(
    example, fake_openai, engine, client, demo, live_api, producer_token, worker, draft_worker
):
    model = f"example-{Path(example).stem}"
    script_refund_notice(fake_openai, model)
    before = demo.notice_count(recipient=RECIPIENT)
    remote = {"WARRANT_SERVER_URL": live_api, "WARRANT_API_TOKEN": producer_token}
    with ApproverBot(client, "customer-42", by="alice", patience_s=1.5).running():
        done = run_example(example, fake_openai, model, **remote)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "a person must confirm: send_notice" in done.stdout
    run_id = run_of(done.stdout)
    info = client.get_run(run_id)
    assert (info.status, info.stop_reason) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert info.answer == "Jo knows their refund is on its way."
    assert demo.notice_count(recipient=RECIPIENT) == before + 1  # exactly once
    [approved] = facts.events(engine, run_id, "confirmation.approved")
    assert approved.details["by"] == "alice"
    tools = [e.details["tool"] for e in facts.events(engine, run_id, "proposal.received")]
    assert tools == ["lookup", "send_notice", None]  # two tool steps, then the final answer
    assert len(fake_openai.requests_for(model)) == 3  # the agent's own loop asked its model


def test_the_mcp_client_example(fake_openai, demo, worker):
    done = run_example("examples/agents/mcp_client.py", fake_openai, "unused")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "lookup read-only" in done.stdout and "lookup: {" in done.stdout
    assert "send_notice" not in done.stdout  # not granted: not offered
    demo.set_fault("lookup", "fail")
    try:
        failed = run_example("examples/agents/mcp_client.py", fake_openai, "unused")
    finally:
        demo.clear_faults()
    assert failed.returncode == 1, failed.stdout + failed.stderr  # loudly, with the code
    assert failed.stderr.strip().splitlines()[-1].startswith("lookup: "), failed.stderr
