"""The error of a bookie's directories (``layout``), also raised by their lock (``dirlock``)."""


class LayoutError(RuntimeError):
    """The directories do not belong to this bookie as configured; the message says why."""
