"""The broker on one node: listener and connection driver, sessions, routing, retained messages, queues."""
