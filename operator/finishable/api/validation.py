"""Turn a manifest into a model or into problems a person can act on.

A user's mistake must never surface as a traceback: every problem names the field as it is
written in YAML (``spec.executor.instances``), what was wrong with the value, and what is accepted.
The same problems serve ``finishable validate``, ``finishable run`` and the operator's
``Ready=False`` condition.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from finishable.api.manifest import FinishableSparkJob
from finishable.api.models import API_GROUP, API_VERSION, KIND
from finishable.api.rules import RuleViolations
from finishable.api.spec import FinishableSparkJobSpec


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a manifest: the field's dotted path and a message."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class InvalidManifest(ValueError):
    """A manifest that can never run; carries every problem found, not just the first."""

    def __init__(self, problems: Sequence[Problem], source: str = "") -> None:
        self.problems = tuple(problems)
        self.source = source
        prefix = f"{source}: " if source else ""
        super().__init__("\n".join(f"{prefix}{problem}" for problem in self.problems))


_BOUND_ERRORS = frozenset({"greater_than_equal", "less_than_equal", "greater_than", "less_than"})


def _dotted(location: Sequence[int | str]) -> str:
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _model_at(root: type[BaseModel], location: Sequence[int | str]) -> type[BaseModel] | None:
    """The model class that owns the field at ``location`` (for listing known field names)."""
    model: type[BaseModel] | None = root
    for part in location:
        if model is None or isinstance(part, int):
            continue
        field = next((f for name, f in model.model_fields.items() if part in (name, f.alias)), None)
        if field is None:
            return None
        annotation = field.annotation
        candidates = getattr(annotation, "__args__", (annotation,))
        model = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
    return model


def _known_fields(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def problems_from_error(
    error: ValidationError, root: type[BaseModel], prefix: Sequence[str] = ()
) -> list[Problem]:
    """Translate pydantic's errors into problems named by their YAML path."""
    problems: list[Problem] = []
    for item in error.errors(include_url=False):
        location = [*prefix, *item["loc"]]
        kind = item["type"]
        value = item.get("input")
        message = str(item["msg"])
        if kind == "value_error":
            error_ = item.get("ctx", {}).get("error")
            if isinstance(error_, RuleViolations):
                for rule, broken in error_.broken:
                    named = [*location, *filter(None, (rule.field or "").split("."))]
                    problems.append(Problem(_dotted(named), broken))
                continue
            message = message.removeprefix("Value error, ")
        elif kind == "extra_forbidden":
            field_name = str(location[-1])
            owner = _model_at(root, item["loc"][:-1])
            known = _known_fields(owner) if owner else []
            close = difflib.get_close_matches(field_name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            listing = f" Known fields here: {', '.join(known)}." if known else ""
            message = f"unknown field{hint}{listing}"
        elif kind == "missing":
            message = "required field is missing"
        elif kind == "enum":
            expected = item.get("ctx", {}).get("expected", "")
            message = f"{_describe(value)} is not one of {expected}"
        elif kind.endswith(("_type", "_parsing")) or kind in _BOUND_ERRORS:
            message = f"{message}, got {_describe(value)}"
        problems.append(Problem(_dotted(location), message))
    return problems


def parse_spec(spec: Mapping[str, Any]) -> FinishableSparkJobSpec:
    """Validate a spec (as the operator receives it); raise :class:`InvalidManifest`."""
    try:
        return FinishableSparkJobSpec.model_validate(dict(spec))
    except ValidationError as error:
        raise InvalidManifest(
            problems_from_error(error, FinishableSparkJobSpec, prefix=("spec",))
        ) from None


def parse_manifest(document: object, source: str = "") -> FinishableSparkJob:
    """Validate a whole manifest; raise :class:`InvalidManifest` listing every problem."""
    if not isinstance(document, Mapping):
        raise InvalidManifest(
            [Problem("", f"expected a {KIND} object, got {type(document).__name__}")], source
        )
    problems: list[Problem] = []
    api_version = document.get("apiVersion")
    kind = document.get("kind")
    if api_version != f"{API_GROUP}/{API_VERSION}" or kind != KIND:
        problems.append(
            Problem(
                "",
                f"not a {KIND} (apiVersion {api_version!r}, kind {kind!r}); expected "
                f"apiVersion: {API_GROUP}/{API_VERSION} and kind: {KIND}",
            )
        )
        raise InvalidManifest(problems, source)
    try:
        return FinishableSparkJob.model_validate(dict(document))
    except ValidationError as error:
        raise InvalidManifest(problems_from_error(error, FinishableSparkJob), source) from None


def load_documents(path: Path) -> Iterator[tuple[str, object]]:
    """Yield ``(source, document)`` for each YAML document in a file; errors name the file.

    Raises :class:`InvalidManifest` for an unreadable file or invalid YAML.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InvalidManifest([Problem("", f"cannot read: {error.strerror}")], str(path)) from None
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise InvalidManifest([Problem("", f"invalid YAML: {where}{problem}")], str(path)) from None
    if not documents:
        raise InvalidManifest([Problem("", "the file holds no YAML document")], str(path))
    for index, document in enumerate(documents):
        source = str(path) if len(documents) == 1 else f"{path}#{index + 1}"
        yield source, document


def load_job(path: Path, *, local: bool = False) -> FinishableSparkJob:
    """The single FinishableSparkJob of a manifest file (what ``finishable run`` takes, with
    ``local``: refusing what only the operator can do)."""
    jobs = [parse_manifest(document, source) for source, document in load_documents(path)]
    if len(jobs) != 1:
        raise InvalidManifest(
            [Problem("", f"expected one {KIND} in the file, found {len(jobs)}")], str(path)
        )
    ref = jobs[0].spec.restore_from.snapshot_ref
    if local and ref:
        message = (
            f"{ref!r} names a FinishableSparkSnapshot, which only the operator resolves; "
            "locally, give its location as spec.restoreFrom.savepoint "
            f"(kubectl get fsjsnap {ref} -o jsonpath='{{.status.location}}')"
        )
        raise InvalidManifest([Problem("spec.restoreFrom.snapshotRef", message)], str(path))
    return jobs[0]
