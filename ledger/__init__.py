"""The ledger layer of warrant (imported as ``warrant.ledger``): the models, the migrations and
every SQL statement. Internal: no module here is a face for code outside warrant (the faces are
``warrant``, ``warrant.tools``, ``warrant.testing`` and ``warrant.contrib``)."""

__layer__ = "adapters"

from warrant._namespace import only_as_warrant

only_as_warrant(__name__, "ledger")  # a bare `import ledger` from the repository root fails here
