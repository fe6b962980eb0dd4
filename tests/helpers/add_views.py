"""The defaults of a test's view for the add machine (bookie.core.adds ``View``): a writable
bookie that admits every request, no admin, every owner known, nothing named or re-read, nothing
held.  A property test's view subclasses it and says only what its scenario changes."""

from __future__ import annotations


class PlainView:
    def readonly(self):
        return False

    def admit(self, r):
        return None

    def role_admin(self, principal):
        return False

    def owner_ready(self, ledger_id, key, credential, lane):
        return True

    def named(self, ledger_id):
        return None

    def reread_done(self, ledger_id):
        return False

    def reread(self, ledger_id):
        return True

    def held_entries(self, ledger_id, entry_ids):
        return {}

    def uncommitted(self, ledger_id):
        return False
