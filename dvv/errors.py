"""Errors raised by :mod:`dvv`.

Every error the library raises on purpose derives from :class:`DVVError`, so a caller can catch the
whole family with one ``except``.  Errors about bad arguments also derive from :class:`ValueError` or
:class:`TypeError` so that generic code keeps working.
"""

from __future__ import annotations

__all__ = ["DVVError", "DecodeError", "EncodeError", "InvalidClockError"]


class DVVError(Exception):
    """Root of every error raised by the :mod:`dvv` package."""


class DecodeError(DVVError, ValueError):
    """Bytes given to :func:`dvv.codec.from_bytes` are not a valid encoding of a known type and version."""


class EncodeError(DVVError, TypeError):
    """An object (or a value inside it) cannot be encoded by :func:`dvv.codec.to_bytes`."""


class InvalidClockError(DVVError, ValueError):
    """A clock, dot or counter violates the invariants of its type, or an operation's precondition."""
