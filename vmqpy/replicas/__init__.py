"""Persistent sessions' queues replicated to other nodes (docs/replication.md, "Queue replicas").

placement.py: which nodes hold a client id's copies (pure). ops.py: the replica operations (pure). ledger.py:
which operations are acknowledged, for the acknowledgement barrier (pure). copies.py: the replica side, the
copies kept for other owners. owner.py: the owner side, sending operations and the composite barrier.
failover.py: a session recreated without its messages fetches and adopts its copies. service.py: the wiring.
"""
