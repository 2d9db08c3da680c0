"""Reading intent text: the YAML, and where in it a problem is (file line, object, field).

`crosszone.intent.cluster.parse_cluster` is the one entry point (YAML -> schema -> checks); this
module holds what it needs from the YAML side: reading a file, the node tree (built only when an
error needs a line number), the line of a document path, and a schema error as (path, message).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from crosszone.intent.errors import InvalidIntentError
from crosszone.intent.hosts import HostError
from crosszone.intent.strict_yaml import StrictLoader, line_of, node_at

# The one YAML dialect of intents (strict_yaml.py): libyaml's speed, YAML 1.2-core scalars, no
# duplicate keys.
Loader = StrictLoader


def compose(text: str) -> yaml.Node | None:
    """The YAML node tree (only built when an error needs a line number)."""
    try:
        return yaml.compose(text, Loader=Loader)
    except (yaml.YAMLError, RecursionError):
        return None


def line_in_block(root: yaml.Node | None, loc: tuple[Any, ...], msg: str) -> int | None:
    """Line of a bad prefix ('prefix #N ...') in a compact block or a list, else of the field."""
    line = line_of(root, loc) if root is not None else None
    if "prefix #" not in msg or line is None:
        return line
    try:
        index = int(msg.split("prefix #", 1)[1].split()[0].rstrip(":"))
    except ValueError:
        return line
    node = node_at(root, loc)
    if isinstance(node, yaml.SequenceNode) and index < len(node.value):
        # the list form (every version-1 file): the item's own line
        return int(node.value[index].start_mark.line) + 1
    if isinstance(node, yaml.ScalarNode):
        before = " ".join(str(node.value).split()[:index])
        lines_before = str(node.value)[: len(before) + 1].count("\n")
        return line + lines_before + (1 if node.style in ("|", ">") else 0)
    return line


def block_line(root: yaml.Node | None, key: str, offset: int) -> int | None:
    """File line of line `offset` (0-based) of the block scalar at top-level key."""
    if not isinstance(root, yaml.MappingNode):
        return None
    node = next((v for k, v in root.value if getattr(k, "value", None) == key), None)
    if node is None:
        return None
    return node.start_mark.line + 1 + offset + (1 if getattr(node, "style", None) in ("|", ">")
                                                 else 0)


def host_block_error(exc: HostError, text: str, path: str | None) -> InvalidIntentError:
    """A bad line of `hosts_compact` as the project's error, on the host's own line."""
    where = f"hosts_compact[{exc.index}]" + (f".{exc.field}" if exc.field else "")
    return InvalidIntentError(exc.why, path=path, where=where,
                              line=block_line(compose(text), "hosts_compact", exc.line))


def clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """A pydantic error location without validator and union member names: the document path."""
    return tuple(p for p in loc if not (isinstance(p, str) and (
        p.startswith("function-") or "[" in p or p in ("str", "list", "int", "bool"))))


def validation_problem(exc: ValidationError) -> tuple[tuple[Any, ...], str]:
    """(document path, message) of a schema error, for InvalidIntentError."""
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
