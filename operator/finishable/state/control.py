"""The control channel between whoever steers a job and its driver (docs/architecture.md).

The operator (or ``finishable stop`` locally) never calls into the driver: it writes a
:class:`~finishable.api.status.ControlRequest`, and the driver answers with a
:class:`~finishable.api.control.DriverReport` at least once per checkpoint. One writer per side:
only the steering side writes the request, only the driver writes the report. Two backends:

* ConfigMaps ``<job>-control`` (key ``request``, ``cancelled`` holding a withdrawn request's
  id, and ``takeover``: the order a standby driver waits for) and ``<job>-state`` (key
  ``report``), in the job's namespace;
* two files in the job's local directory, ``control.json`` and ``state.json``, replaced
  atomically (write a temporary file, then rename), so a reader never sees half a document.

What is read is validated with the API models; a document that does not parse is logged and read
as absent, so a broken writer can stall a job but never steer it wrongly. The operator and a
driver may run different releases (a job started before the operator was upgraded runs the old
image): a reader skips top-level fields it does not know, and a request carries only what a driver
acts on (its ``trigger`` is the operator's own bookkeeping, already spelt out in its id).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from finishable.api.control import DriverReport
from finishable.api.status import ControlRequest
from finishable.kube.api import KubeApi, KubeApiError
from finishable.kube.objects import LABEL_COMPONENT, LABEL_JOB, job_label_value
from finishable.state.configmap import upsert_configmap
from finishable.state.errors import BackendError

log = logging.getLogger(__name__)

CONTROL_SUFFIX = "-control"
STATE_SUFFIX = "-state"


NOT_SENT_TO_DRIVERS = frozenset({"trigger"})
"""Request fields the driver does not act on: left out, so drivers of older images read it."""

Document = TypeVar("Document", ControlRequest, DriverReport)

TAKEOVER_KEY = "takeover"
"""The control document's key for the order a standby driver waits for (recovery.standby)."""


RELEASED_KEY = "released"
"""The control document's key for the newest driver attempt the steering side stops itself (an
upgrade replacing it, a crash's successor, the job's deletion): at SIGTERM it leaves at once,
since a savepoint of it would be of use to no one."""


@dataclass(frozen=True)
class TakeOver:
    """The order for a standby driver to become attempt ``attempt``. ``predecessor_exited``:
    the lost driver's process is known to have ended, so the standby need not wait out the
    fence's grace for writes of it in flight (``state/fence.py``)."""

    attempt: int
    predecessor_exited: bool


def _attempt_number(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def _encode(model: ControlRequest | DriverReport, exclude: frozenset[str] = frozenset()) -> str:
    fields = model.model_dump(mode="json", by_alias=True, exclude_none=True, exclude=set(exclude))
    return json.dumps(fields)


def decode(kind: type[Document], text: str) -> Document:
    """The document as this release reads it: fields of a newer writer are skipped; a field this
    release needs that is missing or wrong still fails (``ValidationError``)."""
    try:
        raw = json.loads(text)
    except ValueError:
        return kind.model_validate_json(text)  # the same error, as a ValidationError
    if isinstance(raw, dict):
        known = {field.alias or name for name, field in kind.model_fields.items()}
        unknown = sorted(key for key in raw if key not in known and key not in kind.model_fields)
        if unknown:
            log.debug("skipping fields of a newer %s: %s", kind.__name__, ", ".join(unknown))
            raw = {key: value for key, value in raw.items() if key not in unknown}
    return kind.model_validate(raw)


class ControlChannel(ABC):
    """Requests one way, reports the other; both sides use the same object."""

    takeover_poll_seconds = 0.1
    """How often a standby driver reads the channel for its order to take over."""

    write_guard: Callable[[], None] | None = None
    """Called before each report; a driver sets its fence check here, so that a superseded
    attempt's report raises ``Fenced`` instead of overwriting its successor's."""

    # -- the steering side (operator, `finishable stop`) ------------------------------------

    def send(self, request: ControlRequest) -> None:
        """Ask the driver to stop or take a savepoint; replaces any earlier request."""
        current = {k: v for k, v in self._read_control().items() if k != "cancelled"}
        self._write_control({**current, "request": _encode(request, NOT_SENT_TO_DRIVERS)})

    def take_over(self, attempt: int, *, predecessor_exited: bool) -> None:
        """Tell the standby driver of ``attempt`` to take the job over now;
        ``predecessor_exited``: the lost driver's process was seen to end (see ``TakeOver``)."""
        order = {"attempt": attempt, "predecessorExited": predecessor_exited}
        self._write_control({**self._read_control(), TAKEOVER_KEY: json.dumps(order)})

    def release(self, attempt: int) -> None:
        """Say that the steering side itself stops the drivers up to ``attempt``. Best effort:
        unsaid, a driver takes a savepoint no one needs, which is no reason not to stop it."""
        try:
            current = self._read_control()
            if _attempt_number(current.get(RELEASED_KEY)) < attempt:
                self._write_control({**current, RELEASED_KEY: str(attempt)})
        except (BackendError, OSError) as error:
            log.warning("%s: cannot tell attempt %d it is released: %s", self, attempt, error)

    def cancel(self, request_id: str) -> None:
        """Withdraw a request (a stop that took too long); the driver abandons it if it can."""
        current = self._read_control()
        self._write_control({**current, "cancelled": request_id})

    def read_report(self) -> DriverReport | None:
        """The driver's newest report, or None if it has written none (or an unreadable one)."""
        text = self._read_state().get("report")
        if not text:
            return None
        try:
            return decode(DriverReport, text)
        except ValidationError as error:
            log.warning("ignoring an unreadable driver report in %s: %s", self, error)
            return None

    # -- the driver side ------------------------------------------------------------------

    def read_request(self, attempt: int | None = None) -> ControlRequest | None:
        """The pending request for driver ``attempt``, unless it was cancelled.

        A request names the attempt it was sent to, so a new attempt never acts on a request
        its predecessor already answered (a resumed job must not stop again at once).
        """
        document = self._read_control()
        text = document.get("request")
        if not text:
            return None
        try:
            request = decode(ControlRequest, text)
        except ValidationError as error:
            log.warning("ignoring an unreadable control request in %s: %s", self, error)
            return None
        if document.get("cancelled") == request.id:
            return None
        if attempt is not None and request.attempt is not None and request.attempt != attempt:
            return None
        return request

    def takeover(self, attempt: int) -> TakeOver | None:
        """The order for the standby of ``attempt`` to take over, once it was given."""
        text = self._read_control().get(TAKEOVER_KEY)
        if not text:
            return None
        try:
            order = json.loads(text)
            ordered = int(order["attempt"])
            exited = order.get("predecessorExited") is True
        except (ValueError, KeyError, TypeError) as error:
            log.warning("ignoring an unreadable takeover order in %s: %s", self, error)
            return None
        return TakeOver(ordered, exited) if ordered == attempt else None

    def released(self, attempt: int) -> bool:
        """Whether the steering side stops driver ``attempt`` itself (see ``RELEASED_KEY``);
        unreadable, it is taken as not: a savepoint too many is the safe side."""
        try:
            return _attempt_number(self._read_control().get(RELEASED_KEY)) >= attempt
        except (BackendError, OSError) as error:
            log.warning("%s: cannot read whether attempt %d is released: %s", self, attempt, error)
            return False

    def write_report(self, report: DriverReport) -> None:
        """Publish the driver's state; the steering side reads it on its next reconcile."""
        if self.write_guard is not None:
            self.write_guard()
        self._write_state({"report": _encode(report)})

    # -- storage --------------------------------------------------------------------------

    @abstractmethod
    def _read_control(self) -> dict[str, str]: ...

    @abstractmethod
    def _write_control(self, data: Mapping[str, str]) -> None: ...

    @abstractmethod
    def _read_state(self) -> dict[str, str]: ...

    @abstractmethod
    def _write_state(self, data: Mapping[str, str]) -> None: ...


class LocalControlChannel(ControlChannel):
    """Two JSON files in a local job directory (``finishable run``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.control_file = directory / "control.json"
        self.state_file = directory / "state.json"

    def __repr__(self) -> str:
        return f"LocalControlChannel({str(self.directory)!r})"

    def _read(self, path: Path) -> dict[str, str]:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:
            log.warning("ignoring unreadable %s: %s", path, error)
            return {}
        if not isinstance(document, dict):
            log.warning("ignoring %s: not a JSON object", path)
            return {}
        return {str(key): str(value) for key, value in document.items()}

    def _write(self, path: Path, data: Mapping[str, str]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=f".{path.name}.")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                json.dump(dict(data), stream)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def _read_control(self) -> dict[str, str]:
        return self._read(self.control_file)

    def _write_control(self, data: Mapping[str, str]) -> None:
        self._write(self.control_file, data)

    def _read_state(self) -> dict[str, str]:
        return self._read(self.state_file)

    def _write_state(self, data: Mapping[str, str]) -> None:
        self._write(self.state_file, data)


class ConfigMapControlChannel(ControlChannel):
    """``<job>-control`` and ``<job>-state`` ConfigMaps in the job's namespace."""

    takeover_poll_seconds = 0.5  # one GET per poll: gentler on the API server

    def __init__(
        self,
        api: KubeApi,
        job: str,
        *,
        namespace: str | None = None,
        owner_references: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.api = api
        self.job = job
        self.namespace = namespace or api.namespace
        self.control_name = f"{job}{CONTROL_SUFFIX}"
        self.state_name = f"{job}{STATE_SUFFIX}"
        self.owner_references = [dict(reference) for reference in owner_references]

    def __repr__(self) -> str:
        return f"ConfigMapControlChannel({self.namespace}/{self.job})"

    def _read(self, name: str) -> dict[str, str]:
        response = self.api.request(
            "GET", self.api.path("configmaps", name, namespace=self.namespace)
        )
        if response.status == 404:
            return {}
        if response.status != 200:
            raise KubeApiError(f"cannot read ConfigMap {name}", response)
        data = response.body.get("data") or {}
        return {str(key): str(value) for key, value in data.items()}

    def _write(self, name: str, component: str, data: Mapping[str, str]) -> None:
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": self.namespace,
            "labels": {LABEL_JOB: job_label_value(self.job), LABEL_COMPONENT: component},
        }
        if self.owner_references:
            metadata["ownerReferences"] = self.owner_references
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": dict(data)}
        upsert_configmap(self.api, body, namespace=self.namespace)

    def _read_control(self) -> dict[str, str]:
        return self._read(self.control_name)

    def _write_control(self, data: Mapping[str, str]) -> None:
        self._write(self.control_name, "control", data)

    def _read_state(self) -> dict[str, str]:
        return self._read(self.state_name)

    def _write_state(self, data: Mapping[str, str]) -> None:
        self._write(self.state_name, "control", data)
