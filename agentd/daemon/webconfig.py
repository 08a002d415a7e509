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
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentd.base.openssl_gate import tls_available
from agentd.config import ConfigError

if TYPE_CHECKING:  # ssl is imported where a TLS context is built (agentd.base.openssl_gate)
    import ssl

MAX_FILE_BYTES = 1 << 20

# Ordered as ssl.TLSVersion, without importing ssl.
TLS_VERSIONS = {"TLS10": "TLSv1", "TLS11": "TLSv1_1", "TLS12": "TLSv1_2", "TLS13": "TLSv1_3"}
TLS_ORDER = tuple(TLS_VERSIONS)
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
    def _blank_is_unset(cls, v: Any) -> Any:  # Any: the raw YAML value, before validation
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
    def _duration(cls, v: Any) -> Any:  # Any: the raw YAML value, before validation
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


class _Loader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no type stubs, so SafeLoader is Any here
    """SafeLoader without aliases (no entity-expansion bombs) and with duplicate-key errors."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # Any: PyYAML's nodes (no type stubs)
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "YAML aliases (*name) are not supported", self.peek_event().start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:  # Any: PyYAML's nodes (no type stubs)
        seen: set[Any] = set()  # Any: YAML keys (any hashable scalar)
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
    if TLS_ORDER.index(t.min_version) > TLS_ORDER.index(t.max_version):
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
        data = yaml.load(text, Loader=_Loader)
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


def _pem(inline: str | None, key: str, path: Path | None, origin: str) -> str:
    """The PEM text given inline, else read from ``path`` (the model requires one of them)."""
    if inline is not None:
        return inline
    if path is None:
        raise WebConfigError(f"invalid web config ({origin}): tls_server_config.{key}: not set")
    return _read_pem(key, path, origin)


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

    cert = _pem(t.cert, "cert_file", t.cert_file, origin)
    key = _pem(t.key, "key_file", t.key_file, origin)
    cert_key, key_key = ("cert" if t.cert is not None else "cert_file"), ("key" if t.key is not None else "key_file")
    if "-----BEGIN CERTIFICATE-----" not in cert:
        raise fail(cert_key, "no PEM certificate (-----BEGIN CERTIFICATE-----)")
    if "PRIVATE KEY-----" not in key:
        raise fail(key_key, "no PEM private key")
    if "ENCRYPTED" in key:
        raise fail(key_key, "encrypted private keys are not supported")
    if not tls_available():
        raise fail(cert_key, "turning TLS on needs a restart: agentd started with no web.config_file, so without OpenSSL "
                   "(set web.config_file at start, even to a file with no TLS, to turn TLS on and off by reload)")
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = getattr(ssl.TLSVersion, TLS_VERSIONS[t.min_version])
    ctx.maximum_version = getattr(ssl.TLSVersion, TLS_VERSIONS[t.max_version])
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
        ca = _pem(t.client_ca, "client_ca_file", t.client_ca_file, origin)
        try:
            ctx.load_verify_locations(cadata=ca)
        except (ssl.SSLError, ValueError) as e:
            raise fail(ca_key, f"no usable CA certificate ({getattr(e, 'reason', None) or e})") from None
        ctx.verify_mode = ssl.CERT_REQUIRED if t.client_auth_type == "RequireAndVerifyClientCert" else ssl.CERT_OPTIONAL
    return ctx
