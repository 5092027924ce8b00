"""Turn a schema of the Kubernetes API server's OpenAPI v3 document into a structural schema.

A CustomResourceDefinition cannot hold `$ref`s, so every reference is inlined. What the API
server needs to validate and prune is kept (types, formats, enums, required, value limits and
the `x-kubernetes-*` extensions a CRD understands); descriptions, the Go-zero-value defaults
and the server-side-apply patch hints are dropped to keep the CRD small. Anything the
converter does not know raises `SchemaError` rather than being copied or dropped silently, so
a newer Kubernetes OpenAPI document that adds a construct makes the generator stop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Schema = dict[str, Any]

REF_PREFIX = "#/components/schemas/"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"

# The grammar of resource.Quantity (apimachinery/pkg/api/resource), as a regular expression:
# a signed decimal number, then a binary-SI suffix, a decimal-SI suffix or an exponent.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

# The part of ObjectMeta a pod template may carry (what controller-gen calls the embedded
# ObjectMeta): the operator copies it onto the pods it creates.
TEMPLATE_METADATA_FIELDS = ("annotations", "finalizers", "labels", "name", "namespace")

# Keys copied as they are.
_KEPT = frozenset(
    {
        "type",
        "format",
        "enum",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "nullable",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
    }
)
# Keys handled by the converter itself.
_STRUCTURAL = frozenset(
    {"$ref", "allOf", "properties", "additionalProperties", "items", "required"}
)
# Keys dropped on purpose: documentation, Go zero-value defaults (the Pod API applies its own
# defaults when the operator creates the pod), and hints for strategic-merge patches and
# unions that a CRD cannot express.
_DROPPED = frozenset(
    {
        "description",
        "default",
        "title",
        "example",
        "externalDocs",
        "x-kubernetes-patch-strategy",
        "x-kubernetes-patch-merge-key",
        "x-kubernetes-unions",
    }
)
# Formats the OpenAPI document uses that are no CRD format (int-or-string becomes the
# x-kubernetes-int-or-string extension).
_DROPPED_FORMATS = frozenset({"int-or-string"})


def int_or_string(**extra: Any) -> Schema:
    """An integer or a string: the structural form of IntOrString and Quantity.

    A JSON number with a fraction (`cpu: 0.5`) is not an integer: as in Kubeflow's CRD
    (controller-gen), quantities with a fraction are written as strings ("0.5", "500m").
    """
    return {"x-kubernetes-int-or-string": True, **extra}


class SchemaError(ValueError):
    """The OpenAPI document holds something this converter cannot turn into a CRD schema."""


class StructuralConverter:
    """Inline the components of one OpenAPI v3 document into structural schemas."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        try:
            self._components: Mapping[str, Any] = document["components"]["schemas"]
        except (KeyError, TypeError) as error:
            raise SchemaError("not an OpenAPI v3 document: no components.schemas") from error

    def component(self, name: str) -> Schema:
        """The structural schema of the named component (e.g. io.k8s.api.core.v1.PodSpec)."""
        return self._convert_component(name, stack=())

    def _raw(self, name: str) -> Mapping[str, Any]:
        try:
            raw = self._components[name]
        except KeyError as error:
            raise SchemaError(f"component {name} is not in the OpenAPI document") from error
        if not isinstance(raw, Mapping):
            raise SchemaError(f"component {name} is not a schema object")
        return raw

    def _convert_component(self, name: str, stack: tuple[str, ...]) -> Schema:
        if name in stack:
            cycle = " -> ".join((*stack, name))
            raise SchemaError(f"recursive schema cannot be inlined: {cycle}")
        stack = (*stack, name)
        if name == INT_OR_STRING:
            return int_or_string()
        if name == QUANTITY:
            return int_or_string(pattern=QUANTITY_PATTERN)
        if name == OBJECT_META:
            return self._template_metadata(stack)
        return self._convert(self._raw(name), path=name, stack=stack)

    def _template_metadata(self, stack: tuple[str, ...]) -> Schema:
        meta = self._convert(self._raw(OBJECT_META), path=OBJECT_META, stack=stack)
        properties = meta.get("properties", {})
        missing = [field for field in TEMPLATE_METADATA_FIELDS if field not in properties]
        if missing:
            raise SchemaError(f"{OBJECT_META} lacks the fields {missing}")
        return {
            "type": "object",
            "properties": {field: properties[field] for field in TEMPLATE_METADATA_FIELDS},
        }

    def _reference(self, node: Mapping[str, Any], path: str) -> str | None:
        """The component a node stands for: `$ref`, or `allOf` with a single `$ref`."""
        if "$ref" in node:
            ref = node["$ref"]
        elif "allOf" in node:
            parts = node["allOf"]
            if not (isinstance(parts, list) and len(parts) == 1 and set(parts[0]) == {"$ref"}):
                raise SchemaError(f"{path}: allOf other than a single $ref is not supported")
            ref = parts[0]["$ref"]
        else:
            return None
        if not (isinstance(ref, str) and ref.startswith(REF_PREFIX)):
            raise SchemaError(f"{path}: unsupported $ref {ref!r}")
        return ref[len(REF_PREFIX) :]

    def _convert(self, node: Mapping[str, Any], path: str, stack: tuple[str, ...]) -> Schema:
        unknown = set(node) - _KEPT - _STRUCTURAL - _DROPPED
        if unknown:
            raise SchemaError(f"{path}: unsupported schema keys {sorted(unknown)}")
        ref = self._reference(node, path)
        if ref is not None:
            # Siblings of a reference are documentation and defaults only.
            extra = set(node) - {"$ref", "allOf"} - _DROPPED
            if extra:
                raise SchemaError(f"{path}: keys {sorted(extra)} beside a $ref")
            return self._convert_component(ref, stack)

        out: Schema = {}
        for key in sorted(set(node) & _KEPT):
            if key == "format" and node[key] in _DROPPED_FORMATS:
                continue
            out[key] = node[key]
        if "required" in node:
            out["required"] = sorted(node["required"])
        if "properties" in node:
            out["properties"] = {
                name: self._convert(child, f"{path}.{name}", stack)
                for name, child in sorted(node["properties"].items())
            }
        if "additionalProperties" in node:
            additional = node["additionalProperties"]
            if isinstance(additional, bool):
                raise SchemaError(f"{path}: boolean additionalProperties is not supported")
            out["additionalProperties"] = self._convert(additional, f"{path}[*]", stack)
        if "items" in node:
            out["items"] = self._convert(node["items"], f"{path}[]", stack)
            if node.get("x-kubernetes-list-type") == "map":
                self._default_map_keys(node, out, path)
        if "type" not in out and not _untyped_allowed(out):
            raise SchemaError(f"{path}: no type")
        return out

    def _default_map_keys(self, node: Mapping[str, Any], out: Schema, path: str) -> None:
        """Keep the defaults of list-map keys: a CRD requires each key be required or defaulted.

        (The Pod API itself defaults e.g. a container port's `protocol` to TCP.)
        """
        raw_items = node["items"]
        ref = self._reference(raw_items, f"{path}[]")
        if ref is not None:
            raw_items = self._raw(ref)
        items = out["items"]
        required = set(items.get("required", ()))
        for key in node.get("x-kubernetes-list-map-keys", ()):
            if key in required:
                continue
            raw_key = raw_items.get("properties", {}).get(key, {})
            if "default" not in raw_key:
                raise SchemaError(f"{path}: list-map key {key!r} is neither required nor defaulted")
            items["properties"][key]["default"] = raw_key["default"]


def _untyped_allowed(schema: Schema) -> bool:
    return bool(
        schema.get("x-kubernetes-int-or-string")
        or schema.get("x-kubernetes-preserve-unknown-fields")
    )
