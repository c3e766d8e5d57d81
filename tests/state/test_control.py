"""The control channel on both backends: requests one way, reports the other, over real I/O."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from finishable.api.control import DriverReport, DriverState, RequestOutcome, RequestReport
from finishable.api.models import RequestAction, SavepointTrigger
from finishable.api.status import CheckpointStatus, ControlRequest
from finishable.kube.api import KubeApi
from finishable.state.control import (
    ConfigMapControlChannel,
    ControlChannel,
    LocalControlChannel,
    TakeOver,
    decode,
)
from testcluster.apiserver.emulator import EmulatorServer
from tests.conftest import TOKEN

pytestmark = pytest.mark.quick

NAMESPACE = "control-tests"


@pytest.fixture(params=["local", "configmap"])
def channels(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[ControlChannel, ControlChannel]]:
    """Two channel objects on the same storage: the steering side's and the driver's."""
    if request.param == "local":
        yield LocalControlChannel(tmp_path / "job"), LocalControlChannel(tmp_path / "job")
        return
    server: EmulatorServer = request.getfixturevalue("k8s_server")
    job = f"job-{uuid.uuid4().hex[:8]}"
    apis = [KubeApi.for_url(server.url, token=TOKEN, namespace=NAMESPACE) for _ in range(2)]
    yield ConfigMapControlChannel(apis[0], job), ConfigMapControlChannel(apis[1], job)
    for api in apis:
        api.close()


def stop(request_id: str = "stop-1", drain: bool = False) -> ControlRequest:
    return ControlRequest(
        id=request_id,
        action=RequestAction.STOP,
        drain=drain,
        requested_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_nothing_yet(channels: tuple[ControlChannel, ControlChannel]) -> None:
    operator, driver = channels
    assert operator.read_report() is None
    assert driver.read_request() is None


def test_request_reaches_the_driver_and_the_answer_comes_back(
    channels: tuple[ControlChannel, ControlChannel],
) -> None:
    operator, driver = channels
    operator.send(stop(drain=True))
    received = driver.read_request()
    assert received == stop(drain=True)
    report = DriverReport(
        attempt=2,
        state=DriverState.FINISHED,
        last_checkpoint=CheckpointStatus(id=17, location="cp/17"),
        request=RequestReport(id="stop-1", outcome=RequestOutcome.COMPLETED),
    )
    driver.write_report(report)
    assert operator.read_report() == report


def test_a_new_request_replaces_the_old_one(
    channels: tuple[ControlChannel, ControlChannel],
) -> None:
    operator, driver = channels
    operator.send(stop("stop-1"))
    operator.send(
        ControlRequest(id="sp-2", action=RequestAction.SAVEPOINT, target_directory="/tmp/sp")
    )
    received = driver.read_request()
    assert received is not None
    assert (received.id, received.action, received.target_directory) == (
        "sp-2",
        RequestAction.SAVEPOINT,
        "/tmp/sp",
    )


def test_cancelled_request_is_not_seen(channels: tuple[ControlChannel, ControlChannel]) -> None:
    operator, driver = channels
    operator.send(stop("stop-1"))
    operator.cancel("stop-1")
    assert driver.read_request() is None
    operator.send(stop("stop-2"))
    received = driver.read_request()
    assert received is not None and received.id == "stop-2"


def test_a_takeover_order_reaches_its_standby_only_and_survives_requests(
    channels: tuple[ControlChannel, ControlChannel],
) -> None:
    operator, standby = channels
    assert standby.takeover(2) is None
    operator.take_over(2, predecessor_exited=True)
    assert standby.takeover(3) is None, "an order names the one attempt it is for"
    operator.send(stop("stop-1"))  # a request written after the order leaves it in place
    operator.cancel("stop-1")
    assert standby.takeover(2) == TakeOver(2, predecessor_exited=True)
    operator.send(stop("stop-2"))
    received = standby.read_request()
    assert received is not None and received.id == "stop-2", "a new request clears the cancel"
    operator.take_over(3, predecessor_exited=False)
    assert standby.takeover(2) is None
    assert standby.takeover(3) == TakeOver(3, predecessor_exited=False)


def test_drivers_the_operator_stops_itself_are_told_so_and_it_never_goes_back(
    channels: tuple[ControlChannel, ControlChannel],
) -> None:
    operator, driver = channels
    assert not driver.released(1)
    operator.release(2)
    assert driver.released(1) and driver.released(2) and not driver.released(3)
    operator.send(stop("stop-3"))  # requests leave it in place
    operator.release(1)  # an older attempt's deletion does not take it back
    assert driver.released(2) and not driver.released(3)


def test_an_unreadable_takeover_order_is_no_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    channel = LocalControlChannel(tmp_path)
    channel.control_file.write_text(json.dumps({"takeover": '{"attempt": "two"}'}))
    assert channel.takeover(2) is None
    assert "unreadable takeover order" in caplog.text


def test_reports_overwrite(channels: tuple[ControlChannel, ControlChannel]) -> None:
    operator, driver = channels
    for checkpoint in range(3):
        driver.write_report(
            DriverReport(
                attempt=1,
                state=DriverState.RUNNING,
                last_checkpoint=CheckpointStatus(id=checkpoint),
            )
        )
    report = operator.read_report()
    assert report is not None and report.last_checkpoint == CheckpointStatus(id=2)


def test_garbage_is_read_as_absent(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    channel = LocalControlChannel(tmp_path)
    channel.state_file.write_text("{not json")
    channel.control_file.write_text('{"request": "{\\"id\\": \\"x\\", \\"action\\": \\"fly\\"}"}')
    assert channel.read_report() is None
    assert channel.read_request() is None
    assert "unreadable" in caplog.text


def test_configmaps_are_named_and_labelled(k8s_server: EmulatorServer) -> None:
    api = KubeApi.for_url(k8s_server.url, token=TOKEN, namespace=NAMESPACE)
    owner = {
        "apiVersion": "finishable.dev/v1alpha1",
        "kind": "FinishableSparkJob",
        "name": "labelled",
        "uid": "u-1",
        "controller": True,
    }
    channel = ConfigMapControlChannel(api, "labelled", owner_references=[owner])
    channel.send(stop())
    channel.write_report(DriverReport(attempt=1, state=DriverState.RUNNING))
    for name in ("labelled-control", "labelled-state"):
        found = api.request("GET", api.path("configmaps", name))
        assert found.status == 200, name
        metadata = found.body["metadata"]
        assert metadata["labels"]["finishable.dev/job"] == "labelled"
        assert metadata["ownerReferences"][0]["uid"] == "u-1"
    api.close()


def test_a_request_for_another_attempt_is_ignored(
    channels: tuple[ControlChannel, ControlChannel],
) -> None:
    operator, driver = channels
    operator.send(ControlRequest(id="stop-a1", attempt=1, action=RequestAction.STOP))
    assert driver.read_request(attempt=2) is None
    received = driver.read_request(attempt=1)
    assert received is not None and received.id == "stop-a1"


def test_drivers_and_operators_of_other_releases_read_each_other(
    channels: tuple[ControlChannel, ControlChannel],
) -> None:
    """A job started before the operator was upgraded runs the old image: a request carries only
    what a driver acts on, and each side skips the fields a newer release added."""
    steering, driver = channels
    request = ControlRequest(
        id="savepoint-periodic-a1-g1-5",
        attempt=1,
        action=RequestAction.SAVEPOINT,
        trigger=SavepointTrigger.PERIODIC,
    )
    steering.send(request)
    sent = json.loads(driver._read_control()["request"])
    assert "trigger" not in sent and sent["id"] == request.id
    assert driver.read_request(1) == request.model_copy(update={"trigger": None})

    steering._write_control({"request": json.dumps({**sent, "someFutureField": {"x": 1}})})
    assert driver.read_request(1) == request.model_copy(update={"trigger": None})
    report = {"attempt": 1, "state": "RUNNING", "anotherNewField": 3}
    driver._write_state({"report": json.dumps(report)})
    read = steering.read_report()
    assert read is not None and (read.attempt, read.state) == (1, DriverState.RUNNING)
    with pytest.raises(ValidationError, match="attempt"):  # what this release needs, it needs
        decode(DriverReport, json.dumps({"state": "RUNNING", "anotherNewField": 3}))
