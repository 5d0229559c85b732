"""A fake NKS API and identity service over real HTTP: the demo cloud, and the tests' NKS.

Run it with ``python manage.py fake_nks``; use it from Python with :class:`FakeNks`.
"""

from fakes.nks.model import FakeCluster, FakeEvent, FakeNode, FakeNodegroup
from fakes.nks.server import FakeNks, RecordedRequest
from fakes.nks.state import FakeNksState

__all__ = [
    "FakeCluster",
    "FakeEvent",
    "FakeNks",
    "FakeNksState",
    "FakeNode",
    "FakeNodegroup",
    "RecordedRequest",
]
