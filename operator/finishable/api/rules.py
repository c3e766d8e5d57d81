"""Cross-field rules of the custom resources, written once for two checkers.

A rule the schema's shape cannot say (two fields that exclude each other, a bound that depends
on another field, a name the operator owns) is an expression tree built here. It renders as a
CEL rule in the CRD's ``x-kubernetes-validations``, so that the API server refuses the object at
``kubectl apply``; and it evaluates in Python with CEL's meaning, so that the models (the
operator, ``finishable validate``, ``finishable run``) refuse exactly the same objects with the
same message. Neither form is written by hand, so the two cannot drift; the tests apply every
rule's invalid examples to a real API server and to the models.

Expressions see an object as the API server stores it: camelCase keys, defaults filled in, unset
optional fields absent. Python evaluates them on the model's wire form (:func:`wire`). A field
that may be absent must be guarded with :func:`has` before it is read, as in CEL, where reading
it is an error; ``&&``, ``||`` and the list macros treat errors as CEL does (``false && error``
is false), so a rule that forgets a guard fails here as it would on the server.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from pydantic import BaseModel


class Absent(LookupError):
    """A rule read a field the object does not have (CEL: "no such key")."""


class Expr:
    """A CEL expression that Python can evaluate too."""

    def cel(self) -> str:
        raise NotImplementedError

    def eval(self, scope: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    # -- building ---------------------------------------------------------------------------

    def eq(self, other: object) -> Expr:
        return Binary("==", self, lit(other))

    def ne(self, other: object) -> Expr:
        return Binary("!=", self, lit(other))

    def le(self, other: object) -> Expr:
        return Binary("<=", self, lit(other))

    def starts_with(self, prefix: object) -> Expr:
        return Call(self, "startsWith", (lit(prefix),))

    def matches(self, pattern: str) -> Expr:
        return Call(self, "matches", (Literal(pattern),))

    def size(self) -> Expr:
        return Call(self, "size", ())

    def is_in(self, collection: object) -> Expr:
        return Binary("in", self, lit(collection))

    def all(self, body: Callable[[Path], Expr]) -> Expr:
        return Macro("all", self, body)

    def exists(self, body: Callable[[Path], Expr]) -> Expr:
        return Macro("exists", self, body)

    def filter(self, body: Callable[[Path], Expr]) -> Expr:
        return Macro("filter", self, body)

    def map(self, body: Callable[[Path], Expr]) -> Expr:
        return Macro("map", self, body)

    def first(self) -> Expr:
        return Index(self, 0)


def lit(value: object) -> Expr:
    """``value`` as an expression (expressions pass through)."""
    return value if isinstance(value, Expr) else Literal(value)


@dataclass(frozen=True, eq=False)
class Literal(Expr):
    value: object

    def cel(self) -> str:
        return _cel_literal(self.value)

    def eval(self, scope: Mapping[str, Any]) -> Any:
        return self.value


def _cel_literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_cel_literal(item) for item in value) + "]"
    raise TypeError(f"no CEL literal for {value!r}")


@dataclass(frozen=True, eq=False)
class Path(Expr):
    """A field of the object (``self.a.b``) or of a macro's variable (``c.name``)."""

    root: str
    keys: tuple[str, ...] = ()

    def at(self, dotted: str) -> Path:
        return Path(self.root, (*self.keys, *dotted.split(".")))

    def cel(self) -> str:
        return ".".join((self.root, *self.keys))

    def eval(self, scope: Mapping[str, Any]) -> Any:
        value = scope[self.root]
        for key in self.keys:
            if not isinstance(value, Mapping) or value.get(key) is None:
                raise Absent(f"no such key: {key} (in {self.cel()})")
            value = value[key]
        return value


SELF = Path("self")


def field(dotted: str) -> Path:
    """A field of the object the rule is on: ``field("restoreFrom.savepoint")``."""
    return SELF.at(dotted)


@dataclass(frozen=True, eq=False)
class Has(Expr):
    """``has(x.a) && has(x.a.b)``: every step of the path is set."""

    path: Path

    def cel(self) -> str:
        steps = [Path(self.path.root, self.path.keys[: n + 1]) for n in range(len(self.path.keys))]
        return " && ".join(f"has({step.cel()})" for step in steps) or "true"

    def eval(self, scope: Mapping[str, Any]) -> bool:
        try:
            self.path.eval(scope)
        except Absent:
            return False
        return True


def has(path: Path) -> Expr:
    return Has(path)


_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda a, b: bool(a == b),
    "!=": lambda a, b: bool(a != b),
    "<=": lambda a, b: bool(a <= b),
    "<": lambda a, b: bool(a < b),
    "in": lambda a, b: a in b,
    "+": lambda a, b: a + b,
}


@dataclass(frozen=True, eq=False)
class Binary(Expr):
    op: str
    left: Expr
    right: Expr

    def cel(self) -> str:
        return f"({self.left.cel()} {self.op} {self.right.cel()})"

    def eval(self, scope: Mapping[str, Any]) -> Any:
        return _COMPARISONS[self.op](self.left.eval(scope), self.right.eval(scope))


@dataclass(frozen=True, eq=False)
class Logic(Expr):
    """``&&`` or ``||`` over operands, with CEL's commutative treatment of errors."""

    op: str
    operands: tuple[Expr, ...]

    def cel(self) -> str:
        return "(" + f" {self.op} ".join(operand.cel() for operand in self.operands) + ")"

    def eval(self, scope: Mapping[str, Any]) -> bool:
        # the value that decides at once: true for ||, false for &&
        return _decided((partial(o.eval, scope) for o in self.operands), self.op == "||")


def _decided(values: Iterable[Callable[[], Any]], decisive: bool) -> bool:
    """CEL's ``||`` (``decisive`` true) or ``&&`` (false) over lazily evaluated values, and its
    ``exists`` and ``all``: one decisive value decides even when others are errors; otherwise an
    error is the result."""
    error: Absent | None = None
    for value in values:
        try:
            if bool(value()) is decisive:
                return decisive
        except Absent as absent:
            error = error or absent
    if error is not None:
        raise error
    return not decisive


def all_of(*operands: Expr) -> Expr:
    return Logic("&&", operands)


def any_of(*operands: Expr) -> Expr:
    return Logic("||", operands)


def implies(condition: Expr, consequence: Expr) -> Expr:
    return any_of(Not(condition), consequence)


@dataclass(frozen=True, eq=False)
class Not(Expr):
    operand: Expr

    def cel(self) -> str:
        return f"!({self.operand.cel()})"

    def eval(self, scope: Mapping[str, Any]) -> bool:
        return not self.operand.eval(scope)


_METHODS: dict[str, Callable[..., Any]] = {
    "startsWith": lambda value, prefix: str(value).startswith(prefix),
    "matches": lambda value, pattern: re.search(pattern, str(value)) is not None,
    "size": len,
}


@dataclass(frozen=True, eq=False)
class Call(Expr):
    receiver: Expr
    name: str
    args: tuple[Expr, ...]

    def cel(self) -> str:
        return f"{self.receiver.cel()}.{self.name}({', '.join(arg.cel() for arg in self.args)})"

    def eval(self, scope: Mapping[str, Any]) -> Any:
        arguments = [arg.eval(scope) for arg in self.args]
        return _METHODS[self.name](self.receiver.eval(scope), *arguments)


@dataclass(frozen=True, eq=False)
class Index(Expr):
    collection: Expr
    index: int

    def cel(self) -> str:
        return f"{self.collection.cel()}[{self.index}]"

    def eval(self, scope: Mapping[str, Any]) -> Any:
        return list(self.collection.eval(scope))[self.index]


@dataclass(frozen=True, eq=False)
class Text(Expr):
    """``string(x)``: a value in a message."""

    operand: Expr

    def cel(self) -> str:
        return f"string({self.operand.cel()})"

    def eval(self, scope: Mapping[str, Any]) -> str:
        value = self.operand.eval(scope)
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)


class Macro(Expr):
    """A list or map macro (``all``, ``exists``, ``filter``, ``map``) over a fresh variable;
    over a map it ranges over the keys, as in CEL."""

    _depth = 0  # nested macros get distinct variable names

    def __init__(self, kind: str, target: Expr, body: Callable[[Path], Expr]) -> None:
        Macro._depth += 1
        try:
            self.kind = kind
            self.target = target
            self.var = f"x{Macro._depth}"
            self.body = body(Path(self.var))
        finally:
            Macro._depth -= 1

    def cel(self) -> str:
        return f"{self.target.cel()}.{self.kind}({self.var}, {self.body.cel()})"

    def eval(self, scope: Mapping[str, Any]) -> Any:
        items = list(self.target.eval(scope))
        if self.kind == "map":
            return [self.body.eval({**scope, self.var: item}) for item in items]
        if self.kind == "filter":
            return [item for item in items if self.body.eval({**scope, self.var: item})]
        values = (partial(self.body.eval, {**scope, self.var: item}) for item in items)
        return _decided(values, self.kind == "exists")


Message = Sequence[str | Expr]


@dataclass(frozen=True)
class Rule:
    """One cross-field rule: what must hold, and what to tell a user when it does not.

    ``message`` is text and expressions (the offending values); ``field`` points the API
    server's error at a field below the object (``.snapshotRef``); ``reason`` is its kind
    (``FieldValueInvalid``, ``FieldValueForbidden``, ``FieldValueRequired``)."""

    check: Expr
    message: Message
    field: str | None = None
    reason: str = "FieldValueInvalid"

    def crd(self) -> dict[str, Any]:
        """The rule as an entry of ``x-kubernetes-validations``."""
        entry: dict[str, Any] = {"rule": self.check.cel()}
        texts = [part if isinstance(part, str) else f"<{part.cel()}>" for part in self.message]
        entry["message"] = "".join(texts)
        values = [part for part in self.message if isinstance(part, Expr)]
        if values:
            # format() of CEL's string library: a concatenation of values is estimated as the
            # longest string the server could receive, and refused as too costly
            template = "".join(
                part.replace("%", "%%") if isinstance(part, str) else "%s" for part in self.message
            )
            arguments = ", ".join(value.cel() for value in values)
            entry["messageExpression"] = f"{_cel_literal(template)}.format([{arguments}])"
        if self.field:
            entry["fieldPath"] = self.field
        entry["reason"] = self.reason
        return entry

    def violation(self, obj: Mapping[str, Any]) -> str | None:
        """The message when ``obj`` breaks the rule; ``None`` when it holds."""
        scope = {"self": obj}
        try:
            holds = bool(self.check.eval(scope))
        except Absent as absent:  # a rule without its guard: the server refuses such objects too
            return f"rule {self.check.cel()} cannot be evaluated: {absent}"
        if holds:
            return None
        return "".join(
            part if isinstance(part, str) else Text(part).eval(scope) for part in self.message
        )


class RuleViolations(ValueError):
    """The rules an object breaks, each with its message; the rule's ``field`` says which field
    to name (relative, ``.shuffle``; none: the object itself), as the API server does."""

    def __init__(self, broken: Sequence[tuple[Rule, str]]) -> None:
        self.broken = tuple(broken)
        super().__init__("; ".join(message for _rule, message in self.broken))


def check(rules: Iterable[Rule], obj: Mapping[str, Any]) -> None:
    """Raise :class:`RuleViolations` naming every rule ``obj`` breaks."""
    broken = [(rule, message) for rule in rules if (message := rule.violation(obj)) is not None]
    if broken:
        raise RuleViolations(broken)


def wire(model: BaseModel) -> dict[str, Any]:
    """A model as the API server stores it, which is what rules read."""
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def unset(path: Path, model: type[BaseModel]) -> Expr:
    """``path`` (a field of type ``model``) holds nothing but ``model``'s defaults: every
    optional field absent, every other at its default, as a conjunction generated from the
    model, so that it follows the model's fields."""
    terms: list[Expr] = []
    for name, info in model.model_fields.items():
        key = path.at(info.alias or name)
        annotation = info.annotation
        nested: type[BaseModel] | None = next(
            (
                candidate
                for candidate in getattr(annotation, "__args__", (annotation,))
                if isinstance(candidate, type) and issubclass(candidate, BaseModel)
            ),
            None,
        )
        if info.default is None:
            terms.append(Not(Has(key)))
        elif nested is not None and info.default_factory is not None:
            terms.append(unset(key, nested))  # a nested model made by its own defaults
        elif isinstance(info.default, bool | int | str):
            terms.append(Binary("==", key, Literal(info.default)))
        else:
            raise TypeError(f"{model.__name__}.{name}: no rule for its default")
    return all_of(*terms)


def schema_validations(rules: Sequence[Rule]) -> list[dict[str, Any]]:
    return [rule.crd() for rule in rules]
