"""The cluster: node links, membership, the reachability view and forwarding between nodes.

Node links (docs/cluster-links.md): `framing` (frames, `FrameDecoder`), `handshake` (challenge-response over
the cookie), `frame_auth` (the tag of every frame after the handshake) and `link` (`Link`: one connection with
heartbeats and silence detection) are sans-I/O; `tcp` (`ClusterNetwork`) is their asyncio driver, `tls_accept`
its TLS side; `errors` holds the `ClusterError` hierarchy.
The cluster service on top of them (docs/cluster.md): `service`, `membership`, `view`, `replica_links`;
joining at start-up from `cluster.discovery`: `discovery_plan` (pure) and `discovery` (its task).
"""
