"""The replicated metadata store: every node holds all of it, accepts writes while partitioned, and
converges (server-wide clocks, as VerneMQ's ``vmq_swc``; design in ``docs/replication.md``).

* :mod:`vmqpy.metadata.replica` -- :class:`~vmqpy.metadata.replica.Replica`, one node's replica: a
  sans-I/O state machine whose calls return outputs (:mod:`~vmqpy.metadata.outputs`: ``Send``, ``Changed``,
  ``Persist``, ``Logged``); it writes, applies, responds, pulls, runs timers and collects garbage over the
  state its base class :mod:`~vmqpy.metadata.state` builds and reads, from these parts:
  :mod:`~vmqpy.metadata.objects` (the stored objects), :mod:`~vmqpy.metadata.replica_clock` (the node clock
  and its counters), :mod:`~vmqpy.metadata.membership` (peers, members, watermark),
  :mod:`~vmqpy.metadata.dot_index` (GC candidates), :mod:`~vmqpy.metadata.scheduler` (exchange rounds),
  :mod:`~vmqpy.metadata.writeback` (sibling write-backs), :mod:`~vmqpy.metadata.peer_reports` (what peers
  hold, for leave checks).
* :mod:`vmqpy.metadata.exchange` -- the anti-entropy exchange (requester state machine, responder planner).
* :mod:`vmqpy.metadata.messages` -- wire messages and their versioned msgpack codec;
  :mod:`~vmqpy.metadata.rows` -- storage rows and their decoding at restore; :mod:`~vmqpy.metadata.fields`
  -- keys and the field readers both share.
* :mod:`vmqpy.metadata.hlc` -- hybrid logical clocks; :mod:`vmqpy.metadata.resolve` -- sibling resolvers.
* :mod:`vmqpy.metadata.memory_network` -- a seeded in-memory network of replicas for tests.
* :mod:`vmqpy.metadata.errors` -- ``MetadataError``, ``DecodeError``, ``InvalidKeyError``.

The core imports only :mod:`dvv`, msgpack and the standard library; time and randomness are inputs.
"""
