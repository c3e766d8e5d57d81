"""Control requests to a Batch driver, and suspending it.

Suspend: the sources stop handing out splits, running reader tasks finish with what they have,
the enumerators are snapshotted into the log and the driver exits SUSPENDED; resuming is a
recovery like any other. A driver asked to leave (SIGTERM, driver/departure.py) suspends the
same way and exits DEPARTED. A drain runs the job to its end (its input is bounded); a savepoint is
refused (the job event log and the shuffle partitions are a Batch job's state).
"""

from __future__ import annotations

import logging

from finishable.api.control import DriverState, RequestOutcome, is_departure
from finishable.api.models import RequestAction
from finishable.api.status import ControlRequest, SavepointStatus
from finishable.driver.batch.core import RuntimeCore, event_log_prefix
from finishable.driver.outcome import Outcome

log = logging.getLogger(__name__)

SUSPEND_POLL_SECONDS = 0.5


class ControlMixin(RuntimeCore):
    """Watches the control channel: stop suspends, a drain runs to the end."""

    def _watch_control(self) -> None:
        """Requests, Batch style: stop suspends, a drain runs to the end, savepoints are refused."""
        seen: set[str] = set()
        while not self._heartbeat_stop.is_set():
            departure = self.departure
            request: ControlRequest | None
            try:
                if departure is not None and departure.asked:
                    request = departure.request(self.attempt)
                else:
                    request = self.control.read_request(self.attempt)
            except Exception:
                log.debug("cannot read the control channel", exc_info=True)
                request = None
            if request is not None and request.id not in seen:
                seen.add(request.id)
                self._on_request(request)
            self._heartbeat_stop.wait(SUSPEND_POLL_SECONDS)

    def _on_request(self, request: ControlRequest) -> None:
        if request.action is RequestAction.SAVEPOINT:
            self._report(
                DriverState.RUNNING,
                "a Batch job takes no savepoint while it runs: stop it to suspend it (its job "
                "event log and shuffle partitions are its state)",
                request=request,
                outcome=RequestOutcome.FAILED,
            )
        elif request.drain:
            # Bounded input: running to the end *is* the drain; answered when the output commits.
            log.info("drain request %s: the job runs to its end", request.id)
            self._drain_request = request
            self._report(DriverState.FINISHING, "draining: running to the end", request=request)
        elif self._stop_request is None:
            log.info("stop request %s: suspending after the running tasks", request.id)
            self._stop_request = request
            for read in self._reads.values():
                read.coordinator.suspend()
            self._report(DriverState.STOPPING, "suspending", request=request)

    def _suspend(self) -> Outcome:
        request: ControlRequest | None = self._stop_request
        for read in self._reads.values():
            try:
                self._snapshot(read, force=True)
            except Exception:
                log.warning("snapshot of %s at suspend failed", read.name, exc_info=True)
        self.events.flush(timeout=60)
        location = f"{self.config.state_url.rstrip('/')}/{event_log_prefix(self.config.run_key)}"
        savepoint = SavepointStatus(
            location=location, request_id=request.id if request is not None else None
        )
        departed = request is not None and is_departure(request.id)
        state = DriverState.DEPARTED if departed else DriverState.SUSPENDED
        self._report(
            state,
            f"{'left' if departed else 'suspended'}: the next attempt recovers from the job "
            "event log",
            request=request,
            outcome=RequestOutcome.COMPLETED,
            savepoint=savepoint,
        )
        return Outcome(state, savepoint, None)
