"""Sessions as plain values, shared by the broker and the cluster (both may import it; it imports neither).

message (`Message`: an application message as it is routed, queued, stored and forwarded), parts (what a
session is made of: `Outgoing`, `OutState`, `SubEntry`, `Delivery`), owners (the user a session belongs to),
records (what the broker keeps in the replicated metadata store: the prefixes, owner records, subscription,
retained and forward records), handover (a moving session's `SessionImage`, the `Ticket` of a registration,
`RegistrationRefused`, and the packing of its messages) and names (the names of recovered messages that an image
carries). Pure: no I/O, no clock; it imports only `vmqpy.mqtt` and msgpack.
"""
