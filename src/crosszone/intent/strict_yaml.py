"""The YAML dialect of intent files: no duplicate keys, no YAML 1.1 number or boolean surprises.

PyYAML implements YAML 1.1, whose implicit typing reads things nobody means in an intent:
`vni: 01751` is the octal 1001, `0x3e9`, `1_001` and `16:41` (base 60) are integers too, `on`,
`off`, `yes` and `no` are booleans, and a key written twice keeps its last value silently. An
intent is read with `StrictLoader` instead, which keeps libyaml's C parser (a 40 MB file parses at
the same speed) and changes only what the parser's scalars and mappings become:

- a plain scalar is an integer only when it is plain decimal (`-?(0|[1-9][0-9]*)`), a boolean only
  when it is `true` or `false` (any case of YAML 1.2's core schema), null when it is empty, `~` or
  `null`; everything else is a string. An integer field that receives `01751` therefore fails the
  schema, and `yaml11_hint` names what YAML 1.1 would have read, so the error says why.
- a mapping that names a key twice raises `DuplicateKeyError` (with the second key's line).

Aliases stay allowed: PyYAML shares the aliased object instead of copying it, and the schema stops
at the first wrong shape, so nested aliases do not multiply the work (tested with a 10^9-node
expansion).

Every YAML input of the project is read in this dialect: the intent (`StrictLoader`), and the
inputs with measured or priced quantities (`StrictNumbersLoader`, which adds decimal fractions):
the planner's scenario and catalog, the emulator's topology, a migration's deployment file and
guard limits, the probe's configuration and the legacy adapter's. `load` reads one document and
turns a YAML error into `YamlInputError` naming the source and the line; `where` gives the line
of a value the schema refused and, when YAML 1.1 would have read it differently, what it would
have read, so the caller's message says why `no`, `010` or `1:30` is not what it looks like.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import yaml

_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MERGE_TAG = "tag:yaml.org,2002:merge"
STR_TAG = "tag:yaml.org,2002:str"


class DuplicateKeyError(yaml.YAMLError):
    """A mapping names the same key twice; `line` (1-based) and `column` are the second one's."""

    def __init__(self, key: object, line: int, column: int) -> None:
        super().__init__(f"key {key!r} is given twice in the same mapping")
        self.key = key
        self.line = line
        self.column = column


class StrictLoader(_Base):  # type: ignore[misc]
    """libyaml's parser with YAML 1.2-core scalars and no duplicate keys."""

    yaml_implicit_resolvers: ClassVar[dict[str, list[tuple[str, re.Pattern[str]]]]] = {}

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """The mapping, after refusing a key written twice (merged `<<` keys may be overridden)."""
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:
                    continue  # unhashable: the base constructor rejects it with its own error
                if duplicate:
                    raise DuplicateKeyError(key, key_node.start_mark.line + 1,
                                            key_node.start_mark.column)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"))
StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^-?(?:0|[1-9][0-9]*)$"), list("-0123456789"))
StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
StrictLoader.add_implicit_resolver(MERGE_TAG, re.compile(r"^(?:<<)$"), ["<"])


def yaml11_reading(raw: str) -> object | None:
    """What YAML 1.1 (PyYAML's default) reads a plain scalar as, when that is not a string."""
    tag = yaml.resolver.Resolver().resolve(yaml.ScalarNode, raw, (True, False))
    if tag == STR_TAG:
        return None
    try:
        value = yaml.SafeLoader(raw).construct_object(yaml.ScalarNode(tag, raw))
    except (yaml.YAMLError, ValueError, OverflowError):
        return None
    return None if isinstance(value, str) else value


def yaml11_hint(node: yaml.Node | None) -> str | None:
    """An error message for a plain scalar that YAML 1.1 would read as a number or boolean."""
    # only a plain scalar that this dialect read as a string while YAML 1.1 would not: a quoted
    # "1001" or an out-of-range decimal is the schema's own error
    if not isinstance(node, yaml.ScalarNode) or node.tag != STR_TAG:
        return None
    if node.style not in (None, ""):  # libyaml marks a plain scalar "", PyYAML None
        return None
    value = yaml11_reading(str(node.value))
    if value is None:
        return None
    if isinstance(value, bool):
        return (f"{node.value} is not a boolean here (YAML 1.1 would read it as {value}): "
                "write true or false")
    if isinstance(value, int):
        return (f"{node.value} is not a plain decimal integer (YAML 1.1 would read it as "
                f"{value}): write integers in decimal, without leading zeros, underscores, "
                "0x/0o/0b prefixes or colons")
    return f"{node.value} is not a value of this field (YAML 1.1 would read it as {value!r})"


def path_of_key(root: yaml.Node | None, line: int, column: int) -> tuple[Any, ...]:
    """The document path of the mapping key written at (1-based line, column), or ()."""
    stack: list[tuple[yaml.Node, tuple[Any, ...]]] = [(root, ())] if root is not None else []
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                here = path + (getattr(k, "value", "?"),)
                if k.start_mark.line + 1 == line and k.start_mark.column == column:
                    return here
                stack.append((v, here))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, path + (i,)) for i, v in enumerate(node.value))
    return ()


def line_of(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
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


def node_at(root: yaml.Node | None, loc: tuple[Any, ...]) -> yaml.Node | None:
    """The YAML node at a document path, or None."""
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(
                node.value):
            node = node.value[part]
        else:
            return None
    return node



class StrictNumbersLoader(StrictLoader):
    """StrictLoader that also reads decimal fractions as floats: for the inputs with measured or
    priced quantities (the planner's scenarios and catalog), where `0.85` is a number. A float is
    written with a point or an exponent (`0.5`, `.5`, `1e9`, `2.5E-3`), plus `.inf` and `.nan`;
    `01751` and `1_000.5` stay strings, so the schema refuses them as it does in an intent."""

    yaml_implicit_resolvers: ClassVar[dict[str, list[tuple[str, re.Pattern[str]]]]] = {
        k: list(v) for k, v in StrictLoader.yaml_implicit_resolvers.items()}


StrictNumbersLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:(?:0|[1-9][0-9]*)\.[0-9]*|\.[0-9]+|(?:0|[1-9][0-9]*)(?:\.[0-9]*)?"
               r"[eE][-+]?[0-9]+)|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


class YamlInputError(ValueError):
    """A YAML input that cannot be read: `source`, the 1-based `line` (None when unknown) and
    the `problem`; its text is `source:line: problem`."""

    def __init__(self, source: str, line: int | None, problem: str) -> None:
        super().__init__(f"{source}:{line}: {problem}" if line else f"{source}: {problem}")
        self.source = source
        self.line = line
        self.problem = problem


def load(text: str, source: str, loader: Any = StrictNumbersLoader) -> Any:
    """One YAML document read in this dialect (`StrictNumbersLoader` unless told); a duplicate
    key or a syntax error is a YamlInputError naming `source` and the line."""
    try:
        return yaml.load(text, Loader=loader)
    except DuplicateKeyError as exc:
        raise YamlInputError(source, exc.line, str(exc)) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        what = " ".join(x for x in (exc.context, exc.problem) if x)
        raise YamlInputError(source, line, f"not valid YAML: {what}") from None
    except yaml.YAMLError as exc:
        raise YamlInputError(source, None, f"not valid YAML: {exc}") from None


def yaml11_note(node: yaml.Node | None) -> str | None:
    """'YAML 1.1 would read `no` as False, ...' for a plain scalar this dialect read as a string
    and YAML 1.1 as something else (a boolean, an octal or base-60 integer, a date), else None."""
    if not isinstance(node, yaml.ScalarNode) or node.tag != STR_TAG:
        return None
    if node.style not in (None, ""):
        return None
    value = yaml11_reading(str(node.value))
    if value is None:
        return None
    return (f"{node.value} is the string {str(node.value)!r} here, which YAML 1.1 would read as "
            f"{value!r}: write true/false for a boolean and integers in plain decimal")


def where(text: str, loc: tuple[Any, ...]) -> tuple[int | None, str | None]:
    """(line, YAML 1.1 note) of the value at document path `loc` of `text`: for an error the
    schema found after `load` succeeded."""
    try:
        root = yaml.compose(text, Loader=StrictLoader)
    except (yaml.YAMLError, RecursionError):
        return None, None
    return line_of(root, loc), yaml11_note(node_at(root, loc))
