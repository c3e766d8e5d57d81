"""A split enumerator's state: its ledger as one JSON document, and the restore from it.

The document names its format and version and the source it belongs to (the state of another
input is refused), and holds the discovery cursor and every split in its state with its epochs
(but the finished splits a source forgot: their count, ``forgotten``).
An unfinished sentinel split stays out: it belongs to a drain in progress, not to the source. A
restore checks that every split is in exactly one state; a malformed state leaves the ledger
empty and raises ``EnumeratorStateError``.
"""

from __future__ import annotations

import json
import logging
from abc import abstractmethod
from typing import Any, ClassVar

from finishable.coordinator._json import (
    JsonFieldError,
    as_object,
    get_bool,
    get_int,
    get_list,
    get_str,
)
from finishable.coordinator.enumerator.ledger import SplitLedger
from finishable.coordinator.errors import EnumeratorStateError
from finishable.coordinator.splits import SentinelSplit, split_from_json

logger = logging.getLogger(__name__)

ENUMERATOR_STATE_FORMAT = "finishable.split-enumerator"
ENUMERATOR_STATE_VERSION = 1


class EnumeratorState(SplitLedger):
    """Writes the ledger into a snapshot and restores it from one."""

    source_kind: ClassVar[str]

    # ------------------------------------------------------------------ hooks for subclasses

    @abstractmethod
    def _source_identity(self) -> dict[str, Any]:
        """What makes two enumerators read the same input; a snapshot of another is refused."""

    @abstractmethod
    def _cursor_json(self) -> dict[str, Any]:
        """The discovery cursor, as stored in the snapshot."""

    @abstractmethod
    def _restore_cursor(self, cursor: dict[str, Any]) -> None:
        """Restore the cursor; raise ``JsonFieldError`` naming a bad field."""

    # ------------------------------------------------------------------ snapshot format

    def _snapshot(self, checkpoint_id: int) -> bytes:
        # An unfinished sentinel belongs to a drain in progress, not to the source's state.
        left_out = {split_id for split_id in self._sentinels if split_id not in self._finished}
        assigned: dict[str, list[list[Any]]] = {}
        for split_id in self._splits:
            if split_id in left_out:
                continue
            holding = self._holder.get(split_id)
            if holding is not None:
                assigned.setdefault(str(holding[0]), []).append([split_id, holding[2]])
        document = {
            "format": ENUMERATOR_STATE_FORMAT,
            "version": ENUMERATOR_STATE_VERSION,
            "source": {"kind": self.source_kind, **self._source_identity()},
            "checkpoint_id": checkpoint_id,
            "epoch": self._epoch,
            "bounded": self._bounded,
            "discovery_complete": self._discovery_complete,
            "fully_finished": self.fully_finished,
            "cursor": self._cursor_json(),
            "splits": [
                split.to_json()
                for split_id, split in self._splits.items()
                if split_id not in left_out
            ],
            "pending": sorted(self._pending - left_out, key=self._seq.__getitem__),
            "assigned": dict(sorted(assigned.items(), key=lambda item: int(item[0]))),
            "finished": [
                [split_id, *self._finished[split_id]]
                for split_id in self._splits
                if split_id in self._finished
            ],
        }
        if self._skipped:
            document["skipped"] = dict(sorted(self._skipped.items()))
        if self._forgotten:
            document["forgotten"] = self._forgotten
        return json.dumps(document, separators=(",", ":")).encode("utf-8")

    def _restore(self, checkpoint_id: int, data: bytes) -> None:
        try:
            document = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise EnumeratorStateError(f"enumerator state is not JSON: {error}") from None
        try:
            self._restore_document(checkpoint_id, as_object(document, "snapshot"))
        except JsonFieldError as error:
            self._clear_ledger()
            raise EnumeratorStateError(f"enumerator state: {error}") from None
        except EnumeratorStateError:
            self._clear_ledger()
            raise

    def _restore_document(self, checkpoint_id: int, doc: dict[str, Any]) -> None:
        fmt = get_str(doc, "format", "snapshot")
        version = get_int(doc, "version", "snapshot")
        if fmt != ENUMERATOR_STATE_FORMAT or version != ENUMERATOR_STATE_VERSION:
            raise EnumeratorStateError(
                f"snapshot has format {fmt!r} version {version}; this enumerator reads "
                f"{ENUMERATOR_STATE_FORMAT!r} version {ENUMERATOR_STATE_VERSION}"
            )
        source = as_object(doc.get("source"), "snapshot.source")
        expected = {"kind": self.source_kind, **self._source_identity()}
        if source != expected:
            raise EnumeratorStateError(
                f"the snapshot belongs to source {json.dumps(source, sort_keys=True)}, this "
                f"enumerator reads {json.dumps(expected, sort_keys=True)}"
            )
        for index, item in enumerate(get_list(doc, "splits", "snapshot")):
            try:
                split = split_from_json(item, f"snapshot.splits[{index}]")
            except ValueError as error:
                raise EnumeratorStateError(str(error)) from None
            if split.split_id in self._splits:
                raise EnumeratorStateError(f"snapshot.splits[{index}]: duplicate split")
            self._splits[split.split_id] = split
            self._seq[split.split_id] = index
            if isinstance(split, SentinelSplit):
                self._sentinels.add(split.split_id)
        self._next_seq = len(self._splits)
        placed: set[str] = set()

        def place(split_id: object, where: str) -> str:
            if not isinstance(split_id, str) or split_id not in self._splits:
                raise EnumeratorStateError(f"{where}: unknown split id {split_id!r}")
            if split_id in placed:
                raise EnumeratorStateError(f"{where}: split {split_id!r} is in two states")
            placed.add(split_id)
            return split_id

        def integer(value: object, where: str) -> int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise EnumeratorStateError(f"{where}: expected an integer, got {value!r}")
            return value

        for index, split_id in enumerate(get_list(doc, "pending", "snapshot")):
            self._make_pending(place(split_id, f"snapshot.pending[{index}]"))
        assigned = as_object(doc.get("assigned", {}), "snapshot.assigned")
        for key, entries in assigned.items():
            try:
                subtask = int(key)
            except ValueError:
                raise EnumeratorStateError(f"snapshot.assigned: {key!r} is no subtask") from None
            if not isinstance(entries, list):
                raise EnumeratorStateError(f"snapshot.assigned[{key}]: expected an array")
            for index, entry in enumerate(entries):
                where = f"snapshot.assigned[{key}][{index}]"
                if not isinstance(entry, list) or len(entry) != 2:
                    raise EnumeratorStateError(f"{where}: expected [split id, epoch]")
                split_id = place(entry[0], where)
                self._holder[split_id] = (subtask, None, integer(entry[1], where))
                self._orphans.setdefault(subtask, set()).add(split_id)
        for index, entry in enumerate(get_list(doc, "finished", "snapshot")):
            where = f"snapshot.finished[{index}]"
            if not isinstance(entry, list) or len(entry) != 4:
                raise EnumeratorStateError(
                    f"{where}: expected [split id, subtask, assigned epoch, finished epoch]"
                )
            split_id = place(entry[0], where)
            subtask = integer(entry[1], where)
            self._finished[split_id] = (
                subtask,
                integer(entry[2], where),
                integer(entry[3], where),
            )
            self._finished_by_subtask.setdefault(subtask, set()).add(split_id)
        skipped = as_object(doc.get("skipped", {}), "snapshot.skipped")
        for split_id, reason in skipped.items():
            if split_id not in self._splits or not isinstance(reason, str):
                raise EnumeratorStateError(
                    f"snapshot.skipped[{split_id!r}]: expected a known split id and a reason"
                )
            self._skipped[split_id] = reason
        forgotten = doc.get("forgotten", 0)
        if isinstance(forgotten, bool) or not isinstance(forgotten, int) or forgotten < 0:
            raise EnumeratorStateError(f"snapshot.forgotten: expected a count, got {forgotten!r}")
        self._forgotten = forgotten
        missing = [split_id for split_id in self._splits if split_id not in placed]
        if missing:
            raise EnumeratorStateError(
                f"snapshot: {len(missing)} split(s) in no state, such as {missing[0]!r}"
            )
        bounded = get_bool(doc, "bounded", "snapshot")
        if bounded != self._bounded:
            logger.warning(
                "%s: the snapshot's source was %s, this one is %s",
                self._context.name,
                "bounded" if bounded else "unbounded",
                "bounded" if self._bounded else "unbounded",
            )
        self._discovery_complete = self._bounded and get_bool(doc, "discovery_complete", "snapshot")
        self._restore_cursor(as_object(doc.get("cursor"), "snapshot.cursor"))
        self._epoch = max(checkpoint_id, get_int(doc, "epoch", "snapshot"))
        if get_bool(doc, "fully_finished", "snapshot") and not self.fully_finished:
            logger.warning(
                "%s: the snapshot says fully finished but its splits disagree", self._context.name
            )
        logger.info(
            "%s: restored checkpoint %d: %d split(s), %d pending, %d assigned, %d finished%s",
            self._context.name,
            checkpoint_id,
            len(self._splits),
            len(self._pending),
            len(self._holder),
            len(self._finished),
            ", fully finished" if self.fully_finished else "",
        )
