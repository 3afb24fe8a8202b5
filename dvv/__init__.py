"""Dotted version vectors and server-wide clocks: a pure library (no I/O, no clocks, no asyncio).

Types (one module each):

* :mod:`dvv.dots` -- ``Dot = tuple[str, int]`` and :class:`Counters` (sorted dot counters as runs).
* :mod:`dvv.version_vector` -- :class:`VersionVector`, an immutable node -> counter mapping.
* :mod:`dvv.dvvset` -- compact dotted version vector sets (per-key siblings + causal history).
* :mod:`dvv.node_clock` -- :class:`NodeClock`, a bitmapped version vector of every dot a node has seen.
* :mod:`dvv.causal_container` -- :class:`CausalContainer`, a key's versions (dot -> value) + context.
* :mod:`dvv.watermark` -- :class:`Watermark`, what each peer is known to hold of each node's dots.
* :mod:`dvv.dot_key_map` -- :class:`DotKeyMap`, dot -> key index for anti-entropy and its pruning.
* :mod:`dvv.codec` -- versioned ``to_bytes`` / ``from_bytes`` for all of the above.
* :mod:`dvv.errors` -- ``DVVError`` and its subclasses.

See ``docs/dvv.md`` for a guided tour.
"""

from dvv import dvvset
from dvv.causal_container import CausalContainer
from dvv.codec import from_bytes, to_bytes
from dvv.dot_key_map import DotKeyMap, PruneResult
from dvv.dots import Counters, Dot
from dvv.errors import DecodeError, DVVError, EncodeError, InvalidClockError
from dvv.node_clock import NodeClock
from dvv.version_vector import VersionVector
from dvv.watermark import Watermark

__all__ = [
    "CausalContainer",
    "Counters",
    "DVVError",
    "DecodeError",
    "Dot",
    "DotKeyMap",
    "EncodeError",
    "InvalidClockError",
    "NodeClock",
    "PruneResult",
    "VersionVector",
    "Watermark",
    "dvvset",
    "from_bytes",
    "to_bytes",
]
