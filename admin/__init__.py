"""Administration: one table of commands shared by the HTTP API and the `vmq-admin` CLI."""
