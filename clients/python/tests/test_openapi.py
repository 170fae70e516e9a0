"""The routes and fields the client uses must all be in the server's own
OpenAPI document."""

from typing import Any, Dict, List, Set

import httpx

from conftest import Server

from tollgate_client import ROUTES


def props(doc: Dict[str, Any], schema: Dict[str, Any]) -> Set[str]:
    if "$ref" in schema:
        target: Any = doc
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return props(doc, target)
    out = set(schema.get("properties", {}))
    for key in ("allOf", "oneOf", "anyOf"):
        for sub in schema.get(key, []):
            out |= props(doc, sub)
    return out


def test_client_routes_are_in_openapi(server: Server) -> None:
    doc = httpx.get(server.url + "/openapi.json", timeout=10).json()
    missing: List[str] = []
    for name, route in ROUTES.items():
        op = doc["paths"].get(route.path, {}).get(route.method.lower())
        if op is None:
            missing.append(f"{name}: {route.method} {route.path}")
            continue
        params = {p["name"] for p in op.get("parameters", []) + doc["paths"][route.path].get("parameters", [])
                  if p.get("in") == "query"}
        for q in sorted(route.query - params):
            missing.append(f"{name}: query parameter {q}")
        if route.body:
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            fields = props(doc, body) if body else set()
            for f in sorted(route.body - fields):
                missing.append(f"{name}: body field {f}")
    assert not missing, "routes or fields the client uses that /openapi.json lacks:\n" + "\n".join(missing)
