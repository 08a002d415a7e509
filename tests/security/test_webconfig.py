"""exporter-toolkit web config: real TLS handshakes and basic auth against a live aiohttp
server on 127.0.0.1, and the errors a bad file gets (each names its key)."""

from __future__ import annotations

import asyncio
import base64
import shutil
import ssl
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import aiohttp
import bcrypt
import pytest
from aiohttp import web

from agentd.daemon.auth import BasicAuth, basic_auth_middleware, parse_basic_authorization, web_app_options
from agentd.daemon.webconfig import WebConfigError, load_web_config, parse_go_duration, parse_web_config, ssl_context

OPENSSL = shutil.which("openssl")
PASSWORD = "s3cret-pässword"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$", 1)  # htpasswd's prefix
EXT = """[server]
subjectAltName=IP:127.0.0.1,DNS:localhost
[client]
subjectAltName=DNS:scraper.example
extendedKeyUsage=clientAuth
"""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True)  # type: ignore[list-item]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CA, server and client certificates (EC P-256) made with the openssl CLI."""
    if OPENSSL is None:
        pytest.skip("openssl CLI not installed (needed to make test certificates)")
    d = tmp_path_factory.mktemp("pki")
    (d / "ext.cnf").write_text(EXT)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=agentd-test-ca", cwd=d)
    for name in ("server", "client"):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-extfile", "ext.cnf", "-extensions", name, "-out", f"{name}.pem", cwd=d)
    _openssl("req", "-x509", *ec, "-keyout", "rogue.key", "-out", "rogue.pem", "-days", "2", "-subj", "/CN=rogue", cwd=d)
    return d


def config_in(d: Path, text: str) -> Path:
    p = d / "web.yml"
    p.write_text(text)
    return p


def client_ctx(pki: Path, cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if cert:
        ctx.load_cert_chain(str(pki / f"{cert}.pem"), str(pki / f"{cert}.key"))
    return ctx


@asynccontextmanager
async def serve(cfg) -> AsyncIterator[str]:
    async def ok(request: web.Request) -> web.Response:
        return web.Response(text=f"ok {request.path}\n")

    middlewares, sslctx = web_app_options(cfg)
    app = web.Application(middlewares=middlewares)
    app.router.add_get("/metrics", ok)
    app.router.add_get("/livez", ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=sslctx)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"{'https' if sslctx else 'http'}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()  # RFC 7617 UTF-8


async def get(url: str, *, ssl_ctx: ssl.SSLContext | bool = True, auth: tuple[str, str] | None = None) -> tuple[int, dict, str]:
    headers = {"Authorization": basic(*auth)} if auth else {}
    async with aiohttp.ClientSession() as s, s.get(url, ssl=ssl_ctx, headers=headers) as r:
        return r.status, dict(r.headers), await r.text()


TLS_AUTH = f"""
tls_server_config:
  cert_file: server.pem   # relative: taken from the config file's directory
  key_file: server.key
basic_auth_users:
  alice: {HASH}
"""


@pytest.mark.proc
async def test_tls_and_basic_auth(pki: Path) -> None:
    cfg = load_web_config(config_in(pki, TLS_AUTH))
    tls = client_ctx(pki)
    async with serve(cfg) as url:
        status, headers, _ = await get(f"{url}/metrics", ssl_ctx=tls)
        assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="agentd"'
        assert (await get(f"{url}/metrics", ssl_ctx=tls, auth=("alice", "wrong")))[0] == 401
        assert (await get(f"{url}/metrics", ssl_ctx=tls, auth=("mallory", PASSWORD)))[0] == 401
        assert (await get(f"{url}/nope", ssl_ctx=tls))[0] == 401  # auth before routing: no path probing
        for _ in range(3):
            status, _, body = await get(f"{url}/metrics", ssl_ctx=tls, auth=("alice", PASSWORD))
            assert (status, body) == (200, "ok /metrics\n")
        with pytest.raises(aiohttp.ClientError):  # plain HTTP client on the TLS port
            await get(url.replace("https", "http") + "/metrics")
        with pytest.raises(aiohttp.ClientError):  # a client that does not trust the test CA
            await get(f"{url}/metrics", ssl_ctx=ssl.create_default_context())


async def test_successful_logins_are_cached_and_unknown_users_cost_a_bcrypt(pki: Path) -> None:
    now = [0.0]
    auth = BasicAuth({"alice": HASH}, ttl_s=60, clock=lambda: now[0])
    good = basic("alice", PASSWORD)
    assert await auth.verify(good) and await auth.verify(good)
    assert auth.bcrypt_calls == 1
    now[0] = 61.0  # past the TTL: verified again
    assert await auth.verify(good) and auth.bcrypt_calls == 2
    assert not await auth.verify("Basic " + base64.b64encode(b"nobody:x").decode())
    assert auth.bcrypt_calls == 3  # the dummy hash keeps unknown users as slow as known ones
    assert not await auth.verify("Basic " + base64.b64encode(b"alice:" + b"x" * 100).decode())  # > 72 bytes
    results = await asyncio.gather(*(auth.verify(good.replace("alice", "alice")) for _ in range(5)))
    assert all(results)


async def test_basic_auth_without_tls_and_excluded_paths(tmp_path: Path) -> None:
    cfg = parse_web_config(f"basic_auth_users:\n  alice: {HASH}\nauth_excluded_paths: [/livez]\n")
    assert ssl_context(cfg) is None
    async with serve(cfg) as url:
        assert url.startswith("http://")
        assert (await get(f"{url}/livez"))[0] == 200  # Kubernetes probes without credentials
        assert (await get(f"{url}/livez/"))[0] == 401  # exact path only
        assert (await get(f"{url}/metrics"))[0] == 401
        assert (await get(f"{url}/metrics", auth=("alice", PASSWORD)))[0] == 200


async def test_client_certificate_required(pki: Path) -> None:
    cfg = load_web_config(config_in(pki, """
tls_server_config:
  cert_file: server.pem
  key_file: server.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: ca.pem
"""))
    async with serve(cfg) as url:
        assert (await get(f"{url}/metrics", ssl_ctx=client_ctx(pki, "client")))[0] == 200
        for without in (client_ctx(pki), client_ctx(pki, "rogue")):  # no certificate; one the CA did not sign
            with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
                await get(f"{url}/metrics", ssl_ctx=without)


@pytest.mark.parametrize("sans,status", [("[scraper.example]", 200), ("[other.example, 10.0.0.1]", 403)])
async def test_client_allowed_sans(pki: Path, sans: str, status: int) -> None:
    cfg = load_web_config(config_in(pki, f"""
tls_server_config:
  cert_file: server.pem
  key_file: server.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: ca.pem
  client_allowed_sans: {sans}
"""))
    async with serve(cfg) as url:
        assert (await get(f"{url}/metrics", ssl_ctx=client_ctx(pki, "client")))[0] == status


async def test_headers_and_rate_limit() -> None:
    cfg = parse_web_config(f"""
http_server_config:
  http2: false
  headers: {{X-Frame-Options: deny, X-Content-Type-Options: nosniff, Content-Security-Policy: ""}}
rate_limit: {{interval: 1h, burst: 3}}
basic_auth_users: {{alice: "{HASH}"}}
""")
    async with serve(cfg) as url:
        for path, auth, want in (("/metrics", ("alice", PASSWORD), 200), ("/nope", ("alice", PASSWORD), 404), ("/metrics", None, 401)):
            status, headers, _ = await get(url + path, auth=auth)
            assert status == want and headers["X-Frame-Options"] == "deny" and headers["X-Content-Type-Options"] == "nosniff"
            assert "Content-Security-Policy" not in headers  # blank: unset
        assert (await get(f"{url}/metrics", auth=("alice", PASSWORD)))[0] == 429


async def test_cipher_suites_map_to_openssl(pki: Path) -> None:
    cfg = load_web_config(config_in(pki, """
tls_server_config:
  cert_file: server.pem
  key_file: server.key
  max_version: TLS12
  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, TLS_AES_128_GCM_SHA256]
  curve_preferences: [CurveP256]
"""))
    tls12 = [c["name"] for c in ssl_context(cfg).get_ciphers() if c["protocol"] == "TLSv1.2"]  # type: ignore[union-attr]
    assert tls12 == ["ECDHE-ECDSA-AES256-GCM-SHA384"]
    async with serve(cfg) as url:
        port = int(url.rsplit(":", 1)[1])
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx(pki))
        assert writer.get_extra_info("cipher")[:2] == ("ECDHE-ECDSA-AES256-GCM-SHA384", "TLSv1.2")
        writer.close()


BAD = [
    ("tls_server_config:\n  cert_file: [\n", "not valid YAML"),
    ("- a\n- b\n", "top level must be a mapping"),
    ("basic_auth: {}\n", "  basic_auth: unknown key"),
    ("tls_server_config:\n  certfile: x.pem\n", "tls_server_config.certfile: unknown key"),
    ("http_server_config:\n  gzip: true\n", "http_server_config.gzip: unknown key"),
    ("http_server_config:\n  headers: {X-Powered-By: me}\n", "http_server_config.headers: HTTP header 'X-Powered-By' can not be configured"),
    ("http_server_config:\n  headers: {X-Frame-Options: allow}\n", "http_server_config.headers: invalid value for X-Frame-Options"),
    ("tls_server_config: {cert_file: a, key_file: b, client_auth_type: Bogus}\n", "tls_server_config.client_auth_type: Input should be"),
    ("tls_server_config: {cert_file: a, key_file: b, client_auth_type: RequireAnyClientCert}\n", "tls_server_config.client_auth_type: RequireAnyClientCert"),
    ("tls_server_config: {cert_file: a, key_file: b, client_auth_type: RequireAndVerifyClientCert}\n", "tls_server_config.client_ca_file: required"),
    ("tls_server_config: {cert_file: a, key_file: b, client_ca_file: c}\n", "tls_server_config.client_auth_type: client CA configured"),
    ("tls_server_config: {cert_file: a, key_file: b, cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]}\n", "tls_server_config.cipher_suites: unknown or insecure cipher suite 'TLS_RSA_WITH_RC4_128_SHA'"),
    ("tls_server_config: {cert_file: a, key_file: b, curve_preferences: [CurveP999]}\n", "tls_server_config.curve_preferences: unknown curve"),
    ("tls_server_config: {cert_file: a, key_file: b, min_version: TLS13, max_version: TLS12}\n", "tls_server_config.min_version: TLS13 is above"),
    ("tls_server_config: {cert_file: a, key_file: b, min_version: SSL3}\n", "tls_server_config.min_version: Input should be"),
    ("tls_server_config: {key_file: b}\n", "tls_server_config.cert_file: missing"),
    ("tls_server_config: {cert_file: a, cert: inline, key_file: b}\n", "tls_server_config.cert: set together with cert_file"),
    ("tls_server_config: {min_version: TLS13}\n", "tls_server_config: min_version set but no certificate"),
    ("basic_auth_users: {alice: hunter2}\n", "basic_auth_users.alice: not a bcrypt hash"),
    ("basic_auth_users: {alice: 12}\n", "basic_auth_users.alice: Input should be a valid string"),
    ("basic_auth_users:\n  alice: x\n  alice: y\n", "duplicate key 'alice'"),
    ("a: &x {}\nbasic_auth_users: *x\n", "aliases"),
    ("rate_limit: {interval: 1, burst: 1}\n", "rate_limit.interval: use a duration with a unit"),
    ("rate_limit: {interval: 1s}\n", "rate_limit.burst: must be at least 1"),
    ("rate_limit: {interval: soon, burst: 1}\n", "rate_limit.interval: not a duration"),
    ("auth_excluded_paths: [livez]\n", "auth_excluded_paths: 'livez' is not an absolute URL path"),
]


@pytest.mark.parametrize("text,expected", BAD, ids=[b[1][:40] for b in BAD])
def test_bad_config_names_the_key(text: str, expected: str) -> None:
    with pytest.raises(WebConfigError) as e:
        parse_web_config(text, origin="web.yml")
    assert expected in str(e.value), str(e.value)
    assert "hunter2" not in str(e.value)  # secrets are never echoed


@pytest.mark.parametrize(
    "files,expected",
    [
        ("cert_file: missing.pem\n  key_file: server.key", "tls_server_config.cert_file: cannot read"),
        ("cert_file: server.pem\n  key_file: missing.key", "tls_server_config.key_file: cannot read"),
        ("cert_file: server.key\n  key_file: server.key", "tls_server_config.cert_file: no PEM certificate"),
        ("cert_file: server.pem\n  key_file: client.key", "tls_server_config.key_file: does not match cert_file"),
        ("cert_file: server.pem\n  key_file: server.key\n  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: server.key",
         "tls_server_config.client_ca_file: no usable CA certificate"),
    ],
)
def test_bad_files_name_the_key(pki: Path, files: str, expected: str) -> None:
    with pytest.raises(WebConfigError) as e:
        load_web_config(config_in(pki, f"tls_server_config:\n  {files}\n"))
    assert expected in str(e.value), str(e.value)


def test_missing_config_file_and_empty_file(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match="cannot be read"):
        load_web_config(tmp_path / "absent.yml")
    cfg = load_web_config(config_in(tmp_path, "# nothing configured\n"))
    assert web_app_options(cfg) == ([], None) and web_app_options(None) == ([], None)
    assert basic_auth_middleware(cfg) is not None  # a pass-through, so wiring needs no branch


def test_inline_cert_and_key(pki: Path) -> None:
    cert, key = (pki / "server.pem").read_text(), (pki / "server.key").read_text()
    indent = lambda s: "\n".join("    " + line for line in s.splitlines())  # noqa: E731
    cfg = parse_web_config(f"tls_server_config:\n  cert: |\n{indent(cert)}\n  key: |\n{indent(key)}\n")
    assert isinstance(ssl_context(cfg), ssl.SSLContext)
    assert key.splitlines()[1] not in repr(cfg)  # the private key is kept out of repr/logs


@pytest.mark.parametrize(
    "header,expected",
    [
        ("Basic " + base64.b64encode(b"alice:pa:ss").decode(), ("alice", b"pa:ss")),
        ("basic " + base64.b64encode(b"alice:").decode(), ("alice", b"")),
        ("Basic " + base64.b64encode(b"no-colon").decode(), None),
        ("Basic !!!", None),
        ("Basic " + base64.b64encode(b"\xff:x").decode(), None),
        ("Bearer abc", None),
        ("Basic ä", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_basic_authorization(header: str | None, expected: tuple[str, bytes] | None) -> None:
    assert parse_basic_authorization(header) == expected


def test_parse_go_duration() -> None:
    assert parse_go_duration("1m30s") == 90.0 and parse_go_duration("250ms") == 0.25 and parse_go_duration("0") == 0.0
    for bad in ("", "1", "-1s", "1d", "s"):
        with pytest.raises(ValueError):
            parse_go_duration(bad)
