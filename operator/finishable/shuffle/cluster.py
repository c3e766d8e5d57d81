"""The job's shuffle servers as one: where a partition goes, and calls on all of them at once.

A partition's server is a stable hash of its name, the same in every process and driver attempt.
Calls on all servers run in parallel and report an unreachable server instead of failing, because
a new driver must go on with the servers that survived (``wait_for``).
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar

from finishable.shuffle.answers import CorruptEntry, Listing, PartitionInfo, Registration
from finishable.shuffle.client import ShuffleClient
from finishable.shuffle.errors import ShuffleError

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class ClusterListing(Listing):
    """A merged listing, with the servers that answered and those that did not."""

    answered: tuple[str, ...] = ()
    unreachable: tuple[str, ...] = ()


class ShuffleCluster:
    """The job's shuffle servers: where a partition goes, and calls on all of them at once."""

    def __init__(self, urls: Iterable[str], token: str, **client_options: Any) -> None:
        self.clients = [ShuffleClient(url, token, **client_options) for url in urls]
        if not self.clients:
            raise ValueError("a shuffle cluster needs at least one server URL")
        self._token = token
        self._options = client_options
        self._probe_timeout = float(client_options.get("timeout", 10.0))

    @property
    def urls(self) -> list[str]:
        return [client.url for client in self.clients]

    def server_for(self, dataset: str, partition: int) -> ShuffleClient:
        """The server of a partition: a stable hash, the same in every process and attempt."""
        index = zlib.crc32(f"{dataset}/{partition}".encode()) % len(self.clients)
        return self.clients[index]

    def client(self, url: str) -> ShuffleClient:
        """The client of ``url`` (one of the cluster's, or a new one with the same options)."""
        for client in self.clients:
            if client.url == url.rstrip("/"):
                return client
        return ShuffleClient(url, self._token, **self._options)

    def register_all(self, attempt: int, *, run: int = 1) -> dict[str, Registration]:
        """Register (or heartbeat) ``attempt`` of ``run`` everywhere; the servers that answered
        (a server that knows a newer attempt refuses, and is left out)."""
        answers = self._each(
            self.clients, lambda client: client.register(attempt, run=run, retries=1)
        )
        return {url: reply for url, reply in answers.items() if isinstance(reply, Registration)}

    def list_all(self, dataset: str | None = None, verify: bool = False) -> ClusterListing:
        """Every server's listing merged, each partition tagged with its server."""
        answers = self._each(self.clients, lambda client: client.list(dataset, verify))
        return _merge(answers, self.urls)

    def release_all(
        self, dataset: str | None = None, include_promoted: bool = False
    ) -> dict[str, int | None]:
        """Release on every server; per server the partitions released (``None``: unreachable)."""
        answers = self._each(self.clients, lambda client: client.release(dataset, include_promoted))
        result: dict[str, int | None] = {}
        for url, reply in answers.items():
            if isinstance(reply, int):
                result[url] = reply
            else:
                logger.warning("shuffle server %s could not release: %s", url, reply)
                result[url] = None
        return result

    def wait_for(
        self,
        urls: Iterable[str] | None = None,
        deadline: float = 30.0,
        needed: set[tuple[str, int]] | None = None,
        *,
        verify: bool = False,
        poll_interval: float = 0.25,
    ) -> ClusterListing:
        """Poll ``urls`` (all servers by default) for up to ``deadline`` seconds.

        Ends when every server answered or, when ``needed`` is given, as soon as every needed
        ``(dataset, partition)`` is listed; at the deadline it returns what it found. This is
        a new driver's wait for surviving shuffle pods (``previousWorkerRecoveryTimeout``).
        A server that does not answer is asked again every ``poll_interval`` seconds.
        """
        targets = [self.client(url) for url in urls] if urls is not None else list(self.clients)
        order = [client.url for client in targets]
        give_up_at = time.monotonic() + deadline
        answered: dict[str, Listing] = {}
        failures: dict[str, object] = {}
        next_try = dict.fromkeys(order, 0.0)
        running: dict[Future[Listing | Exception], str] = {}
        pool = ThreadPoolExecutor(max_workers=min(16, len(targets) or 1))
        try:
            while True:
                now = time.monotonic()
                busy = set(running.values())
                for client in targets:
                    url = client.url
                    if url not in answered and url not in busy and next_try[url] <= now:
                        probe = pool.submit(self._probe, url, verify, give_up_at - now)
                        running[probe] = url
                merged = _merge(answered, order)
                if len(answered) == len(targets) or (
                    needed is not None and needed <= merged.keys()
                ):
                    return merged
                remaining = give_up_at - time.monotonic()
                if remaining <= 0:
                    for url in order:
                        if url not in answered:
                            logger.warning(
                                "shuffle server %s did not answer within %.1f s: %s",
                                url,
                                deadline,
                                failures.get(url, "no answer"),
                            )
                    return merged
                done, _ = wait(
                    running, timeout=min(poll_interval, remaining), return_when=FIRST_COMPLETED
                )
                for future in done:
                    url = running.pop(future)
                    outcome = future.result()
                    if isinstance(outcome, Listing):
                        answered[url] = outcome
                    else:
                        failures[url] = outcome
                        next_try[url] = time.monotonic() + poll_interval
        finally:
            # A probe of a silent server may still run: do not wait for it past the deadline.
            pool.shutdown(wait=False, cancel_futures=True)

    def _probe(self, url: str, verify: bool, remaining: float) -> Listing | Exception:
        """One quick listing: no retries, a timeout within what is left of the wait."""
        quick = ShuffleClient(
            url,
            self._token,
            timeout=max(0.1, min(remaining, self._probe_timeout)),
            retries=0,
            deadline=max(0.1, remaining),
        )
        try:
            return quick.list(verify=verify)
        except ShuffleError as error:
            return error
        finally:
            quick.close()

    @staticmethod
    def _each(
        clients: list[ShuffleClient], call: Callable[[ShuffleClient], T]
    ) -> dict[str, T | Exception]:
        """``call`` on every client in parallel; an exception is the answer of its server."""

        def safe(client: ShuffleClient) -> T | Exception:
            try:
                return call(client)
            except ShuffleError as error:
                logger.warning("shuffle server %s: %s", client.url, error)
                return error

        with ThreadPoolExecutor(max_workers=min(16, len(clients))) as pool:
            results = list(pool.map(safe, clients))
        return {client.url: result for client, result in zip(clients, results, strict=True)}


def _merge(answers: Mapping[str, object], order: list[str]) -> ClusterListing:
    """Merge per-server listings; the partition committed last wins a duplicate."""
    listings = {url: reply for url, reply in answers.items() if isinstance(reply, Listing)}
    job = next((listing.job for listing in listings.values()), "")
    partitions: list[PartitionInfo] = []
    corrupt: list[CorruptEntry] = []
    for url in order:
        listing = listings.get(url)
        if listing is not None:
            partitions.extend(listing.partitions)
            corrupt.extend(listing.corrupt)
    merged = Listing(job, tuple(partitions)).by_key()
    return ClusterListing(
        job=job,
        partitions=tuple(merged[key] for key in sorted(merged)),
        corrupt=tuple(corrupt),
        answered=tuple(url for url in order if url in listings),
        unreachable=tuple(url for url in order if url not in listings),
    )


__all__ = ["ClusterListing", "ShuffleCluster"]
