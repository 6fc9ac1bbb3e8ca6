"""The OpenAPI 3.1 description of the live service, served at ``/openapi.json``."""

from __future__ import annotations

from typing import Any

__all__ = ["openapi_document"]

_LOCATION = {
    "u": {"type": "integer", "description": "node id of the edge's start (with v, offset)"},
    "v": {"type": "integer", "description": "node id of the edge's end"},
    "offset": {"type": "number", "description": "metres from u along the u-v edge"},
    "lon": {"type": "number", "description": "WGS84 longitude, degrees (snapped to a road)"},
    "lat": {"type": "number", "description": "WGS84 latitude, degrees"},
}
_KEYWORDS = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}

_SCHEMAS: dict[str, Any] = {
    "Subscription": {
        "type": "object", "required": ["id", "keywords"],
        "additionalProperties": False,
        "description": "threshold (default): alpha and tau; boolean: radius; topk: alpha "
                       "and k. Fields a kind does not use are null or absent.",
        "properties": {
            "id": {"type": "integer"}, **_LOCATION, "keywords": _KEYWORDS,
            "kind": {"type": ["string", "null"], "enum": ["threshold", "boolean", "topk", None],
                     "description": "threshold (null too): SIM >= tau; boolean: every "
                                    "keyword and dN <= radius; topk: the k best messages "
                                    "of the window of the last W"},
            "alpha": {"type": ["number", "null"], "minimum": 0, "maximum": 1,
                      "description": "preference for nearness over text (threshold, topk)"},
            "tau": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1,
                    "description": "delivery threshold of SIM (threshold)"},
            "radius": {"type": ["number", "null"], "minimum": 0,
                       "description": "metres of road, at most Dmax (boolean)"},
            "k": {"type": ["integer", "null"], "minimum": 1,
                  "description": "results kept (topk)"},
            "expires_at": {"type": ["number", "null"],
                           "description": "seconds since the Unix epoch: the subscription "
                                          "matches no message with time >= expires_at"}}},
    "Message": {
        "type": "object", "required": ["id", "keywords"], "additionalProperties": False,
        "properties": {"id": {"type": "integer"}, **_LOCATION, "keywords": _KEYWORDS,
                       "time": {"type": ["number", "null"],
                                "description": "seconds since the Unix epoch (default: "
                                               "the server's clock)"}}},
    "Move": {"type": "object", "required": ["id"], "additionalProperties": False,
             "properties": {"id": {"type": "integer"}, **_LOCATION}},
    "Location": {"type": "object", "additionalProperties": False, "properties": _LOCATION},
    "Delivery": {"type": "object", "properties": {
        "message_id": {"type": "integer"}, "subscription_id": {"type": "integer"},
        "distance": {"type": "number", "description": "network metres"},
        "score": {"type": "number", "description": "SIM(s, m); 1.0 for a boolean "
                                                    "subscription"}}},
    "TopkEvent": {"type": "object", "properties": {
        "event": {"type": "string", "enum": ["insert", "evict"]},
        "message_id": {"type": "integer", "description": "enters or leaves the top-k"},
        "subscription_id": {"type": "integer"},
        "rank": {"type": "integer", "description": "1-based, after an insert, before an "
                                                   "evict"},
        "score": {"type": "number", "description": "SIM(s, m)"},
        "distance": {"type": "number", "description": "network metres"},
        "arrival_id": {"type": "integer", "description": "the published message whose "
                                                         "arrival caused the event"}}},
    "Deliveries": {"type": "object", "properties": {
        "deliveries": {"type": "array", "items": {"$ref": "#/components/schemas/Delivery"}},
        "topk": {"type": "array", "items": {"$ref": "#/components/schemas/TopkEvent"},
                 "description": "top-k insertions and evictions (absent when none)"},
        "seq": {"type": "integer", "description": "log sequence number of the event"},
        "duplicates": {"type": "array", "items": {"type": "integer"},
                       "description": "ids published before (their recorded deliveries "
                                      "are returned)"}}},
    "Applied": {"type": "object", "properties": {"seq": {"type": "integer"}},
                "additionalProperties": {"type": "integer"}},
    "Error": {"type": "object", "properties": {"error": {"type": "string"}}},
}


def _batch(name: str) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{name}"}
    return {"required": True, "content": {"application/json": {"schema": {
        "oneOf": [ref, {"type": "array", "items": ref, "minItems": 1}]}}}}


def _answer(name: str, text: str = "applied and durable") -> dict[str, Any]:
    return {"description": text, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{name}"}}}}


_ERRORS = {str(s): _answer("Error", text) for s, text in (
    ("400", "malformed request"), ("404", "unknown id"), ("409", "id already exists"),
    ("422", "a field breaks the input rules (named with its value)"),
    ("503", "the log failed; no more events are accepted"))}
_ID = [{"name": "sid", "in": "path", "required": True, "schema": {"type": "integer"}}]


def openapi_document() -> dict[str, Any]:
    """The document (a fresh dict)."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "roadpubsub serve", "version": "1",
                 "description": "Durable spatio-textual publish/subscribe on a road network: "
                                "every answer follows an fsync of its log record."},
        "paths": {
            "/subscriptions": {
                "post": {"summary": "subscribe one or a batch (whole or nothing)",
                         "requestBody": _batch("Subscription"),
                         "responses": {"201": _answer("Applied"), **_ERRORS}},
                "get": {"summary": "live subscriptions by id",
                        "parameters": [
                            {"name": "after", "in": "query", "schema": {"type": "integer"}},
                            {"name": "limit", "in": "query", "schema": {"type": "integer"}}],
                        "responses": {"200": {"description": "a page of subscriptions"}}}},
            "/subscriptions/moves": {
                "post": {"summary": "move a batch of subscriptions (one index update)",
                         "requestBody": _batch("Move"),
                         "responses": {"200": _answer("Applied"), **_ERRORS}}},
            "/subscriptions/{sid}": {
                "get": {"summary": "one subscription", "parameters": _ID,
                        "responses": {"200": _answer("Subscription", "the subscription"),
                                      **_ERRORS}},
                "delete": {"summary": "unsubscribe", "parameters": _ID,
                           "responses": {"200": _answer("Applied"), **_ERRORS}}},
            "/subscriptions/{sid}/location": {
                "put": {"summary": "move one subscription", "parameters": _ID,
                        "requestBody": {"required": True, "content": {"application/json": {
                            "schema": {"$ref": "#/components/schemas/Location"}}}},
                        "responses": {"200": _answer("Applied"), **_ERRORS}}},
            "/messages": {
                "post": {"summary": "publish one message or a batch; answers the deliveries",
                         "requestBody": _batch("Message"),
                         "responses": {"200": _answer("Deliveries"), **_ERRORS}}},
            "/messages/{mid}": {
                "get": {"summary": "a published message's deliveries",
                        "parameters": [{"name": "mid", "in": "path", "required": True,
                                        "schema": {"type": "integer"}}],
                        "responses": {"200": {"description": "seq, time and deliveries"},
                                      **_ERRORS}}},
            "/deliveries": {
                "get": {"summary": "WebSocket: each delivery and top-k event as a JSON "
                                   "object, pushed once durable; ?subscription=ID for one "
                                   "subscription's",
                        "responses": {"101": {"description": "switching protocols"}}}},
            "/health": {"get": {"summary": "status (ok, degraded: snapshots failing or the "
                                           "log at its size limit; failed: the log cannot "
                                           "be written, events refused until the disk "
                                           "accepts writes and the state is reloaded), the "
                                           "reason, the log's position and size",
                                "responses": {"200": {"description": "ok or degraded"},
                                              "503": {"description": "failed"}}}},
            "/metrics": {"get": {"summary": "Prometheus text format",
                                 "responses": {"200": {"description": "metrics"}}}},
        },
        "components": {"schemas": _SCHEMAS},
    }
