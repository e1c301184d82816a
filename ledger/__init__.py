"""The ledger layer of warrant (imported as ``warrant.ledger``)."""

__layer__ = "adapters"

from warrant._namespace import only_as_warrant

only_as_warrant(__name__, "ledger")  # a bare `import ledger` from the repository root fails here
