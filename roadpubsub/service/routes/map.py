"""``GET /``, ``/static/map.js`` and ``/network.geojson``: the live map (offline)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response

from roadpubsub.service.context import service_of, who
from roadpubsub.service.geo import roads_geojson

__all__ = ["index_page", "map_script", "network_geojson"]

_STATIC = Path(__file__).resolve().parent.parent / "static"


async def index_page(request: Request) -> Response:
    """``GET /``: the map's page."""
    return FileResponse(_STATIC / "index.html", media_type="text/html")


async def map_script(request: Request) -> Response:
    """``GET /static/map.js``: the map's script."""
    return FileResponse(_STATIC / "map.js", media_type="text/javascript")


async def network_geojson(request: Request) -> Response:
    """``GET /network.geojson``: the roads, built once off the event loop (Rome: seconds)."""
    service = service_of(request)
    service.guard.check(who(request), "map")
    cache = service.cache
    if "roads" not in cache:
        network = service.state.index.network
        cache["roads"] = await asyncio.to_thread(
            lambda: json.dumps(roads_geojson(network)).encode())
    return Response(cache["roads"], media_type="application/geo+json")
