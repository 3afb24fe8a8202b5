"""Errors raised by :mod:`vmqpy.metadata`.

Everything the store raises on purpose derives from :class:`MetadataError`.  :class:`MessageDecodeError` is
the only exception :func:`vmqpy.metadata.messages.decode` (and the storage-row decoders) raise for
bad input, whatever the bytes are.
"""

from __future__ import annotations

__all__ = ["InvalidKeyError", "MessageDecodeError", "MetadataError"]


class MetadataError(Exception):
    """Root of every error raised on purpose by :mod:`vmqpy.metadata`."""


class MessageDecodeError(MetadataError, ValueError):
    """Bytes are not a valid encoding of a known message (or storage row) of a known version."""


class InvalidKeyError(MetadataError, TypeError):
    """A prefix or key has the wrong shape: a prefix is a ``str``, a key a tuple of str/int/bytes."""
