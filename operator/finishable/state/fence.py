"""Fencing of stale driver attempts: only the newest attempt that claimed a job writes its state.

A driver whose pod was lost may still run (a partitioned node, a force-deleted pod) while the
operator starts its successor. Every driver attempt has an :class:`Epoch`, (run, attempt) in that
order, which the operator hands out once each. Before it reads the job's state an attempt
*claims* its epoch, and every later write of the job's state goes through a
:class:`FencedBackend`, which first checks that no newer epoch has claimed.

Claims need no compare-and-swap, so they work on every backend (a local directory, ConfigMaps,
object stores), because every claim is a write-once object of its own name:

* claiming writes ``fence/<job>/claims/<epoch>``, then lists the claims: a newer one means this
  attempt is already stale (:class:`~finishable.state.errors.Fenced`); every older one is marked
  by writing ``fence/<job>/superseded/<older epoch>``;
* checking is one ``get`` of ``fence/<job>/superseded/<my epoch>``: found means fenced.

Either of two racing claimers sees the other: the older one's listing comes after the newer
one's claim (it fences itself) or before it, and then the newer one's listing sees the older
claim and marks it. The check and the write it guards are two calls, so a write that passed its
check just before a successor claimed can still land: a successor that found an older claim
waits ``grace`` seconds before it reads the state (the driver overlaps that with Spark's start),
and :class:`FencedBackend` logs an error for a write that took longer than that.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from finishable.state.backends import ObjectBackend, WrappedBackend
from finishable.state.errors import Fenced, ObjectNotFound

log = logging.getLogger(__name__)

FENCE_PREFIX = "fence"
DEFAULT_GRACE_SECONDS = 10.0
"""How long a write may take between its fence check and its landing; see the module doc."""

_EPOCH_NAME = re.compile(r"r(\d{6,})-a(\d{6,})")


@dataclass(frozen=True, order=True, slots=True)
class Epoch:
    """A driver attempt's place in the job's history: a later run, or a later attempt of it."""

    run: int
    attempt: int

    @property
    def name(self) -> str:
        """The object name segment, sorting like the epoch."""
        return f"r{self.run:06d}-a{self.attempt:06d}"

    @classmethod
    def parse(cls, name: str) -> Epoch | None:
        match = _EPOCH_NAME.fullmatch(name)
        return cls(int(match[1]), int(match[2])) if match else None

    def __str__(self) -> str:
        return f"attempt {self.attempt} of run {self.run}"


class Fence:
    """One driver attempt's claim on a job's state (``job_key``: the job's uid, or name)."""

    def __init__(
        self,
        backend: ObjectBackend,
        job_key: str,
        epoch: Epoch,
        *,
        grace: float = DEFAULT_GRACE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.epoch = epoch
        self.grace = grace
        self.clock = clock
        self._root = f"{FENCE_PREFIX}/{job_key}"
        self._claimed_at: float | None = None
        self._predecessor: Epoch | None = None

    def _claim_name(self, epoch: Epoch) -> str:
        return f"{self._root}/claims/{epoch.name}"

    def _mark_name(self, epoch: Epoch) -> str:
        return f"{self._root}/superseded/{epoch.name}"

    def claim(self) -> Epoch | None:
        """Claim this epoch; return the newest older epoch that had claimed (None: the first).

        Raises ``Fenced`` when a newer epoch claimed already: this attempt must not start.
        """
        self.backend.put(self._claim_name(self.epoch), _document(claimed=str(self.epoch)))
        self._claimed_at = self.clock()
        epochs = [
            epoch
            for name in self.backend.list(f"{self._root}/claims/")
            if (epoch := Epoch.parse(name.rsplit("/", 1)[-1])) is not None
        ]
        newer = [epoch for epoch in epochs if epoch > self.epoch]
        if newer:
            raise Fenced(str(self.epoch), str(max(newer)), self.backend.location(self._root))
        older = sorted(epoch for epoch in epochs if epoch < self.epoch)
        for epoch in older:
            self.backend.put(self._mark_name(epoch), _document(by=str(self.epoch)))
        self._predecessor = older[-1] if older else None
        if self._predecessor is not None:
            log.info("%s claimed the job's state from %s", self.epoch, self._predecessor)
        return self._predecessor

    def check(self) -> None:
        """Raise ``Fenced`` if a newer epoch has claimed since this one did."""
        try:
            data = self.backend.get(self._mark_name(self.epoch))
        except ObjectNotFound:
            return
        try:
            newer = str(json.loads(data)["by"])
        except (ValueError, KeyError, TypeError):
            newer = "a newer attempt"
        raise Fenced(str(self.epoch), newer, self.backend.location(self._mark_name(self.epoch)))

    def fenced(self) -> Fenced | None:
        """The ``Fenced`` error if this epoch was superseded, else None (also when the store
        cannot say): after a failure, whether it is why."""
        try:
            self.check()
        except Fenced as fenced:
            return fenced
        except Exception:  # an unreachable store says nothing about the fence
            return None
        return None

    def wait_out_predecessor(self, *, exited: bool = False) -> float:
        """After claiming from a predecessor, wait until ``grace`` has passed since the claim,
        so that its writes in flight have landed before this attempt reads; returns the wait.
        ``exited``: whoever started this attempt saw the predecessor's process end, so none of
        its writes can be in flight and there is nothing to wait for."""
        if self._predecessor is None or self._claimed_at is None or exited:
            return 0.0
        remaining = self._claimed_at + self.grace - self.clock()
        if remaining > 0:
            log.info(
                "waiting %.1f s for writes of %s still in flight before reading the state",
                remaining,
                self._predecessor,
            )
            time.sleep(remaining)
        return max(0.0, remaining)


def fenced_cause(error: BaseException) -> Fenced | None:
    """The ``Fenced`` error in ``error``'s chain of causes, if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, Fenced):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _document(**fields: str) -> bytes:
    return json.dumps({**fields, "time": time.time()}).encode("utf-8")


class FencedBackend(WrappedBackend):
    """A backend whose writes are refused (``Fenced``) once a newer attempt claimed the job."""

    def __init__(self, inner: ObjectBackend, fence: Fence) -> None:
        super().__init__(inner)
        self.fence = fence

    def _guarded(self, what: str, name: str, write: Callable[[], None]) -> None:
        self.fence.check()
        started = self.fence.clock()
        write()
        took = self.fence.clock() - started
        if took > self.fence.grace:
            log.error(
                "%s of %s took %.1f s, more than the fence's grace of %.1f s: a successor may "
                "have read the state before it landed",
                what,
                self.inner.location(name),
                took,
                self.fence.grace,
            )

    def put(self, name: str, data: bytes) -> None:
        self._guarded("the write", name, lambda: self.inner.put(name, data))

    def delete(self, name: str) -> None:
        self._guarded("the delete", name, lambda: self.inner.delete(name))

    def __repr__(self) -> str:
        return f"FencedBackend({self.inner!r}, {self.fence.epoch})"
