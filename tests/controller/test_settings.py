"""The kopf settings the operator's options imply, as kopf will send them to an API server."""

from __future__ import annotations

import kopf
import pytest

from finishable.controller.settings import OperatorOptions, configure

pytestmark = pytest.mark.quick


def test_the_watch_timeout_goes_into_the_url_as_an_integer() -> None:
    """kopf writes ``timeoutSeconds=str(server_timeout)`` into every watch URL, and a real API
    server parses it with ``strconv.ParseInt``: "300.0" is a 400 that stops every watch."""
    settings = kopf.OperatorSettings()
    configure(settings, OperatorOptions())
    assert str(settings.watching.server_timeout) == "300"
    assert isinstance(settings.watching.server_timeout, int)
    configure(settings, OperatorOptions(watch_timeout_seconds=45))
    assert str(settings.watching.server_timeout) == "45"
