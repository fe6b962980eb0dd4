"""``bookie shell``: one module per verb family, registered by ``main.register`` through the
public helpers of ``registry`` (issue 35).  This file imports nothing: a family's module imports
``registry`` through it."""
