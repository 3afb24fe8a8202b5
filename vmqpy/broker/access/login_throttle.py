"""The budgets of logins, sans-I/O: how many password checks may wait for the login pool (`Admission`), and which
peer addresses are refused at once for a while after too many failed logins (`LoginThrottle`).

`LoginThrottle` counts the failed logins of each address in a fixed window (`auth.failed_login_window` seconds from
the first failure counted); the `auth.failed_login_limit`-th failure in a window blocks the address for
`auth.failed_login_block` seconds: its CONNECTs that need a password check are refused at once, without hashing,
and every one of them keeps it in the table. At most `capacity` addresses are remembered
(`auth.failed_login_addresses`): the one touched least recently is forgotten first, so a flood of addresses cannot
grow the table without bound (an address that keeps trying is touched at every try and stays). Time is an argument:
no clock here.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["Admission", "LoginThrottle"]


@dataclass(slots=True)
class _Failures:
    count: int  # failures in the window that started at `since`
    since: float
    blocked_until: float = 0.0


class LoginThrottle:
    """Failed logins per peer address, and the addresses blocked because of them. `limit` 0: nothing is blocked
    (failures are still counted)."""

    __slots__ = ("_addresses", "block", "capacity", "limit", "total", "window")

    def __init__(self, limit: int = 10, window: float = 60.0, block: float = 60.0, capacity: int = 10_000) -> None:
        if limit < 0 or window <= 0 or block < 0 or capacity < 1:
            raise ValueError("limit >= 0, window > 0, block >= 0 and capacity >= 1 are required")
        self.limit = limit
        self.window = window
        self.block = block
        self.capacity = capacity
        self.total = 0  # failures ever counted
        self._addresses: OrderedDict[str, _Failures] = OrderedDict()

    def blocked(self, address: str, now: float) -> bool:
        """Whether a login from `address` is refused at `now` without a password check."""
        record = self._addresses.get(address)
        if record is None or record.blocked_until <= now:
            return False
        self._addresses.move_to_end(address)
        return True

    def failed(self, address: str, now: float) -> int:
        """Count one failed login from `address` at `now`; the failures in its current window (this one included).
        The `limit`-th blocks the address until `now + block`."""
        self.total += 1
        addresses = self._addresses
        record = addresses.pop(address, None)
        if record is None or now - record.since >= self.window:
            blocked_until = 0.0 if record is None else record.blocked_until
            record = _Failures(0, now, blocked_until)
        record.count += 1
        if self.limit and record.count >= self.limit:
            record.blocked_until = max(record.blocked_until, now + self.block)
        addresses[address] = record
        if len(addresses) > self.capacity:
            addresses.popitem(last=False)
        return record.count

    def count(self, address: str) -> int:
        """The failures counted for `address` in its current window (0 when it is not remembered)."""
        record = self._addresses.get(address)
        return 0 if record is None else record.count

    def blocked_addresses(self, now: float) -> int:
        return sum(1 for record in self._addresses.values() if record.blocked_until > now)

    def __len__(self) -> int:
        return len(self._addresses)


class Admission:
    """The password checks a node takes at once: `capacity` (the pool's workers and its queue); one more is
    refused (the CONNECT is answered Server busy) rather than queued without bound."""

    __slots__ = ("capacity", "pending")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity >= 1 is required")
        self.capacity = capacity
        self.pending = 0

    def enter(self) -> bool:
        """Take a place for one check; False when every place is taken (nothing changes then)."""
        if self.pending >= self.capacity:
            return False
        self.pending += 1
        return True

    def leave(self) -> None:
        """A check that entered is done."""
        if self.pending <= 0:
            raise RuntimeError("leave() without a matching enter()")
        self.pending -= 1
