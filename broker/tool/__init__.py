"""The tool stage: claim a command, call the tool within its limits, record the typed outcome
(``stage``: load → decide → commit → publish; ``_call``, ``record`` and the features they use)."""
