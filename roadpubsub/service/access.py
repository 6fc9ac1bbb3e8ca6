"""Who may do what in the live service: bearer tokens with roles, and their checks.

Tokens live in ``DIR/tokens.json`` of the service folder (``roadpubsub token create``):
only the SHA-256 of each token is stored (a token is 256 random bits, so a plain hash
is enough), the file is written atomically (temporary file, fsync, rename, fsync of
the folder) with mode 0600. A running service re-reads it when its size, mtime or inode
changes, checked at most once a second, so ``roadpubsub token revoke`` takes effect
without a restart.

Roles
-----
``admin``
    Everything.
``publisher``
    ``POST /messages``; ``GET /messages/{id}`` of the messages it published.
``subscriber``
    Create, read, move and delete its own subscription ids (bound to the token when it
    was created, or created by it), list them, and receive their deliveries
    (``WS /deliveries``). An id a subscriber token created stays that token's for good
    (a delete does not free it for another token), so an ownership once checked cannot
    change under a request in flight.

A missing or unknown (or revoked) token gets 401; a token acting outside its role or on
ids it does not own gets 403, decided before the id's existence is looked at, so
neither answer tells whether an id exists. With no token in the file the service runs
unauthenticated (loopback only, see ``roadpubsub serve``): every request acts as admin.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import hmac
import json
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roadpubsub.index.events import RequestError
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["ADMIN", "HEAD", "HEAD_FIELDS", "NOBODY", "OPEN", "PRINCIPAL", "PUBLISHER",
           "ROLES", "SUBSCRIBER", "TOKENS_FILE", "WS_BEARER", "AccessGate", "Guard",
           "Principal", "TokenRecord", "TokenStore", "Unauthenticated", "authorize",
           "bearer_of", "hash_token", "read_head"]

ADMIN, PUBLISHER, SUBSCRIBER = "admin", "publisher", "subscriber"
ROLES = (ADMIN, PUBLISHER, SUBSCRIBER)
TOKENS_FILE = "tokens.json"
_FORMAT = 1
#: Seconds between two looks at the token file's size, mtime and inode.
RELOAD_SECONDS = DEFAULTS.token_reload_s

#: What each role may do (admin: everything). The ids of a subscriber's actions must be
#: its own (:func:`authorize`); a publisher's message reads, messages it published.
_ALLOWED = {
    PUBLISHER: frozenset({"publish", "message", "openapi", "map"}),
    SUBSCRIBER: frozenset({"subscribe", "read", "list", "move", "unsubscribe",
                           "deliveries", "openapi", "map"}),
}


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller.

    Attributes
    ----------
    token_id
        The token's public id (``""``: the unauthenticated mode's caller).
    role
        ``admin``, ``publisher`` or ``subscriber``.
    bound
        Subscription ids bound to the token when it was created.
    """

    token_id: str
    role: str
    bound: frozenset[int] = frozenset()


#: The caller of a service with no token (every request, as admin).
OPEN = Principal("", ADMIN)
#: The caller of a request that needs no token and carries none of its rights: ``OPTIONS``
#: (the methods of a path; CORS preflights come without credentials anyway).
NOBODY = Principal("", "none")


class Unauthenticated(RequestError):  # noqa: N818 (an answer, like RequestError)
    """No token, or one the store does not know (401)."""


@dataclass
class TokenRecord:
    """One token of the file (never the secret, only its SHA-256)."""

    id: str
    role: str
    sha256: str
    subscriptions: list[int] = field(default_factory=list)
    created: str = ""
    revoked: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "role": self.role, "sha256": self.sha256,
                "subscriptions": self.subscriptions, "created": self.created,
                "revoked": self.revoked}


def hash_token(token: str | bytes) -> bytes:
    """The SHA-256 digest a token is stored and looked up by."""
    raw = token.encode() if isinstance(token, str) else token
    return hashlib.sha256(raw).digest()


def bearer_of(value: bytes | str | None) -> bytes | None:
    """The token of an ``Authorization: Bearer TOKEN`` header value, or None."""
    if not value:
        return None
    raw = value.encode("latin-1") if isinstance(value, str) else value
    raw = raw.strip()
    # the scheme is what comes before the first space, in any case
    if raw[:7].lower() != b"bearer ":
        return None
    return raw[7:].strip() or None


#: The scope key of the request head's fields, read in one pass per request by whichever
#: layer comes first (the transport limits, else the gate): a list indexed by
#: :data:`HEAD_FIELDS` (each header's last value, or None), then the bearer token of the
#: ``Authorization`` value and its :func:`hash_token` (both None without one): the
#: limits' client key and the gate's lookup key, hashed once.
HEAD = "roadpubsub.head"
#: The headers of :data:`HEAD`, by their place in it.
HEAD_FIELDS = {b"authorization": 0, b"origin": 1, b"content-type": 2, b"host": 3,
               b"sec-websocket-protocol": 4, b"content-length": 5, b"transfer-encoding": 6}
_TOKEN = len(HEAD_FIELDS)
_DIGEST = _TOKEN + 1


def read_head(headers: Iterable[tuple[bytes, bytes]]) -> list[Any]:
    """The :data:`HEAD` of a request: one pass over its headers, one hash of its token."""
    head: list[Any] = [None] * (_DIGEST + 1)
    fields = HEAD_FIELDS
    for name, value in headers:
        i = fields.get(name)
        if i is not None:
            head[i] = value
    if head[0] is not None:
        token = head[_TOKEN] = bearer_of(head[0])
        if token is not None:
            head[_DIGEST] = hash_token(token)
    return head


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class TokenStore:
    """The tokens of a service folder (``DIR/tokens.json``).

    Parameters
    ----------
    state_dir
        The service folder.
    """

    def __init__(self, state_dir: str | Path) -> None:
        self.path = Path(state_dir) / TOKENS_FILE
        self.records: list[TokenRecord] = []
        self._by_hash: dict[bytes, tuple[bytes, Principal]] = {}
        self.bound: dict[int, str] = {}  # subscription id -> token id bound to it
        self._seen: tuple[int, int, int] | None = None
        self._active: frozenset[str] = frozenset()
        self._checked = -1e18
        self.reload()

    # ------------------------------------------------------------------ reading
    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def reload(self) -> None:
        """Read the file again (absent: no token)."""
        seen = self._stat()
        records: list[TokenRecord] = []
        if seen is not None:
            try:
                doc = json.loads(self.path.read_text())
                if doc.get("format") != _FORMAT:
                    msg = f"{self.path}: not a roadpubsub token file of format {_FORMAT}"
                    raise InputError(msg)
                records = [TokenRecord(**r) for r in doc["tokens"]]
            except (ValueError, KeyError, TypeError) as exc:
                msg = f"{self.path}: unreadable token file ({exc})"
                raise InputError(msg) from exc
        by_hash: dict[bytes, tuple[bytes, Principal]] = {}
        bound: dict[int, str] = {}
        for r in records:
            for sid in r.subscriptions:
                bound.setdefault(int(sid), r.id)
            if r.revoked is None:
                digest = bytes.fromhex(r.sha256)
                by_hash[digest] = (digest, Principal(
                    r.id, r.role, frozenset(int(s) for s in r.subscriptions)))
        self.records, self._by_hash, self.bound, self._seen = records, by_hash, bound, seen
        self._active = frozenset(p.token_id for _, p in by_hash.values())

    def refresh(self) -> None:
        """Re-read the file if it changed (looked at once a second at most)."""
        now = time.monotonic()
        if now - self._checked < RELOAD_SECONDS:
            return
        self._checked = now
        if self._stat() != self._seen:
            with contextlib.suppress(InputError):  # half-edited by hand: keep the last
                self.reload()

    @property
    def enabled(self) -> bool:
        """Whether any token was ever created (then every request must authenticate)."""
        return bool(self.records)

    def still_valid(self, principal: Principal) -> bool:
        """Whether a principal authenticated earlier (an open WebSocket's) still is: its
        token is not revoked, and an unauthenticated caller only while no token exists."""
        self.refresh()
        if not self.records:
            return True
        return principal.token_id in self._active

    def authenticate(self, token: bytes | None, *, digest: bytes | None = None
                     ) -> Principal:
        """The principal of a bearer token; :class:`Unauthenticated` (401) otherwise.
        With no token in the file, :data:`OPEN`. ``digest``: the token's
        :func:`hash_token`, when the caller has it already."""
        self.refresh()
        if not self.records:
            return OPEN
        if token is None:
            msg = "this service needs 'Authorization: Bearer TOKEN' (roadpubsub token create)"
            raise Unauthenticated(msg, status=401)
        if digest is None:
            digest = hash_token(token)
        found = self._by_hash.get(digest)
        # the dict finds the candidate; the comparison of the digests takes constant time
        if found is None or not hmac.compare_digest(digest, found[0]):
            msg = "unknown or revoked token"
            raise Unauthenticated(msg, status=401)
        return found[1]

    # ------------------------------------------------------------------ writing
    def _write(self) -> None:
        doc = {"format": _FORMAT, "tokens": [r.as_json() for r in self.records]}
        data = (json.dumps(doc, indent=1) + "\n").encode()
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, stat.S_IRUSR | stat.S_IWUSR)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        self.reload()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the file's lock: two CLI calls at once never lose one's change."""
        import fcntl

        fd = os.open(self.path.with_name(f".{self.path.name}.lock"),
                     os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self.reload()
            yield
        finally:
            os.close(fd)

    def create(self, role: str, *, subscriptions: Iterable[int] = ()) -> tuple[str, str]:
        """A new token: (its id, the token itself, shown once)."""
        with self._locked():
            return self._create(role, subscriptions)

    def _create(self, role: str, subscriptions: Iterable[int]) -> tuple[str, str]:
        if role not in ROLES:
            msg = f"--role must be one of {', '.join(ROLES)}, got {role!r}"
            raise InputError(msg)
        subs = sorted({int(s) for s in subscriptions})
        if subs and role != SUBSCRIBER:
            msg = "--subscription binds ids to a subscriber token only"
            raise InputError(msg)
        taken = sorted(s for s in subs if s in self.bound)
        if taken:
            msg = (f"subscription ids already bound to another token: {taken[:10]} "
                   f"(token {self.bound[taken[0]]})")
            raise InputError(msg)
        known = {r.id for r in self.records}
        token_id = secrets.token_hex(4)
        while token_id in known:
            token_id = secrets.token_hex(4)
        token = "rps_" + secrets.token_urlsafe(32)  # 256 random bits
        self.records.append(TokenRecord(token_id, role, hash_token(token).hex(), subs,
                                        _now()))
        self._write()
        return token_id, token

    def revoke(self, token_id: str) -> TokenRecord:
        """Mark a token revoked (kept in the file: its ids stay bound to it)."""
        with self._locked():
            return self._revoke(token_id)

    def _revoke(self, token_id: str) -> TokenRecord:
        for r in self.records:
            if r.id == token_id:
                if r.revoked is None:
                    r.revoked = _now()
                    self._write()
                return r
        msg = f"no token {token_id!r} in {self.path} (see 'roadpubsub token list')"
        raise InputError(msg)


def authorize(principal: Principal, action: str, ids: Iterable[int] = (), *,
              owner_of: Callable[[int], str | None] | None = None) -> None:
    """Refuse (403) an action outside the principal's role, or on ids it does not own.

    ``owner_of`` gives the token id owning a subscription id (or a message id, for
    ``message``), None when nobody does. Decided from ownership alone, before any
    existence check, so a refusal tells nothing about whether an id exists.
    """
    if principal.role == ADMIN:
        return
    if action not in _ALLOWED.get(principal.role, ()):
        msg = f"a {principal.role} token may not {action.replace('_', ' ')}"
        raise RequestError(msg, status=403)
    if owner_of is None:
        return
    for i in ids:
        if owner_of(int(i)) != principal.token_id:
            msg = f"this token does not own id {int(i)}"
            raise RequestError(msg, status=403)


# ---------------------------------------------------------------------- the ASGI gate
#: The scope key holding the request's :class:`Principal`.
PRINCIPAL = "roadpubsub.principal"
#: The WebSocket subprotocol a browser offers with its token as the other one:
#: ``new WebSocket(url, ["bearer", TOKEN])``; the service accepts with ``bearer``.
WS_BEARER = "bearer"
#: Routes that answer without a token: the health check, and the map's page and script
#: (static files with no data and no token in them; a browser cannot send a header when
#: it opens a page).
_OPEN_PATHS = frozenset({"/health", "/", "/static/map.js"})
_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_CORS_METHODS = b"GET, POST, PUT, DELETE, OPTIONS"
_CORS_HEADERS = b"authorization, content-type"

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


def _json_answer(status: int, message: str, extra: Sequence[tuple[bytes, bytes]] = ()
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode()), *extra]
    return ({"type": "http.response.start", "status": status, "headers": headers},
            {"type": "http.response.body", "body": body})


class AccessGate:
    """Authenticates each HTTP request and WebSocket handshake before the routes.

    Answers by itself: 401 (no or unknown token, with ``WWW-Authenticate: Bearer``), 415
    (a write whose body is not ``application/json``), CORS preflights (``OPTIONS``), and
    a WebSocket ``Origin`` outside the allowed list (403). Otherwise it puts the caller's
    :class:`Principal` in the scope under :data:`PRINCIPAL`; the routes authorize.

    Parameters
    ----------
    store
        The service's tokens.
    allow_origins
        Browser origins (``https://host:port``) allowed besides the service's own.
    metrics_open
        ``GET /metrics`` without a token.
    https
        The service serves TLS (its own origin is ``https://``).
    """

    def __init__(self, store: TokenStore, *, allow_origins: Iterable[str] = (),
                 metrics_open: bool = False, https: bool = False) -> None:
        self.store = store
        self.allow_origins = frozenset(o.rstrip("/").encode() for o in allow_origins)
        self.open_paths = _OPEN_PATHS | ({"/metrics"} if metrics_open else set())
        self.scheme = b"https://" if https else b"http://"

    def origin_allowed(self, origin: bytes, host: bytes | None) -> bool:
        """The service's own origin or one of ``--allow-origin``."""
        return origin in self.allow_origins or (
            host is not None and origin == self.scheme + host)

    async def admit(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """True: go on to the routes (the principal is in the scope); False: answered."""
        head = scope.get(HEAD)
        if head is None:  # no transport limits in front (they read it otherwise)
            head = scope[HEAD] = read_head(scope["headers"])
        if scope["type"] == "websocket":
            return await self._admit_ws(scope, receive, send, head)
        origin, ctype, host = head[1], head[2], head[3]
        method = scope["method"]
        if method == "OPTIONS" and origin is not None:
            await self._preflight(send, origin, host)
            return False
        if origin is not None and self.origin_allowed(origin, host):
            scope["roadpubsub.cors"] = origin
        if scope["path"] in self.open_paths and method in ("GET", "HEAD"):
            scope[PRINCIPAL] = OPEN
            return True
        if method == "OPTIONS":  # the path's methods only: no data, no rights
            scope[PRINCIPAL] = NOBODY
            return True
        try:
            principal = self.store.authenticate(head[_TOKEN], digest=head[_DIGEST])
        except Unauthenticated as exc:
            start, body = _json_answer(401, str(exc), [(b"www-authenticate", b"Bearer")])
            await send(start)
            await send(body)
            return False
        if method in _WRITE_METHODS:
            refusal = self._write_refusal(method, ctype, origin, host)
            if refusal is not None:
                start, body = _json_answer(*refusal)
                await send(start)
                await send(body)
                return False
        scope[PRINCIPAL] = principal
        return True

    def _write_refusal(self, method: str, ctype: bytes | None, origin: bytes | None,
                       host: bytes | None) -> tuple[int, str] | None:
        """Why a write is refused: a foreign browser origin (403), a body that is not
        ``application/json`` (415). A request with no Content-Type and no foreign Origin
        comes from no browser (a browser's cross-site request always sends its Origin)."""
        if origin is not None and not self.origin_allowed(origin, host):
            return 403, "this origin is not allowed (--allow-origin)"
        if method != "DELETE" and ctype is not None and \
                ctype.split(b";")[0].strip().lower() != b"application/json":
            return 415, "the body must be JSON sent as 'Content-Type: application/json'"
        return None

    async def _preflight(self, send: Send, origin: bytes, host: bytes | None) -> None:
        if not self.origin_allowed(origin, host):
            start, body = _json_answer(403, "this origin is not allowed (--allow-origin)")
        else:
            start = {"type": "http.response.start", "status": 204, "headers": [
                (b"access-control-allow-origin", origin),
                (b"access-control-allow-methods", _CORS_METHODS),
                (b"access-control-allow-headers", _CORS_HEADERS),
                (b"access-control-max-age", b"600"), (b"vary", b"Origin")]}
            body = {"type": "http.response.body", "body": b""}
        await send(start)
        await send(body)

    @staticmethod
    def cors_send(origin: bytes, send: Send) -> Send:
        """``send`` adding ``Access-Control-Allow-Origin`` for an allowed browser origin."""

        async def with_cors(event: dict[str, Any]) -> None:
            if event["type"] == "http.response.start":
                event = {**event, "headers": [*event.get("headers", []),
                                              (b"access-control-allow-origin", origin),
                                              (b"vary", b"Origin")]}
            await send(event)
        return with_cors

    async def _admit_ws(self, scope: Scope, receive: Receive, send: Send,
                        head: list[Any]) -> bool:
        origin, host, protocols = head[1], head[3], head[4]
        token, digest = head[_TOKEN], head[_DIGEST]
        offered = [p.strip() for p in protocols.split(b",")] if protocols else []
        if token is None and WS_BEARER.encode() in offered:
            others = [p for p in offered if p != WS_BEARER.encode()]
            token = others[0] if others else None
            scope["roadpubsub.subprotocol"] = WS_BEARER
        if origin is not None and not self.origin_allowed(origin, host):
            await _deny_ws(scope, receive, send, 403,
                           "this origin is not allowed (--allow-origin)")
            return False
        try:
            scope[PRINCIPAL] = self.store.authenticate(token, digest=digest)
        except Unauthenticated as exc:
            await _deny_ws(scope, receive, send, 401, str(exc))
            return False
        return True


async def _deny_ws(scope: Scope, receive: Receive, send: Send, status: int,
                   message: str) -> None:
    """Refuse a WebSocket handshake with an HTTP status (where the server can)."""
    event = await receive()
    if event["type"] != "websocket.connect":
        return
    if "websocket.http.response" in scope.get("extensions", {}):
        extra = [(b"www-authenticate", b"Bearer")] if status == 401 else []
        start, body = _json_answer(status, message, extra)
        await send({**start, "type": "websocket.http.response.start"})
        await send({**body, "type": "websocket.http.response.body"})
    else:
        await send({"type": "websocket.close", "code": 1008})


# ---------------------------------------------------------------------- ownership
class Guard:
    """The routes' authorization against the service's owners.

    A subscription id's owner is the token it is bound to (``--subscription`` at the
    token's creation: the admin's word wins) or else the subscriber token that created it
    (``ServiceState.owners``, kept in the log and the snapshots); a message's owner is the
    publisher token that published it. :meth:`subscribe` and :meth:`publish` run on the
    apply thread, where ownership and existence cannot change between check and apply.

    Parameters
    ----------
    state
        The service state (:class:`~roadpubsub.service.state.ServiceState`).
    parser
        The service's body parser.
    store
        The tokens (None: no authentication, every caller is :data:`OPEN`).
    """

    def __init__(self, state: Any, parser: Any, store: TokenStore | None) -> None:
        self.state = state
        self.parser = parser
        self.store = store

    def sub_owner(self, sid: int) -> str | None:
        """The token id owning a subscription id, or None."""
        if self.store is not None:
            bound = self.store.bound.get(sid)
            if bound is not None:
                return bound
        owner: str | None = self.state.owners.get(sid)
        return owner

    def message_owner(self, mid: int) -> str | None:
        """The token id that published a message, or None."""
        owner: str | None = self.state.message_owners.get(mid)
        return owner

    def check(self, principal: Principal, action: str, ids: Iterable[int] = ()) -> None:
        """:func:`authorize` with this service's owners (403 when refused)."""
        if principal.role == ADMIN:
            return
        owner_of = self.message_owner if action == "message" else self.sub_owner
        authorize(principal, action, ids, owner_of=owner_of)

    def row_ids(self, principal: Principal, body: Any) -> None:
        """Check the ids of a body's rows (a batch of moves) before it is parsed."""
        if principal.role == ADMIN:
            return
        rows = body if isinstance(body, list) else [body]
        ids = []
        for n, row in enumerate(rows):
            sid = row.get("id") if isinstance(row, dict) else None
            if not isinstance(sid, int) or isinstance(sid, bool):
                msg = f"row {n}: field 'id' must be an integer, got {sid!r}"
                raise RequestError(msg, status=400)
            ids.append(sid)
        self.check(principal, "move", ids)

    def owned(self, principal: Principal) -> list[int]:
        """A subscriber's subscription ids (bound or created; live or not), sorted."""
        mine = set(principal.bound)
        mine.update(i for i, o in self.state.owners.items()
                    if o == principal.token_id and self.sub_owner(i) == principal.token_id)
        return sorted(mine)

    def wants(self, principal: Principal) -> Callable[[int], bool]:
        """Whether a delivery to a subscription id is this principal's."""
        token_id = principal.token_id
        return lambda sid: self.sub_owner(sid) == token_id

    # -------------------------------------------------------- on the apply thread
    def subscribe(self, principal: Principal, body: Any) -> Any:
        """Parse, check ownership (ids of others, or existing ids nobody owns: 403), and
        subscribe, recording the owner."""
        batch = self.parser.subscriptions(body)
        if principal.role != ADMIN:
            import numpy as np

            owners = [self.sub_owner(i) for i in batch.ids.tolist()]
            for i, o in zip(batch.ids.tolist(), owners, strict=True):
                if o is not None and o != principal.token_id:
                    msg = f"this token does not own id {i}"
                    raise RequestError(msg, status=403)
            free = np.array([i for i, o in zip(batch.ids.tolist(), owners, strict=True)
                             if o is None], dtype=np.int64)
            if free.size:
                taken = free[self.state.contains(free)]
                if taken.size:  # exists, nobody's: not this token's (never a 409)
                    msg = f"this token does not own id {int(taken[0])}"
                    raise RequestError(msg, status=403)
        return self.state.subscribe(batch, owner=principal.token_id)

    def publish(self, principal: Principal, body: Any) -> Any:
        """Parse, refuse ids another token (or nobody) published already (403: their
        answer holds the recorded deliveries), and publish, recording the owner."""
        batch = self.parser.messages(body)
        for m in batch.ids.tolist():
            owner = self.state.message_owners.get(m)
            if owner != principal.token_id and (owner is not None or m in self.state.messages):
                msg = f"message {m} is not one this token published"
                raise RequestError(msg, status=403)
        return self.state.publish(batch, owner=principal.token_id)
