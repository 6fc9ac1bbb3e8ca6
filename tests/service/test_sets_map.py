"""The live map draws route and area subscriptions (issue 32), in a real headless browser:
each set's pieces along the roads, in its colour, next to point subscriptions."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_map import _browser
from test_sets import _geometries, _route

from roadpubsub.roadnet.network import RoadNetwork

pytestmark = pytest.mark.slow

# The pixel on the middle of the longest piece of subscription `sid`, as drawn.
_PIXEL = """
const s = subs.get(arguments[0]);
let best = null, most = -1;
for (const line of setLines(s)) for (let i = 1; i < line.length; i++) {
  const a = project(line[i - 1][0], line[i - 1][1]), b = project(line[i][0], line[i][1]);
  const d = Math.hypot(b[0] - a[0], b[1] - a[1]);
  if (d > most) { most = d; best = [(a[0] + b[0]) / 2, (a[1] + b[1]) / 2]; }
}
return Array.from(ctx.getImageData(Math.round(best[0]), Math.round(best[1]), 1, 1).data);
"""


def test_the_map_draws_routes_and_areas(serve: Any, andorra: RoadNetwork,
                                        tweets: list[list[str]]) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    net = andorra
    word = tweets[0][0]
    server = serve()
    rows = [{"id": 7, "keywords": [word], "alpha": 0.5, "tau": 0.2,
             "geometry": _route(net, 10, 400)},
            {"id": 8, "keywords": [word], "kind": "boolean", "radius": 100.0,
             "geometry": _geometries(net, np.random.default_rng(9), 3)[2]},
            {"id": 9, "keywords": [word], "alpha": 0.5, "tau": 0.2,
             "lon": float(net.node_lon[0]), "lat": float(net.node_lat[0])}]
    with server.client() as c:
        assert c.post("/subscriptions", json=rows).status_code == 201
    browser = _browser()
    try:
        browser.get(server.url + "/")
        WebDriverWait(browser, 60).until(
            lambda b: b.find_element(By.ID, "status").text.startswith("live"))
        status = browser.find_element(By.ID, "status").text
        assert "3 subscriptions, 1 on routes, 1 on areas" in status, status
        assert browser.execute_script(_PIXEL, 7)[:3] == [0x2A, 0x9D, 0x2A]  # route green
        assert browser.execute_script(_PIXEL, 8)[:3] == [0x8E, 0x44, 0xAD]  # area purple
    finally:
        browser.quit()
