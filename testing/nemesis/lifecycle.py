"""Lifecycle faults: what happens to bookies over months, squeezed into a round.

``LifecycleFaults`` is mixed into ``faults.Nemesis``; each ``_<kind>`` method starts one fault
of ``schedule.LIFECYCLE_KINDS`` and returns its heal (or None).  They drive the operator's own
tools as processes (``python -m bookie shell ...``), so what is exercised is what an operator
runs:

- ``compaction``: ``bookie shell triggergc`` (``--minor`` / ``--major``) on a running bookie;
- ``rebuild_index``: the bookie stopped (SIGTERM), its LMDB index removed or damaged,
  ``bookie shell rebuild-index`` run on its directories, the bookie started again;
- ``lost_for_good``: SIGKILL, every file of the bookie wiped, an empty bookie started in its
  place under a new id (a new port); the old id is in ``lost_ids`` until the run ends, and the
  runner's quiescent check waits for no ledger to name it (autorecovery; for target
  ``operator`` also ``bookie shell recover OLD_ID``);
- ``decommission``: the bookie turned read-only, ``bookie shell decommissionbookie ID`` while it
  still runs, then stopped, wiped and replaced as above (nothing was lost: its ledgers were
  copied first); if the decommission fails the bookie is left as it was and turned writable;
- ``squat``: a hostile raw client (``testing.rawclient``) sends bookie ``i`` adds with a wrong
  master key to the writers' live ledgers (entries 0 and 1, which exist), adds to ledger ids
  above every id seen (not created yet: a squat), and a fence with a wrong key; what the
  bookie answered is counted in ``squat_answers``, and any bytes it let in are found by the
  checker (they are no payload any writer produced);
- ``disk_readonly``: a ballast file fills bookie ``i``'s tmpfs ledger disk past
  ``diskUsageThreshold`` (the disk check turns it read-only); the heal drains it (the ballast
  removed, the bookie writable again once under the low-water mark);
- ``readdress``: bookie ``i`` stopped and started on another port under its ``bookieId``
  (the runner names its bookies with ``--lifecycle``); clients and the checker find it through
  its registration;
- ``overreplicated``: a closed ledger that does not name bookie ``i`` (when every closed ledger
  names it, another running bookie stands in; when none fits, one of its own, 20 entries on two
  running bookies): one fragment position's entries are copied to
  ``i`` without a repoint (a replication whose repoint never happened),
  ``i``'s GC drops them after ``gcOverreplicatedLedgerWaitTime``, then the position is healed
  onto ``i`` (``Replicator.heal`` with every other bookie excluded: ``i`` is chosen again as the
  replacement), the copies sent again and the position repointed.  Runs in a thread of its own
  that the round does not wait for (the drop takes tens of seconds);
- ``journal_full``: a ballast file fills the tmpfs under bookie ``i``'s first journal
  directory (it has two); the heal frees it and starts the bookie again if it stopped over it;
- ``rename``: the documented rename of bookie ``i`` while the writers write and autorecovery
  runs: stopped (SIGTERM), ``bookie shell updatecookie`` with a new ``bookieId``, a pause drawn
  from the seed (0-3 s: autorecovery looks meanwhile), ``bookie shell updateledgers --from OLD
  --to NEW``, started under the new id.  A write-quorum-1 ledger of its own on that bookie
  (entries 0-4) stays open throughout; afterwards its writer adds 5 more, closes, and every
  entry must read back (else a finding), and the ledger is deleted (its entries have one copy:
  ``lost_for_good`` is skipped while such a ledger exists, which would lose them by
  definition and leave them naming the lost bookie for ever).  The old id is in
  ``renamed_ids`` and the runner's
  quiescent check waits for no ledger to name it (a writer that wrote its stale ensemble back
  would name it for ever), and the final check reads every acknowledged entry back;
- ``deferred_loss``: SIGKILL a running bookie that the current ledger of a DEFERRED_SYNC
  writer names (``i`` picks among them), started again when the fault ends: the writer
  replaces it and its next ``force()`` covers every entry it acknowledged.
"""

from __future__ import annotations

import collections
import os
import random
import shutil
import subprocess
import sys
import threading
import time

from bookie.client.metadata import LOCATIONS
from bookie.client.resolver import BookieResolver
from bookie.metadata import NoSuchLedgerError, NodeExistsError, open_metadata
from bookie.metadata.ledger import LedgerState
from bookie.testing.nemesis.client_proc import DIGEST, PASSWORD
from bookie.testing.nemesis.workload import CLIENT_CONFIG, RACKS
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status
from bookie.workers.config import SECRET_KEYS  # refused with --set: never on a command line

SHELL_TIMEOUT_S = 240.0
RENAME_WRITER_TRIES = 20  # ledgers created until one lands on the bookie to rename
RENAME_READ_TIMEOUT_S = 180.0  # the renamed bookie starts under its new id within this


def shell(args: list[str], timeout_s: float = SHELL_TIMEOUT_S,
          stdout: list | None = None) -> tuple[int, str]:
    """Run ``python -m bookie shell ARGS``; returns (exit status, its output's last lines).
    ``stdout``, a list, receives the whole standard output."""
    cmd = [sys.executable, "-m", "bookie", "shell", *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:  # what it said so far: where it was stuck
        said = [x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
                for x in (e.stdout, e.stderr)]
        tail = " | ".join("".join(said).strip().splitlines()[-3:])[:400]
        return -1, f"timed out after {timeout_s:g} s" + (f": {tail}" if tail else "")
    if stdout is not None:
        stdout.append(done.stdout)
    out = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode, " | ".join(out[-3:])[:400]


def set_rack(metadata_uri: str, bookie_id: str, location: str) -> None:
    """What ``bookie shell setrack ID LOCATION`` writes: the bookie's rack for placement."""
    with open_metadata(metadata_uri, timeout_s=20.0) as store:
        try:
            store.create(f"{LOCATIONS}/{bookie_id}", location.encode())
        except NodeExistsError:
            store.set(f"{LOCATIONS}/{bookie_id}", location.encode(), None)


def rack_of(i: int) -> str:
    """Bookie slot ``i``'s rack in a lifecycle run (two racks: writers that enforce
    ``minNumRacksPerWriteQuorum`` 2 spread every write quorum over both)."""
    return f"/nemesis/rack{i % RACKS}"


def wipe(path: str) -> None:
    """Remove everything under ``path`` (a mount point under it stays, emptied)."""
    if not os.path.isdir(path):
        return
    for name in os.listdir(path):
        child = os.path.join(path, name)
        if os.path.ismount(child):
            wipe(child)
        elif os.path.isdir(child) and not os.path.islink(child):
            if any(os.path.ismount(os.path.join(child, n)) for n in os.listdir(child)):
                wipe(child)
            else:
                shutil.rmtree(child, ignore_errors=True)
        else:
            try:
                os.unlink(child)
            except FileNotFoundError:
                pass


class LifecycleFaults:
    """The lifecycle half of the nemesis (see the module docstring).  Expects the attributes
    and helpers ``faults.Nemesis`` defines (``bookies``, ``workload``, ``disk``, ``log``,
    ``_alive``, ``_start``, ``_restarting``, ``_restarts``, ``_Skip``)."""

    def _lifecycle_init(self) -> None:
        self.lost_ids: list[str] = []          # bookie ids gone for good this run
        self.renamed_ids: list[str] = []       # old ids of bookies renamed this run
        # The rename writers' write-quorum-1 ledgers, from their first add until they are read
        # back and deleted: their entries have one copy each, which no bookie lost for good may
        # take with it (``_lost_for_good`` waits) and which must not outlive the check (a later
        # round's lost bookie would leave them naming it for ever: ``not_healed``).
        self.single_copy_ledgers: set[int] = set()
        self.findings: list[str] = []          # what an operator step or the squatter met
        self.squat_answers = collections.Counter()
        self.ledger_ids_seen: set[int] = set()  # the runner adds every ledger id it knows

    # -- helpers --------------------------------------------------------------------------------
    def _set_args(self, i: int) -> list[str]:
        args = []
        for key, value in self.bookies.overrides(i).items():
            if key not in SECRET_KEYS:
                args += ["--set", f"{key}={value}"]
        return args

    def _secret_conf_args(self) -> list[str]:
        """``--conf`` of a bookie's 0600 file of secret keys (LocalBookies writes it): the
        autoRecoveryLedgerPasswords a shell heal copies with where the store holds no recovery
        secret (ZooKeeper here); [] when there is none."""
        for i in range(self.bookies.n):
            path = os.path.join(self.bookies.bookie_dir(i), "secret.conf")
            if os.path.exists(path):
                return ["--conf", path]
        return []

    def _in_thread(self, i: int | None, name: str, body) -> None:
        """Run ``body`` in a thread; bookie ``i`` (if any) counts as restarting meanwhile."""
        if i is not None:
            self._restarting.add(i)

        def run() -> None:
            try:
                body()
            except Exception as exc:  # noqa: BLE001 - a harness step that failed: a finding
                self.findings.append(f"{name}: {type(exc).__name__}: {exc}")
            finally:
                if i is not None:
                    self.start_later(i)  # the runner's thread starts it (or finds it running)
        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        self._restarts.append(thread)

    def _replace(self, i: int) -> str:
        """Bookie ``i`` (stopped) wiped and started empty under a new id; returns the old id."""
        old = self.bookies.bookies[i]
        wipe(self.bookies.bookie_dir(i))
        port = self.bookies.reserve_port()
        self.bookies.ports[i] = port
        if self.bookies.bookie_ids is not None:  # named ids: a new name (the same list object)
            self.bookies.bookie_ids[i] = f"{old.split('-r')[0]}-r{len(self.lost_ids) + 1}"
            try:  # the replacement stands in the same rack
                set_rack(self.bookies.metadata_uri, self.bookies.bookie_ids[i], rack_of(i))
            except Exception as exc:  # noqa: BLE001 - the store is down (a fault): no rack
                self.findings.append(f"setrack of {self.bookies.bookie_ids[i]}: {exc}")
        else:
            self.bookies.bookies[i] = f"{self.bookies.hosts[i]}:{port}"
        self.lost_ids.append(old)
        self.log(f"nemesis: bookie {i} {old} replaced by an empty {self.bookies.bookies[i]}")
        return old

    # -- the faults -------------------------------------------------------------------------------
    def _compaction(self, i: int, kind: str):
        self._alive(i)
        extra = {"gc": [], "minor": ["--minor"], "major": ["--major"]}[kind]

        def body() -> None:
            status, out = shell(["triggergc", *self._set_args(i), *extra], timeout_s=60)
            if status != 0 and self.bookies.running(i):
                self.findings.append(f"triggergc {kind} on bookie {i}: exit {status}: {out}")
        self._in_thread(None, f"compaction-{i}", body)
        return None

    def _rebuild_index(self, i: int, how: str):
        self._alive(i)
        self._cont_group(i)

        def body() -> None:
            self.bookies.stop(i)
            index = os.path.join(self.bookies.bookie_dir(i), "ledgers", "current", "index")
            if how == "lost":
                shutil.rmtree(index, ignore_errors=True)
            else:
                _damage(os.path.join(index, "data.mdb"))
            status, out = shell(["rebuild-index", *self._set_args(i)])
            if status != 0:
                self.findings.append(f"rebuild-index ({how}) of bookie {i}: exit {status}: {out}")
        self._in_thread(i, f"rebuild-index-{i}", body)
        return None

    def _lost_for_good(self, i: int, how: str):
        if self.single_copy_ledgers:  # one copy on a wiped bookie is lost by definition
            raise self._Skip(f"a rename's write-quorum-1 ledger is open "
                             f"({sorted(self.single_copy_ledgers)})")
        self._alive(i)
        self._cont_group(i)
        self.bookies.kill(i)
        old = self._replace(i)
        self._start(i)
        if how == "operator":
            def body() -> None:
                time.sleep(2.0)
                status, out = shell(["recover", old, "--metadata", self.bookies.metadata_uri,
                                     *self._secret_conf_args()])
                if status != 0:
                    self.findings.append(f"recover {old}: exit {status}: {out}")
            self._in_thread(None, f"recover-{i}", body)
        return None

    def _decommission(self, i: int):
        self._alive(i)
        self._cont_group(i)
        self.bookies.set_readonly(i, True)
        bookie_id = self.bookies.bookies[i]

        def body() -> None:
            status, out = shell(["decommissionbookie", bookie_id, "--metadata",
                                 self.bookies.metadata_uri, *self._secret_conf_args()])
            if status != 0:
                self.findings.append(f"decommissionbookie {bookie_id}: exit {status}: {out}")
                if self.bookies.running(i):
                    self.bookies.set_readonly(i, False)
                return
            self.bookies.stop(i)
            self._replace(i)
        self._in_thread(i, f"decommission-{i}", body)
        return None

    def _squat(self, i: int):
        self._alive(i)
        live = [self.workload.current_ledger(s) for s in range(self.workload.n_writers)]
        live = [lid for lid in live if lid is not None]
        top = max(self.ledger_ids_seen | set(live), default=0)
        rng = random.Random(f"squat:{i}:{top}")
        key = rng.randbytes(20)
        bookie_id = self.bookies.bookies[i]
        holders = self._holders(live)
        answers = self.squat_answers
        with open_metadata(self.bookies.metadata_uri, timeout_s=10.0) as store, \
                RawBookieClient(bookie_id, timeout_s=5.0, resolver=BookieResolver(store)) as raw:
            for lid in live:
                # "held": the ledger's metadata names this bookie, so it knows the real key
                where = "unknown" if holders is None else \
                    "held" if bookie_id in holders.get(lid, ()) else "not_held"
                for entry_id in (0, 1):
                    status = Status(raw.add(lid, [make_entry(lid, entry_id, b"squat:wrong-key")],
                                            key))
                    answers[f"wrong_key_add_{where}:{status.name}"] += 1
                    if status == Status.OK and where == "held":
                        self.findings.append(f"squat: bookie {i} accepted an add with a wrong "
                                             f"key to ledger {lid} entry {entry_id}, which it "
                                             f"holds")
                status = Status(raw.fence(lid, key))
                answers[f"wrong_key_fence_{where}:{status.name}"] += 1
                if status == Status.OK and where == "held":
                    self.findings.append(f"squat: bookie {i} accepted a fence with a wrong key "
                                         f"on ledger {lid}, which it holds")
            for lid in range(top + 1, top + 4):
                status = Status(raw.add(lid, [make_entry(lid, 0, b"squat:future-ledger")], key))
                answers[f"squat_add:{status.name}"] += 1
        return None

    def _holders(self, ledger_ids: list[int]) -> dict[int, set[str]] | None:
        """Ledger id -> every bookie id its metadata names (any fragment); None when the store
        cannot be read (ZooKeeper paused: the answers are then counted as ``unknown``)."""
        out: dict[int, set[str]] = {}
        try:
            with open_metadata(self.bookies.metadata_uri, timeout_s=10.0) as store:
                for lid in ledger_ids:
                    try:
                        meta = store.read_ledger(lid)[0]
                    except Exception:  # noqa: BLE001 - deleted meanwhile: held by no one
                        continue
                    out[lid] = {b for _, ensemble in meta.fragments for b in ensemble}
        except Exception:  # noqa: BLE001 - the store is down (a fault): say "unknown"
            return None
        return out

    def _disk_readonly(self, i: int):
        if self.disk is None or i >= self.disk.count:
            raise self._Skip("no tmpfs ledger disk under this bookie")
        self._alive(i)
        self.disk.fill_to(i, "ledgers", 0.985)
        return lambda: self.disk.free(i, "ledgers")


    def _readdress(self, i: int):
        if self.bookies.bookie_ids is None:
            raise self._Skip("the bookies have no bookieId (their address is their id)")
        self._alive(i)
        self._cont_group(i)

        def body() -> None:
            self.bookies.stop(i)
            self.bookies.ports[i] = self.bookies.reserve_port()
            self.log(f"nemesis: bookie {i} {self.bookies.bookies[i]} moves to port "
                     f"{self.bookies.ports[i]}")
        self._in_thread(i, f"readdress-{i}", body)
        return None

    def _rename(self, i: int):
        if self.bookies.bookie_ids is None:
            raise self._Skip("the bookies have no bookieId (their address is their id)")
        self._alive(i)
        self._cont_group(i)
        pause_s = random.Random(f"rename:{i}:{len(self.renamed_ids)}").uniform(0.0, 3.0)

        held = None

        def body() -> None:
            nonlocal held
            old = self.bookies.bookies[i]
            held = self._rename_writer(old)  # a write-quorum-1 ledger on it, kept open
            self.bookies.stop(i)
            new = f"{'-'.join(old.split('-')[:2])}-n{len(self.renamed_ids) + 1}"
            self.bookies.bookie_ids[i] = new  # the same list object as bookies.bookies
            conf = os.path.join(self.bookies.base_dir, f"rename-{i}.conf")
            fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # may hold secrets
            with os.fdopen(fd, "w") as f:
                f.writelines(f"{k}={v}\n" for k, v in self.bookies.overrides(i).items())
            status, out = shell(["updatecookie", "--conf", conf])
            if status != 0:
                self.bookies.bookie_ids[i] = old  # not renamed: it starts as it was
                self.findings.append(f"updatecookie of {old} to {new}: exit {status}: {out}")
                return
            self.renamed_ids.append(old)
            try:
                set_rack(self.bookies.metadata_uri, new, rack_of(i))
            except Exception as exc:  # noqa: BLE001 - the store is down (a fault): no rack
                self.findings.append(f"setrack of {new}: {exc}")
            self.log(f"nemesis: bookie {i} {old} renamed {new} (cookie); "
                     f"updateledgers in {pause_s:.2f} s")
            time.sleep(pause_s)
            for _ in range(3):  # the store may be paused by a fault: the operator retries
                status, out = shell(["updateledgers", "--conf", conf, "--from", old, "--to", new])
                if status == 0:
                    break
            if status != 0:
                self.findings.append(f"updateledgers {old} -> {new}: exit {status}: {out}")
            self.log(f"nemesis: updateledgers {old} -> {new}: {out}")
            if held is not None:
                threading.Thread(target=self._rename_writer_goes_on, args=(held, new),
                                 name=f"rename-writer-{i}", daemon=True).start()
                held = None

        def guarded() -> None:
            try:
                body()
            finally:
                if held is not None:  # the rename stopped before its writer went on
                    self._rename_writer_done(held)
        self._in_thread(i, f"rename-{i}", guarded)
        return None

    def _rename_writer(self, bookie: str):
        """The issue-39 writer: a ledger E = Qw = Qa = 1 whose entries 0-4 only ``bookie``
        holds, left open through the rename; (client, handle, payloads), or None when none
        could be placed there (the others are closed and left to the run)."""
        from bookie.client import BookKeeper  # lazy: asyncio
        bk = BookKeeper(self.bookies.metadata_uri, dict(CLIENT_CONFIG))
        try:
            for _ in range(RENAME_WRITER_TRIES):
                lh = bk.create_ledger(1, 1, 1, digest=DIGEST, password=PASSWORD)
                if lh.metadata.fragments[0][1][0] == bookie:
                    self.single_copy_ledgers.add(lh.ledger_id)
                    want = [b"rename:%d:%d" % (lh.ledger_id, e) for e in range(5)]
                    for data in want:
                        lh.add_entry(data)
                    return bk, lh, want
                lh.close()
        except Exception as exc:  # noqa: BLE001 - a fault is on: the rename goes on without it
            self.log(f"nemesis: no write-quorum-1 writer for the rename: {exc}")
        bk.close()
        return None

    def _rename_writer_goes_on(self, held, new: str) -> None:
        """After the rename: the writer adds 5 more (its next ensemble change meets the renamed
        metadata), closes, and every entry it was acknowledged reads back once ``new`` serves;
        anything else is a finding."""
        bk, lh, want = held
        try:
            try:
                for e in range(5, 10):
                    data = b"rename:%d:%d" % (lh.ledger_id, e)
                    lh.add_entry(data)
                    want.append(data)
                lh.close()
            except Exception as exc:  # noqa: BLE001 - another fault: what was acked must stay
                self.log(f"nemesis: the rename's writer stopped: {exc}")
            deadline = time.monotonic() + RENAME_READ_TIMEOUT_S
            while True:
                try:
                    rh = bk.open_ledger(lh.ledger_id, password=PASSWORD)
                    got = [bytes(e.data) for e in rh.read_entries(0, len(want) - 1)]
                    break
                except Exception as exc:  # noqa: BLE001 - new not serving yet, or a fault
                    if time.monotonic() > deadline:
                        got = [f"{type(exc).__name__}: {exc}"]
                        break
                    time.sleep(1.0)
            if got != want:
                self.findings.append(f"rename to {new}: ledger {lh.ledger_id} acknowledged "
                                     f"{len(want)} entries, read back {got[:3]}...")
            else:
                self.log(f"nemesis: the rename's writer: ledger {lh.ledger_id}, "
                         f"{len(want)} entries read back")
        finally:
            self._rename_writer_done(held)

    def _rename_writer_done(self, held) -> None:
        """The rename writer's ledger is checked (or its rename stopped): deleted, so that no
        single-copy ledger outlives its check, and its client closed."""
        bk, lh, _ = held
        try:
            for _ in range(5):  # the store may be paused by a fault
                try:
                    bk.delete_ledger(lh.ledger_id)
                    break
                except Exception as exc:  # noqa: BLE001 - retried, then a finding
                    last = exc
                    time.sleep(1.0)
            else:
                self.findings.append(f"the rename's writer could not delete ledger "
                                     f"{lh.ledger_id}: {type(last).__name__}: {last}")
        finally:
            self.single_copy_ledgers.discard(lh.ledger_id)
            bk.close()

    def _deferred_loss(self, i: int):
        ledgers = self.workload.deferred_ledgers() if self.workload is not None else []
        named = self._holders(ledgers[-1:]) if ledgers else None
        if not named:
            raise self._Skip("no DEFERRED_SYNC writer with a ledger (or the store is down)")
        ids = named[ledgers[-1]]
        up = [j for j in range(self.bookies.n) if self.bookies.bookies[j] in ids and self._up(j)]
        if not up:
            raise self._Skip(f"no bookie of deferred ledger {ledgers[-1]} runs")
        j = up[i % len(up)]
        self.log(f"nemesis: deferred-sync ledger {ledgers[-1]} loses bookie {j}")
        return self._kill_bookie(j)

    def _journal_full(self, i: int):
        if self.disk is None or i >= self.disk.count:
            raise self._Skip("no tmpfs journal disk under this bookie")
        self._alive(i)
        self.disk.fill(i, "journal")

        def heal() -> None:
            self.disk.free(i, "journal")
            if not self.bookies.running(i) and i not in self._restarting:
                self.log(f"nemesis: bookie {i} stopped over its full journal disk; started again")
                self._start(i)
        return heal

    def _overreplicated(self, i: int):
        rng = random.Random(f"over:{i}:{len(self.ledger_ids_seen)}")
        try:
            ledger_id, first, position, bookie, j = self._overreplicated_pick(i, rng)
        except self._Skip as why:
            if str(why).startswith("metadata store"):
                raise
            # nothing fits (the first round has no closed ledger yet; the deleter took the
            # earlier rounds'): a closed ledger of its own, so the kind is never skipped for it
            own = self._overreplicated_ledger()
            self.log(f"nemesis: overreplicated: {why}; ledger {own} created for it")
            ledger_id, first, position, bookie, j = self._overreplicated_pick(i, rng, [own])
        self._alive(j)
        target = self.bookies.bookies[j]
        everyone = set(self.bookies.bookies)

        def body() -> None:
            from bookie.autorecovery.replicator import Replicator  # lazy: crc32c
            try:
                with open_metadata(self.bookies.metadata_uri, timeout_s=20.0) as store:
                    # on ZooKeeper there is no recovery secret: the password is the only key
                    rep = Replicator(store, passwords=[PASSWORD], timeout_s=10.0)
                    try:
                        if not rep.copy_position(ledger_id, first, position, target):
                            return
                        # the target's GC drops the copies no fragment names it for
                        with RawBookieClient(target, timeout_s=5.0,
                                             resolver=BookieResolver(store)) as raw:
                            deadline = time.monotonic() + OVERREPLICATED_WAIT_S
                            while time.monotonic() < deadline:
                                if Status(raw.read(ledger_id, first)[0]) != Status.OK:
                                    break
                                time.sleep(1.0)
                        rep.exclude = everyone - {target}  # chosen again as the replacement
                        outcome = rep.heal(ledger_id, [bookie], force=True, read_from_missing=True)
                        self.log(f"nemesis: overreplicated ledger {ledger_id} position {position} "
                                 f"({bookie}) healed onto {target}: {outcome}")
                    finally:
                        rep.close()
            except NoSuchLedgerError:
                pass  # deleted meanwhile (the workload's deleter)
            except Exception as exc:  # noqa: BLE001 - a harness step that failed: a finding
                self.findings.append(f"overreplicated {ledger_id} onto {target}: "
                                     f"{type(exc).__name__}: {exc}")
        threading.Thread(target=body, name=f"overreplicated-{i}", daemon=True).start()
        return None

    def _up(self, j: int) -> bool:
        """Bookie ``j`` runs and serves (``_alive``: not restarting, not still starting)."""
        try:
            self._alive(j)
            return True
        except self._Skip:
            return False

    def _overreplicated_ledger(self) -> int:
        """A closed ledger of ``OWN_LEDGER_ENTRIES`` entries on two running bookies (E = Qw = Qa
        = 2, so three of five are left out of it); returns its id.  Raises ``_Skip`` when it
        cannot be written (too few bookies up, the store down)."""
        from bookie.client import BookKeeper  # lazy: asyncio
        try:
            with BookKeeper(self.bookies.metadata_uri, dict(CLIENT_CONFIG)) as bk:
                lh = bk.create_ledger(2, 2, 2, digest=DIGEST, password=PASSWORD)
                try:
                    for n in range(OWN_LEDGER_ENTRIES):
                        lh.add_entry(b"overreplicated:%d" % n)
                finally:
                    lh.close()
                return lh.ledger_id
        except Exception as exc:  # noqa: BLE001 - a fault is on (too few bookies, no store)
            raise self._Skip(f"no closed ledger fits, and writing one failed: "
                             f"{type(exc).__name__}: {exc}") from None

    def _overreplicated_pick(self, i: int, rng: random.Random, ids: list[int] | None = None):
        """(ledger id, fragment first entry, position, its bookie, target slot): a closed
        ledger with entries and a running bookie it does not name, bookie ``i`` if it can be
        (the ledgers left in the store between rounds are few: the catalogue's kept ones, so
        another bookie may have to stand in); a position of a running bookie preferred.
        Raises ``_Skip`` saying what the look found."""
        slots = [j for j in range(self.bookies.n) if self._up(j)]
        running = {self.bookies.bookies[j] for j in slots}
        if ids is None:
            ids = sorted(self.ledger_ids_seen)
            rng.shuffle(ids)
        seen = closed = 0
        fallback = None
        try:
            with open_metadata(self.bookies.metadata_uri, timeout_s=10.0) as store:
                for lid in ids[:200]:
                    try:
                        meta = store.read_ledger(lid)[0]
                    except Exception:  # noqa: BLE001 - deleted, or unreadable now
                        continue
                    seen += 1
                    if meta.state is not LedgerState.CLOSED or meta.last_entry_id < 0:
                        continue
                    closed += 1
                    named = {b for _, ens in meta.fragments for b in ens}
                    free = [j for j in slots if self.bookies.bookies[j] not in named]
                    if not free:
                        continue
                    first, ensemble = meta.fragments[0]
                    up = [p for p, b in enumerate(ensemble) if b in running]
                    position = rng.choice(up) if up else rng.randrange(len(ensemble))
                    pick = (lid, first, position, ensemble[position])
                    if i in free:
                        return (*pick, i)
                    fallback = fallback or (*pick, rng.choice(free))
        except Exception as exc:  # noqa: BLE001 - the store is down (a fault): nothing to pick
            raise self._Skip(f"metadata store: {type(exc).__name__}: {exc}") from None
        if fallback is not None:
            return fallback
        raise self._Skip(f"of {len(ids)} ledgers seen, {seen} in the store, {closed} closed with "
                         f"entries, none leaves a running bookie out")


OWN_LEDGER_ENTRIES = 20  # entries of the ledger ``overreplicated`` writes when none fits
OVERREPLICATED_WAIT_S = 60.0  # the most ``overreplicated`` waits for the target's GC drop


def _damage(path: str) -> None:
    """Overwrite a stretch in the middle of an LMDB file with garbage (a damaged index)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return
    with open(path, "r+b") as f:
        f.seek(size // 3)
        f.write(os.urandom(min(64 << 10, max(4096, size // 3))))
