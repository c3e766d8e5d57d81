"""What a program sees of ``finishable.sources`` and ``finishable.sinks``: their API, not their
imports (``dir()`` and an editor's completion)."""

from __future__ import annotations

from types import ModuleType

import pytest

import finishable

pytestmark = pytest.mark.quick


@pytest.mark.parametrize("name", ["sources", "sinks"])
def test_a_public_module_shows_its_api_and_every_name_of_it_exists(name: str) -> None:
    module = getattr(finishable, name)
    assert isinstance(module, ModuleType)
    assert dir(module) == sorted(module.__all__)
    assert all(hasattr(module, shown) for shown in dir(module))
    assert "Files" in dir(finishable.sources) and "TransactionalFiles" in dir(finishable.sinks)
    assert "json" not in dir(module) and "annotations" not in dir(module)
