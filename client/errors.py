"""The client's exceptions: one base class, one subclass per thing a caller can act on.

Every message names the ledger (and entry or bookie where there is one) and says what to do.
``code`` is a short stable string for logs and metrics.
"""

from __future__ import annotations


class BookKeeperError(Exception):
    """Base class of every error this client raises."""

    code = "error"

    def __init__(self, message: str, *, ledger_id: int | None = None):
        super().__init__(message)
        self.ledger_id = ledger_id


class LedgerFencedError(BookKeeperError):
    """The ledger was fenced by a reader that is recovering it; this writer can add no more.

    An add that failed with this may or may not be in the ledger: open the ledger (which
    recovers it) to find out.
    """

    code = "fenced"


class LedgerClosedError(BookKeeperError):
    """The ledger is closed (by this handle or another client); it takes no more adds."""

    code = "closed"


class NoSuchLedgerError(BookKeeperError):
    """No ledger with this id exists in the metadata store."""

    code = "no_such_ledger"


class NoSuchEntryError(BookKeeperError):
    """The entry is not in the ledger (past its end, or lost on every replica)."""

    code = "no_such_entry"


class NotEnoughBookiesError(BookKeeperError):
    """Too few writable bookies are registered to form or repair an ensemble."""

    code = "not_enough_bookies"


class BadVersionError(BookKeeperError):
    """A metadata compare-and-swap lost against another client's change."""

    code = "bad_version"


class DigestMismatchError(BookKeeperError):
    """An entry's digest does not match its contents on every replica (or wrong digest type)."""

    code = "digest_mismatch"

    def __init__(self, message: str, *, ledger_id: int | None = None,
                 entry_id: int | None = None):
        super().__init__(message, ledger_id=ledger_id)
        self.entry_id = entry_id


class TamperedEntryError(DigestMismatchError):
    """A verifiable ledger's entry matches its Merkle root on no replica (issue 43): its
    digest may be good, but its bytes are not the ones the ledger was closed with."""

    code = "tampered_entry"


class UnauthorizedError(BookKeeperError):
    """The password does not match the one the ledger was created with."""

    code = "unauthorized"


class QuotaExceededError(BookKeeperError):
    """A bookie refused an add (OVER_QUOTA): the writer's identity (its enrolled CURVE key, or
    without enrolment the ledger) stores ``ledgerStorageQuotaBytes`` on that bookie already.
    Not retried and no ensemble change: another bookie would refuse the same writer as soon as
    it filled its quota there.  The ledger takes no more adds; delete ledgers of this writer
    (their bytes count again once the bookies' GC deleted them) or ask for a larger quota.
    """

    code = "quota_exceeded"


class BKTimeoutError(BookKeeperError, TimeoutError):
    """An operation did not complete in time (bookies or metadata store too slow or down)."""

    code = "timeout"


class BookieError(BookKeeperError):
    """Bookies answered with an error the client cannot work around (see the message)."""

    code = "bookie_error"


class LedgerRecoveryError(BookKeeperError):
    """Recovery could not find out where the ledger ends; retry when more bookies are up."""

    code = "recovery_failed"


class MetadataStoreError(BookKeeperError):
    """The metadata store failed or could not be reached."""

    code = "metadata"


class NoSuchRecordError(BookKeeperError):
    """No custom record at this path of the metadata store (see ``BookKeeper.read_record``)."""

    code = "no_such_record"

    def __init__(self, message: str, *, path: str | None = None):
        super().__init__(message)
        self.path = path


class RecordExistsError(BookKeeperError):
    """A custom record exists at this path already (``BookKeeper.create_record``)."""

    code = "record_exists"

    def __init__(self, message: str, *, path: str | None = None):
        super().__init__(message)
        self.path = path


class ClientClosedError(BookKeeperError):
    """The BookKeeper client was closed; create a new one."""

    code = "client_closed"


class InvalidArgumentError(BookKeeperError, ValueError):
    """A call's arguments are impossible (quorum sizes, entry range, digest type, ...)."""

    code = "invalid_argument"
