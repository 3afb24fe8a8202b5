"""SANS-I/O: the broker's core on one node. Sessions and their queues, routing (router, retained store, the feed
from the metadata store), wills, expiry, forwards to and from other nodes, sessions moving between nodes
(migration, holdback, lineage), the ports it is given (ports.py) and the work it defers to the bulk lane. Takes
plain values and `now`, hands packets to a `Sink` (tests/unit/broker/test_purity.py)."""
