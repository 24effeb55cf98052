"""Where a ``$ref`` of a JSON Schema points, within the one document it is given.

References resolve as JSON Schema resolves them (RFC 3986 against the base URI that ``$id``
sets): JSON pointers (``#``, ``#/properties/a``, ``#/$defs/A``, ``~0`` / ``~1`` escapes,
percent-encoding), ``$anchor`` and ``$dynamicAnchor`` names, draft-07 ``$id: "#name"``, and
``$id``-relative URIs of resources embedded in the document. Nothing is fetched: a reference to
another document is a :class:`~dspark_json.errors.SchemaError` that says how to inline it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from dspark_json.errors import SchemaError

__all__ = ["Document"]

#: Keywords whose values are data, not schemas (an ``$id`` inside them identifies nothing).
_DATA = frozenset({"enum", "const", "default", "examples"})
#: Keywords whose values map names to schemas (the map itself is not a schema).
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)
#: Drafts whose ``$ref`` replaces its siblings (and hides a sibling ``$id``).
_LEGACY = ("draft-03", "draft-04", "draft-06", "draft-07")


class Document:
    """One JSON Schema document, indexed once: the base URI of each subschema, the resources
    (``$id``) and anchors it holds."""

    def __init__(self, root: Any) -> None:
        dialect = root.get("$schema") if isinstance(root, Mapping) else None
        dialect = dialect if isinstance(dialect, str) else ""
        #: draft-07 and earlier: ``$ref`` ignores its siblings.
        self.legacy = any(name in dialect for name in _LEGACY)
        self._id_key = "id" if any(name in dialect for name in _LEGACY[:2]) else "$id"
        self._bases: dict[int, str] = {}
        self._resources: dict[str, Any] = {"": root}
        self._anchors: dict[tuple[str, str], Any] = {}
        self._walk(root, "")

    def resolve(self, node: Mapping[str, Any], ref: str, where: str) -> Any:
        """The subschema that ``ref`` (written in ``node``) points to."""
        base = self._bases.get(id(node), "")
        uri, fragment = urldefrag(_join(base, ref))
        root = self._resources.get(uri)
        if root is None:
            raise SchemaError(
                f"JSON Schema at {where} has $ref {ref!r}, which points outside this schema "
                f"(to {uri!r}); dspark-json resolves references within the schema it is given "
                "and fetches nothing. Copy the referenced schema under $defs and refer to it as "
                "'#/$defs/<Name>'."
            )
        if not fragment:
            return root
        name = unquote(fragment)
        if name.startswith("/"):
            return _pointer(root, name, ref, where)
        target = self._anchors.get((uri, name))
        if target is None:
            raise SchemaError(
                f"JSON Schema at {where} has $ref {ref!r}, but no $anchor {name!r} is declared "
                "in this schema. Declare it, or refer by JSON pointer ('#/$defs/<Name>')."
            )
        return target

    def _walk(self, node: Any, base: str) -> None:
        if isinstance(node, list):
            for item in node:
                self._walk(item, base)
            return
        if not isinstance(node, Mapping):
            return
        base = self._identify(node, base)
        self._bases.setdefault(id(node), base)
        for key, value in node.items():
            if key in _DATA:
                continue
            if key in _SCHEMA_MAPS and isinstance(value, Mapping):
                for sub in value.values():
                    self._walk(sub, base)
            else:
                self._walk(value, base)

    def _identify(self, node: Mapping[str, Any], base: str) -> str:
        """The base URI inside ``node``, registering the resource and anchors it declares."""
        ident = node.get(self._id_key)
        if isinstance(ident, str) and not (self.legacy and "$ref" in node):
            uri, fragment = urldefrag(_join(base, ident))
            if not ident.startswith("#"):
                base = uri
                self._resources.setdefault(uri, node)
            if fragment:  # draft-07 names: "$id": "#foo"
                self._anchors.setdefault((uri, fragment), node)
        for key in ("$anchor", "$dynamicAnchor"):
            anchor = node.get(key)
            if isinstance(anchor, str):
                self._anchors.setdefault((base, anchor), node)
        return base


def _join(base: str, ref: str) -> str:
    # urljoin leaves a fragment-only reference alone under schemes it does not know (urn:).
    if ref.startswith("#"):
        return urldefrag(base)[0] + ref
    return urljoin(base, ref)


def _pointer(root: Any, pointer: str, ref: str, where: str) -> Any:
    """RFC 6901: ``/a/b~1c/0`` from ``root``."""
    node = root
    for token in pointer[1:].split("/"):
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            raise SchemaError(
                f"JSON Schema at {where} has $ref {ref!r}, which points to nothing: there is no "
                f"{key!r} at that place in the schema. Fix the pointer (write '~1' for '/' and "
                "'~0' for '~' in names)."
            )
    return node
