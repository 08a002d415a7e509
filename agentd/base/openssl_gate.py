"""Keep OpenSSL out of the ``agentd`` process unless it serves TLS.

CPython reaches OpenSSL's libcrypto through two extension modules: ``_hashlib`` (the
fast path of ``hashlib`` and ``hmac``) and ``_ssl`` (``ssl``). On an always-on daemon
they cost several MiB of RSS together: libcrypto and libssl mapped, and OpenSSL's own
tables (figures: docs/performance.md, "Memory"; bench/bench_memory.py). agentd needs neither on most nodes:

- Its digests are SHA-256 of small texts (managed files, fingerprints, rail hashes) and
  HMAC-SHA-256 in capture redaction. CPython's built-in hash modules give the same
  digests. ``lean_process()``, which the ``agentd`` command calls first, marks
  ``_hashlib`` absent, as in a CPython built without OpenSSL; ``hashlib`` and ``hmac``
  fall back to the built-ins by design. Builds that leave the built-ins out (Fedora and
  RHEL keep only blake2, for FIPS) keep ``_hashlib``.
- ``ssl`` is needed only to serve TLS (a web config's ``tls_server_config``).
  ``agentd run`` calls ``without_tls()`` when its configuration names no web config
  file, before asyncio and aiohttp are imported; both treat a missing ``ssl`` as a build
  without TLS. A web config file added by a later reload may then set basic auth and
  headers, but turning TLS on needs a restart (``tls_available()`` says why).

One more library is left out the same way. frozenlist's compiled ``FrozenList`` (which
aiohttp uses for its signals and route lists, a handful of short lists built at start) is
C++, and loading it maps the C++ runtime, libstdc++: RSS for nothing agentd needs. ``lean_process()`` imports frozenlist as its documented ``FROZENLIST_NO_EXTENSIONS``
switch selects, the pure-Python ``FrozenList`` with the same API, and restores the
environment, so no child process inherits the switch.

Nothing changes in a process that did not call ``lean_process()`` (the tests, a program
that embeds agentd), nor for a module that was already imported.
"""

from __future__ import annotations

import importlib.util
import os
import sys

# hashlib's built-in constructors (md5, sha1, sha2, sha3, blake2): each must be there.
_BUILTIN_HASHES = ("_md5", "_sha1", "_sha3", "_blake2") + (("_sha2",) if sys.version_info >= (3, 12) else ("_sha256", "_sha512"))

_lean = False


def lean_process() -> bool:
    """Mark this process as the ``agentd`` command, import frozenlist's pure-Python build,
    and leave ``_hashlib`` out when the built-in hashes can stand in for it. True if
    ``_hashlib`` will not be loaded."""
    global _lean
    _lean = True
    _pure_python_frozenlist()
    if "_hashlib" in sys.modules or "hashlib" in sys.modules:
        return sys.modules.get("_hashlib", 0) is None
    if not all(importlib.util.find_spec(name) is not None for name in _BUILTIN_HASHES):
        return False
    sys.modules["_hashlib"] = None  # type: ignore[assignment]
    return True


def _pure_python_frozenlist() -> None:
    """Import frozenlist without its C++ extension (and so without libstdc++), leaving the
    environment as it was."""
    if "frozenlist" in sys.modules or importlib.util.find_spec("frozenlist") is None:
        return
    name = "FROZENLIST_NO_EXTENSIONS"
    before = os.environ.get(name)
    os.environ[name] = "1"
    try:
        import frozenlist  # noqa: F401  (read the switch once, at import)
    except ImportError:  # never stop the command over a saving
        pass
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def without_tls() -> bool:
    """In a lean process, leave ``ssl`` out (call before asyncio is imported). True if
    ``ssl`` cannot be imported from now on."""
    if _lean and "ssl" not in sys.modules:
        sys.modules["ssl"] = None  # type: ignore[assignment]
    return not tls_available()


def tls_available() -> bool:
    """False when ``without_tls()`` left ``ssl`` out of this process."""
    return "ssl" not in sys.modules or sys.modules["ssl"] is not None
