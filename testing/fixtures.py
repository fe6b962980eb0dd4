"""Fixtures for users' own test suites (filled in by the testing harness)."""
