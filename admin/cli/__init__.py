"""The command tree, one module per group (`vmq-admin cluster ...` is in `cluster.py`, `vmq-admin show` and `set`
in `settings.py`): each holds its commands' table entries, their handlers and the examples of their help; the
HTTP API serves the same entries (`admin.commands`). `main.py` is the `vmq-admin` program."""
