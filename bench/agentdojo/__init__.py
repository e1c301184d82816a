"""AgentDojo (v1.2.2: workspace, travel, banking, slack) replayed by a hijacked planner through
warrant's real gate: ``python -m bench.agentdojo`` (docs/agentdojo.md).

:mod:`.contracts` declares a warrant contract per AgentDojo function, :mod:`.replay` runs one
replay through ``warrant.runner.policy.evaluate``, :mod:`.tasks` builds the benign and hijacked
replays and checks them with AgentDojo's own utility and security checks, :mod:`.report` makes
the table. Needs the optional ``agentdojo`` package (``agentdojo==0.1.35``).
"""
