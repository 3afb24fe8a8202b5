"""The replicated metadata store: every node holds all of it, accepts writes while partitioned, and
converges (server-wide clocks, as VerneMQ's ``vmq_swc``; design in ``docs/replication.md``).

* :mod:`vmqpy.metadata.replica` -- :class:`~vmqpy.metadata.replica.Replica`, one node's replica: a
  sans-I/O state machine whose calls return outputs (``Send``, ``Changed``, ``Persist``, ``Logged``).
* :mod:`vmqpy.metadata.exchange` -- the anti-entropy exchange (requester state machine, responder planner).
* :mod:`vmqpy.metadata.messages` -- wire messages and their versioned msgpack codec; storage rows.
* :mod:`vmqpy.metadata.hlc` -- hybrid logical clocks; :mod:`vmqpy.metadata.resolve` -- sibling resolvers.
* :mod:`vmqpy.metadata.memory_network` -- a seeded in-memory network of replicas for tests.
* :mod:`vmqpy.metadata.errors` -- ``MetadataError``, ``DecodeError``, ``InvalidKeyError``.

The core imports only :mod:`dvv`, msgpack and the standard library; time and randomness are inputs.
"""
