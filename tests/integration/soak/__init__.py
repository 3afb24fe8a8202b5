"""The soak test's parts (tests/integration/test_soak.py): the series a node leaves behind and their slopes
(`series`), what is read from a running node every few seconds (`probe`), and the seeded client mix (`workload`)."""
