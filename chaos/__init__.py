"""Chaos experiments against real vmqpy clusters (not built yet)."""
