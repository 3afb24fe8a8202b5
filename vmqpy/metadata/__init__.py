"""The replicated metadata store (not built yet)."""
