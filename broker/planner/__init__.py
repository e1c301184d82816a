"""The planner stage: load a run, check its budgets, ask the planner, record its output
(``stage``; the recording is :mod:`warrant.ledger.planner_outcomes`, shared with a caller's
proposal, :mod:`warrant.ledger.external_proposals`)."""
