"""The one error type of the administration layer."""

from __future__ import annotations


class CommandError(Exception):
    """A command that cannot be carried out; `message` names the cause, `status` is the HTTP status to answer.

    400: a bad request (unknown parameter, bad value); 404: something named does not exist (command, setting,
    node, key); 409: the request conflicts with the current state; 503: the node cannot do it right now.
    """

    def __init__(self, message: str, status: int = 400) -> None:
        if not 400 <= status <= 599:
            raise ValueError(f"CommandError status must be 4xx or 5xx, got {status}")
        super().__init__(message)
        self.message = message
        self.status = status

    def __repr__(self) -> str:
        return f"CommandError({self.message!r}, status={self.status})"
