"""``python -m bench.chaos`` (``make chaos``): see :mod:`bench.chaos`."""

from bench.chaos.suite import main

raise SystemExit(main())
