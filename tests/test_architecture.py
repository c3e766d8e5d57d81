"""The rooms of the code and the one direction imports may run between them (docs/architecture.md).

A module may import from its own package and from packages of a lower rank, never upwards and
never sideways into a package of the same rank: the pure decisions and the API stay importable
without the runtimes, and the driver never needs the operator (or the operator the driver).

The test trees (tests/, e2e/, benchmarks/) share only the test cluster (testcluster/): each may
import itself, ``testcluster`` and ``finishable``, never another tree, and ``testcluster`` imports
no tree.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.quick

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "operator" / "finishable"

RANKS: dict[str, int] = {
    "api": 0,
    "transport": 0,
    "timings": 0,
    "serving": 0,
    "lifecycle": 1,
    "coordinator": 1,
    "shuffle": 1,
    "kube": 1,
    "state": 2,
    "partitions": 3,
    "connectors": 4,
    "driver": 5,
    "local": 6,
    "controller": 6,
    "cli": 7,
}
"""Each room's rank; ``finishable/__init__.py`` (the program's entry point) may import anything."""

LEAVES = {"finishable.state.errors", "finishable.timings"}
"""Modules every room may import: they import nothing of the project themselves. The state stores'
error taxonomy is one: the Kubernetes client raises ``BackendError`` like any unreachable storage,
and the operator and the CLI catch it. The phase timings are another: the tasks (connectors) and the
driver add to them."""

TREES = ("tests", "e2e", "benchmarks", "testcluster")
"""The test trees: each may import itself, the test cluster and ``finishable``, no other tree."""

SUB_RANKS: dict[str, dict[str, int]] = {"controller": {"snapshot": 0, "job": 1}}
"""Where one sub-package builds on a sibling, their order: the job's controller records savepoints
as snapshot resources and serves the snapshots created by hand, so ``controller/job`` may import
``controller/snapshot``; never the other way. Siblings not listed share nothing."""

MAX_MODULE_LINES = 650
"""No module of the package is longer, without exemption: a longer one is split."""


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "finishable" else None


def _modules() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return found


def _own_room(path: Path) -> str:
    relative = path.relative_to(ROOT)
    return relative.parts[0].removesuffix(".py")


def test_every_room_has_a_rank() -> None:
    rooms = {_own_room(path) for path in _modules()} - {"__init__"}
    assert rooms <= set(RANKS), f"rank these rooms in RANKS: {sorted(rooms - set(RANKS))}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_import_runs_upwards_or_sideways(path: Path) -> None:
    room = _own_room(path)
    if room == "__init__":
        return
    wrong = []
    for line, name in _imports(path):
        target = _room(name)
        if any(name == leaf or name.startswith(f"{leaf}.") for leaf in LEAVES):
            continue
        if target is None or target == room or target not in RANKS:
            continue  # outside the package, or `from finishable import __version__`
        if RANKS[target] >= RANKS[room]:
            wrong.append(f"line {line}: {name} ({target}, rank {RANKS[target]})")
    assert not wrong, f"{room} (rank {RANKS[room]}) may only import lower ranks: {wrong}"


def _sideways_imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """The imports in ``path`` (``room/part/module.py`` under ``root``) of another sub-package
    of its room."""
    parts = path.relative_to(root).parts
    if len(parts) < 3:
        return []
    room, part = parts[0], parts[1]
    siblings = {d.name for d in (root / room).iterdir() if (d / "__init__.py").exists()} - {part}
    order = SUB_RANKS.get(room, {})
    if part in order:
        siblings -= {other for other, rank in order.items() if rank < order[part]}
    found = []
    for line, name in _imports(path):
        names = name.split(".")
        if names[:2] == ["finishable", room] and len(names) > 2 and names[2] in siblings:
            found.append((line, name))
    return found


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_sub_package_does_not_reach_into_its_siblings(path: Path) -> None:
    """``connectors/batch`` and ``connectors/streaming`` (``driver/batch`` and
    ``driver/streaming``, the coordinator's ``host`` and ``enumerator``) share only what their
    room holds beside them."""
    wrong = [f"line {line}: {name}" for line, name in _sideways_imports(path)]
    assert not wrong, f"{path.relative_to(ROOT)} imports a sibling sub-package: {wrong}"


def test_a_sideways_import_is_found(tmp_path: Path) -> None:
    for part in ("batch", "streaming"):
        (tmp_path / "connectors" / part).mkdir(parents=True)
        (tmp_path / "connectors" / part / "__init__.py").touch()
    module = tmp_path / "connectors" / "batch" / "reading.py"
    module.write_text(
        "from finishable.connectors.streaming.sink import x\n"
        "import finishable.connectors.sinks\n"
        "from finishable.connectors.batch import y\n"
    )
    assert _sideways_imports(module, tmp_path) == [(1, "finishable.connectors.streaming.sink.x")]


def test_a_sub_package_imports_only_the_siblings_ranked_below_it(tmp_path: Path) -> None:
    for part in ("job", "snapshot"):
        (tmp_path / "controller" / part).mkdir(parents=True)
        (tmp_path / "controller" / part / "__init__.py").touch()
    job = tmp_path / "controller" / "job" / "reconcile.py"
    job.write_text("from finishable.controller.snapshot import store\n")
    snapshot = tmp_path / "controller" / "snapshot" / "store.py"
    snapshot.write_text("from finishable.controller.job.reconcile import JobLoop\n")
    assert _sideways_imports(job, tmp_path) == []
    assert _sideways_imports(snapshot, tmp_path) == [
        (1, "finishable.controller.job.reconcile.JobLoop")
    ]


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_a_leaf_imports_nothing_of_the_project(leaf: str) -> None:
    path = ROOT.joinpath(*leaf.split(".")[1:]).with_suffix(".py")
    assert [name for _, name in _imports(path) if _room(name)] == []


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_longer_than_the_limit(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_MODULE_LINES, (
        f"{path.relative_to(REPO)} has {lines} lines, more than {MAX_MODULE_LINES}: split it"
    )


def _imports_of_another_tree(tree: str, path: Path) -> list[tuple[int, str]]:
    """The imports in ``path``, a module of ``tree``, of a tree it may not import."""
    others = set(TREES) - {tree, "testcluster"}
    return [(line, name) for line, name in _imports(path) if name.split(".")[0] in others]


@pytest.mark.parametrize("tree", TREES)
def test_a_test_tree_imports_only_itself_the_test_cluster_and_the_package(tree: str) -> None:
    paths = sorted(p for p in (REPO / tree).rglob("*.py") if "__pycache__" not in p.parts)
    assert paths, f"{tree}/ has no modules"
    wrong = [
        f"{path.relative_to(REPO)}:{line}: import {name}"
        for path in paths
        for line, name in _imports_of_another_tree(tree, path)
    ]
    assert not wrong, f"{tree}/ may import only itself, testcluster and finishable: {wrong}"


def test_an_import_of_another_tree_is_found(tmp_path: Path) -> None:
    module = tmp_path / "example.py"
    module.write_text(
        "import e2e\n"
        "from e2e.clickcounts import committed\n"
        "from testcluster.waiting import wait_for\n"
        "from tests.support import spark\n"
        "import finishable\n"
        "from . import sibling\n"
        "def later():\n"
        "    import benchmarks.batch as batch\n"
    )
    assert _imports_of_another_tree("tests", module) == [
        (1, "e2e"),
        (2, "e2e.clickcounts.committed"),
        (8, "benchmarks.batch"),
    ]
    assert [name for _, name in _imports_of_another_tree("testcluster", module)] == [
        "e2e",
        "e2e.clickcounts.committed",
        "tests.support.spark",
        "benchmarks.batch",
    ]


ARCHITECTURE = REPO / "docs" / "architecture.md"
MAP_HEADING = "## Module map"
MAP_INTRO = "One line per module, from each module's docstring (read the docstring for the why)."


def summary_of(path: Path) -> str:
    """A module's line in the map: its docstring's first paragraph, on one line, Markdown quotes."""
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = " ".join(docstring.split("\n\n")[0].split())
    return first.replace("``", "`").removesuffix(".")


def module_map() -> str:
    """The map docs/architecture.md must hold: the rooms by rank, each module of each on a line."""
    lines = [MAP_HEADING, "", MAP_INTRO]
    for room in RANKS:
        package = ROOT / room
        paths = (
            sorted(p for p in package.rglob("*.py") if p.name != "__init__.py")
            if package.is_dir()
            else [ROOT / f"{room}.py"]
        )
        lines += ["", f"**{room}/**" if package.is_dir() else f"**{room}.py**", ""]
        lines += [f"- `{p.relative_to(ROOT).as_posix()}`: {summary_of(p)}" for p in paths]
    return "\n".join(lines) + "\n"


def written_map(text: str) -> str:
    """The map as docs/architecture.md has it: from its heading to the next section's."""
    start = text.index(MAP_HEADING)
    end = text.index("\n## ", start + len(MAP_HEADING))
    return text[start:end]


def test_the_module_map_lists_every_module_with_its_docstring_and_no_other() -> None:
    """The map cannot drift: a module added, moved, removed or re-described fails here until
    `python tests/test_architecture.py` rewrites the map."""
    modules = {p for p in ROOT.rglob("*.py") if p.name != "__init__.py"}
    roomless = sorted(str(p.relative_to(ROOT)) for p in modules if _own_room(p) not in RANKS)
    assert not roomless, f"modules in no ranked room: {roomless}"
    assert written_map(ARCHITECTURE.read_text()) == module_map(), (
        "docs/architecture.md's module map is not the modules' docstrings: run "
        "`python tests/test_architecture.py` to rewrite it"
    )


if __name__ == "__main__":
    text = ARCHITECTURE.read_text()
    ARCHITECTURE.write_text(text.replace(written_map(text), module_map()))
