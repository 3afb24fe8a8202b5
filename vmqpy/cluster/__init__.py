"""Node links, membership and netsplit handling (not built yet)."""
