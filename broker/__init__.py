"""The broker layer of warrant (imported as ``warrant.broker``): the Celery app, queues and one
package per stage. Internal: no module here is a face for code outside warrant (the faces are
``warrant``, ``warrant.tools``, ``warrant.testing`` and ``warrant.contrib``), except the name
operators give Celery, ``warrant.broker.app`` (``celery -A warrant.broker.app ...``)."""

__layer__ = "broker stages"

from warrant._namespace import only_as_warrant

only_as_warrant(__name__, "broker")  # a bare `import broker` from the repository root fails here
