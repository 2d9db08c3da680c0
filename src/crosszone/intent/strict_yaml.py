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
