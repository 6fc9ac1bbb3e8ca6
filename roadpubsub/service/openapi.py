"""The OpenAPI 3.1 description of the live service, served at ``/openapi.json``.

It states exactly what the server accepts: 64-bit ids (in paths too: canonical decimal,
:func:`roadpubsub.index.events.parse_ids`), the location rule (``u``, ``v``, ``offset`` all given,
or
``lon``, ``lat`` both given, the other group null or absent), the fields of each
subscription kind (threshold: ``alpha`` and ``tau``; boolean: ``radius``; topk: ``k`` and
``alpha``; the fields a kind does not use null or absent), and every status each route
can answer, the transport limits' too (:mod:`roadpubsub.service.limits`). What a schema
cannot say (a node id that is not in the network, a point off every road, an id that
already exists) is answered 404, 409 or 422 with the field and the value.
"""

from __future__ import annotations

from typing import Any

from roadpubsub.index.events import MAX_BATCH
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["openapi_document"]

_INT64 = {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}
_NULL = {"type": "null"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "type": [schema["type"], "null"]}


_LOCATION = {
    "u": _nullable({**_INT64, "description": "node id of the edge's start (with v, offset)"}),
    "v": _nullable({**_INT64, "description": "node id of the edge's end"}),
    "offset": {"type": ["number", "null"], "description": "metres from u along the u-v edge"},
    "lon": {"type": ["number", "null"], "minimum": -180, "maximum": 180,
            "description": "WGS84 longitude, degrees (snapped to a road)"},
    "lat": {"type": ["number", "null"], "minimum": -90, "maximum": 90,
            "description": "WGS84 latitude, degrees"},
}
#: u, v, offset all given (lon, lat then both given, as a hint, or both null), or lon, lat
#: both given with u, v, offset null or absent.
_LOCATION_RULE = {"oneOf": [
    {"required": ["u", "v", "offset"],
     "properties": {"u": {"type": "integer"}, "v": {"type": "integer"},
                    "offset": {"type": "number"}, "geometry": _NULL},
     "anyOf": [{"properties": {"lon": _NULL, "lat": _NULL}},
               {"required": ["lon", "lat"],
                "properties": {"lon": {"type": "number"}, "lat": {"type": "number"}}}]},
    {"required": ["lon", "lat"],
     "properties": {"lon": {"type": "number"}, "lat": {"type": "number"},
                    "u": _NULL, "v": _NULL, "offset": _NULL, "geometry": _NULL}},
    {"required": ["geometry"],  # a route or an area (issue 32)
     "properties": {"geometry": {"type": "object"}, "u": _NULL, "v": _NULL, "offset": _NULL,
                    "lon": _NULL, "lat": _NULL}},
]}
_POSITION = {"type": "array", "minItems": 2, "maxItems": 3, "items": {"type": "number"},
             "prefixItems": [{"type": "number", "minimum": -180, "maximum": 180},
                             {"type": "number", "minimum": -90, "maximum": 90}]}


def _coordinates(depth: int, min_items: int) -> dict[str, Any]:
    """Nested arrays of [lon, lat] positions, ``depth`` deep."""
    out: dict[str, Any] = _POSITION
    for level in range(depth):
        out = {"type": "array", "items": out, **({"minItems": min_items} if level == 0 else {})}
    return out


def _geometry(max_points: int) -> dict[str, Any]:
    """A route or an area instead of a point (issue 32), with the service's own limit on
    a route's waypoints and nodes (``--set-max-points``; the other limits: roadnet.settings
    service_set_*)."""
    return {
        "description": "a route (GeoJSON LineString of lon/lat waypoints joined by shortest "
                       "paths, or a NodePath: original node ids, metres along the first and "
                       "last edge) or an area (GeoJSON Polygon or MultiPolygon: every road "
                       "inside); threshold and boolean subscriptions only",
        "oneOf": [
            _NULL,
            {"type": "object", "required": ["type", "coordinates"],
             "additionalProperties": False,
             "properties": {"type": {"const": "LineString"},
                            "coordinates": {**_coordinates(1, 2), "maxItems": max_points}}},
            {"type": "object", "required": ["type", "coordinates"],
             "additionalProperties": False,
             "properties": {"type": {"const": "Polygon"}, "coordinates": _coordinates(2, 0)}},
            {"type": "object", "required": ["type", "coordinates"],
             "additionalProperties": False,
             "properties": {"type": {"const": "MultiPolygon"},
                            "coordinates": _coordinates(3, 0)}},
            {"type": "object", "required": ["type", "nodes"],
             "additionalProperties": False,
             "properties": {"type": {"const": "NodePath"},
                            "nodes": {"type": "array", "minItems": 2, "items": _INT64,
                                      "maxItems": max_points},
                            "start_m": {"type": ["number", "null"], "minimum": 0},
                            "end_m": {"type": ["number", "null"], "minimum": 0}}}]}


_KEYWORDS = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}
_UNIT = {"type": "number", "minimum": 0, "maximum": 1}


def _kind_rule(dmax_m: float | None) -> dict[str, Any]:
    radius: dict[str, Any] = {"type": "number", "minimum": 0}
    if dmax_m is not None:
        radius["maximum"] = dmax_m
    return {"oneOf": [
        {"title": "threshold", "required": ["alpha", "tau"], "properties": {
            "kind": {"enum": ["threshold", None]}, "alpha": _UNIT,
            "tau": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "radius": _NULL, "k": _NULL}},
        {"title": "boolean", "required": ["kind", "radius"], "properties": {
            "kind": {"const": "boolean"}, "radius": radius,
            "alpha": _NULL, "tau": _NULL, "k": _NULL}},
        {"title": "topk", "required": ["kind", "k", "alpha"], "properties": {
            "kind": {"const": "topk"}, "alpha": _UNIT,
            "k": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
            "tau": _NULL, "radius": _NULL, "geometry": _NULL}},
    ]}


def _schemas(dmax_m: float | None, set_max_points: int) -> dict[str, Any]:
    geometry = _geometry(set_max_points)
    dmax = "at most Dmax" if dmax_m is None else f"at most Dmax, {dmax_m:g}"
    return {
        "Subscription": {
            "type": "object", "required": ["id", "keywords"], "additionalProperties": False,
            "description": "threshold (kind absent or null too): alpha and tau; boolean: "
                           "radius; topk: alpha and k. Fields a kind does not use are null "
                           "or absent.",
            "properties": {
                "id": _INT64, **_LOCATION, "geometry": geometry, "keywords": _KEYWORDS,
                "kind": {"enum": ["threshold", "boolean", "topk", None],
                         "description": "threshold: SIM >= tau; boolean: every keyword and "
                                        "dN <= radius; topk: the k best messages of the "
                                        "window of the last W"},
                "alpha": {"type": ["number", "null"], "minimum": 0, "maximum": 1,
                          "description": "preference for nearness over text (threshold, "
                                         "topk)"},
                "tau": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1,
                        "description": "delivery threshold of SIM (threshold)"},
                "radius": {"type": ["number", "null"], "minimum": 0,
                           **({} if dmax_m is None else {"maximum": dmax_m}),
                           "description": f"metres of road, {dmax} (boolean)"},
                "k": {"type": ["integer", "null"], "minimum": 1, "maximum": 2**31 - 1,
                      "description": "results kept (topk)"},
                "expires_at": {"type": ["number", "null"],
                               "description": "seconds since the Unix epoch: the "
                                              "subscription matches no message with time "
                                              ">= expires_at"},
                "webhook": {"type": ["string", "null"], "minLength": 1, "maxLength": 2048,
                            "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://[ -~]*$",
                            "description": "deliveries are also POSTed here as "
                                           "{\"deliveries\": [Delivery, ...]} (integer "
                                           "ids, seq), signed "
                                           "(RoadPubSub-Signature) with a "
                                           "RoadPubSub-Delivery-Id each; a host that is "
                                           "loopback, private or does not resolve is "
                                           "refused (422) unless the service allows it"},
                "mqtt": {"type": ["boolean", "null"],
                         "description": "whether the MQTT connector publishes this "
                                        "subscription's deliveries on "
                                        "{prefix}/deliveries/{id}; null or absent: the "
                                        "service's --mqtt-push decides (all: yes, "
                                        "chosen: no)"}},
            "allOf": [_LOCATION_RULE, _kind_rule(dmax_m)]},
        "Message": {
            "type": "object", "required": ["id", "keywords"], "additionalProperties": False,
            "properties": {"id": _INT64, **_LOCATION, "keywords": _KEYWORDS,
                           "time": {"type": ["number", "null"],
                                    "description": "seconds since the Unix epoch (default: "
                                                   "the server's clock)"}},
            "allOf": [_LOCATION_RULE]},
        "Move": {"type": "object", "required": ["id"], "additionalProperties": False,
                 "properties": {"id": _INT64, **_LOCATION, "geometry": geometry},
                 "allOf": [_LOCATION_RULE]},
        "Location": {"type": "object", "additionalProperties": False,
                     "properties": {"id": {**_INT64, "description": "the path's id, if "
                                                                      "given (else 422)"},
                                    **_LOCATION, "geometry": geometry},
                     "allOf": [_LOCATION_RULE]},
        "SubscriptionRow": {
            "type": "object", "required": ["id", "keywords"],
            "description": "a live subscription: its fields, with its location as given "
                           "back by the server; a top-k one also with 'topk', its current "
                           "top-k; a route or area one with 'geometry': kind (route, area), "
                           "length_m, node_paths (original node ids per leg) and segments "
                           "(edge, u, v, start_m, end_m: metres from u) and a null point",
            "properties": {"id": {"type": "integer"},
                           "keywords": {"type": "array", "items": {"type": "string"}},
                           "kind": {"type": ["string", "null"]},
                           "topk": {"type": "array", "items": {"type": "object"}}}},
        "SubscriptionPage": {
            "type": "object", "required": ["subscriptions"],
            "properties": {"subscriptions": {
                "type": "array", "items": {"$ref": "#/components/schemas/SubscriptionRow"}}}},
        "Delivery": {"type": "object",
                     "required": ["message_id", "subscription_id", "distance", "score"],
                     "properties": {
                         "message_id": {"type": "integer"},
                         "subscription_id": {"type": "integer"},
                         "seq": {"type": "integer", "minimum": 1,
                                 "description": "the delivery's number, increasing across "
                                                "the service: resume a stream after it"},
                         "distance": {"type": "number", "description": "network metres"},
                         "score": {"type": "number", "description": "SIM(s, m); 1.0 for a "
                                                                     "boolean subscription"}}},
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
        "Deliveries": {"type": "object", "required": ["deliveries"], "properties": {
            "deliveries": {"type": "array", "items": {"$ref": "#/components/schemas/Delivery"}},
            "topk": {"type": "array", "items": {"$ref": "#/components/schemas/TopkEvent"},
                     "description": "top-k insertions and evictions (absent when none)"},
            "seq": {"type": "integer", "description": "log sequence number of the event"},
            "duplicates": {"type": "array", "items": {"type": "integer"},
                           "description": "ids published before (their recorded deliveries "
                                          "are returned)"}}},
        "MessageRecord": {"type": "object",
                          "required": ["message_id", "seq", "deliveries"], "properties": {
                              "message_id": {"type": "integer"}, "seq": {"type": "integer"},
                              "time": {"type": ["number", "null"]},
                              "deliveries": {"type": "array", "items": {
                                  "$ref": "#/components/schemas/Delivery"}},
                              "topk": {"type": "array", "items": {
                                  "$ref": "#/components/schemas/TopkEvent"}}}},
        "Applied": {"type": "object", "required": ["seq"],
                    "properties": {"seq": {"type": "integer"}},
                    "additionalProperties": {"type": "integer"}},
        "DeadLetters": {"type": "object", "required": ["dead"], "properties": {
            "dead": {"type": "array", "items": {"type": "object"},
                     "description": "webhook deliveries given up after their retries: "
                                    "id (for replay), the Delivery's fields (seq, "
                                    "message_id, subscription_id, distance, score), url, "
                                    "queued_at, reason, dead_at (Unix seconds)"}}},
        "Replay": {"type": "object", "required": ["ids"], "properties": {
            "ids": {"type": "array", "items": {"type": "integer", "minimum": 1}}}},
        "Replayed": {"type": "object", "required": ["replayed"],
                     "properties": {"replayed": {"type": "integer"}}},
        "Health": {"type": "object", "required": ["status"],
                   "properties": {"status": {"enum": ["ok", "failed"]}}},
        "Error": {"type": "object", "required": ["error"],
                  "properties": {"error": {"type": "string"}}},
    }


def _batch(name: str) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{name}"}
    return {"required": True, "content": {"application/json": {"schema": {
        "oneOf": [ref, {"type": "array", "items": ref, "minItems": 1,
                        "maxItems": MAX_BATCH}]}}}}


def _answer(name: str, text: str = "applied and durable") -> dict[str, Any]:
    return {"description": text, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{name}"}}}}


_ERROR_TEXT = {
    "400": "malformed request: not JSON, not an object or array, or a malformed id in the "
           "path or query (ids are canonical decimal 64-bit integers)",
    "401": "no token, or a token that is not valid",
    "403": "the token may not do this, or not on this id",
    "404": "unknown id (webhook routes: the service sends no webhooks)",
    "408": "the request did not arrive in full within the body timeout (connection closed)",
    "409": "id already exists",
    "410": "older than the stream's retention: the error names the oldest seq still held",
    "413": "the body or the batch is larger than the limit (refused before it is read)",
    "415": "the body is not application/json",
    "422": "a field breaks the input rules (named with its value)",
    "426": "a WebSocket endpoint: connect with ws:// or wss://",
    "429": "too many requests from this client; retry after Retry-After seconds",
    "431": "the request's headers are larger than the limit",
    "503": "the log failed (no more events are accepted), or the server is at its "
           "connection limit",
}


def _errors(*codes: int, auth: bool = True) -> dict[str, Any]:
    """The error answers ``codes`` plus those of every route: the transport limits' and,
    with ``auth``, authentication's."""
    every = {408, 429, 431, 503} | ({401, 403} if auth else set())
    out: dict[str, Any] = {}
    for code in sorted(set(codes) | every):
        text = _ERROR_TEXT[str(code)]
        answer = _answer("Error", text)
        if code == 503:  # uvicorn's own answer at its connection limit is plain text
            answer["content"]["text/plain"] = {"schema": {"type": "string"}}
        if code == 429:
            answer["headers"] = {"Retry-After": {"description": "seconds",
                                                 "schema": {"type": "integer"}}}
        out[str(code)] = answer
    return out


_BODY = (400, 413, 415, 422)  # the answers of a route with a JSON body
_ID = [{"name": "sid", "in": "path", "required": True, "schema": _INT64, "example": 1,
        "description": "canonical decimal (no sign +, no leading zero, no space)"}]
_AFTER = {"name": "after", "in": "query", "schema": _INT64,
          "description": "resume after this delivery seq (replays every stored delivery "
                         "after it, then live)"}
_MID = [{"name": "mid", "in": "path", "required": True, "schema": _INT64, "example": 1,
         "description": "canonical decimal (no sign +, no leading zero, no space)"}]


def _options(methods: str, *codes: int) -> dict[str, Any]:
    return {"options": {"summary": "the methods of this path", "responses": {
        "204": {"description": f"Allow: {methods}", "headers": {"Allow": {
            "schema": {"type": "string"}}}},
        **_errors(*codes, auth=False)}}}


def openapi_document(*, dmax_m: float | None = None,
                     set_max_points: int = DEFAULTS.service_set_max_points) -> dict[str, Any]:
    """The document (a fresh dict); ``dmax_m`` bounds a boolean subscription's radius,
    ``set_max_points`` a route's waypoints or nodes (the service's ``--set-max-points``)."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "roadpubsub serve", "version": "1",
                 "description": "Durable spatio-textual publish/subscribe on a road network: "
                                "every answer follows an fsync of its log record."},
        "paths": {
            "/subscriptions": {
                "post": {"summary": "subscribe one or a batch (whole or nothing)",
                         "requestBody": _batch("Subscription"),
                         "responses": {"201": _answer("Applied"),
                                       **_errors(*_BODY, 409)}},
                "get": {"summary": "live subscriptions by id",
                        "parameters": [
                            {"name": "after", "in": "query", "schema": _INT64,
                             "description": "ids above this one"},
                            {"name": "limit", "in": "query",
                             "schema": {"type": "integer", "minimum": 1,
                                        "maximum": 100_000, "default": 1000}}],
                        "responses": {"200": _answer("SubscriptionPage",
                                                     "a page of subscriptions"),
                                      **_errors(400)}},
                **_options("GET, HEAD, POST, OPTIONS")},
            "/subscriptions/moves": {
                "post": {"summary": "move a batch of subscriptions (one index update)",
                         "requestBody": _batch("Move"),
                         "responses": {"200": _answer("Applied"), **_errors(*_BODY, 404)}},
                **_options("POST, OPTIONS")},
            "/subscriptions/{sid}": {
                "parameters": _ID,
                "get": {"summary": "one subscription",
                        "responses": {"200": _answer("SubscriptionRow", "the subscription"),
                                      **_errors(400, 404)}},
                "delete": {"summary": "unsubscribe",
                           "responses": {"200": _answer("Applied"), **_errors(400, 404)}},
                **_options("GET, DELETE, HEAD, OPTIONS", 400)},
            "/subscriptions/{sid}/location": {
                "parameters": _ID,
                "put": {"summary": "move one subscription",
                        "requestBody": {"required": True, "content": {"application/json": {
                            "schema": {"$ref": "#/components/schemas/Location"}}}},
                        "responses": {"200": _answer("Applied"), **_errors(*_BODY, 404)}},
                **_options("PUT, OPTIONS", 400)},
            "/messages": {
                "post": {"summary": "publish one message or a batch; answers the deliveries",
                         "requestBody": _batch("Message"),
                         "responses": {"200": _answer("Deliveries"), **_errors(*_BODY)}},
                **_options("POST, OPTIONS")},
            "/messages/{mid}": {
                "parameters": _MID,
                "get": {"summary": "a published message's deliveries",
                        "responses": {"200": _answer("MessageRecord",
                                                     "seq, time and deliveries"),
                                      **_errors(400, 404)}},
                **_options("GET, HEAD, OPTIONS", 400)},
            "/deliveries": {
                "get": {"summary": "WebSocket: each delivery and top-k event as a JSON "
                                   "object, pushed once durable; ?subscription=ID for one "
                                   "subscription's. A client that falls behind by more "
                                   "than the send buffer (--ws-buffer deliveries or "
                                   "--ws-buffer-bytes) is closed with code 1013 (try "
                                   "again later): reconnect, and read what was missed "
                                   "with ?after=SEQ. Past the connection limits "
                                   "the upgrade is refused with 429 (per client) or 503.",
                        "parameters": [{"name": "subscription", "in": "query",
                                        "schema": _INT64}, _AFTER],
                        "responses": {"101": {"description": "switching protocols"},
                                      **_errors(400, 410, 426)}},
                **_options("GET, HEAD, OPTIONS")},
            "/deliveries/stream": {
                "get": {"summary": "Server-Sent Events: every delivery after a seq (the "
                                   "'after' parameter or the Last-Event-ID header; "
                                   "neither: from now), then live; each event's id is its "
                                   "seq. Without 'subscription': all (admin) or the "
                                   "caller's own subscriptions'. Older than the retention: "
                                   "410 naming the oldest seq held; a reader overtaken by "
                                   "the retention gets an 'event: resume' with where to "
                                   "resume, and the stream ends.",
                        "parameters": [{"name": "subscription", "in": "query",
                                        "schema": _INT64}, _AFTER,
                                       {"name": "Last-Event-ID", "in": "header",
                                        "schema": _INT64}],
                        "responses": {"200": {"description": "the stream", "content": {
                            "text/event-stream": {"schema": {"type": "string"}}}},
                            **_errors(400, 410)}},
                **_options("GET, HEAD, OPTIONS")},
            "/webhooks/dead": {
                "get": {"summary": "webhook deliveries given up (admin; 404 when the "
                                   "service sends no webhooks)",
                        "responses": {"200": _answer("DeadLetters", "the dead letters"),
                                      **_errors(404)}},
                **_options("GET, HEAD, OPTIONS")},
            "/webhooks/replay": {
                "post": {"summary": "queue dead letters again, by id (admin)",
                         "requestBody": {"required": True, "content": {"application/json": {
                             "schema": {"$ref": "#/components/schemas/Replay"}}}},
                         "responses": {"200": _answer("Replayed", "how many were queued"),
                                       **_errors(400, 404, 413, 415)}},
                **_options("POST, OPTIONS")},
            "/health": {"get": {"summary": "status (ok, degraded: snapshots failing or the "
                                           "log at its size limit; failed (503): the log "
                                           "cannot be written, events refused until the "
                                           "disk accepts writes and the state is "
                                           "reloaded), the reason, the log's position and "
                                           "size (no rate limit)",
                                "security": [],
                                "responses": {"200": _answer("Health", "status"),
                                              **_errors(auth=False)}},
                        **_options("GET, HEAD, OPTIONS")},
            "/metrics": {"get": {"summary": "Prometheus text format",
                                 "responses": {"200": {"description": "metrics", "content": {
                                     "text/plain": {"schema": {"type": "string"}}}},
                                     **_errors()}},
                         **_options("GET, HEAD, OPTIONS")},
        },
        "components": {"schemas": _schemas(dmax_m, set_max_points), "securitySchemes": {"bearer": {
            "type": "http", "scheme": "bearer",
            "description": "a token of 'roadpubsub token create' (admin, publisher or "
                           "subscriber); WebSocket: this header, or the subprotocols "
                           "'bearer' and the token"}}},
        "security": [{"bearer": []}],
    }
