"""Read an intent file: YAML -> schema -> cross checks -> frozen `Intent`.

Every failure, whatever its cause (YAML syntax, a wrong type, a dangling reference), becomes one
`InvalidIntentError` naming the file, the line, the object and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from crosszone.intent.errors import InvalidIntentError
from crosszone.intent.schema import Intent
from crosszone.intent.validate import IntentProblem, as_error, check, format_loc, vpc_routes


def _line_of(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """The 1-based line of the YAML node at loc, or of the deepest ancestor found."""
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
            if nxt is None:
                key = next((k for k, _ in node.value if getattr(k, "value", None) == part), None)
                return key.start_mark.line + 1 if key is not None else line
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return line
            node = node.value[part]
        else:
            return line
        line = node.start_mark.line + 1
    return line


def parse_intent(text: str, path: str | None = None) -> Intent:
    """Validate intent YAML text into a frozen Intent, or raise InvalidIntentError."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise InvalidIntentError(
            f"not valid YAML: {getattr(exc, 'problem', exc)}", path=path, line=line
        ) from None
    except RecursionError:
        raise InvalidIntentError("YAML nested too deeply", path=path) from None
    if not isinstance(data, dict):
        raise InvalidIntentError(
            "the document must be a mapping with version, gateway, vpcs", path=path, line=1
        )
    try:
        intent = Intent.model_validate(data)
    except ValidationError as exc:
        loc, msg = validation_problem(exc)
        raise InvalidIntentError(
            msg, path=path, line=_line_of(root, loc), where=format_loc(loc)
        ) from None
    try:
        check(intent)
    except IntentProblem as problem:
        raise as_error(problem, path, _line_of(root, problem.loc)) from None
    return intent


def clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """A pydantic error location without validator and union member names: the document path."""
    return tuple(p for p in loc if not (isinstance(p, str) and (
        p.startswith("function-") or "[" in p or p in ("str", "list", "int", "bool"))))


def validation_problem(exc: ValidationError) -> tuple[tuple[Any, ...], str]:
    """(document path, message) of a schema error, for InvalidIntentError (both versions)."""
    err = exc.errors()[0]
    loc = clean_loc(tuple(err["loc"]))
    msg = err["msg"].removeprefix("Value error, ")
    # the key itself, even when clean_loc dropped it (a key that looks like "x[1]")
    key = err["loc"][-1] if err["loc"] else None
    if err["type"] == "extra_forbidden":
        msg = f"unknown key {key!r}"
    elif err["type"] == "missing":
        msg = f"missing required key {key!r}"
    return loc, msg


def read_intent_text(path: str | Path) -> str:
    """The text of an intent file, or InvalidIntentError naming why it cannot be read."""
    p = Path(path)
    try:
        return p.read_text()
    except OSError as exc:
        raise InvalidIntentError(f"cannot read: {exc.strerror}", path=str(p)) from None
    except UnicodeDecodeError:
        raise InvalidIntentError("not UTF-8 text", path=str(p)) from None


def load_intent(path: str | Path) -> LoadedIntent:
    """Read and validate an intent file."""
    return LoadedIntent(parse_intent(read_intent_text(path), str(path)), str(path))


class LoadedIntent:
    """A validated intent and the file it came from."""

    def __init__(self, intent: Intent, path: str | None) -> None:
        self.intent = intent
        self.path = path

    def table_counts(self) -> dict[str, int]:
        """Entries the intent needs: VPCs, routes (both families) and host addresses."""
        routes = sum(len(vpc_routes(self.intent, v)) for v in self.intent.vpcs)
        hosts = sum(len(h.addresses) for h in self.intent.hosts)
        return {"vpcs": len(self.intent.vpcs), "routes": routes, "hosts": hosts}
