"""TLS, basic auth and response headers from an exporter-toolkit web config file.

The YAML file node_exporter reads with ``--web.config.file`` (exporter-toolkit
docs/web-configuration.md) works here unchanged, with these differences, each an error
naming the key rather than a silently weaker server:

- ``client_auth_type: RequireAnyClientCert`` (and its old name ``RequireClientCert``):
  Python's ssl cannot demand a certificate without verifying it. Use
  ``RequireAndVerifyClientCert`` with ``client_ca_file``.
- ``RequestClientCert`` serves like ``NoClientCert``: the certificate it would request is
  never verified nor used, so access is the same.
- ``cipher_suites`` take Go's names and are mapped to OpenSSL's; the TLS 1.3 suites are
  accepted and, as in Go, not configurable. ``curve_preferences`` takes one curve.
- ``client_allowed_sans`` is checked per request (403) rather than in the handshake.
- ``http2`` is accepted and ignored: the server speaks HTTP/1.1.
- Certificates are read at load (start and reload), not on every connection.
- ``auth_excluded_paths`` (exact paths served without basic auth, e.g. ``/livez``) is
  the option proposed upstream; by default every path needs credentials, as in
  exporter-toolkit. YAML aliases and duplicate keys are refused.

Basic auth verifies bcrypt in one worker thread (never on the event loop) and remembers
a success for ``AUTH_CACHE_TTL_S`` keyed by the SHA-256 of user, password and hash, so a
scrape costs one bcrypt per TTL, not one per request.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import ipaddress
import os
import re
import ssl
import tempfile
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal

import bcrypt
import yaml
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentd.config import ConfigError

MAX_FILE_BYTES = 1 << 20
REALM = "agentd"
AUTH_CACHE_TTL_S = 120.0
AUTH_CACHE_MAX = 1024
AUTH_MAX_PENDING = 32  # bcrypt verifications queued at once; more answer 429
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]

TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1, "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# Go crypto/tls CipherSuites() names -> OpenSSL names (TLS <= 1.2).
GO_CIPHERS = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
GO_TLS13_CIPHERS = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})
GO_CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": "X25519"}
# exporter-toolkit's extraHTTPHeaders: name -> allowed values (None: any).
EXTRA_HEADERS: dict[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}
_BCRYPT_RE = re.compile(r"^\$2[abxy]\$(\d\d)\$[./A-Za-z0-9]{53}$")
_DURATION_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class WebConfigError(ConfigError):
    """A web config that cannot be used; the message names each key and reason."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_unset(cls, v: Any) -> Any:
        return None if v == "" else v  # Go treats an empty string as "not set"


class TLSServerConfig(_Model):
    cert: str | None = None
    key: str | None = Field(None, repr=False)
    client_ca: str | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    client_auth_type: Literal[
        "NoClientCert", "RequestClientCert", "RequireAnyClientCert", "RequireClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"
    ] = "NoClientCert"
    client_ca_file: Path | None = None
    client_allowed_sans: tuple[str, ...] | None = None
    min_version: Literal["TLS10", "TLS11", "TLS12", "TLS13"] = "TLS12"
    max_version: Literal["TLS10", "TLS11", "TLS12", "TLS13"] = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True
    curve_preferences: tuple[str, ...] = ()

    @field_validator("cipher_suites")
    @classmethod
    def _ciphers(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for name in v:
            if name not in GO_CIPHERS and name not in GO_TLS13_CIPHERS:
                raise ValueError(f"unknown or insecure cipher suite {name!r}; supported: {', '.join([*GO_CIPHERS, *sorted(GO_TLS13_CIPHERS)])}")
        return v

    @field_validator("curve_preferences")
    @classmethod
    def _curves(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for name in v:
            if name not in GO_CURVES:
                raise ValueError(f"unknown curve {name!r}; supported: {', '.join(GO_CURVES)}")
        if len(v) > 1:
            raise ValueError("Python's ssl module can limit the handshake to one curve only: list one curve, or remove the key for OpenSSL's defaults")
        return v

    @property
    def enabled(self) -> bool:
        return bool({"cert", "key", "client_ca", "cert_file", "key_file", "client_ca_file", "client_auth_type"} & {k for k in self.model_fields_set if getattr(self, k) is not None})


class HTTPServerConfig(_Model):
    http2: bool = True  # accepted for compatibility; the server speaks HTTP/1.1
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if name not in EXTRA_HEADERS:
                raise ValueError(f"HTTP header {name!r} can not be configured; allowed: {', '.join(EXTRA_HEADERS)}")
            allowed = EXTRA_HEADERS[name]
            if allowed is not None and value and value not in allowed:
                raise ValueError(f"invalid value for {name}: expected one of {list(allowed)}, got {value!r}")
            if any(c in value for c in "\r\n\0"):
                raise ValueError(f"{name}: value contains a line break")
        return {k: val for k, val in v.items() if val}  # blank: unset


class RateLimit(_Model):
    interval: float = 0.0  # seconds between requests (Go duration string or number); 0: off
    burst: int = Field(0, ge=0)

    @field_validator("interval", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        if isinstance(v, str):
            return parse_go_duration(v)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v != 0:
            raise ValueError("use a duration with a unit, e.g. 1s or 500ms (Go reads a bare number as nanoseconds)")
        return v


class WebConfig(_Model):
    tls_server_config: TLSServerConfig = Field(default_factory=TLSServerConfig)
    http_server_config: HTTPServerConfig = Field(default_factory=HTTPServerConfig)
    basic_auth_users: dict[str, str] = Field(default_factory=dict, repr=False)
    rate_limit: RateLimit = Field(default_factory=RateLimit)
    auth_excluded_paths: tuple[str, ...] = ()


def parse_go_duration(text: str) -> float:
    """Go ``time.ParseDuration`` subset (no sign): "1s", "1m30s", "250ms", "0" -> seconds."""
    s = text.strip()
    if s == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(s):
        m = _DURATION_RE.match(s, pos)
        if not m:
            raise ValueError(f"not a duration: {text!r} (examples: 1s, 500ms, 1m30s)")
        total += float(m.group(1)) * _DURATION_S[m.group(2)]
        pos = m.end()
    if not s:
        raise ValueError("empty duration")
    return total


# ---------------------------------------------------------------------------
# loading


class _Loader(yaml.SafeLoader):
    """SafeLoader without aliases (no entity-expansion bombs) and with duplicate-key errors."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "YAML aliases (*name) are not supported", self.peek_event().start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                dup = key in seen
                seen.add(key)
            except TypeError:
                continue  # unhashable key: the base class reports it
            if dup:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        return super().construct_mapping(node, deep)


def _format(err: ValidationError, origin: str) -> str:
    lines = [f"invalid web config ({origin}):"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = "unknown key" if e["type"] == "extra_forbidden" else e["msg"].removeprefix("Value error, ")
        secret = e["loc"][:1] == ("basic_auth_users",) or e["loc"][-1:] == ("key",)
        got = e.get("input")
        if e["type"].startswith("literal") and not secret and isinstance(got, (str, int, float, bool)):
            msg += f" (got {str(got)[:60]!r})"
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


def _semantic_errors(cfg: WebConfig) -> list[str]:
    t, out = cfg.tls_server_config, []
    pre = "tls_server_config"
    for inline, path in (("cert", "cert_file"), ("key", "key_file"), ("client_ca", "client_ca_file")):
        if getattr(t, inline) is not None and getattr(t, path) is not None:
            out.append(f"{pre}.{inline}: set together with {path}; use one of them")
    if t.enabled:
        if t.cert is None and t.cert_file is None:
            out.append(f"{pre}.cert_file: missing (one of cert or cert_file is required for TLS)")
        if t.key is None and t.key_file is None:
            out.append(f"{pre}.key_file: missing (one of key or key_file is required for TLS)")
    elif t.model_fields_set:
        out.append(f"{pre}: {', '.join(sorted(t.model_fields_set))} set but no certificate: TLS would be off (add cert_file and key_file)")
    has_ca = t.client_ca is not None or t.client_ca_file is not None
    auth = t.client_auth_type
    if auth in ("RequireAnyClientCert", "RequireClientCert"):
        out.append(f"{pre}.client_auth_type: {auth} (require a certificate without verifying it) is not supported by Python's ssl; use RequireAndVerifyClientCert with client_ca_file")
    if auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert") and not has_ca:
        out.append(f"{pre}.client_ca_file: required with client_auth_type {auth} (the CA that signs client certificates)")
    if has_ca and auth == "NoClientCert":
        out.append(f"{pre}.client_auth_type: client CA configured without a client auth policy (set RequireAndVerifyClientCert)")
    if t.client_allowed_sans is not None and auth != "RequireAndVerifyClientCert":
        out.append(f"{pre}.client_allowed_sans: requires client_auth_type RequireAndVerifyClientCert")
    if TLS_VERSIONS[t.min_version] > TLS_VERSIONS[t.max_version]:
        out.append(f"{pre}.min_version: {t.min_version} is above max_version {t.max_version}")
    for user, hashed in cfg.basic_auth_users.items():
        m = _BCRYPT_RE.match(hashed)
        if ":" in user:
            out.append(f"basic_auth_users.{user}: a user name cannot contain ':' (HTTP basic auth)")
        if not m or not 4 <= int(m.group(1)) <= 31:
            out.append(f"basic_auth_users.{user}: not a bcrypt hash (expected $2y$10$... from `htpasswd -nBC 10 \"\"`)")
    for p in cfg.auth_excluded_paths:
        if not p.startswith("/"):
            out.append(f"auth_excluded_paths: {p!r} is not an absolute URL path")
    if cfg.rate_limit.interval > 0 and cfg.rate_limit.burst < 1:
        out.append("rate_limit.burst: must be at least 1 when rate_limit.interval is set (0 refuses every request)")
    return out


def parse_web_config(text: str, base_dir: Path | str = ".", origin: str = "<text>") -> WebConfig:
    """Validate web config YAML; relative file names are taken from ``base_dir`` (the
    config file's directory, as exporter-toolkit does). Raises WebConfigError."""
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.YAMLError as e:
        raise WebConfigError(f"invalid web config ({origin}): not valid YAML: {e}") from None
    except RecursionError:
        raise WebConfigError(f"invalid web config ({origin}): nested too deeply") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise WebConfigError(f"invalid web config ({origin}): the top level must be a mapping, got {type(data).__name__}")
    try:
        cfg = WebConfig.model_validate(data)
    except ValidationError as e:
        raise WebConfigError(_format(e, origin)) from None
    t = cfg.tls_server_config
    paths = {k: Path(base_dir, getattr(t, k)) for k in ("cert_file", "key_file", "client_ca_file") if getattr(t, k) is not None}
    if paths:
        cfg = cfg.model_copy(update={"tls_server_config": t.model_copy(update=paths)})
    errors = _semantic_errors(cfg)
    if errors:
        raise WebConfigError("\n".join([f"invalid web config ({origin}):", *(f"  {e}" for e in errors)]))
    return cfg


def load_web_config(path: str | os.PathLike[str]) -> WebConfig:
    """Read, validate, and load the certificates once (so a bad file fails here, at start
    or reload, with the key named). Raises WebConfigError."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise WebConfigError(f"web config {p} cannot be read: {e.strerror or e}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise WebConfigError(f"web config {p} is larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise WebConfigError(f"web config {p} is not UTF-8 text") from None
    cfg = parse_web_config(text, p.parent, str(p))
    ssl_context(cfg, origin=str(p))
    return cfg


# ---------------------------------------------------------------------------
# TLS


def _read_pem(key: str, path: Path, origin: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(MAX_FILE_BYTES).decode("utf-8", "replace")
    except OSError as e:
        raise WebConfigError(f"invalid web config ({origin}): tls_server_config.{key}: cannot read {path}: {e.strerror or e}") from None


def ssl_context(cfg: WebConfig, *, origin: str = "web config") -> ssl.SSLContext | None:
    """The server SSLContext, or None when the config does not enable TLS."""
    t = cfg.tls_server_config
    if not t.enabled:
        return None

    def fail(key: str, why: str) -> WebConfigError:
        return WebConfigError(f"invalid web config ({origin}): tls_server_config.{key}: {why}")

    cert = t.cert if t.cert is not None else _read_pem("cert_file", t.cert_file, origin)  # type: ignore[arg-type]
    key = t.key if t.key is not None else _read_pem("key_file", t.key_file, origin)  # type: ignore[arg-type]
    cert_key, key_key = ("cert" if t.cert is not None else "cert_file"), ("key" if t.key is not None else "key_file")
    if "-----BEGIN CERTIFICATE-----" not in cert:
        raise fail(cert_key, "no PEM certificate (-----BEGIN CERTIFICATE-----)")
    if "PRIVATE KEY-----" not in key:
        raise fail(key_key, "no PEM private key")
    if "ENCRYPTED" in key:
        raise fail(key_key, "encrypted private keys are not supported")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[t.min_version]
    ctx.maximum_version = TLS_VERSIONS[t.max_version]
    if t.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    ctx.set_alpn_protocols(["http/1.1"])
    suites = [GO_CIPHERS[c] for c in t.cipher_suites if c in GO_CIPHERS]
    try:
        if suites:
            ctx.set_ciphers(":".join(suites))
    except ssl.SSLError as e:
        raise fail("cipher_suites", f"rejected by OpenSSL: {e}") from None
    try:
        if t.curve_preferences:
            ctx.set_ecdh_curve(GO_CURVES[t.curve_preferences[0]])
    except (ssl.SSLError, ValueError) as e:
        raise fail("curve_preferences", f"rejected by OpenSSL: {e}") from None
    with tempfile.TemporaryDirectory(prefix="agentd-tls-") as tmp:  # mode 0700
        files = []
        for name, text in (("cert.pem", cert), ("key.pem", key)):
            fd = os.open(os.path.join(tmp, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            files.append(os.path.join(tmp, name))
        try:
            ctx.load_cert_chain(files[0], files[1], password=b"")
        except ssl.SSLError as e:
            raise fail(key_key, f"does not match {cert_key}, or one of them is malformed ({e.reason or e})") from None
    if t.client_auth_type in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert"):
        ca_key = "client_ca" if t.client_ca is not None else "client_ca_file"
        ca = t.client_ca if t.client_ca is not None else _read_pem("client_ca_file", t.client_ca_file, origin)  # type: ignore[arg-type]
        try:
            ctx.load_verify_locations(cadata=ca)
        except (ssl.SSLError, ValueError) as e:
            raise fail(ca_key, f"no usable CA certificate ({getattr(e, 'reason', None) or e})") from None
        ctx.verify_mode = ssl.CERT_REQUIRED if t.client_auth_type == "RequireAndVerifyClientCert" else ssl.CERT_OPTIONAL
    return ctx


# ---------------------------------------------------------------------------
# middlewares


def parse_basic_authorization(header: str | None) -> tuple[str, bytes] | None:
    """``Basic base64(user:password)`` -> (user, password bytes); None if malformed."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
        user, sep, password = raw.partition(b":")
        return (user.decode("utf-8"), password) if sep else None
    except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
        return None


class BasicAuth:
    """bcrypt checks off the event loop, one at a time, with a short cache of successes."""

    def __init__(self, users: dict[str, str], *, ttl_s: float = AUTH_CACHE_TTL_S, clock: Callable[[], float] = time.monotonic):
        self._users = {u: h.encode() for u, h in users.items()}
        self._cost = max(int(h[4:6]) for h in users.values())
        self._dummy: bytes | None = None  # made in the worker on first use: no bcrypt on the event loop
        self._ttl, self._clock = ttl_s, clock
        self._cache: OrderedDict[bytes, float] = OrderedDict()
        self._inflight: dict[bytes, asyncio.Future[bool]] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentd-bcrypt")
        self.bcrypt_calls = 0

    def _check(self, password: bytes, stored: bytes | None) -> bool:
        """Runs in the single worker thread. Unknown users are checked against a dummy hash
        of the same cost, so the answer takes as long as for a known user."""
        if stored is None and self._dummy is None:
            self._dummy = bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(self._cost))
        self.bcrypt_calls += 1
        try:
            return bcrypt.checkpw(password, stored or self._dummy)  # type: ignore[arg-type]
        except ValueError:  # > 72 bytes: refused, as Go's bcrypt does
            return False

    async def verify(self, header: str | None) -> bool:
        creds = parse_basic_authorization(header)
        if creds is None:
            return False
        user, password = creds
        stored = self._users.get(user)
        fields = (user.encode(), password, stored or b"")
        key = hashlib.sha256(b"".join(len(f).to_bytes(4, "big") + f for f in fields)).digest()  # unambiguous
        now = self._clock()
        expires = self._cache.get(key)
        if expires is not None and expires > now:
            return True
        fut = self._inflight.get(key)
        if fut is None:
            if len(self._inflight) >= AUTH_MAX_PENDING:
                raise web.HTTPTooManyRequests(text="too many pending authentications\n", headers={"Retry-After": "1"})
            fut = asyncio.get_running_loop().run_in_executor(self._pool, self._check, password, stored)
            self._inflight[key] = fut
            try:
                ok = await asyncio.shield(fut) and stored is not None
            finally:
                del self._inflight[key]
            if ok:
                self._remember(key, self._clock())
            return ok
        return await asyncio.shield(fut) and stored is not None

    def _remember(self, key: bytes, now: float) -> None:
        self._cache[key] = now + self._ttl
        self._cache.move_to_end(key)
        while len(self._cache) > AUTH_CACHE_MAX:
            self._cache.popitem(last=False)


def basic_auth_middleware(cfg: WebConfig | None) -> Middleware:
    """401 ``WWW-Authenticate: Basic realm="agentd"`` unless the request carries the
    password of a ``basic_auth_users`` entry; a pass-through when there are no users."""
    if cfg is None or not cfg.basic_auth_users:

        @web.middleware
        async def passthrough(request: web.Request, handler: Handler) -> web.StreamResponse:
            return await handler(request)

        return passthrough
    auth = BasicAuth(cfg.basic_auth_users)
    excluded = frozenset(cfg.auth_excluded_paths)

    @web.middleware
    async def basic_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in excluded or await auth.verify(request.headers.get("Authorization")):
            return await handler(request)
        return web.Response(status=401, text="401 Unauthorized\n", headers={"WWW-Authenticate": f'Basic realm="{REALM}"'})

    basic_auth.auth = auth  # type: ignore[attr-defined]  # tests read bcrypt_calls
    return basic_auth


def _headers_middleware(headers: dict[str, str]) -> Middleware:
    @web.middleware
    async def extra_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            resp = await handler(request)
        except web.HTTPException as e:
            e.headers.update(headers)
            raise
        if not resp.prepared:
            resp.headers.update(headers)
        return resp

    return extra_headers


def _rate_limit_middleware(interval_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> Middleware:
    state = {"tokens": float(burst), "at": clock()}

    @web.middleware
    async def rate_limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        now = clock()
        state["tokens"] = min(float(burst), state["tokens"] + (now - state["at"]) / interval_s)
        state["at"] = now
        if state["tokens"] < 1:
            return web.Response(status=429, text="429 Too Many Requests\n")
        state["tokens"] -= 1
        return await handler(request)

    return rate_limit


def _san_values(peercert: dict[str, Any] | None) -> list[str]:
    return [str(v) for kind, v in (peercert or {}).get("subjectAltName", ()) if kind in ("DNS", "IP Address", "email", "URI")]


def _same_san(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a.strip()) == ipaddress.ip_address(b.strip())
    except ValueError:
        return a == b


def _client_san_middleware(allowed: tuple[str, ...]) -> Middleware:
    @web.middleware
    async def client_san(request: web.Request, handler: Handler) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
        if not any(_same_san(v, a) for v in _san_values(peer) for a in allowed):
            return web.Response(status=403, text="403 client certificate not allowed\n")
        return await handler(request)

    return client_san


def web_app_options(cfg: WebConfig | None) -> tuple[list[Middleware], ssl.SSLContext | None]:
    """(middlewares to put first in the app, SSLContext for the site) for a web config;
    ``([], None)`` without one. Order: headers, rate limit, client SAN, basic auth."""
    if cfg is None:
        return [], None
    mws: list[Middleware] = []
    if cfg.http_server_config.headers:
        mws.append(_headers_middleware(dict(cfg.http_server_config.headers)))
    if cfg.rate_limit.interval > 0:
        mws.append(_rate_limit_middleware(cfg.rate_limit.interval, cfg.rate_limit.burst))
    if cfg.tls_server_config.client_allowed_sans is not None:
        mws.append(_client_san_middleware(cfg.tls_server_config.client_allowed_sans))
    if cfg.basic_auth_users:
        mws.append(basic_auth_middleware(cfg))
    return mws, ssl_context(cfg)
