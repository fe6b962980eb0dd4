"""The bookie's pure rules, no I/O (DESIGN.md, "Layers and folders"): the ledger rule book,
shares, long polls, GC and group-commit policy, the add worker's decisions."""
