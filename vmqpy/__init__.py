"""vmqpy: a VerneMQ-like clustered MQTT broker."""

from vmqpy import native

__version__ = "0.1.0"
# The compiled core or the pure modules (vmqpy/native.py): decided here, before any module of the core is imported.
BUILD = native.select()
