"""The fake NKS fixtures, for tests here that go through NKS doors too."""

from tests.nks.conftest import fake_nks, nks_settings

__all__ = ["fake_nks", "nks_settings"]
