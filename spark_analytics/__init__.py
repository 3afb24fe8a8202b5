"""PySpark jobs that audit replication from the nodes' replication logs (not built yet)."""
