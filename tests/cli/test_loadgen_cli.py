"""``roadpubsub loadgen`` after a plain install (issue 29, item 8): no httpx (only the test
extra installs it), and one line when the service is down."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from plain_install import run_without_httpx
from ports import free_port


def test_loadgen_says_one_line_when_the_service_is_down(shared: Callable[[str], Path]
                                                        ) -> None:
    network = shared("osm/andorra-latest.osm.pbf")
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    done = run_without_httpx("loadgen", "--url", url, "--network", str(network),
                             "--existing", "10", "--events", "10")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("roadpubsub loadgen: error: no service answers at " + url), \
        lines[0]
    assert "Traceback" not in done.stderr and "httpx" not in done.stderr
