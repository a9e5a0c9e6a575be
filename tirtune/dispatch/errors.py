"""The dispatcher's errors: a tuned kernel that cannot be used, and why."""

from __future__ import annotations

from tirtune.core.errors import TirtuneError

__all__ = ["ArtifactRefused", "DispatchError", "NoArtifact"]


class DispatchError(TirtuneError):
    """A tuned kernel could not be found, fetched or loaded (the message says which and why)."""


class NoArtifact(DispatchError):
    """The best config is known but its module is nowhere to be had (not cached, not served, not built)."""


class ArtifactRefused(DispatchError):
    """A module whose bytes do not match the digest recorded when it was built: never loaded."""
