"""The chaos suite (``make chaos``, issue 16).

A mixed load of runs (reads, refunds, drafts, confirmed preference writes, cancels) against
the demo service with its own faults, while worker processes are SIGKILLed (pool children and
main processes of every role, and beat), the suite's own Redis and PostgreSQL are restarted,
and tool messages are delivered twice while their command is in flight; then
:mod:`bench.chaos.checker` compares the ledger with the service's tables.

    python -m bench.chaos [--runs 300] [--faults-per-kind 50] [--seed 16] [--json]
    python -m bench.chaos --campaign concurrency   # the threads pools under load (issue 47)
    python -m bench.chaos.checker --database-url postgresql://...   # the checker alone
"""
