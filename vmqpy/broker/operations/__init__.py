"""What the operator reads of the broker: the $SYS tree (systree) and the client tracer (trace). Imports nothing
of the other rooms; the core feeds them."""
