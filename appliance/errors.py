"""Errors of the commands layer."""


class CliError(Exception):
    """An error a person can act on; printed as one line, exit status 2."""
