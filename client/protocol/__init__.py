"""Pure protocol logic (no I/O)."""
