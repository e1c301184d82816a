"""The broker layer of warrant (imported as ``warrant.broker``)."""

__layer__ = "broker stages"

from warrant._namespace import only_as_warrant

only_as_warrant(__name__, "broker")  # a bare `import broker` from the repository root fails here
