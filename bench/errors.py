"""The usage error of ``bookie bench``: a benchmark option that cannot run as given (raised by
the command line, ``cli``, and by the tools that check their own options)."""


class BenchOptionError(ValueError):
    """A benchmark option that cannot run as given; the command prints it as one line, exit 2."""
