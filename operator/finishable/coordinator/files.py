"""Splits of the files under a ``pyarrow.fs`` URL (file://, s3://, gs://, hdfs://), bounded or
discovered continuously.

Listing is I/O, so it never runs on the coordinator thread: ``call_async`` lists and plans on a
worker thread and hands the planned splits back. A bounded source lists once; an unbounded one
lists every ``discovery_interval`` and adds files it has not seen. Files are identified by URL
and must be complete when they appear (write elsewhere, then rename): a file that grows later is
not read again. Files larger than ``split_size`` become byte ranges, except compressed ones
(``.gz``, ``.bz2``, ``.zst``, ``.deflate``), which are read whole.

What a listing finds is what Spark's file index finds: names starting with ``.`` or ``_``
(``_SUCCESS``, ``.crc``, temporary files) are skipped; the files directly under the URL and under
partition directories (``key=value``) are read, and every subdirectory only with
``recursive=True`` (Spark's ``recursiveFileLookup``); ``name_glob`` filters file names
(``pathGlobFilter``), ``pattern`` the path below the URL.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import quote, unquote, urlsplit

import pyarrow.fs as pafs

from finishable.coordinator._json import get_int
from finishable.coordinator.contract import CoordinatorContext, CoordinatorProvider
from finishable.coordinator.enumerator import SplitEnumerator
from finishable.coordinator.splits import FileSplit, Split

logger = logging.getLogger(__name__)

DEFAULT_SPLIT_SIZE = 128 * 1024 * 1024
COMPRESSIONS: dict[str, str] = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".deflate": "deflate"}
"""The codecs Spark's Hadoop file readers recognise by file name, and pyarrow's name for them."""


def compression_of(path: str) -> str | None:
    """The codec a file's name says it is compressed with, or ``None``."""
    name = path.partition("?")[0].lower()
    return next((codec for suffix, codec in COMPRESSIONS.items() if name.endswith(suffix)), None)


def _hidden(name: str) -> bool:
    """Spark's rule: ``.x`` and ``_x`` are not data (``_key=value`` is a partition directory)."""
    return name.startswith(".") or (name.startswith("_") and "=" not in name)


def _expand_braces(glob: str) -> list[str]:
    """Hadoop globs allow ``{a,b}``; ``fnmatch`` does not, so expand them first."""
    opening = glob.find("{")
    closing = glob.find("}", opening)
    if opening < 0 or closing < 0:
        return [glob]
    head, body, tail = glob[:opening], glob[opening + 1 : closing], glob[closing + 1 :]
    return [alt for choice in body.split(",") for alt in _expand_braces(head + choice + tail)]


def glob_matches(name: str, glob: str) -> bool:
    """Whether a file name matches a Hadoop glob (``*``, ``?``, ``[ab]``, ``{x,y}``)."""
    return any(fnmatch.fnmatchcase(name, each) for each in _expand_braces(glob))


@dataclass(frozen=True, slots=True)
class ListedFile:
    """A file found by a listing: its full URL and size in bytes."""

    url: str
    size: int


def normalize_source_url(url: str) -> str:
    """A URL with a scheme: plain local paths become ``file://`` URLs (percent-encoded)."""
    if not url:
        raise ValueError("a file source needs a URL")
    if "://" in url:
        parts = urlsplit(url)
        if not parts.scheme:
            raise ValueError(f"{url!r} is not a URL")
        return url
    return "file://" + quote(os.path.abspath(url))


HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def partition_values(root_url: str, file_url: str) -> dict[str, str | None]:
    """The ``key=value`` directories between a source's URL and one of its files.

    Values are unescaped as Spark escapes them in partition paths; Hive's default partition is
    null.
    """
    root = root_url.partition("?")[0].rstrip("/") + "/"
    path = file_url.partition("?")[0]
    if not path.startswith(root):
        return {}
    values: dict[str, str | None] = {}
    for directory in unquote(path[len(root) :]).split("/")[:-1]:
        key, equals, value = directory.partition("=")
        if equals and key:
            text = unquote(value)
            values[unquote(key)] = None if text == HIVE_NULL else text
    return values


def list_files(
    url: str,
    *,
    bounded: bool,
    pattern: str | None = None,
    recursive: bool = True,
    name_glob: str | None = None,
) -> list[ListedFile]:
    """List the readable files under ``url`` in path order (I/O: call it off the coordinator).

    A missing location is an error for a bounded source and an empty listing for an unbounded one
    (its directory may appear later).
    """
    base, _, query = url.partition("?")
    base = base.rstrip("/")
    suffix = f"?{query}" if query else ""
    filesystem, root = pafs.FileSystem.from_uri(url)
    info = filesystem.get_file_info(root)
    if info.type == pafs.FileType.File:
        return [ListedFile(url=url, size=int(info.size))]
    if info.type == pafs.FileType.NotFound:
        if bounded:
            raise FileNotFoundError(f"{url} does not exist")
        return []
    root = root.rstrip("/")
    listed: list[ListedFile] = []
    selector = pafs.FileSelector(root, recursive=True, allow_not_found=not bounded)
    for entry in filesystem.get_file_info(selector):
        if entry.type != pafs.FileType.File:
            continue
        relative = entry.path[len(root) :].lstrip("/")
        *directories, name = relative.split("/")
        if any(_hidden(part) for part in relative.split("/")):
            continue
        if not recursive and not all("=" in directory for directory in directories):
            continue
        if name_glob is not None and not glob_matches(name, name_glob):
            continue
        if pattern is not None and not fnmatch.fnmatchcase(relative, pattern):
            continue
        listed.append(ListedFile(url=f"{base}/{quote(relative)}{suffix}", size=int(entry.size)))
    listed.sort(key=lambda item: item.url)
    return listed


def plan_file_splits(files: list[ListedFile], split_size: int | None) -> list[FileSplit]:
    """Cut files into splits: whole files, or ``split_size`` byte ranges of larger ones.

    Empty files give no split; compressed files are never cut. The result depends only on the
    input, so planning is repeatable.
    """
    splits: list[FileSplit] = []
    for listed in files:
        if listed.size == 0:
            continue
        if split_size is None or listed.size <= split_size or compression_of(listed.url):
            splits.append(
                FileSplit(url=listed.url, start=0, length=listed.size, file_size=listed.size)
            )
            continue
        for start in range(0, listed.size, split_size):
            length = min(split_size, listed.size - start)
            splits.append(
                FileSplit(url=listed.url, start=start, length=length, file_size=listed.size)
            )
    return splits


class FileSplitEnumerator(SplitEnumerator):
    """Assigns the files (or byte ranges) under a URL to readers on request."""

    source_kind: ClassVar[str] = "files"

    def __init__(
        self,
        context: CoordinatorContext,
        url: str,
        *,
        split_size: int | None = DEFAULT_SPLIT_SIZE,
        bounded: bool = True,
        discovery_interval: float = 10.0,
        pattern: str | None = None,
        recursive: bool = True,
        name_glob: str | None = None,
        retry_delay: float = 1.0,
        max_listing_failures: int = 3,
    ) -> None:
        if split_size is not None and split_size < 1:
            raise ValueError(f"split_size must be at least 1 byte, got {split_size}")
        if discovery_interval <= 0:
            raise ValueError(f"discovery_interval must be positive, got {discovery_interval}")
        self._url = normalize_source_url(url)
        self._split_size = split_size
        self._interval = discovery_interval
        self._pattern = pattern
        self._recursive = recursive
        self._name_glob = name_glob
        self._retry_delay = retry_delay
        self._max_listing_failures = max_listing_failures
        self._seen_files: set[str] = set()
        self._scans = 0
        self._last_scan_ms: int | None = None
        self._listing_failures = 0
        super().__init__(context, bounded=bounded)

    @classmethod
    def provider(
        cls,
        url: str,
        *,
        split_size: int | None = DEFAULT_SPLIT_SIZE,
        bounded: bool = True,
        discovery_interval: float = 10.0,
        pattern: str | None = None,
        recursive: bool = True,
        name_glob: str | None = None,
        retry_delay: float = 1.0,
        max_listing_failures: int = 3,
    ) -> CoordinatorProvider:
        """A provider for ``CoordinatorHost`` with this configuration."""
        normalize_source_url(url)  # refuse a bad URL now, not on the coordinator thread

        def create(context: CoordinatorContext) -> FileSplitEnumerator:
            return cls(
                context,
                url,
                split_size=split_size,
                bounded=bounded,
                discovery_interval=discovery_interval,
                pattern=pattern,
                recursive=recursive,
                name_glob=name_glob,
                retry_delay=retry_delay,
                max_listing_failures=max_listing_failures,
            )

        return create

    @property
    def url(self) -> str:
        """The normalised source URL."""
        return self._url

    @property
    def scans(self) -> int:
        """How many listings completed (the discovery cursor)."""
        return self._scans

    def _source_identity(self) -> dict[str, Any]:
        return {"url": self._url}

    def _cursor_json(self) -> dict[str, Any]:
        cursor: dict[str, Any] = {"scans": self._scans, "files_seen": len(self._seen_files)}
        if self._last_scan_ms is not None:
            cursor["last_scan_unix_ms"] = self._last_scan_ms
        return cursor

    def _restore_cursor(self, cursor: dict[str, Any]) -> None:
        self._scans = get_int(cursor, "scans", "snapshot.cursor")
        last = cursor.get("last_scan_unix_ms")
        self._last_scan_ms = last if isinstance(last, int) else None
        self._seen_files = {
            split.url for split in self._splits.values() if isinstance(split, FileSplit)
        }

    def _reset_cursor(self) -> None:
        self._seen_files = set()
        self._scans = 0
        self._last_scan_ms = None
        self._listing_failures = 0

    def _discovered_with(self, split: Split) -> list[Split]:
        """An adopted file split discovery has not seen: add the whole file as listing would.

        Listing skips files it has seen, so marking the URL seen without its other byte ranges
        would lose them; adding them (the same ranges ``plan_file_splits`` cuts) keeps both
        discovery and the ledger complete.
        """
        if not isinstance(split, FileSplit) or split.url in self._seen_files:
            return [split]
        planned = plan_file_splits([ListedFile(split.url, split.file_size)], self._split_size)
        if split not in planned:
            logger.warning(
                "%s: adopted split %s of %s does not match the current split_size; the file's "
                "other ranges are left to discovery",
                self.context.name,
                split.split_id,
                split.url,
            )
            return [split]
        self._seen_files.add(split.url)
        return list(planned)

    def _start_discovery(self) -> None:
        if self.bounded and self.discovery_complete:
            return
        self._schedule_listing(0.0, self._interval if not self.bounded else None)

    def _schedule_listing(self, delay: float, period: float | None) -> None:
        url, bounded, split_size = self._url, self.bounded, self._split_size
        pattern, recursive, name_glob = self._pattern, self._recursive, self._name_glob

        def work() -> list[FileSplit]:
            listed = list_files(
                url, bounded=bounded, pattern=pattern, recursive=recursive, name_glob=name_glob
            )
            return plan_file_splits(listed, split_size)

        self.context.call_async(work, self._on_listing, initial_delay=delay, period=period)

    def _on_listing(self, planned: list[FileSplit] | None, error: BaseException | None) -> None:
        if self.bounded and self.discovery_complete:
            return
        if error is not None or planned is None:
            self._listing_failures += 1
            if not self.bounded:
                logger.warning(
                    "%s: listing %s failed (will retry): %s", self.context.name, self._url, error
                )
                return
            if self._listing_failures >= self._max_listing_failures:
                self.context.fail_job(
                    RuntimeError(
                        f"listing {self._url} failed {self._listing_failures} times: {error}"
                    )
                )
                return
            logger.warning(
                "%s: listing %s failed, retrying in %.1f s: %s",
                self.context.name,
                self._url,
                self._retry_delay,
                error,
            )
            self._schedule_listing(self._retry_delay, None)
            return
        self._listing_failures = 0
        fresh = [split for split in planned if split.url not in self._seen_files]
        added = self._add_discovered(fresh)
        self._seen_files.update(split.url for split in fresh)
        self._scans += 1
        self._last_scan_ms = int(time.time() * 1000)
        if self.bounded:
            self._mark_discovery_complete()
        if added:
            logger.info(
                "%s: discovered %d new split(s) under %s", self.context.name, added, self._url
            )
