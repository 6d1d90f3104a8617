"""Schemathesis hooks for rtrack's API test (loaded by run.sh through SCHEMATHESIS_HOOKS).

rtrack's document is OpenAPI 3.0.3, whose schemas are JSON Schema draft 4: it has no
`propertyNames`, so a map's keys can only be "any string". The server checks the keys of two maps
(Placement's allocations: provider uuids, then resource class names), and the document states
those rules with `propertyNames` all the same, for readers that take it. Schemathesis reads 3.0
as draft 4 and draws any string as such a key, so a body it calls valid is refused (400) for its
keys alone.

This hook makes the valid (positive) cases it is given follow the document's own `propertyNames`
patterns: a key that does not match is replaced by one derived from it that does. It reads the
rules from the document, knows nothing else of rtrack, and leaves every other part of the case,
every invalid (negative) case, and every check as they are.
"""

import hashlib
import re
import uuid

import schemathesis


def _resolve(schema, root, seen=0):
    while isinstance(schema, dict) and "$ref" in schema and seen < 32:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            return schema
        node = root
        for part in ref[2:].split("/"):
            node = node.get(part.replace("~1", "/").replace("~0", "~"), {})
        schema, seen = node, seen + 1
    return schema


def _valid_key(key, pattern, taken):
    """A key matching `pattern`, derived from `key` (the same key gives the same answer)."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    candidates = [
        str(uuid.uuid5(uuid.NAMESPACE_URL, key)),
        "CUSTOM_" + digest[:16].upper(),
        digest[:16],
    ]
    for candidate in candidates:
        if re.fullmatch(pattern, candidate) and candidate not in taken:
            return candidate
    return key


def _conform(value, schema, root, depth=0):
    schema = _resolve(schema, root)
    if depth > 32 or not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        names = schema.get("propertyNames")
        pattern = _resolve(names, root).get("pattern") if isinstance(names, dict) else None
        extra = schema.get("additionalProperties")
        out = {}
        for key, item in value.items():
            if key in props:
                out[key] = _conform(item, props[key], root, depth + 1)
                continue
            if pattern is not None and not re.fullmatch(pattern, key):
                key = _valid_key(key, pattern, set(value) | set(out))
            out[key] = _conform(item, extra, root, depth + 1) if isinstance(extra, dict) else item
        value = out
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        value = [_conform(item, schema["items"], root, depth + 1) for item in value]
    for part in schema.get("allOf") or []:
        value = _conform(value, part, root, depth + 1)
    return value


@schemathesis.hook
def map_case(context, case):
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or not isinstance(case.body, dict):
        return case
    root = case.operation.schema.raw_schema
    operation = root.get("paths", {}).get(case.operation.path, {}).get(case.operation.method.lower(), {})
    content = _resolve(operation.get("requestBody", {}), root).get("content", {})
    schema = (content.get(case.media_type or "application/json") or {}).get("schema")
    if schema is not None:
        case.body = _conform(case.body, schema, root)
    return case
