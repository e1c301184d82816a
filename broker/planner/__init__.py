"""The planner stage: load a run, check its budgets, ask the planner, record its output
(``stage``, ``_outcomes``; ``external_step``: a caller's proposal recorded the same way)."""
