"""The live map in a real headless browser (Debian's chromium and chromium-driver)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from live import message_rows, subscription_rows

from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.network import RoadNetwork

webdriver = pytest.importorskip("selenium.webdriver")


def _browser() -> Any:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.skip("needs chromium and chromedriver (apt-get install chromium "
                    "chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,800",
                "--disable-dev-shm-usage"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=options)


def test_the_map_shows_messages_and_deliveries(serve: Any, workload: Workload,
                                               andorra: RoadNetwork, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = serve()
    with server.client() as c:
        roads = c.get("/network.geojson").json()
        assert len(roads["features"][0]["geometry"]["coordinates"]) == andorra.n_edges
        assert c.post("/subscriptions", json=subscription_rows(workload, andorra)[:800]
                      ).status_code == 201
        browser = _browser()
        try:
            browser.get(server.url + "/")
            WebDriverWait(browser, 60).until(
                lambda b: b.find_element(By.ID, "status").text.startswith("live"))
            assert "800 subscriptions" in browser.find_element(By.ID, "status").text
            answers = {}
            for m in message_rows(workload, andorra)[:5]:
                r = c.post("/messages", json=m)
                assert r.status_code == 200
                answers[m["id"]] = len(r.json()["deliveries"])
            assert sum(answers.values()) > 0
            for mid, n in answers.items():
                li = WebDriverWait(browser, 30).until(lambda b, mid=mid: b.find_element(
                    By.CSS_SELECTOR, f'li.message[data-id="{mid}"]'))
                assert li.get_attribute("data-deliveries") == str(n)
            shot = Path(os.environ.get("ROADPUBSUB_MAP_SCREENSHOT", tmp_path / "map.png"))
            assert browser.save_screenshot(str(shot))
            assert shot.stat().st_size > 10_000
        finally:
            browser.quit()
