"""JSON Schema schemas as Confluent Schema Registry handles them.

Parsing: the text must be JSON (an object or a boolean) and valid for its draft (``$schema``;
draft 7 when absent), as the `jsonschema` library checks it against the draft's meta-schema.
A ``$ref`` may point inside the schema (``#/definitions/X``, ``#/$defs/X``, either found in
both) or at a referenced schema by its reference name (``other.json``, resolved against the
root ``$id`` as Confluent does, optionally with a fragment); any other ``$ref`` (a remote one)
is refused, as Confluent refuses remote references by default.

The stored text is the schema re-serialized compactly (Confluent's Jackson mapper: keys in
their order, numbers as written); `normalized` also sorts every object's keys.

`can_read` is Confluent's JSON Schema diff (its SchemaDiff and the per-keyword diffs), which
compares the writer ("original") with the reader ("update") keyword by keyword over the
schema model its loader builds, and calls the result compatible when every difference is in
its strict policy's set of compatible changes. So, as in Confluent:

- A schema is modelled by its keyword groups: ``type`` (a list of types is an ``anyOf``),
  ``enum``, ``const``, ``allOf``/``anyOf``/``oneOf``, ``not``, and keywords of a type without
  ``type`` (an "object" from ``properties``, ...); several groups make a synthetic ``allOf``
  whose parts are matched one to one.
- Objects: the content model is open (no ``additionalProperties``, or ``true``), closed
  (``false``) or partially open (a schema, or ``patternProperties``). A property removed from
  the reader is compatible when the reader is open, or when its partial model covers the
  removed property's schema, or when the property was ``false``; a property added to the
  reader is compatible when the writer is closed (as an optional property or a required one
  with a default), or when the writer's partial model covers it, or when the added schema is
  empty; in an open writer an added property is incompatible (strict policy). A property made
  required needs a default; dropping ``required`` is compatible. ``additionalProperties``
  added or removed, ``dependencies``, ``min``/``maxProperties`` likewise.
- Types: a changed type is incompatible except to ``{}``/``true`` (anything) or from ``false``;
  ``integer`` to ``number`` widens (compatible), the reverse narrows; a type into a
  ``oneOf``/``anyOf`` that has it widens.
- Enums: values added are compatible, removed or changed are not; ``const`` changes are not.
- Bounds: ``maxLength``, ``maximum``, ``maxItems``, ... may grow or go; the ``min`` ones may
  shrink or go; ``multipleOf`` may shrink to a divisor; ``pattern`` may only go.
- Arrays: ``items`` recursively; tuple items by position with the same open/closed rules
  (``additionalItems``); ``uniqueItems`` may only go.
- Combined schemas: ``oneOf``/``anyOf`` may gain branches, ``allOf`` may lose parts; branches
  are matched by a maximum matching of compatible pairs; a criterion may change only to
  ``anyOf`` (or between singletons).
- ``not``: the negated schema may only widen; ``if``/``then``/``else`` are not compared (nor
  in Confluent).

Left out: Confluent's LENIENT policy (its more permissive set of compatible changes); ``$ref``
to an embedded ``$id`` other than the root's, and to the draft meta-schemas; keywords beside a
``$ref`` (ignored in every draft, where 2019-09 and later would apply them too); the recursion
fixpoint Confluent runs for cyclic schemas (a cycle counts as compatible); Confluent's
field-name validation (``$$`` prefixes). ``unevaluatedProperties``/``unevaluatedItems`` are
read in the 2019-09 and 2020-12 drafts only, as in Confluent; ``contains``, ``propertyNames``,
``format`` and ``if``/``then``/``else`` are not compared, as in Confluent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import unquote, urljoin

import jsonschema
from jsonschema import validators

from strom.registry.formats import base, jsontext
from strom.registry.formats.base import Incompatibility, InvalidSchemaError, literal

SCHEMA_TYPE = "JSON"

DRAFT_4, DRAFT_6, DRAFT_7, DRAFT_2019, DRAFT_2020 = 4, 6, 7, 2019, 2020
_DRAFTS = {
    "json-schema.org/draft-04/schema": DRAFT_4,
    "json-schema.org/draft-06/schema": DRAFT_6,
    "json-schema.org/draft-07/schema": DRAFT_7,
    "json-schema.org/draft/2019-09/schema": DRAFT_2019,
    "json-schema.org/draft/2020-12/schema": DRAFT_2020,
}
_NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_STRING_KEYWORDS = ("minLength", "maxLength", "pattern", "format")
_CONDITIONAL_KEYWORDS = ("if", "then", "else")
_CRITERIA = ("allOf", "anyOf", "oneOf")


def _object_keywords(draft: int) -> tuple[str, ...]:
    out: tuple[str, ...] = ("properties", "required", "minProperties", "maxProperties", "dependencies",
           "patternProperties", "additionalProperties")
    if draft >= DRAFT_6:
        out += ("propertyNames",)
    if draft >= DRAFT_2019:
        out += ("dependentRequired", "dependentSchemas", "unevaluatedProperties")
    return out


def _array_keywords(draft: int) -> tuple[str, ...]:
    out: tuple[str, ...] = ("items", "additionalItems", "minItems", "maxItems", "uniqueItems")
    if draft >= DRAFT_6:
        out += ("contains",)
    if draft >= DRAFT_2019:
        out += ("minContains", "maxContains", "unevaluatedItems")
    if draft >= DRAFT_2020:
        out += ("prefixItems",)
    return out


class _Invalid(Exception):
    pass


# -- the model ---------------------------------------------------------------------------------


@dataclass(eq=False)
class Node:
    """A schema as Confluent's loader models it; `source` is the JSON it was loaded from."""

    source: Any
    id: str | None = None
    title: str | None = None
    description: str | None = None
    default: Any = None
    has_default: bool = False
    unprocessed: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The node's JSON with sorted keys: equal for equal schemas."""
        return jsontext.dumps(self.source, sort_keys=True)


class EmptyNode(Node):
    """``{}`` (no constraint) or, as TrueNode, ``true``."""


class TrueNode(EmptyNode):
    pass


class FalseNode(Node):
    pass


class NullNode(Node):
    pass


class BooleanNode(Node):
    pass


@dataclass(eq=False)
class StringNode(Node):
    min_length: Any = None
    max_length: Any = None
    pattern: str | None = None


@dataclass(eq=False)
class NumberNode(Node):
    requires_integer: bool = False
    minimum: Any = None
    maximum: Any = None
    exclusive_minimum: Any = None
    exclusive_maximum: Any = None
    multiple_of: Any = None


@dataclass(eq=False)
class ObjectNode(Node):
    properties: dict[str, Node] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    min_properties: Any = None
    max_properties: Any = None
    permits_additional: bool = True
    additional: Node | None = None
    pattern_properties: dict[str, Node] = field(default_factory=dict)
    property_dependencies: dict[str, set[str]] = field(default_factory=dict)
    schema_dependencies: dict[str, Node] = field(default_factory=dict)
    unevaluated: Node | None = None


@dataclass(eq=False)
class ArrayNode(Node):
    all_items: Node | None = None
    item_schemas: list[Node] | None = None
    permits_additional: bool = True
    additional: Node | None = None
    min_items: Any = None
    max_items: Any = None
    unique_items: bool = False
    min_contains: Any = None
    max_contains: Any = None
    unevaluated: Node | None = None


@dataclass(eq=False)
class EnumNode(Node):
    values: list[Any] = field(default_factory=list)


@dataclass(eq=False)
class ConstNode(Node):
    value: Any = None


@dataclass(eq=False)
class CombinedNode(Node):
    criterion: str = "allOf"
    subschemas: list[Node] = field(default_factory=list)


@dataclass(eq=False)
class NotNode(Node):
    must_not: Node | None = None


class ConditionalNode(Node):
    pass


@dataclass(eq=False)
class RefNode(Node):
    ref: str = ""
    resolve: Callable[[], Node] | None = None

    def target(self) -> Node:
        assert self.resolve is not None
        return self.resolve()


def _deref(node: Node) -> Node:
    seen: set[int] = set()
    while isinstance(node, RefNode):
        if id(node) in seen:
            raise _Invalid(f"Circular $ref '{node.ref}'")
        seen.add(id(node))
        node = node.target()
    return node


# -- loading -----------------------------------------------------------------------------------


def _draft(schema: Any) -> int:
    uri = schema.get("$schema") if isinstance(schema, dict) else None
    if isinstance(uri, str):
        stripped = uri.split("://", 1)[-1].rstrip("#")
        return _DRAFTS.get(stripped, DRAFT_7)
    return DRAFT_7


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _json_text(node: Any) -> str:
    return jsontext.dumps(node)


class _Loader:
    """Builds the model of a schema and of the schemas it references (`docs`, by name; the
    schema itself is ``""``), sharing one node per location so cycles stay finite."""

    def __init__(self, docs: dict[str, Any], draft: int) -> None:
        self.docs = docs
        self.draft = draft
        self.nodes: dict[tuple[str, str], Node] = {}
        self.refs: list[RefNode] = []
        root = docs[""]
        root_id = root.get("$id", root.get("id")) if isinstance(root, dict) else None
        self.base = root_id if isinstance(root_id, str) else ""

    def load(self, doc: str, pointer: str, value: Any) -> Node:
        key = (doc, pointer)
        node = self.nodes.get(key)
        if node is None:
            node = self._build(doc, pointer, value)
            self.nodes[key] = node
        return node

    def _child(self, doc: str, pointer: str, value: Any, *tokens: str) -> Node:
        return self.load(doc, pointer + "".join("/" + _escape(t) for t in tokens), value)

    def _build(self, doc: str, pointer: str, value: Any) -> Node:
        if value is True:
            return TrueNode(value)
        if value is False:
            return FalseNode(value)
        if not isinstance(value, dict):
            raise _Invalid(f"Invalid JSON: expected a schema at {pointer or '#'}, "
                           f"found {_json_text(value)}")
        consumed: set[str] = set()
        parts = self._extract(doc, pointer, value, consumed)
        node: Node
        if not parts:
            node = EmptyNode(value)
        elif len(parts) == 1:
            node = parts[0]
        else:
            node = CombinedNode(value, criterion="allOf", subschemas=parts)
        node.source = value
        id_keyword = "id" if self.draft == DRAFT_4 else "$id"
        for keyword in (id_keyword, "title", "description", "default"):
            consumed.add(keyword)
        node.id = _str(value.get(id_keyword))
        node.title = _str(value.get("title"))
        node.description = _str(value.get("description"))
        if "default" in value:
            node.default, node.has_default = value["default"], True
        node.unprocessed = {k: v for k, v in value.items() if k not in consumed}
        return node

    def _extract(self, doc: str, pointer: str, o: dict[str, Any], consumed: set[str]
                 ) -> list[Node]:
        if "$ref" in o:
            consumed.add("$ref")
            return [self._ref(doc, o)]
        parts: list[Node] = []
        if "enum" in o:
            consumed.add("enum")
            values = o["enum"]
            parts.append(EnumNode(_only(o, "enum"),
                                  values=list(values) if isinstance(values, list) else []))
        for criterion in _CRITERIA:
            if criterion in o:
                consumed.add(criterion)
                subs = o[criterion] if isinstance(o[criterion], list) else []
                parts.append(CombinedNode(_only(o, criterion), criterion=criterion, subschemas=[
                    self._child(doc, pointer, sub, criterion, str(i))
                    for i, sub in enumerate(subs)]))
        if "not" in o:
            consumed.add("not")
            parts.append(NotNode(_only(o, "not"),
                                 must_not=self._child(doc, pointer, o["not"], "not")))
        if "const" in o and self.draft != DRAFT_4:
            consumed.add("const")
            parts.append(ConstNode(_only(o, "const"), value=o["const"]))
        if "type" in o:
            consumed.add("type")
            types = o["type"]
            if isinstance(types, list):
                parts.append(CombinedNode(_only(o, "type"), criterion="anyOf", subschemas=[
                    self._typed(doc, pointer, o, t, consumed) for t in types]))
            else:
                parts.append(self._typed(doc, pointer, o, types, consumed))
        remaining = {k: v for k, v in o.items() if k not in consumed}
        if any(k in remaining for k in _array_keywords(self.draft)):
            parts.append(self._array(doc, pointer, o, consumed, None))
        if any(k in remaining for k in _object_keywords(self.draft)):
            parts.append(self._object(doc, pointer, o, consumed, None))
        if any(k in remaining for k in _NUMBER_KEYWORDS):
            parts.append(self._number(o, consumed, None))
        if any(k in remaining for k in _STRING_KEYWORDS):
            parts.append(self._string(o, consumed, None))
        if self.draft >= DRAFT_7 and any(k in remaining for k in _CONDITIONAL_KEYWORDS):
            consumed.update(_CONDITIONAL_KEYWORDS)
            for keyword in _CONDITIONAL_KEYWORDS:
                if keyword in o:
                    self._child(doc, pointer, o[keyword], keyword)
            parts.append(ConditionalNode(_only(o, *_CONDITIONAL_KEYWORDS)))
        return parts

    def _typed(self, doc: str, pointer: str, o: dict[str, Any], name: Any,
               consumed: set[str]) -> Node:
        if name == "string":
            return self._string(o, consumed, name)
        if name in ("integer", "number"):
            return self._number(o, consumed, name)
        if name == "boolean":
            return BooleanNode({"type": name})
        if name == "null":
            return NullNode({"type": name})
        if name == "array":
            return self._array(doc, pointer, o, consumed, name)
        if name == "object":
            return self._object(doc, pointer, o, consumed, name)
        raise _Invalid(f"unknown type: [{name}]")

    def _string(self, o: dict[str, Any], consumed: set[str], typed: str | None) -> StringNode:
        consumed.update(_STRING_KEYWORDS)
        pattern = o.get("pattern")
        return StringNode(_typed_source(o, typed, _STRING_KEYWORDS), min_length=o.get("minLength"), max_length=o.get("maxLength"),
                          pattern=pattern if isinstance(pattern, str) else None)

    def _number(self, o: dict[str, Any], consumed: set[str], typed: str | None) -> NumberNode:
        consumed.update(_NUMBER_KEYWORDS)
        node = NumberNode(_typed_source(o, typed, _NUMBER_KEYWORDS),
                          requires_integer=typed == "integer", minimum=o.get("minimum"),
                          maximum=o.get("maximum"), multiple_of=o.get("multipleOf"))
        for keyword in ("exclusiveMinimum", "exclusiveMaximum"):
            limit = o.get(keyword)
            if isinstance(limit, bool):  # draft 4: a flag on minimum / maximum
                continue
            if keyword == "exclusiveMinimum":
                node.exclusive_minimum = limit
            else:
                node.exclusive_maximum = limit
        return node

    def _object(self, doc: str, pointer: str, o: dict[str, Any], consumed: set[str],
                typed: str | None) -> ObjectNode:
        keywords = _object_keywords(self.draft)
        consumed.update(keywords)
        node = ObjectNode(_typed_source(o, typed, keywords), min_properties=o.get("minProperties"),
                          max_properties=o.get("maxProperties"))
        for name, sub in _items(o.get("properties")):
            node.properties[name] = self._child(doc, pointer, sub, "properties", name)
        required = o.get("required")
        node.required = [r for r in required if isinstance(r, str)] \
            if isinstance(required, list) else []
        additional = o.get("additionalProperties")
        if isinstance(additional, bool):
            node.permits_additional = additional
        elif additional is not None:
            node.additional = self._child(doc, pointer, additional, "additionalProperties")
        for regex, sub in _items(o.get("patternProperties")):
            node.pattern_properties[regex] = self._child(doc, pointer, sub,
                                                         "patternProperties", regex)
        deps = [("dependencies", o.get("dependencies"))]
        if self.draft >= DRAFT_2019:
            deps += [("dependentRequired", o.get("dependentRequired")),
                     ("dependentSchemas", o.get("dependentSchemas"))]
        for keyword, value in deps:
            for name, dep in _items(value):
                if isinstance(dep, list):
                    node.property_dependencies[name] = {d for d in dep if isinstance(d, str)}
                else:
                    node.schema_dependencies[name] = self._child(doc, pointer, dep, keyword,
                                                                 name)
        if "propertyNames" in o and self.draft >= DRAFT_6:
            self._child(doc, pointer, o["propertyNames"], "propertyNames")
        if "unevaluatedProperties" in o and self.draft >= DRAFT_2019:
            node.unevaluated = self._child(doc, pointer, o["unevaluatedProperties"],
                                           "unevaluatedProperties")
        return node

    def _array(self, doc: str, pointer: str, o: dict[str, Any], consumed: set[str],
               typed: str | None) -> ArrayNode:
        keywords = _array_keywords(self.draft)
        consumed.update(keywords)
        node = ArrayNode(_typed_source(o, typed, keywords), min_items=o.get("minItems"), max_items=o.get("maxItems"),
                         unique_items=o.get("uniqueItems") is True)
        items = o.get("items")
        if self.draft >= DRAFT_2020 and "prefixItems" in o:
            prefix = o["prefixItems"] if isinstance(o["prefixItems"], list) else []
            node.item_schemas = [self._child(doc, pointer, sub, "prefixItems", str(i))
                                 for i, sub in enumerate(prefix)]
            self._additional_items(node, doc, pointer, items, "items")
        else:
            if isinstance(items, list):
                node.item_schemas = [self._child(doc, pointer, sub, "items", str(i))
                                     for i, sub in enumerate(items)]
            elif items is not None:
                node.all_items = self._child(doc, pointer, items, "items")
            self._additional_items(node, doc, pointer, o.get("additionalItems"),
                                   "additionalItems")
        if "contains" in o and self.draft >= DRAFT_6:
            self._child(doc, pointer, o["contains"], "contains")
        if self.draft >= DRAFT_2019:
            node.min_contains = o.get("minContains")
            node.max_contains = o.get("maxContains")
            if "unevaluatedItems" in o:
                node.unevaluated = self._child(doc, pointer, o["unevaluatedItems"],
                                               "unevaluatedItems")
        return node

    def _additional_items(self, node: ArrayNode, doc: str, pointer: str, value: Any,
                          keyword: str) -> None:
        if isinstance(value, bool):
            node.permits_additional = value
        elif value is not None:
            node.additional = self._child(doc, pointer, value, keyword)

    # -- $ref ----------------------------------------------------------------------------------

    def _ref(self, doc: str, o: dict[str, Any]) -> RefNode:
        ref = o.get("$ref")
        if not isinstance(ref, str):
            raise _Invalid(f"Invalid $ref: {_json_text(ref)}")
        node = RefNode(o, ref=ref)
        target: list[Node] = []

        def resolve() -> Node:
            if not target:
                target.append(self._resolve(doc, ref))
            return target[0]

        node.resolve = resolve
        self.refs.append(node)
        return node

    def _resolve(self, doc: str, ref: str) -> Node:
        location, _, fragment = ref.partition("#")
        target_doc = doc if not location else self._document(doc, location)
        if target_doc is None:
            raise _Invalid(f"Unresolved $ref '{ref}': no reference of that name (remote "
                           "references are not fetched)")
        value = self.docs[target_doc]
        fragment = unquote(fragment)
        if not fragment:
            return self.load(target_doc, "", value)
        if not fragment.startswith("/"):
            found = _anchor(value, fragment)
            if found is None:
                raise _Invalid(f"Unresolved $ref '{ref}'")
            return self.load(target_doc, found[0], found[1])
        pointer = ""
        for raw in fragment[1:].split("/"):
            token = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(value, dict):
                if token not in value and not pointer and token in ("$defs", "definitions"):
                    token = "definitions" if token == "$defs" else "$defs"
                if token not in value:
                    raise _Invalid(f"Unresolved $ref '{ref}'")
                value = value[token]
            elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
                value = value[int(token)]
            else:
                raise _Invalid(f"Unresolved $ref '{ref}'")
            pointer += "/" + _escape(token)
        return self.load(target_doc, pointer, value)

    def _document(self, doc: str, location: str) -> str | None:
        """The reference named by `location` (as written, or resolved against the root
        ``$id`` as Confluent registers references)."""
        if location in self.docs and location:
            return location
        wanted = urljoin(self.base, location) if self.base else location
        for name in self.docs:
            if not name:
                continue
            if wanted in (name, urljoin(self.base, name) if self.base else name):
                return name
            if name.startswith("./") and name[2:] == location:
                return name
        return None

    def resolve_all(self) -> None:
        """Resolve every $ref, so a bad one fails the parse (targets may hold more)."""
        done = 0
        while done < len(self.refs):
            _deref(self.refs[done])
            done += 1


def _anchor(value: Any, name: str, pointer: str = "") -> tuple[str, Any] | None:
    """The subschema whose ``$anchor`` is `name` (or draft 6/7 ``$id: "#name"``)."""
    if isinstance(value, dict):
        if value.get("$anchor") == name or value.get("$id") == f"#{name}":
            return pointer, value
        items: Iterable[tuple[str, Any]] = value.items()
    elif isinstance(value, list):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return None
    for key, sub in items:
        found = _anchor(sub, name, f"{pointer}/{_escape(key)}")
        if found is not None:
            return found
    return None


def _only(o: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {k: o[k] for k in keys if k in o}


def _typed_source(o: Mapping[str, Any], typed: str | None, keys: Iterable[str]
                  ) -> dict[str, Any]:
    """The JSON of one keyword group (what Confluent's loader renders the part as)."""
    return {**({"type": typed} if typed else {}), **_only(o, *keys)}


def _items(value: Any) -> list[tuple[str, Any]]:
    return list(value.items()) if isinstance(value, dict) else []


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# -- the diff ----------------------------------------------------------------------------------

COMPATIBLE_CHANGES = frozenset({
    "ID_CHANGED", "DESCRIPTION_CHANGED", "TITLE_CHANGED", "DEFAULT_CHANGED", "SCHEMA_REMOVED",
    "TYPE_EXTENDED",
    "MAX_LENGTH_INCREASED", "MAX_LENGTH_REMOVED", "MIN_LENGTH_DECREASED", "MIN_LENGTH_REMOVED",
    "PATTERN_REMOVED",
    "MAXIMUM_INCREASED", "MAXIMUM_REMOVED", "MINIMUM_DECREASED", "MINIMUM_REMOVED",
    "EXCLUSIVE_MAXIMUM_INCREASED", "EXCLUSIVE_MAXIMUM_REMOVED", "EXCLUSIVE_MINIMUM_DECREASED",
    "EXCLUSIVE_MINIMUM_REMOVED", "MULTIPLE_OF_REDUCED", "MULTIPLE_OF_REMOVED",
    "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED", "REQUIRED_ATTRIBUTE_REMOVED",
    "DEPENDENCY_ARRAY_NARROWED", "DEPENDENCY_ARRAY_REMOVED", "DEPENDENCY_SCHEMA_REMOVED",
    "MAX_PROPERTIES_INCREASED", "MAX_PROPERTIES_REMOVED", "MIN_PROPERTIES_DECREASED",
    "MIN_PROPERTIES_REMOVED", "ADDITIONAL_PROPERTIES_ADDED", "ADDITIONAL_PROPERTIES_EXTENDED",
    "UNEVALUATED_PROPERTIES_ADDED", "UNEVALUATED_PROPERTIES_EXTENDED",
    "PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL",
    "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL",
    "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL",
    "PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL",
    "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL",
    "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "MAX_ITEMS_INCREASED", "MAX_ITEMS_REMOVED", "MIN_ITEMS_DECREASED", "MIN_ITEMS_REMOVED",
    "MAX_CONTAINS_INCREASED", "MAX_CONTAINS_REMOVED", "MIN_CONTAINS_DECREASED",
    "MIN_CONTAINS_REMOVED", "UNIQUE_ITEMS_REMOVED", "ADDITIONAL_ITEMS_ADDED",
    "ADDITIONAL_ITEMS_EXTENDED", "UNEVALUATED_ITEMS_ADDED", "UNEVALUATED_ITEMS_EXTENDED",
    "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL",
    "ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL", "ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL",
    "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "ENUM_ARRAY_EXTENDED", "COMBINED_TYPE_EXTENDED", "PRODUCT_TYPE_NARROWED",
    "SUM_TYPE_EXTENDED", "NOT_TYPE_NARROWED",
})

# Confluent's descriptions, by groups of difference types ({path} is filled in here; the
# reader and writer schemas when rendered).
_DESCRIPTION_GROUPS: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"MAXIMUM_ADDED", "MINIMUM_ADDED", "EXCLUSIVE_MAXIMUM_ADDED",
                "EXCLUSIVE_MINIMUM_ADDED", "MULTIPLE_OF_ADDED", "MAX_LENGTH_ADDED",
                "MIN_LENGTH_ADDED", "PATTERN_ADDED", "REQUIRED_ATTRIBUTE_ADDED",
                "MAX_PROPERTIES_ADDED", "MIN_PROPERTIES_ADDED", "DEPENDENCY_ARRAY_ADDED",
                "DEPENDENCY_SCHEMA_ADDED", "MAX_ITEMS_ADDED", "MIN_ITEMS_ADDED",
                "MAX_CONTAINS_ADDED", "MIN_CONTAINS_ADDED", "UNIQUE_ITEMS_ADDED",
                "ADDITIONAL_ITEMS_REMOVED", "ADDITIONAL_PROPERTIES_REMOVED",
                "UNEVALUATED_PROPERTIES_REMOVED", "UNEVALUATED_ITEMS_REMOVED"}),
     "The keyword at path '{path}' in the {{reader}} schema is not present in the {{writer}} "
     "schema"),
    (frozenset({"MIN_LENGTH_INCREASED", "MINIMUM_INCREASED", "EXCLUSIVE_MINIMUM_INCREASED",
                "MIN_PROPERTIES_INCREASED", "MULTIPLE_OF_EXPANDED", "MIN_ITEMS_INCREASED",
                "MIN_CONTAINS_INCREASED"}),
     "The value at path '{path}' in the {{reader}} schema is more than its value in the "
     "{{writer}} schema"),
    (frozenset({"MAX_LENGTH_DECREASED", "MAXIMUM_DECREASED", "MAX_ITEMS_DECREASED",
                "MAX_CONTAINS_DECREASED", "EXCLUSIVE_MAXIMUM_DECREASED",
                "MAX_PROPERTIES_DECREASED"}),
     "The value at path '{path}' in the {{reader}} schema is less than its value in the "
     "{{writer}} schema"),
    (frozenset({"PATTERN_CHANGED", "MULTIPLE_OF_CHANGED", "DEPENDENCY_ARRAY_CHANGED"}),
     "The value at path '{path}' is different between the {{reader}} and {{writer}} schema"),
    (frozenset({"ADDITIONAL_ITEMS_NARROWED", "ENUM_ARRAY_NARROWED", "SUM_TYPE_NARROWED",
                "ADDITIONAL_PROPERTIES_NARROWED", "UNEVALUATED_PROPERTIES_NARROWED",
                "UNEVALUATED_ITEMS_NARROWED"}),
     "An array or combined type at path '{path}' has fewer elements in the {{reader}} schema "
     "than the {{writer}} schema"),
    (frozenset({"DEPENDENCY_ARRAY_EXTENDED", "PRODUCT_TYPE_EXTENDED", "SUM_TYPE_EXTENDED",
                "NOT_TYPE_EXTENDED"}),
     "An array or combined type at path '{path}' has more elements in the {{reader}} schema "
     "than the {{writer}} schema"),
    (frozenset({"TYPE_CHANGED", "TYPE_NARROWED", "COMBINED_TYPE_CHANGED",
                "COMBINED_TYPE_SUBSCHEMAS_CHANGED", "ENUM_ARRAY_CHANGED"}),
     "A type at path '{path}' is different between the {{reader}} schema and the {{writer}} "
     "schema"),
    (frozenset({"REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
                "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL",
                "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
                "ITEM_ADDED_TO_OPEN_CONTENT_MODEL"}),
     "The {{reader}} schema has an open content model and has a property or item at path "
     "'{path}' which is missing in the {{writer}} schema"),
    (frozenset({"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"}),
     "The {{reader}} schema has an unopen content model and has a required property at path "
     "'{path}' which is missing in the {{writer}} schema"),
    (frozenset({"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
                "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"}),
     "The {{reader}} has a closed content model and is missing a property or item present at "
     "path '{path}' in the {{writer}} schema"),
    (frozenset({"PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"}),
     "A property or item is missing in the {{reader}} schema but present at path '{path}' in "
     "the {{writer}} schema and is not covered by its partially open content model"),
    (frozenset({"PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"}),
     "The {{reader}} schema has a property or item at path '{path}' which is missing in the "
     "{{writer}} schema and is not covered by its partially open content model"),
)


def _description(error_type: str, path: str) -> str:
    for types, template in _DESCRIPTION_GROUPS:
        if error_type in types:
            return template.format(path=literal(path))
    return ""


@dataclass(frozen=True)
class Difference:
    """One difference, at a path relative to the pair of schemas compared."""

    type: str
    path: tuple[str, ...] = ()

    def under(self, *prefix: str) -> Difference:
        return Difference(self.type, prefix + self.path)

    @property
    def json_path(self) -> str:
        return "#/" + "/".join(self.path)


def _compatible(diffs: Iterable[Difference]) -> bool:
    return all(d.type in COMPATIBLE_CHANGES for d in diffs)


def _under(prefix: tuple[str, ...], diffs: Iterable[Difference]) -> list[Difference]:
    return [d.under(*prefix) for d in diffs]


def _open(permits: bool, additional: Node | None, patterns: Mapping[str, Node] | None,
          unevaluated: Node | None) -> bool:
    """An open content model: anything else allowed (``additionalProperties`` absent or
    true, no ``patternProperties``, ``unevaluatedProperties`` absent or true)."""
    if not permits or additional is not None or patterns:
        return False
    return unevaluated is None or isinstance(unevaluated, EmptyNode)


def _partial(permits: bool, additional: Node | None, unevaluated: Node | None) -> Node | None:
    """The schema of a partially open content model (other than pattern properties)."""
    if additional is not None:
        return additional
    if permits and unevaluated is not None and not isinstance(unevaluated, FalseNode | EmptyNode):
        return unevaluated
    return None


def _object_partial(node: ObjectNode, name: str) -> Node | None:
    for regex, sub in node.pattern_properties.items():
        try:
            if re.search(regex, name):
                return sub
        except re.error:
            continue
    return _partial(node.permits_additional, node.additional, node.unevaluated)


def _bound(diffs: list[Difference], keyword: str, original: Any, update: Any,
           added: str, removed: str, increased: str, decreased: str) -> None:
    if original == update or (original is None and update is None):
        return
    if original is None:
        diffs.append(Difference(added, (keyword,)))
    elif update is None:
        diffs.append(Difference(removed, (keyword,)))
    elif original < update:
        diffs.append(Difference(increased, (keyword,)))
    elif original > update:
        diffs.append(Difference(decreased, (keyword,)))


def _value_key(value: Any) -> str:
    return jsontext.dumps(value, sort_keys=True)


class _Diff:
    """Confluent's SchemaDiff: differences between an original (writer) and an update
    (reader), each pair compared once, a pair met again inside itself counting as equal."""

    def __init__(self) -> None:
        self.memo: dict[tuple[int, int], list[Difference]] = {}
        self.in_progress: set[tuple[int, int]] = set()

    def compare(self, original: Node | None, update: Node | None) -> list[Difference]:
        if original is None and update is None:
            return []
        if original is None:
            return [Difference("SCHEMA_ADDED")]
        if update is None:
            return [Difference("SCHEMA_REMOVED")]
        original, update = _deref(original), _deref(update)
        key = (id(original), id(update))
        cached = self.memo.get(key)
        if cached is not None:
            return cached
        if key in self.in_progress:
            return []
        self.in_progress.add(key)
        try:
            result = self._types(original, update)
        finally:
            self.in_progress.discard(key)
        self.memo[key] = result
        return result

    def _types(self, original: Node, update: Node) -> list[Difference]:
        if not isinstance(original, CombinedNode) and isinstance(update, CombinedNode):
            if len(update.subschemas) == 1:
                found = self.compare(original, update.subschemas[0])
                if _compatible(found):
                    return found
            elif update.criterion in ("anyOf", "oneOf"):
                for sub in update.subschemas:
                    found = self.compare(original, sub)
                    if _compatible(found):
                        return [*found, Difference("SUM_TYPE_EXTENDED")]
        elif isinstance(original, CombinedNode) and not isinstance(update, CombinedNode):
            if len(original.subschemas) == 1:
                found = self.compare(original.subschemas[0], update)
                if _compatible(found):
                    return found
            elif original.criterion == "allOf":
                for sub in original.subschemas:
                    found = self.compare(sub, update)
                    if _compatible(found):
                        return [*found, Difference("PRODUCT_TYPE_NARROWED")]

        if not _same_type(original, update):
            if isinstance(original, FalseNode) or isinstance(update, EmptyNode):
                return []
            if (original.unprocessed.get("connect.type") == "bytes"
                    and update.unprocessed.get("connect.type") == "bytes"):
                return []
            return [Difference("TYPE_CHANGED")]

        diffs: list[Difference] = []
        for attr, change in (("id", "ID_CHANGED"), ("title", "TITLE_CHANGED"),
                             ("description", "DESCRIPTION_CHANGED")):
            if getattr(original, attr) != getattr(update, attr):
                diffs.append(Difference(change))
        if (original.has_default, _value_key(original.default)) != \
                (update.has_default, _value_key(update.default)):
            diffs.append(Difference("DEFAULT_CHANGED"))

        if isinstance(original, StringNode) and isinstance(update, StringNode):
            diffs += _strings(original, update)
        elif isinstance(original, NumberNode) and isinstance(update, NumberNode):
            diffs += _numbers(original, update)
        elif isinstance(original, ConstNode) and isinstance(update, ConstNode):
            if _value_key(original.value) != _value_key(update.value):
                diffs.append(Difference("ENUM_ARRAY_CHANGED", ("const",)))
        elif isinstance(original, EnumNode) and isinstance(update, EnumNode):
            diffs += _enums(original, update)
        elif isinstance(original, CombinedNode) and isinstance(update, CombinedNode):
            diffs += self._combined(original, update)
        elif isinstance(original, NotNode) and isinstance(update, NotNode):
            inner = self.compare(update.must_not, original.must_not)
            diffs.append(Difference("NOT_TYPE_NARROWED" if _compatible(inner)
                                    else "NOT_TYPE_EXTENDED", ("not",)))
        elif isinstance(original, ObjectNode) and isinstance(update, ObjectNode):
            diffs += self._objects(original, update)
        elif isinstance(original, ArrayNode) and isinstance(update, ArrayNode):
            diffs += self._arrays(original, update)
        return diffs

    # -- combined ------------------------------------------------------------------------------

    def _combined(self, original: CombinedNode, update: CombinedNode) -> list[Difference]:
        diffs: list[Difference] = []
        if original.criterion != update.criterion:
            single_o, single_u = len(original.subschemas) == 1, len(update.subschemas) == 1
            if (update.criterion == "anyOf" or (single_o and single_u)
                    or (single_o and update.criterion == "oneOf")
                    or (single_u and original.criterion == "allOf")):
                diffs.append(Difference("COMBINED_TYPE_EXTENDED"))
            else:
                return [Difference("COMBINED_TYPE_CHANGED")]
        olds, news = _distinct(original.subschemas), _distinct(update.subschemas)
        if len(olds) < len(news):
            diffs.append(Difference("PRODUCT_TYPE_EXTENDED" if update.criterion == "allOf"
                                    else "SUM_TYPE_EXTENDED"))
        elif len(olds) > len(news):
            diffs.append(Difference("SUM_TYPE_NARROWED" if original.criterion != "allOf"
                                    else "PRODUCT_TYPE_NARROWED"))
        edges: dict[tuple[int, int], list[Difference]] = {}
        for i, old in enumerate(olds):
            for j, new in enumerate(news):
                found = _under((f"{original.criterion}/{i}",), self.compare(old, new))
                if _compatible(found):
                    edges[(i, j)] = found
        matching = _max_matching(len(olds), len(news), edges)
        for pair in matching:
            diffs += edges[pair]
        if len(matching) < min(len(olds), len(news)):
            diffs.append(Difference("COMBINED_TYPE_SUBSCHEMAS_CHANGED"))
        return diffs

    # -- objects -------------------------------------------------------------------------------

    def _objects(self, original: ObjectNode, update: ObjectNode) -> list[Difference]:
        diffs: list[Difference] = []
        for name in original.properties:
            if name in update.properties:
                was, now = name in original.required, name in update.required
                if was and not now:
                    diffs.append(Difference("REQUIRED_ATTRIBUTE_REMOVED", ("required", name)))
                elif now and not was:
                    diffs.append(Difference(
                        "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED"
                        if update.properties[name].has_default else "REQUIRED_ATTRIBUTE_ADDED",
                        ("required", name)))
        names = list(original.properties) + [n for n in update.properties
                                             if n not in original.properties]
        for name in names:
            diffs += _under(("properties", name), self._property(original, update, name))
        diffs += _under(("dependencies",), self._dependencies(original, update))
        diffs += _under(("additionalProperties",), self._additional(
            original.permits_additional, original.additional,
            update.permits_additional, update.additional, "ADDITIONAL_PROPERTIES"))
        diffs += _under(("unevaluatedProperties",), self._unevaluated(
            original.unevaluated, update.unevaluated, "UNEVALUATED_PROPERTIES"))
        _bound(diffs, "maxProperties", original.max_properties, update.max_properties,
               "MAX_PROPERTIES_ADDED", "MAX_PROPERTIES_REMOVED", "MAX_PROPERTIES_INCREASED",
               "MAX_PROPERTIES_DECREASED")
        _bound(diffs, "minProperties", original.min_properties, update.min_properties,
               "MIN_PROPERTIES_ADDED", "MIN_PROPERTIES_REMOVED", "MIN_PROPERTIES_INCREASED",
               "MIN_PROPERTIES_DECREASED")
        return diffs

    def _property(self, original: ObjectNode, update: ObjectNode, name: str
                  ) -> list[Difference]:
        old, new = original.properties.get(name), update.properties.get(name)
        if new is None:
            assert old is not None
            if _open(update.permits_additional, update.additional, update.pattern_properties,
                     update.unevaluated):
                return [Difference("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL")]
            partial = _object_partial(update, name)
            if partial is not None:
                found = self.compare(old, partial)
                return [*found, Difference(
                    "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                    if _compatible(found)
                    else "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")]
            if isinstance(old, FalseNode):
                return [Difference("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")]
            return [Difference("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")]
        if old is None:
            required = name in update.required
            if _open(original.permits_additional, original.additional,
                     original.pattern_properties, original.unevaluated):
                if isinstance(new, EmptyNode):
                    return [Difference("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")]
                if required:
                    return [Difference(
                        "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL"
                        if new.has_default else "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")]
                return [Difference("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")]
            diffs: list[Difference] = []
            partial = _object_partial(original, name)
            if partial is not None:
                found = self.compare(partial, new)
                diffs += [*found, Difference(
                    "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                    if _compatible(found)
                    else "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")]
            if required:
                diffs.append(Difference(
                    "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL"
                    if new.has_default else "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"))
            else:
                diffs.append(Difference("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"))
            return diffs
        return self.compare(old, new)

    def _dependencies(self, original: ObjectNode, update: ObjectNode) -> list[Difference]:
        diffs: list[Difference] = []
        o_deps, u_deps = original.property_dependencies, update.property_dependencies
        for name in list(o_deps) + [n for n in u_deps if n not in o_deps]:
            old, new = o_deps.get(name), u_deps.get(name)
            if new is None:
                diffs.append(Difference("DEPENDENCY_ARRAY_REMOVED", (name,)))
            elif old is None:
                diffs.append(Difference("DEPENDENCY_ARRAY_ADDED", (name,)))
            elif old != new:
                diffs.append(Difference("DEPENDENCY_ARRAY_EXTENDED" if new >= old
                                        else "DEPENDENCY_ARRAY_NARROWED" if old >= new
                                        else "DEPENDENCY_ARRAY_CHANGED", (name,)))
        o_schemas, u_schemas = original.schema_dependencies, update.schema_dependencies
        for name in list(o_schemas) + [n for n in u_schemas if n not in o_schemas]:
            old_schema, new_schema = o_schemas.get(name), u_schemas.get(name)
            if new_schema is None:
                diffs.append(Difference("DEPENDENCY_SCHEMA_REMOVED", (name,)))
            elif old_schema is None:
                diffs.append(Difference("DEPENDENCY_SCHEMA_ADDED", (name,)))
            else:
                diffs += _under((name,), self.compare(old_schema, new_schema))
        return diffs

    def _additional(self, o_permits: bool, o_schema: Node | None, u_permits: bool,
                    u_schema: Node | None, prefix: str) -> list[Difference]:
        """additionalProperties / additionalItems: allowed or not, and with which schema."""
        if o_permits != u_permits:
            return [Difference(f"{prefix}_ADDED" if u_permits else f"{prefix}_REMOVED")]
        if o_schema is None and u_schema is not None:
            return [Difference(f"{prefix}_NARROWED")]
        if u_schema is None and o_schema is not None:
            return [Difference(f"{prefix}_EXTENDED")]
        return self.compare(o_schema, u_schema)

    def _unevaluated(self, old: Node | None, new: Node | None, prefix: str
                     ) -> list[Difference]:
        if old is None and new is None:
            return []
        if old is None:
            return [Difference(f"{prefix}_REMOVED" if isinstance(new, FalseNode)
                               else f"{prefix}_NARROWED")]
        if new is None:
            return [Difference(f"{prefix}_ADDED" if isinstance(old, FalseNode)
                               else f"{prefix}_EXTENDED")]
        if isinstance(old, FalseNode) and not isinstance(new, FalseNode):
            return [Difference(f"{prefix}_ADDED")]
        if not isinstance(old, FalseNode) and isinstance(new, FalseNode):
            return [Difference(f"{prefix}_REMOVED")]
        if isinstance(old, EmptyNode) and not isinstance(new, EmptyNode):
            return [Difference(f"{prefix}_NARROWED")]
        if not isinstance(old, EmptyNode) and isinstance(new, EmptyNode):
            return [Difference(f"{prefix}_EXTENDED")]
        return self.compare(old, new)

    # -- arrays --------------------------------------------------------------------------------

    def _arrays(self, original: ArrayNode, update: ArrayNode) -> list[Difference]:
        diffs = _under(("items",), self.compare(original.all_items, update.all_items))
        diffs += self._tuples(original, update)
        diffs += _under(("additionalItems",), self._additional(
            original.permits_additional, original.additional,
            update.permits_additional, update.additional, "ADDITIONAL_ITEMS"))
        diffs += _under(("unevaluatedItems",), self._unevaluated(
            original.unevaluated, update.unevaluated, "UNEVALUATED_ITEMS"))
        _bound(diffs, "maxItems", original.max_items, update.max_items, "MAX_ITEMS_ADDED",
               "MAX_ITEMS_REMOVED", "MAX_ITEMS_INCREASED", "MAX_ITEMS_DECREASED")
        _bound(diffs, "minItems", original.min_items, update.min_items, "MIN_ITEMS_ADDED",
               "MIN_ITEMS_REMOVED", "MIN_ITEMS_INCREASED", "MIN_ITEMS_DECREASED")
        if original.unique_items != update.unique_items:
            diffs.append(Difference("UNIQUE_ITEMS_REMOVED" if original.unique_items
                                    else "UNIQUE_ITEMS_ADDED", ("uniqueItems",)))
        _bound(diffs, "maxContains", original.max_contains, update.max_contains,
               "MAX_CONTAINS_ADDED", "MAX_CONTAINS_REMOVED", "MAX_CONTAINS_INCREASED",
               "MAX_CONTAINS_DECREASED")
        _bound(diffs, "minContains", original.min_contains, update.min_contains,
               "MIN_CONTAINS_ADDED", "MIN_CONTAINS_REMOVED", "MIN_CONTAINS_INCREASED",
               "MIN_CONTAINS_DECREASED")
        return diffs

    def _tuples(self, original: ArrayNode, update: ArrayNode) -> list[Difference]:
        olds, news = original.item_schemas or [], update.item_schemas or []
        diffs: list[Difference] = []
        for i in range(min(len(olds), len(news))):
            diffs += _under((f"items/{i}",), self.compare(olds[i], news[i]))
        for i in range(len(news), len(olds)):
            found: list[Difference]
            if _open(update.permits_additional, update.additional, None, update.unevaluated):
                found = [Difference("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL")]
            else:
                partial = _partial(update.permits_additional, update.additional,
                                   update.unevaluated)
                if partial is not None:
                    inner = self.compare(olds[i], partial)
                    found = [*inner, Difference(
                        "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                        if _compatible(inner)
                        else "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")]
                elif isinstance(olds[i], FalseNode):
                    found = [Difference("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")]
                else:
                    found = [Difference("ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL")]
            diffs += _under((f"items/{i}",), found)
        for i in range(len(olds), len(news)):
            if _open(original.permits_additional, original.additional, None,
                     original.unevaluated):
                found = [Difference("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL"
                                    if isinstance(news[i], EmptyNode)
                                    else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL")]
            else:
                partial = _partial(original.permits_additional, original.additional,
                                   original.unevaluated)
                if partial is not None:
                    inner = self.compare(partial, news[i])
                    found = [*inner, Difference(
                        "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"
                        if _compatible(inner)
                        else "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")]
                else:
                    found = [Difference("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")]
            diffs += _under((f"items/{i}",), found)
        return diffs


def _same_type(a: Node, b: Node) -> bool:
    return type(a) is type(b) or (isinstance(a, CombinedNode) and isinstance(b, CombinedNode))


def _strings(original: StringNode, update: StringNode) -> list[Difference]:
    diffs: list[Difference] = []
    _bound(diffs, "maxLength", original.max_length, update.max_length, "MAX_LENGTH_ADDED",
           "MAX_LENGTH_REMOVED", "MAX_LENGTH_INCREASED", "MAX_LENGTH_DECREASED")
    _bound(diffs, "minLength", original.min_length, update.min_length, "MIN_LENGTH_ADDED",
           "MIN_LENGTH_REMOVED", "MIN_LENGTH_INCREASED", "MIN_LENGTH_DECREASED")
    if original.pattern is None and update.pattern is not None:
        diffs.append(Difference("PATTERN_ADDED", ("pattern",)))
    elif original.pattern is not None and update.pattern is None:
        diffs.append(Difference("PATTERN_REMOVED", ("pattern",)))
    elif original.pattern != update.pattern:
        diffs.append(Difference("PATTERN_CHANGED", ("pattern",)))
    return diffs


def _numbers(original: NumberNode, update: NumberNode) -> list[Difference]:
    diffs: list[Difference] = []
    _bound(diffs, "maximum", original.maximum, update.maximum, "MAXIMUM_ADDED",
           "MAXIMUM_REMOVED", "MAXIMUM_INCREASED", "MAXIMUM_DECREASED")
    _bound(diffs, "minimum", original.minimum, update.minimum, "MINIMUM_ADDED",
           "MINIMUM_REMOVED", "MINIMUM_INCREASED", "MINIMUM_DECREASED")
    _bound(diffs, "exclusiveMaximum", original.exclusive_maximum, update.exclusive_maximum,
           "EXCLUSIVE_MAXIMUM_ADDED", "EXCLUSIVE_MAXIMUM_REMOVED",
           "EXCLUSIVE_MAXIMUM_INCREASED", "EXCLUSIVE_MAXIMUM_DECREASED")
    _bound(diffs, "exclusiveMinimum", original.exclusive_minimum, update.exclusive_minimum,
           "EXCLUSIVE_MINIMUM_ADDED", "EXCLUSIVE_MINIMUM_REMOVED",
           "EXCLUSIVE_MINIMUM_INCREASED", "EXCLUSIVE_MINIMUM_DECREASED")
    old = Decimal(str(original.multiple_of)) if original.multiple_of is not None else None
    new = Decimal(str(update.multiple_of)) if update.multiple_of is not None else None
    if old != new:
        if old is None:
            diffs.append(Difference("MULTIPLE_OF_ADDED", ("multipleOf",)))
        elif new is None:
            diffs.append(Difference("MULTIPLE_OF_REMOVED", ("multipleOf",)))
        elif old != 0 and new % old == 0:
            diffs.append(Difference("MULTIPLE_OF_EXPANDED", ("multipleOf",)))
        elif new != 0 and old % new == 0:
            diffs.append(Difference("MULTIPLE_OF_REDUCED", ("multipleOf",)))
        else:
            diffs.append(Difference("MULTIPLE_OF_CHANGED", ("multipleOf",)))
    if original.requires_integer != update.requires_integer:
        diffs.append(Difference("TYPE_EXTENDED" if original.requires_integer
                                else "TYPE_NARROWED"))
    return diffs


def _enums(original: EnumNode, update: EnumNode) -> list[Difference]:
    old = {_value_key(v) for v in original.values}
    new = {_value_key(v) for v in update.values}
    if old == new:
        return []
    if new >= old:
        return [Difference("ENUM_ARRAY_EXTENDED", ("enum",))]
    if old >= new:
        return [Difference("ENUM_ARRAY_NARROWED", ("enum",))]
    return [Difference("ENUM_ARRAY_CHANGED", ("enum",))]


def _distinct(nodes: list[Node]) -> list[Node]:
    seen: set[str] = set()
    out: list[Node] = []
    for node in nodes:
        if node.key not in seen:
            seen.add(node.key)
            out.append(node)
    return out


def _max_matching(left: int, right: int, edges: Mapping[tuple[int, int], object]
                  ) -> list[tuple[int, int]]:
    """A maximum matching of the bipartite graph (augmenting paths; the graphs are small)."""
    adjacent: dict[int, list[int]] = {i: [] for i in range(left)}
    for i, j in edges:
        adjacent[i].append(j)
    owner: dict[int, int] = {}

    def augment(i: int, visited: set[int]) -> bool:
        for j in adjacent[i]:
            if j in visited:
                continue
            visited.add(j)
            if j not in owner or augment(owner[j], visited):
                owner[j] = i
                return True
        return False

    for i in range(left):
        augment(i, set())
    del right
    return sorted((i, j) for j, i in owner.items())


# -- the format --------------------------------------------------------------------------------


class JsonSchema:
    """A parsed, valid JSON Schema (with the texts of the schemas it references)."""

    schema_type = SCHEMA_TYPE

    def __init__(self, value: Any, root: Node, references: Mapping[str, str]) -> None:
        self.value = value
        self.root = root
        self.references = dict(references)
        self._canonical: str | None = None
        self._normalized: str | None = None

    def canonical(self) -> str:
        if self._canonical is None:
            self._canonical = jsontext.dumps(self.value)
        return self._canonical

    def normalized(self) -> str:
        if self._normalized is None:
            self._normalized = jsontext.dumps(self.value, sort_keys=True)
        return self._normalized

    def differences(self, writer: JsonSchema) -> list[Difference]:
        """Every difference from `writer` (the original) to this schema (the update),
        compatible ones included."""
        return _Diff().compare(writer.root, self.root)

    def can_read(self, writer: Any) -> list[Incompatibility]:
        if not isinstance(writer, JsonSchema):
            return [Incompatibility("", "Incompatible because of different schema type", "")]
        out: list[Incompatibility] = []
        for diff in self.differences(writer):
            if diff.type not in COMPATIBLE_CHANGES:
                path = diff.json_path
                out.append(Incompatibility(diff.type, _description(diff.type, path), path,
                                           SCHEMA_TYPE))
        return out

    def fingerprint(self) -> str:
        return base.fingerprint(SCHEMA_TYPE, self.canonical(), self.references)

    def __repr__(self) -> str:
        return f"JsonSchema({self.canonical()})"


def _node_type(value: Any) -> str:
    """Jackson's name for the kind of a JSON value, as Confluent's message gives it."""
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "STRING"
    if isinstance(value, list):
        return "ARRAY"
    return "NUMBER"


def _load_document(text: str, what: str) -> Any:
    try:
        value = jsontext.loads(text, exact=True)
    except ValueError as exc:
        raise _Invalid(f"Invalid JSON schema{what}: {exc}") from None
    if not isinstance(value, dict | bool):
        raise _Invalid(f"Invalid JSON schema{what}: expected an object or boolean at the root, "
                       f"found {_node_type(value)}")
    return value


def _check(value: Any, what: str) -> None:
    validator = validators.validator_for(value, default=jsonschema.Draft7Validator)
    try:
        validator.check_schema(value)
    except jsonschema.SchemaError as exc:
        where = "#" + "".join(f"/{_escape(str(p))}" for p in exc.path)
        raise _Invalid(f"Invalid JSON{what}: {exc.message} at {where}") from None


class JsonSchemaFormat:
    """Parses JSON Schemas (`SchemaFormat`)."""

    schema_type = SCHEMA_TYPE

    def parse(self, text: str, references: Mapping[str, str]) -> JsonSchema:
        try:
            value = _load_document(text, "")
            _check(value, "")
            docs: dict[str, Any] = {"": value}
            for name, ref_text in references.items():
                what = f" (reference {name})"
                docs[name] = _load_document(ref_text, what)
            loader = _Loader(docs, _draft(value))
            root = loader.load("", "", value)
            loader.resolve_all()
            schema = JsonSchema(value, root, references)
            schema.canonical()  # the registry needs it anyway; written here, depth is checked here
        except _Invalid as exc:
            raise InvalidSchemaError(SCHEMA_TYPE, str(exc)) from None
        except RecursionError:
            raise InvalidSchemaError(SCHEMA_TYPE, "the schema nests too deeply") from None
        return schema


JSON = JsonSchemaFormat()
