"""YAML as users write it, read with bounds: safe types only, no duplicate keys, a bounded
nesting depth, and aliases that cannot expand a small file into a huge document.

PyYAML keeps an alias as a reference to its anchor's node, so composing a "billion laughs"
file is cheap; the blow-up comes later, from whatever walks the data (validation, error
messages, the grid). `load_yaml` measures the composed node graph with every alias
expanded, in time linear in the file, and refuses it before anything is constructed.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from ..errors import brief
from ..model.files import json_int
from .schema import FLOAT_TEXT, INT_TEXT

#: Deepest nesting of mappings and sequences a file may have (a sweep file needs 3).
MAX_DEPTH = 64
#: Most nodes aliases may add to a document once expanded (beyond the file's own nodes).
MAX_ALIAS_NODES = 100_000
_MERGE_TAG = "tag:yaml.org,2002:merge"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_SATURATED = 1 << 62


class YamlInputError(yaml.YAMLError):
    """A file that parses but may not be used: one line per problem, file name excluded."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class BoundedSafeLoader(yaml.SafeLoader):
    """A SafeLoader that reports duplicate keys (in any mapping, at any depth) and stops
    composing at MAX_DEPTH levels of nesting."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.duplicates: list[tuple[int, str]] = []
        self._checked: set[int] = set()

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.depth >= MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise YamlInputError([f"nested deeper than {MAX_DEPTH} levels at line {mark.line + 1}"])
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        # Before merge keys (<<) are flattened into the mapping: a key a merge brings in
        # may be overridden, only keys written twice in one mapping are duplicates.
        self._check_duplicates(node)
        super().flatten_mapping(node)

    def _check_duplicates(self, node: yaml.MappingNode) -> None:
        if id(node) in self._checked:
            return
        self._checked.add(id(node))
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            try:
                seen = first.get(key)
                if seen is None:
                    first[key] = line
                    continue
            except TypeError:  # an unhashable key: construct_mapping reports it
                continue
            where = f"at lines {seen} and {line}" if seen != line else f"twice at line {line}"
            self.duplicates.append((line, f"duplicate key {brief(key)} {where}"))


def _decimal_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    """An integer, at most as many digits as a JSON file's (files.json_int); the line of
    one longer is named, where Python would advise raising its conversion limit."""
    try:
        return json_int(loader.construct_scalar(node))
    except ValueError as exc:
        raise ValueError(f"{exc} (line {node.start_mark.line + 1})") from None


# Numbers are read as the flags read them (schema.INT_TEXT, FLOAT_TEXT): YAML 1.1 wants a
# dot before an exponent and a sign in it (2e-2 and 1e3 would be text), and reads 010 as
# octal, 1:30 as base 60 and 0x10 as hexadecimal, which no flag takes.
BoundedSafeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
BoundedSafeLoader.add_implicit_resolver(_INT_TAG, re.compile(f"^{INT_TEXT}$"), list("-+0123456789"))
BoundedSafeLoader.add_implicit_resolver(
    _FLOAT_TAG,
    re.compile(rf"^(?:{FLOAT_TEXT}|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."),
)
BoundedSafeLoader.add_constructor(_INT_TAG, _decimal_int)


def _date_or_text(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> object:
    """A date as YAML reads one, or its text where it names no day there is
    (9999-99-99, a day 30 of February, an offset of 25 hours): the field it is given for
    then says what it expected, at its key and line, where the calendar's own error
    named neither."""
    try:
        return yaml.SafeLoader.construct_yaml_timestamp(loader, node)
    except (ValueError, OverflowError):
        return loader.construct_scalar(node)


BoundedSafeLoader.add_constructor("tag:yaml.org,2002:timestamp", _date_or_text)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def check_expansion(root: yaml.Node, budget: int = MAX_ALIAS_NODES) -> None:
    """Refuse a node graph whose aliases, expanded, add more than `budget` nodes, or that
    contains itself (an alias inside its own anchor). Iterative, linear in the graph."""
    sizes: dict[int, int] = {}  # id(node) -> node count with aliases expanded (saturated)
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            open_nodes.discard(key)
            size = 1 + sum(sizes[id(child)] for child in _children(node))
            sizes[key] = min(size, _SATURATED)
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            line = node.start_mark.line + 1
            raise YamlInputError([f"an alias refers to its own anchor (line {line})"])
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    if sizes[id(root)] - len(sizes) > budget:
        raise YamlInputError([f"too many aliases (YAML anchors expand beyond {budget} nodes)"])


def load_yaml(text: str) -> Any:
    """The data of one YAML document, read safely and within the bounds above. Syntax
    errors raise yaml.YAMLError; the other problems YamlInputError, one line each."""
    loader = BoundedSafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_expansion(node)
        try:
            data = loader.construct_document(node)
        except ValueError as exc:  # e.g. an integer of more digits than Python converts
            raise YamlInputError([f"cannot read a value: {exc}"]) from None
    finally:
        loader.dispose()
    if loader.duplicates:
        raise YamlInputError([message for _, message in sorted(loader.duplicates)])
    return data
