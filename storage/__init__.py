"""The bookie's on-disk formats and the offline operations on them (DESIGN.md, "Layers and
folders"): records, journal, ring, layout and cookies, directory lock, entry logs, index, compaction,
index check / rebuild / verify.  Never imports ``bookie.workers``."""
