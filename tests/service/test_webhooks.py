"""Webhooks against a real HTTP receiver on loopback: retries, order, dedup, kill -9, dead letters.

The receiver (:class:`hooks.Receiver`) is a ``ThreadingHTTPServer`` the test starts, stops and
scripts (500, 429 with ``Retry-After``, slow answers); it verifies every signature with the
documented recipe and deduplicates on ``RoadPubSub-Delivery-Id`` as a real receiver would.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import stat
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from hooks import SECRET, Receiver, wait_for
from ports import free_port

from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.service.outbox import Outbox, OutboxEntry
from roadpubsub.service.webhooks import (
    WebhookSecretError,
    WebhookSender,
    WebhookService,
    WebhookURLError,
    check_webhook_url,
    load_webhook_secret,
    sign_body,
    verify_signature,
)

FAST = replace(DEFAULTS, webhook_batch_max=5, webhook_timeout_s=2.0, webhook_max_attempts=60,
               webhook_backoff_base_s=0.05, webhook_backoff_cap_s=1.0)


def _entries(seqs: range, url: str) -> list[OutboxEntry]:
    return [OutboxEntry(seq=s, subscription_id=s % 7, message_id=2**40 + s,
                        distance=float(s), score=0.25, url=url) for s in seqs]


def test_down_500_429_slow_receiver_gets_everything_in_order_once(
        tmp_path: Path, receivers: list[Receiver]) -> None:
    def flaky(n: int) -> tuple[int, dict[str, str], float]:
        if n % 5 == 1:
            return 500, {}, 0.0
        if n % 5 == 3:
            return 429, {"Retry-After": "1" if n < 10 else
                         time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())}, 0.0
        return 200, {}, 0.05 if n % 3 == 0 else 0.0  # slow now and then

    first = Receiver(script=flaky)  # down at first: started below
    second = Receiver().start()
    receivers += [first, second]
    box = Outbox(tmp_path / "outbox")
    sender = WebhookSender(box, secret=SECRET, settings=FAST, allow_private=True)
    sender.start()
    try:
        for i in range(10):
            box.append(_entries(range(1 + 20 * i, 11 + 20 * i), first.url)
                       + _entries(range(11 + 20 * i, 21 + 20 * i), second.url))
        time.sleep(1.0)
        assert first.accepted == []
        assert sender.metrics()[first.url]["retried"] > 0
        first.start()
        wait_for(lambda: len(first.deduplicated()) == 100 and len(second.deduplicated()) == 100,
                 60, "all deliveries")
        expected_first = [s for i in range(10) for s in range(1 + 20 * i, 11 + 20 * i)]
        assert first.deduplicated() == expected_first
        assert second.deduplicated() == [s for s in range(1, 201) if s not in expected_first]
        # In seq order as received, not only after deduplication: one request in flight.
        assert first.accepted == expected_first
        assert first.bad_signatures == second.bad_signatures == 0
        assert any(r["ids"] and len(r["ids"]) > 1 for r in first.requests)  # batched
        assert max(len(r["ids"]) for r in first.requests) <= FAST.webhook_batch_max
        wait_for(lambda: sender.metrics()[first.url]["sent"] == 100, 10, "acknowledgements")
        metrics = sender.metrics()[first.url]
        assert metrics["sent"] == 100 and metrics["dead"] == 0 and metrics["retried"] > 0
        assert metrics["oldest_queued_age_s"] == 0.0
    finally:
        sender.stop()
    assert Outbox(tmp_path / "outbox").pending(first.url) == 0


def test_retry_after_is_honoured(tmp_path: Path, receivers: list[Receiver]) -> None:
    receiver = Receiver(script=lambda n: (429, {"Retry-After": "1"}, 0.0) if n == 0
                        else (200, {}, 0.0)).start()
    receivers.append(receiver)
    box = Outbox(tmp_path)
    sender = WebhookSender(box, secret=SECRET, settings=FAST, allow_private=True)
    sender.start()
    try:
        box.append(_entries(range(1, 3), receiver.url))
        wait_for(lambda: len(receiver.requests) == 2, 10, "the retry")
        gap = receiver.requests[1]["at"] - receiver.requests[0]["at"]
        assert gap >= 0.95  # base backoff is 0.05 s: only Retry-After explains the wait
    finally:
        sender.stop()


WORKER = textwrap.dedent("""
    import sys, time
    from dataclasses import replace
    from pathlib import Path
    from roadpubsub.roadnet.settings import DEFAULTS
    from roadpubsub.service.outbox import Outbox, OutboxEntry
    from roadpubsub.service.webhooks import WebhookSender
    folder, url, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    settings = replace(DEFAULTS, webhook_batch_max=4, webhook_backoff_base_s=0.05,
                       webhook_backoff_cap_s=0.5, webhook_memory_per_endpoint=8)
    box = Outbox(folder, memory_per_endpoint=8, segment_bytes=4096)
    sender = WebhookSender(box, secret=b"test-secret-0123456789", settings=settings,
                           allow_private=True)
    sender.start()
    for first in range(1, count + 1, 10):
        box.append([OutboxEntry(seq=s, subscription_id=3, message_id=s, distance=1.0,
                                score=1.0, url=url) for s in range(first, first + 10)])
        print("queued", first + 9, flush=True)
        time.sleep(0.02)
    print("all queued", flush=True)
    while True:
        time.sleep(1)
""")


def _worker(folder: Path, url: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", WORKER, str(folder), url, str(count)],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ))


def test_kill_9_in_the_middle_then_resume(tmp_path: Path, receivers: list[Receiver]) -> None:
    receiver = Receiver(script=lambda n: (500, {}, 0.0) if n % 7 == 2 else (200, {}, 0.03))
    receivers.append(receiver.start())
    folder = tmp_path / "outbox"
    worker = _worker(folder, receiver.url, 300)
    assert worker.stdout is not None
    queued = 0
    try:
        for line in worker.stdout:  # wait until a part is queued and a part is sent
            queued = int(line.split()[-1]) if line.startswith("queued") else queued
            if queued >= 150 and len(receiver.accepted) >= 20:
                break
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
    finally:
        worker.kill()
    sent_before = len(receiver.deduplicated())
    assert 0 < sent_before < queued
    # Restart on the same folder, queueing nothing more (count 0).
    worker = _worker(folder, receiver.url, 0)
    try:
        wait_for(lambda: len(receiver.deduplicated()) >= queued, 60, "the queued deliveries")
    finally:
        worker.kill()
        worker.wait(10)
    got = receiver.deduplicated()
    assert got[:queued] == list(range(1, queued + 1))  # each once, in order, none missing
    assert got == list(range(1, len(got) + 1))
    assert len(receiver.accepted) >= len(got)  # at least once (duplicates allowed)
    assert receiver.bad_signatures == 0


def test_dead_endpoint_goes_to_dead_letters_and_does_not_slow_a_healthy_one(
        tmp_path: Path, receivers: list[Receiver]) -> None:
    healthy = Receiver().start()
    receivers.append(healthy)
    blackhole = socket.socket()  # accepts connections, never answers: every POST times out
    blackhole.bind(("127.0.0.1", 0))
    blackhole.listen(100)
    dead_url = f"http://127.0.0.1:{blackhole.getsockname()[1]}/hook"
    refused_url = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens: refused
    settings = replace(FAST, webhook_timeout_s=2.0, webhook_max_attempts=3, webhook_batch_max=2)
    box = Outbox(tmp_path)
    sender = WebhookSender(box, secret=SECRET, settings=settings, allow_private=True)
    sender.start()
    latencies = []
    rounds = 40
    try:
        for i in range(rounds):  # over 2.5 s: spans a blackhole timeout and retry
            time.sleep(0.06)
            box.append(_entries(range(1 + 3 * i, 2 + 3 * i), dead_url)
                       + _entries(range(2 + 3 * i, 3 + 3 * i), refused_url)
                       + _entries(range(3 + 3 * i, 4 + 3 * i), healthy.url))
            sent_at = time.monotonic()
            wait_for(lambda i=i: 3 + 3 * i in healthy.accepted, 5, "the healthy delivery")
            latencies.append(time.monotonic() - sent_at)
        assert max(latencies) < 1.0, latencies  # the dead endpoint's 2 s timeouts never show
        wait_for(lambda: sender.metrics()[refused_url]["dead"] == rounds, 30,
                 "the refused endpoint given up")
        refused = [row for row in sender.dead_letters() if row["url"] == refused_url]
        assert [row["seq"] for row in refused] == list(range(2, 3 * rounds, 3))
        assert "connection failed" in refused[0]["reason"] and "3 attempt" in refused[0]["reason"]
        wait_for(lambda: sender.metrics()[healthy.url]["sent"] == rounds, 5, "acknowledgements")
        metrics = sender.metrics()
        assert metrics[refused_url]["dead"] == rounds and metrics[refused_url]["queued"] == 0
        assert metrics[dead_url]["queued"] > 0 and metrics[dead_url]["oldest_queued_age_s"] > 0
        assert metrics[healthy.url]["sent"] == rounds
        assert metrics[dead_url]["retried"] > 0
    finally:
        sender.stop()
        blackhole.close()
    # The dead letters survive a restart and replay once the endpoint is back.
    box = Outbox(tmp_path)
    assert len([row for row in box.dead_letters() if row["url"] == refused_url]) == rounds
    back = Receiver(port=int(refused_url.split(":")[2].split("/")[0])).start()
    receivers.append(back)
    sender = WebhookSender(box, secret=SECRET, settings=settings, allow_private=True)
    sender.start()
    try:
        ids = [row["id"] for row in box.dead_letters() if row["url"] == refused_url]
        assert sender.replay(ids) == rounds
        wait_for(lambda: len(back.deduplicated()) == rounds, 20, "the replayed deliveries")
        assert back.deduplicated() == list(range(2, 3 * rounds, 3))
        assert not [row for row in sender.dead_letters() if row["url"] == refused_url]
    finally:
        sender.stop()


def test_non_retryable_answer_is_dead_at_once(tmp_path: Path,
                                              receivers: list[Receiver]) -> None:
    receiver = Receiver(script=lambda n: (404, {}, 0.0)).start()
    receivers.append(receiver)
    box = Outbox(tmp_path)
    sender = WebhookSender(box, secret=SECRET, settings=FAST, allow_private=True)
    sender.start()
    try:
        box.append(_entries(range(1, 4), receiver.url))
        wait_for(lambda: len(sender.dead_letters()) == 3, 10, "dead letters")
        assert len(receiver.requests) == 1
        assert sender.dead_letters()[0]["reason"].startswith("HTTP 404")
    finally:
        sender.stop()


def test_signature_recipe() -> None:
    body = b'{"deliveries":[]}'
    now = 1_800_000_000
    signature = sign_body(SECRET, now, body)
    import hashlib
    import hmac
    assert signature == "sha256=" + hmac.new(SECRET, b"1800000000." + body,
                                             hashlib.sha256).hexdigest()
    assert verify_signature(SECRET, str(now), body, signature, now=now + 10)
    assert not verify_signature(SECRET, str(now), body + b" ", signature, now=now)
    assert not verify_signature(b"other", str(now), body, signature, now=now)
    assert not verify_signature(SECRET, str(now + 1), body, signature, now=now)
    assert not verify_signature(SECRET, str(now), body, signature, now=now + 3600)  # replayed


@pytest.mark.parametrize(("url", "reason"), [
    ("ftp://example.com/x", "scheme"),
    ("file:///etc/passwd", "scheme"),
    ("gopher://example.com/", "scheme"),
    ("http://user:pw@example.com/", "user name"),
    ("http:///nohost", "no host"),
    ("http://127.0.0.1/", "loopback"),
    ("http://[::1]:8080/", "loopback"),
    ("http://10.1.2.3/", "private"),
    ("http://172.16.0.1/", "private"),
    ("http://192.168.1.1/", "private"),
    ("http://[fc00::1]/", "private"),
    ("http://169.254.169.254/latest/meta-data/", "metadata"),
    ("http://169.254.10.10/", "link-local"),
    ("http://[fe80::1]/", "link-local"),
    ("http://224.0.0.1/", "multicast"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://240.0.0.1/", "reserved"),
    ("http://[::ffff:127.0.0.1]/", "loopback"),
    ("http://100.64.0.1/", "reserved"),
    ("http://192.0.2.1/", "reserved"),
])
def test_url_checks_refuse(url: str, reason: str) -> None:
    with pytest.raises(WebhookURLError) as caught:
        check_webhook_url(url, allow_private=False)
    message = str(caught.value)
    assert reason in message and repr(url) in message and "\n" not in message
    assert isinstance(caught.value, ValueError)


def test_url_checks_allow_private_but_never_metadata() -> None:
    assert check_webhook_url("http://127.0.0.1:9/x", allow_private=True) == "http://127.0.0.1:9/x"
    assert check_webhook_url("https://10.0.0.5/x", allow_private=True)
    for url in ("http://169.254.169.254/", "http://[fe80::1]/", "http://0.0.0.0/"):
        with pytest.raises(WebhookURLError):
            check_webhook_url(url, allow_private=True)
    public = check_webhook_url("https://hooks.example/x", allow_private=False,
                               resolver=lambda host, port: ["93.184.216.34"])
    assert public == "https://hooks.example/x"
    # Every resolved address is checked, not only the first.
    with pytest.raises(WebhookURLError, match=r"10\.0\.0\.1"):
        check_webhook_url("https://hooks.example/x", allow_private=False,
                          resolver=lambda host, port: ["93.184.216.34", "10.0.0.1"])


def test_rebinding_is_refused_at_send_time(tmp_path: Path, receivers: list[Receiver]) -> None:
    receiver = Receiver().start()
    receivers.append(receiver)
    answers = {"hook.example": "93.184.216.34"}
    url = f"http://hook.example:{receiver.port}/hook"

    def resolver(host: str, port: int) -> list[str]:
        return [answers[host]]

    assert check_webhook_url(url, allow_private=False, resolver=resolver) == url
    answers["hook.example"] = "127.0.0.1"  # the DNS answer changes after the check
    box = Outbox(tmp_path)
    sender = WebhookSender(box, secret=SECRET, settings=FAST, allow_private=False,
                           resolver=resolver)
    sender.start()
    try:
        box.append(_entries(range(1, 3), url))
        wait_for(lambda: len(sender.dead_letters()) == 2, 10, "dead letters")
        assert "loopback" in sender.dead_letters()[0]["reason"]
        assert receiver.requests == []
    finally:
        sender.stop()


def test_connection_goes_to_the_checked_address_with_the_url_host(
        tmp_path: Path, receivers: list[Receiver]) -> None:
    receiver = Receiver().start()
    receivers.append(receiver)
    url = f"http://hook.example:{receiver.port}/in?x=1"
    box = Outbox(tmp_path)
    sender = WebhookSender(box, secret=SECRET, settings=FAST, allow_private=True,
                           resolver=lambda host, port: ["127.0.0.1"])
    sender.start()
    try:
        box.append(_entries(range(1, 2), url))
        wait_for(lambda: receiver.accepted == [1], 10, "the delivery")
        assert receiver.requests[0]["host"] == f"hook.example:{receiver.port}"
    finally:
        sender.stop()


def test_load_webhook_secret(tmp_path: Path) -> None:
    path = tmp_path / "state" / "webhook-secret"
    secret = load_webhook_secret(path)
    assert len(secret) == 64 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_webhook_secret(path) == secret
    path.chmod(0o644)
    with pytest.raises(WebhookSecretError, match="other users"):
        load_webhook_secret(path)
    path.chmod(0o600)
    path.write_bytes(b"  \n")
    with pytest.raises(WebhookSecretError, match="empty"):
        load_webhook_secret(path)


def test_webhook_service_facade(tmp_path: Path, receivers: list[Receiver]) -> None:
    receiver = Receiver().start()
    receivers.append(receiver)
    state = tmp_path / "state"
    WebhookService(state, settings=FAST).stop()  # creates the secret file, mode 0600
    assert stat.S_IMODE((state / "webhook-secret").stat().st_mode) == 0o600
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(SECRET + b"\n")
    secret_file.chmod(0o600)
    service = WebhookService(state, secret_file=secret_file, allow_private=True, settings=FAST)
    with pytest.raises(WebhookURLError, match="metadata"):
        service.check_url("http://169.254.169.254/")
    url = service.check_url(receiver.url)
    service.start()
    try:
        service.queue(_entries(range(1, 8), url))
        wait_for(lambda: receiver.deduplicated() == list(range(1, 8)), 10, "the deliveries")
        body = receiver.requests[0]["body"]
        first = orjson.loads(body)["deliveries"][0]
        # the delivery object of every other answer: integer ids, the same keys in order
        assert list(first.items()) == [("seq", 1), ("message_id", 2**40 + 1),
                                       ("subscription_id", 1), ("distance", 1.0),
                                       ("score", 0.25)]
        wait_for(lambda: service.metrics()[url]["sent"] == 7, 10, "acknowledgements")
        assert service.metrics()[url]["queued"] == 0
        assert service.dead_letters() == [] and service.replay([1]) == 0
    finally:
        service.stop()
    assert (state / "outbox").is_dir()
    assert receiver.bad_signatures == 0  # signed with the secret file's secret


def test_age_limit_moves_old_deliveries_to_dead_letters(tmp_path: Path) -> None:
    refused_url = f"http://127.0.0.1:{free_port()}/hook"
    settings = replace(FAST, webhook_max_attempts=10_000, webhook_max_age_s=0.5,
                       webhook_backoff_cap_s=0.1)
    box = Outbox(tmp_path)
    sender = WebhookSender(box, secret=SECRET, settings=settings, allow_private=True)
    sender.start()
    try:
        started = time.monotonic()
        box.append(_entries(range(1, 3), refused_url))
        wait_for(lambda: len(sender.dead_letters()) == 2, 10, "dead letters")
        assert 0.5 <= time.monotonic() - started < 3.0
        assert sender.metrics()[refused_url]["retried"] >= 2
    finally:
        sender.stop()


@pytest.mark.parametrize("answer", [b"garbage\r\n\r\n", b"HTTP/1.1 200 OK" + b"A" * 200_000])
def test_hostile_answers_are_failures_not_crashes(tmp_path: Path, answer: bytes) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    url = f"http://127.0.0.1:{server.getsockname()[1]}/hook"

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(65536)
                    conn.sendall(answer)
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    settings = replace(FAST, webhook_max_attempts=2)
    box = Outbox(tmp_path)
    sender = WebhookSender(box, secret=SECRET, settings=settings, allow_private=True)
    sender.start()
    try:
        box.append(_entries(range(1, 3), url))
        wait_for(lambda: len(sender.dead_letters()) == 2, 10, "dead letters")
        assert "2 attempt" in sender.dead_letters()[0]["reason"]
        assert sender.metrics()[url]["sent"] == 0
    finally:
        sender.stop()
        server.close()


def test_https_goes_to_the_checked_address_with_the_url_name_for_tls(
        tmp_path: Path, receivers: list[Receiver]) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=hook.example", "-addext", "subjectAltName=DNS:hook.example",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    receiver = Receiver(tls=server_tls).start()
    receivers.append(receiver)
    client_tls = ssl.create_default_context(cafile=str(cert))
    box = Outbox(tmp_path / "outbox")
    good = f"https://hook.example:{receiver.port}/hook"
    wrong = f"https://other.example:{receiver.port}/hook"  # same address, name not in the cert
    sender = WebhookSender(box, secret=SECRET, settings=replace(FAST, webhook_max_attempts=2),
                           allow_private=True, resolver=lambda host, port: ["127.0.0.1"],
                           ssl_context=client_tls)
    sender.start()
    try:
        box.append(_entries(range(1, 3), good) + _entries(range(3, 4), wrong))
        wait_for(lambda: receiver.deduplicated() == [1, 2], 10, "the TLS deliveries")
        wait_for(lambda: len(sender.dead_letters()) == 1, 10, "the refused certificate")
        assert "CERTIFICATE_VERIFY_FAILED" in sender.dead_letters()[0]["reason"]
        assert receiver.requests[0]["host"] == f"hook.example:{receiver.port}"
    finally:
        sender.stop()
