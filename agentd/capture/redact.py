"""Redaction of a capture (``agentd capture --redact``): identity out, structure kept.

A ``Redactor`` replaces what identifies a node or its parts, consistently within one
capture: the same value gets the same replacement in every file (sysfs and procfs text,
the recorded answers under ``.agentd/``, the kernel log, the baseline), so a redacted
capture replays to the same findings. Replacements come from HMAC-SHA256 under a
per-capture key (random unless one is given): consistent inside a capture, unlinkable
across captures. Replacement is injective per kind (a collision is re-drawn), so two
different GUIDs never become one.

What is replaced, and how it keeps its format for its readers:

- MAC addresses (6 octets, ``xx:..:xx``): a globally administered MAC keeps its OUI (the
  vendor, not the unit) and gets new lower 3 octets; a locally administered one keeps
  only its two flag bits. IPoIB hardware addresses (20 octets) keep the 4 flag/QPN octets
  and map the 16-octet GID inside as below.
- GUIDs (``xxxx:xxxx:xxxx:xxxx``; GID interface ids; the PCIe Device Serial Number; hex
  ``phys_port_id``/``phys_switch_id``): one 64-bit map. The OUI (top 24 bits) is kept. An
  EUI-64 made from a MAC (``ff:fe`` in the middle, U/L bit flipped) and a Mellanox GUID
  made from a MAC (``03:00`` in the middle) are mapped through the MAC map, so a netdev's
  MAC, its HCA's node GUID and its RoCE v1 GID still agree after redaction.
- GIDs and IPv6 addresses (any spelling; sysfs's 8 groups of 4 stay 8 groups of 4):
  ``::``, ``::1`` and multicast are kept; the ``fe80::/64`` link-local prefix (also the
  default IB subnet prefix) is kept and the interface id mapped as a GUID; an IPv4-mapped
  GID (``::ffff:a.b.c.d``, RoCE v2) keeps its prefix and maps the IPv4 address; any other
  prefix (a global address, a site's IB subnet prefix) keeps its top 16 bits (address
  class) and maps the rest.
- IPv4 dotted quads: kept when they carry no identity: 0.0.0.0, 127/8, multicast and
  reserved (224/3), netmasks (255.255.255.0 ...). Private, shared and link-local ranges
  (10/8, 172.16/12, 192.168/16, 100.64/10, 169.254/16) keep their range; anything else
  becomes an address in 198.18/15 (RFC 2544, never a real host).
- UUIDs (NVML ``GPU-<uuid>``, ``boot_id``, DMI ``product_uuid``, cluster UUIDs): new
  random bits, version nibble and variant bits kept, case kept; the nil and max UUID are
  kept. A bare 32-hex-digit token (``etc/machine-id``) is the same 128-bit map, written
  without dashes.
- Hostnames: each name given to the Redactor (and the content of
  ``proc/sys/kernel/hostname``, ``uname.json``'s ``nodename``, a JSON ``hostname``) is
  replaced wherever it occurs as a word, case-insensitively: the short name by
  ``node-<8 hex>``, a fully qualified one by ``node-<8 hex>.invalid``. ``localhost`` and
  names shorter than 2 characters are not replaced.
- Netdev names made from a MAC (systemd's ``NamePolicy=mac``: ``enx`` + the 12 hex digits,
  also ``wlx``, ``wwx``, ``slx``), in file content and in member paths and symlink targets
  (``redact_path``): the MAC inside goes through the MAC map, so the name and its
  ``address`` file still agree, and the real MAC is in neither.
- GUIDs in ``0x`` form (``0xa088c20300425f10``, as the kernel log prints them): on a line
  that says ``GUID``, and elsewhere when the middle bytes say it is made from a MAC
  (``03:00``, ``ff:fe``); mapped as above, ``0x`` and case kept. Other ``0x`` numbers are
  kept (addresses).
- Other hosts' names: a dotted name of three or more labels ending in a common top-level
  domain (``com``, ``net``, ``org``, ``local``, ``internal``... or two letters, except
  endings that are file types such as ``so`` or ``py``) becomes ``host-<8 hex>.invalid``;
  an e-mail address becomes ``user-<8 hex>@redacted.invalid``.
- Serial numbers: JSON keys naming a serial (``serial``, ``board_serial``...), DMI
  ``*_serial``, ``*asset_tag`` files, a pluggable module's vendor serial inside its
  recorded EEPROM pages (``.agentd/ethtool-netlink/<if>.json``: SFF-8636 bytes 196-211,
  CMIS 166-181 of upper page 00h, agentd.base.sff), and in free text the value after
  ``Serial Number:``, ``SerialNumber:``, ``serial=``, ``S/N:`` and the like: same length,
  digits stay digits, letters stay letters of the same case, other characters kept.
  Placeholders (``To Be Filled By O.E.M.``, ``Not Specified``...) are kept. The rest of the
  EEPROM pages (temperatures, powers, thresholds) is not identity and is kept as it is.

Not replaced: PCI bus ids (topology, not identity), IB ``board_id`` (a part number, e.g.
``MT_0000000838``, the same on every board of a model), firmware and driver versions,
numbers that only look like ``0x``-hex (kernel log addresses). Version files
(``fw_ver``, ``*version*``...) are copied untouched so a 4-part version is not taken for an
IPv4 address. A file that is not text (holds a NUL byte) and has no rule of its own is
copied untouched and counted as ``binary_untouched``: PCI ``config`` has one (the Device
Serial Number capability, id 3 in the extended list from 0x100, is mapped as a GUID; the
rest of config space carries no identity). Free text (the kernel log, ``etc/nccl.conf``)
is redacted by these patterns only: a name with fewer than three labels (``storage01``), a
serial without one of the keywords above, or a domain outside the list can still pass.

Only stdlib and a leaf (agentd.base.sff, the module memory maps): a pure function of
(key, hostnames, path, bytes).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import struct
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar, cast

from agentd.base import sff
from agentd.base.jsontypes import JsonValue

__all__ = ["Redactor"]

_M64 = (1 << 64) - 1
_M128 = (1 << 128) - 1

# Files copied as they are: versions and part numbers (a 4-part version is no IPv4).
H = TypeVar("H", bound=Hashable)  # a value redaction maps (bytes, str, int)

_KEEP_NAMES = frozenset({"fw_ver", "hw_rev", "board_id", "hca_type", "srcversion", "osrelease", "modalias", "uevent_seqnum"})
_SERIAL_FILE_RE = re.compile(r"(^|/)dmi/id/[^/]*(serial|asset_tag)$")
_HEX_ID_FILE_RE = re.compile(r"(^|/)net/[^/]+/phys_(port|switch)_id$")
# The routing tables (agentd.host.routes reads which netdevs carry a default route):
# addresses in hex the text pass cannot see; only the default routes are kept, their
# gateways and sources zeroed.
_ROUTES_FILE_RE = re.compile(r"(^|/)proc/net/(route|ipv6_route)$")
_HOSTNAME_FILE_RE = re.compile(r"(^|/)proc/sys/kernel/hostname$")
_ETHTOOL_NETLINK_RE = re.compile(r"(^|/)\.agentd/ethtool-netlink/[^/]+\.json$")
_PLACEHOLDERS = frozenset({
    "", "none", "n/a", "na", "0", "00000000", "0123456789", "not specified", "not applicable", "not available",
    "to be filled by o.e.m.", "default string", "system serial number", "chassis serial number",
    "base board serial number", "serial", "unknown",
})
_HOST_KEYS = frozenset({"hostname", "nodename"})
_DSN_CAP_ID = 0x0003
_EXT_CAP_START = 0x100

# One pass over the text; each alternative is classified by its group and a candidate that
# turns out to be nothing known is left as it was. The output is never scanned again.
_UUID = rb"(?<![0-9A-Za-z])(?P<uuid>[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})(?![0-9A-Za-z])"
_HEXCOLON = rb"(?<![0-9A-Za-z:.])(?P<hc>[0-9A-Fa-f]*:[0-9A-Fa-f:]*)(?![0-9A-Za-z:]|\.[0-9])"
_IPV4 = rb"(?<![0-9A-Za-z_.])(?P<v4>[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})(?![0-9A-Za-z_]|\.[0-9])"
_HEX32 = rb"(?<![0-9A-Za-z])(?P<h32>[0-9a-f]{32})(?![0-9A-Za-z])"
# systemd NamePolicy=mac: prefix + "x" + the MAC's 12 hex digits (systemd.net-naming-scheme(7))
_MACNAME = rb"(?<![0-9A-Za-z])(?P<macname>(?:en|wl|ww|sl)x[0-9a-f]{12})(?![0-9A-Za-z])"
_GUID_LINE = rb"(?P<gctx>(?i:guid)[^\n]{0,40}?)(?<![0-9A-Za-z])0x(?P<g0x>[0-9a-fA-F]{16})(?![0-9A-Za-z])"
_HEX0X = rb"(?<![0-9A-Za-z])0x(?P<h0x>[0-9a-fA-F]{16})(?![0-9A-Za-z])"
_SERIAL_TEXT = (rb"(?<![A-Za-z])(?P<serkey>(?i:serial[ _]?(?:number|num|no\.?)?|s/n)[ \t]*[:=][ \t]*)"
                rb"(?P<ser>[A-Za-z0-9][A-Za-z0-9._/-]{2,63})(?![A-Za-z0-9._/-])")
_EMAIL = rb"(?<![A-Za-z0-9._%+-])(?P<email>[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,63})(?![A-Za-z0-9-])"
_TLDS = (b"com|net|org|edu|gov|mil|int|info|biz|io|ai|dev|app|cloud|tech|local|localdomain|lan|internal|intranet|intra|corp|"
         b"home|private|site|cluster|hpc|example|(?!(?:so|py|ko|js|sh|pl|md|rs|go|ts|rb|cc|hh|mk|el|gz|xz|bz|db)(?![A-Za-z]))[A-Za-z]{2}")
_FQDN = (rb"(?<![0-9A-Za-z_.@-])(?P<fqdn>(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){2,}(?i:" + _TLDS + rb"))"
         rb"(?![0-9A-Za-z_-]|\.[0-9A-Za-z])")


def _is_netmask(a: int) -> bool:
    inv = a ^ 0xFFFFFFFF
    return inv & (inv + 1) == 0


def _groups(text: str) -> list[str]:
    return text.split(":")


def _fmt_ipv6(value: int, full: bool, upper: bool) -> str:
    groups = [(value >> (112 - 16 * i)) & 0xFFFF for i in range(8)]
    if full:
        out = ":".join(f"{g:04x}" for g in groups)
    else:
        best, run, start = (0, -1), 0, -1  # (length, start) of the longest run of zero groups
        for i, g in enumerate(groups):
            if g == 0:
                if run == 0:
                    start = i
                run += 1
                if run > best[0]:
                    best = (run, start)
            else:
                run = 0
        parts = [f"{g:x}" for g in groups]
        if best[0] >= 2:
            s, n = best[1], best[0]
            out = ":".join(parts[:s]) + "::" + ":".join(parts[s + n:])
        else:
            out = ":".join(parts)
    return out.upper() if upper else out


def _parse_ipv6(text: str) -> int | None:
    """128-bit value of a hex-only IPv6 spelling (no dotted tail, no zone); None if not one."""
    if text.count("::") > 1 or ":::" in text:
        return None
    if "::" in text:
        head, _, tail = text.partition("::")
        hg = head.split(":") if head else []
        tg = tail.split(":") if tail else []
        if len(hg) + len(tg) > 7:
            return None
        groups = hg + ["0"] * (8 - len(hg) - len(tg)) + tg
    else:
        groups = text.split(":")
        if len(groups) != 8:
            return None
    value = 0
    for g in groups:
        if not 1 <= len(g) <= 4:
            return None
        value = (value << 16) | int(g, 16)
    return value


def _default_routes_only(data: bytes, *, ipv6: bool) -> bytes:
    """A routing table with only its default routes, every address in them zeroed."""
    lines = data.decode("ascii", "replace").splitlines()
    out = [] if ipv6 else lines[:1]
    for line in lines if ipv6 else lines[1:]:
        f = line.split() if ipv6 else line.split("\t")
        if ipv6 and len(f) == 10 and f[0].strip("0") == "" and f[1] == "00":
            out.append(" ".join([f[0], f[1], "0" * 32, "00", "0" * 32, *f[5:]]))
        elif not ipv6 and len(f) >= 8 and f[1].strip() == "00000000" and f[7].strip() == "00000000":
            out.append("\t".join([f[0], f[1], "00000000", *f[3:]]))
    return ("\n".join(out) + "\n").encode("ascii")


class Redactor:
    """Consistent, keyed replacement of identifying values in the files of one capture.

    ``key``: the HMAC key (default: 32 random bytes; pass one only in tests).
    ``hostnames``: the node's names (``proc/sys/kernel/hostname``, uname's nodename, an
    FQDN); give them all before the first ``redact`` so every file gets them.
    """

    def __init__(self, key: bytes | None = None, hostnames: Iterable[str] = ()) -> None:
        self._key = key if key is not None else secrets.token_bytes(32)
        self._maps: dict[str, dict[Hashable, Hashable]] = {}  # per kind: value -> its replacement (one type per kind)
        self._used: dict[str, set[Hashable]] = {}
        self._counts: Counter[str] = Counter()
        self._hosts: dict[str, str] = {}  # lowercased name -> replacement
        for name in hostnames:
            self._add_host(name)
        self._text_re = self._compile()
        self._name_re = re.compile(_MACNAME)

    # ------------------------------------------------------------------ public

    def redact(self, path: str, data: bytes) -> bytes:
        """``data`` (the content of ``path``, relative to the host root, e.g.
        ``sys/class/infiniband/mlx5_0/node_guid``) with identities replaced. Never raises
        on any content; a file it cannot parse is treated as text or left as it is."""
        path = path.lstrip("/")
        if path.startswith("./"):
            path = path[2:]
        name = path.rpartition("/")[2]
        if not data:
            return data
        if name in _KEEP_NAMES or "version" in name:
            return data
        if name == "config" and path.startswith("sys/"):
            return self._pci_config(data)
        if _HOSTNAME_FILE_RE.search(path):
            return self._whole(data, self._hostname)
        if _SERIAL_FILE_RE.search(path):
            return self._whole(data, self._serial_or_text)
        if _HEX_ID_FILE_RE.search(path):
            return self._whole(data, self._hex_id)
        if _ROUTES_FILE_RE.search(path):
            return _default_routes_only(data, ipv6=name == "ipv6_route")
        if _ETHTOOL_NETLINK_RE.search(path):
            eeprom = self._module_eeprom(data)
            if eeprom is not None:
                return eeprom
        if name.endswith(".json") and b"\0" not in data:
            out = self._json(data)
            if out is not None:
                return out
        if b"\0" in data:
            self._counts["binary_untouched"] += 1
            return data
        return self.redact_bytes(data)

    def redact_bytes(self, data: bytes) -> bytes:
        """The free-text pass alone (MACs, GUIDs, GIDs/IPv6, IPv4, UUIDs, machine-ids,
        hostnames), on bytes of any encoding."""
        return self._text_re.sub(self._replace_match, data)

    def redact_path(self, path: str) -> str:
        """A member path or symlink target with the names made from a MAC replaced (the
        only identity a sysfs path carries: PCI ids and device names are topology)."""
        return self._name_re.sub(self._replace_match, path.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")

    def redact_text(self, text: str) -> str:
        """``redact_bytes`` for a str (undecodable bytes kept as surrogate escapes)."""
        return self.redact_bytes(text.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")

    def summary(self) -> dict[str, int]:
        """For the manifest: distinct values replaced per kind (``mac``, ``guid`` (GUIDs
        and GID interface ids, MAC-derived ones too), ``ipv4``, ``ipv6_prefix``, ``uuid``
        (machine-ids too), ``hostname``, ``other_host``, ``email``, ``serial``), and counts of ``pci_dsn`` (Device
        Serial Number capabilities rewritten) and ``binary_untouched`` (binary files left
        as they were). Kinds with nothing to count are absent."""
        out = {kind: len(m) for kind, m in sorted(self._maps.items())}
        out.update(sorted(self._counts.items()))
        return out

    # ------------------------------------------------------------------ keyed maps

    def _digest(self, kind: str, value: bytes, attempt: int) -> bytes:
        msg = kind.encode() + b"\0" + attempt.to_bytes(4, "big") + value
        return hmac.new(self._key, msg, hashlib.sha256).digest()

    def _mapped(self, kind: str, value: H, draw: Callable[[int], H], *, avoid: Callable[[H], bool] = lambda _v: False) -> H:
        """The replacement of ``value`` of ``kind``: ``draw(attempt)`` until it is new,
        not the value itself, and not ``avoid``ed (bounded; injective per kind)."""
        table = self._maps.setdefault(kind, {})
        if value in table:
            return cast(H, table[value])  # stored by the same kind's draw
        used = self._used.setdefault(kind, set())
        out = draw(0)
        for attempt in range(1, 64):
            if out not in used and out != value and not avoid(out):
                break
            out = draw(attempt)
        table[value] = out
        used.add(out)
        return out

    def _mac(self, mac: bytes) -> bytes:
        if mac == b"\0" * 6 or mac == b"\xff" * 6:
            return mac

        def draw(attempt: int) -> bytes:
            d = self._digest("mac", mac, attempt)
            if mac[0] & 0x02:  # locally administered: all of it is arbitrary
                return bytes([(d[0] & 0xFC) | (mac[0] & 0x03)]) + d[1:6]
            return mac[:3] + d[:3]

        out: bytes = self._mapped("mac", mac, draw, avoid=lambda v: v in (b"\0" * 6, b"\xff" * 6))
        return out

    def _guid(self, value: int) -> int:
        if value in (0, _M64):
            return value
        b = value.to_bytes(8, "big")
        if b[3:5] in (b"\xff\xfe", b"\x03\x00"):  # EUI-64 of a MAC (U/L bit inverted), Mellanox GUID of a MAC
            flip = 0x02 if b[3:5] == b"\xff\xfe" else 0
            m = self._mac(bytes([b[0] ^ flip]) + b[1:3] + b[5:8])
            derived = int.from_bytes(bytes([m[0] ^ flip]) + m[1:3] + b[3:5] + m[3:6], "big")
            self._maps.setdefault("guid", {})[value] = derived  # counted; generic draws avoid these middles
            return derived

        def draw(attempt: int) -> int:
            d = self._digest("guid", b, attempt)
            return (value & ~((1 << 40) - 1) & _M64) | int.from_bytes(d[:5], "big")

        def avoid(v: int) -> bool:
            return v in (0, _M64) or ((v >> 24) & 0xFFFF) in (0xFFFE, 0x0300)

        out: int = self._mapped("guid", value, draw, avoid=avoid)
        return out

    def _ipv4(self, a: int) -> int:
        top = a >> 24
        if top == 127 or top >= 224 or _is_netmask(a):
            return a
        for net, bits in ((0x0A000000, 8), (0xAC100000, 12), (0xC0A80000, 16), (0x64400000, 10), (0xA9FE0000, 16), (0xC6120000, 15)):
            if a >> (32 - bits) == net >> (32 - bits):
                break
        else:
            net, bits = 0xC6120000, 15
        host_mask = (1 << (32 - bits)) - 1

        def draw(attempt: int) -> int:
            h = int.from_bytes(self._digest("ipv4", a.to_bytes(4, "big"), attempt)[:4], "big") & host_mask
            return net | h

        out: int = self._mapped("ipv4", a, draw, avoid=lambda v: v & host_mask in (0, host_mask))
        return out

    def _ipv6(self, value: int) -> int:
        prefix, iid = value >> 64, value & _M64
        if value in (0, 1) or value >> 120 == 0xFF:
            return value
        if value >> 32 == 0xFFFF:  # ::ffff:a.b.c.d
            return (0xFFFF << 32) | self._ipv4(value & 0xFFFFFFFF)
        if prefix != 0xFE80 << 48:

            def draw(attempt: int) -> int:
                d = self._digest("ipv6_prefix", prefix.to_bytes(8, "big"), attempt)
                return (prefix & (0xFFFF << 48)) | int.from_bytes(d[:6], "big")

            prefix = self._mapped("ipv6_prefix", prefix, draw, avoid=lambda v: v == 0xFE80 << 48)
        return (prefix << 64) | self._guid(iid)

    def _uuid128(self, value: int) -> int:
        if value in (0, _M128):
            return value

        def draw(attempt: int) -> int:
            d = int.from_bytes(self._digest("uuid", value.to_bytes(16, "big"), attempt)[:16], "big")
            keep = (0xF << 76) | (0xC << 60)  # version nibble, variant bits
            return (d & ~keep & _M128) | (value & keep)

        out: int = self._mapped("uuid", value, draw, avoid=lambda v: v in (0, _M128))
        return out

    @staticmethod
    def _host_key(name: str) -> str | None:
        key = name.strip().lower().rstrip(".")
        return None if len(key) < 2 or key in ("localhost", "localhost.localdomain", "(none)") else key

    def _hostname(self, name: str) -> str:
        """A value that is a hostname (the hostname file, a JSON ``hostname``): learnt if new."""
        key = self._host_key(name)
        if key is None:
            return name
        if key not in self._hosts:
            self._add_host(key)
            self._text_re = self._compile()
        return self._hosts[key]

    def _add_host(self, name: str) -> None:
        key = self._host_key(name)
        if key is None or key in self._hosts:
            return
        short = key.split(".", 1)[0]
        tag = hmac.new(self._key, b"host\0" + short.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()[:8]
        self._hosts[short] = f"node-{tag}"
        if key != short:
            self._hosts[key] = f"node-{tag}.invalid"
        self._maps.setdefault("hostname", {})[short] = f"node-{tag}"

    def _serial(self, text: str) -> str:
        if text.strip().lower() in _PLACEHOLDERS or set(text.strip()) <= {"0", " ", "-"}:
            return text

        def draw(attempt: int) -> str:
            d = self._digest("serial", text.encode("utf-8", "surrogateescape"), attempt)
            stream = iter(d * 4)
            out = []
            for ch in text:
                if ch.isascii() and ch.isdigit():
                    out.append(str(next(stream) % 10))
                elif ch.isascii() and ch.isupper():
                    out.append(chr(65 + next(stream) % 26))
                elif ch.isascii() and ch.islower():
                    out.append(chr(97 + next(stream) % 26))
                else:
                    out.append(ch)
            return "".join(out)

        out: str = self._mapped("serial", text, draw)
        return out

    # ------------------------------------------------------------------ free text

    def _compile(self) -> re.Pattern[bytes]:
        alts = [_MACNAME, _GUID_LINE, _HEX0X, _SERIAL_TEXT, _EMAIL, _UUID, _HEXCOLON, _IPV4, _HEX32, _FQDN]
        if self._hosts:
            names = sorted(self._hosts, key=len, reverse=True)
            body = b"|".join(re.escape(n.encode("utf-8", "surrogateescape")) for n in names)
            alts.insert(0, rb"(?<![0-9A-Za-z_-])(?P<host>(?i:" + body + rb"))(?![0-9A-Za-z_-])")
        return re.compile(b"|".join(alts))

    def _replace_match(self, m: re.Match[bytes]) -> bytes:
        kind = m.lastgroup
        raw = m.group(0)
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:  # a hostname that is not ASCII
            text = raw.decode("utf-8", "surrogateescape")
        if kind == "host":
            out = self._hosts.get(text.lower(), text)
        elif kind == "uuid":
            out = self._fmt_uuid(text)
        elif kind == "hc":
            out = self._hexcolon(text)
        elif kind == "v4":
            octets = [int(x) for x in text.split(".")]
            if max(octets) > 255:
                return raw
            a = self._ipv4(int.from_bytes(bytes(octets), "big"))
            out = ".".join(str(x) for x in a.to_bytes(4, "big"))
        elif kind == "h32":
            out = f"{self._uuid128(int(text, 16)):032x}"
        elif kind == "macname":
            out = text[:3] + self._mac(bytes.fromhex(text[3:])).hex()
        elif kind == "g0x":  # "... GUID ... 0x<16 hex>": the context is redacted on its own
            start = m.start("g0x") - m.start()
            return self.redact_bytes(raw[: start - 2]) + raw[start - 2 : start] + self._guid_hex(raw[start:].decode("ascii")).encode()
        elif kind == "h0x":
            value = int(text[2:], 16)
            b = value.to_bytes(8, "big")
            if b[3:5] not in (b"\x03\x00", b"\xff\xfe") or value >> 48 == 0xFFFF:
                return raw  # an address, not a GUID made from a MAC
            out = "0x" + self._guid_hex(text[2:])
        elif kind == "ser":
            start = m.start("ser") - m.start()
            return raw[:start] + self._serial(raw[start:].decode("ascii")).encode()
        elif kind == "email":
            key = text.lower()
            out = self._mapped("email", key, lambda a: f"user-{self._digest('email', key.encode(), a).hex()[:8]}@redacted.invalid")
        elif kind == "fqdn":
            key = text.lower()
            out = self._mapped("other_host", key, lambda a: f"host-{self._digest('other_host', key.encode(), a).hex()[:8]}.invalid")
        else:
            return raw
        return out.encode("utf-8", "surrogateescape")

    def _guid_hex(self, digits: str) -> str:
        """16 hex digits mapped as a GUID, in their case."""
        out = f"{self._guid(int(digits, 16)):016x}"
        return out.upper() if digits.upper() == digits and any(c.isalpha() for c in digits) else out

    def _fmt_uuid(self, text: str) -> str:
        h = f"{self._uuid128(int(text.replace('-', ''), 16)):032x}"
        out = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        return out.upper() if text.upper() == text and any(c.isalpha() for c in text) else out

    def _hexcolon(self, text: str) -> str:
        """A MAC, an IPoIB address, a GUID or an IPv6 address/GID; else ``text``."""
        groups = _groups(text)
        upper = any(c.isupper() for c in text)
        if len(groups) in (6, 20) and all(len(g) == 2 for g in groups):
            b = bytes(int(g, 16) for g in groups)
            if len(b) == 6:
                out = self._mac(b)
            else:
                gid = self._ipv6(int.from_bytes(b[4:], "big"))
                out = b[:4] + gid.to_bytes(16, "big")
            s = ":".join(f"{x:02x}" for x in out)
            return s.upper() if upper else s
        if len(groups) == 4 and all(len(g) == 4 for g in groups):
            v = self._guid(int("".join(groups), 16))
            h = f"{v:016x}"
            s = ":".join(h[i:i + 4] for i in range(0, 16, 4))
            return s.upper() if upper else s
        value = _parse_ipv6(text)
        if value is None:
            return text
        full = len(groups) == 8 and all(len(g) == 4 for g in groups)
        return _fmt_ipv6(self._ipv6(value), full, upper)

    # ------------------------------------------------------------------ per-file rules

    @staticmethod
    def _whole(data: bytes, fn: Callable[[str], str]) -> bytes:
        """``fn`` on the file's value (one line, its trailing whitespace kept)."""
        text = data.decode("utf-8", "surrogateescape")
        value = text.rstrip()
        return (fn(value) + text[len(value):]).encode("utf-8", "surrogateescape")

    def _serial_or_text(self, value: str) -> str:
        if re.fullmatch(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", value):
            return self._fmt_uuid(value)
        return self._serial(value)

    def _hex_id(self, value: str) -> str:
        """``phys_port_id``/``phys_switch_id``: hex without separators; 16 digits are a
        GUID (mlx5 prints the system image GUID), other lengths a serial."""
        if re.fullmatch(r"[0-9a-fA-F]{16}", value):
            return f"{self._guid(int(value, 16)):016x}"
        if re.fullmatch(r"[0-9a-fA-F]+", value):
            return self._serial(value)
        return self.redact_text(value)

    def _json(self, data: bytes) -> bytes | None:
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            return None
        try:
            out = self._walk(obj, None)
        except RecursionError:
            return None
        indent = 2 if data.lstrip()[:1] in (b"{", b"[") and b"\n" in data.strip() else None
        text = json.dumps(out, indent=indent, ensure_ascii=False)
        return (text + ("\n" if data.endswith(b"\n") else "")).encode("utf-8", "surrogateescape")

    def _walk(self, obj: JsonValue, key: str | None) -> JsonValue:
        if isinstance(obj, dict):
            return {self.redact_text(k): self._walk(v, k) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self._walk(v, key) for v in obj]
        if isinstance(obj, str):
            k = (key or "").lower()
            if "serial" in k or k.endswith("asset_tag"):
                return self._serial_or_text(obj)
            if k in _HOST_KEYS and obj and not any(c in obj for c in " /:"):
                return self._hostname(obj)
            return self.redact_text(obj)
        return obj

    def _module_eeprom(self, data: bytes) -> bytes | None:
        """Recorded ethtool netlink answers with the module's vendor serial mapped inside
        upper page 00h; None when the file is not that shape (then the JSON rules apply)."""
        try:
            doc = json.loads(data)
            pages = doc.get("module-eeprom", {}).get("pages", []) if isinstance(doc, dict) else None
            if not isinstance(pages, list):
                return None
            by_key = {(p["page"], p.get("bank", 0), p["offset"]): p for p in pages}
            lower = bytes.fromhex(by_key[(0, 0, 0)]["data"]) if (0, 0, 0) in by_key else b""
            upper = by_key.get((0, 0, sff.PAGE_SIZE))
        except (ValueError, RecursionError, AttributeError, KeyError, TypeError):
            return None
        spec = sff.Sff8636 if lower[:1] and lower[0] in sff.SFF8636_IDS else sff.Cmis if lower[:1] and lower[0] in sff.CMIS_IDS else None
        if spec is not None and upper is not None:
            try:
                buf = bytearray.fromhex(upper["data"])
            except (ValueError, TypeError):
                return None
            start, length = spec.VENDOR_SN[0] - sff.PAGE_SIZE, spec.VENDOR_SN[1]
            raw = bytes(buf[start : start + length])
            text = raw.decode("ascii", "replace").rstrip(" \0")
            if text and len(raw) == length:
                new = self._serial(text).encode("ascii", "replace")[:length].ljust(length)
                buf[start : start + length] = new
                upper["data"] = buf.hex()
        indent = 1 if b"\n" in data.strip() else None
        return (json.dumps(doc, indent=indent) + ("\n" if data.endswith(b"\n") else "")).encode()

    def _pci_config(self, data: bytes) -> bytes:
        """Config space with each Device Serial Number capability's 8 bytes mapped as a
        GUID (lspci prints them high dword first: that is the node GUID on ConnectX)."""
        buf = bytearray(data)
        off, seen = _EXT_CAP_START, set[int]()
        while off + 4 <= len(buf) and off not in seen and len(seen) < 512:
            seen.add(off)
            header = struct.unpack_from("<I", buf, off)[0]
            if header in (0, 0xFFFFFFFF):
                break
            if header & 0xFFFF == _DSN_CAP_ID and off + 12 <= len(buf):
                lo, hi = struct.unpack_from("<II", buf, off + 4)
                value = (hi << 32) | lo
                new = self._guid(value)
                if new != value:
                    self._counts["pci_dsn"] += 1
                struct.pack_into("<II", buf, off + 4, new & 0xFFFFFFFF, new >> 32)
            off = (header >> 20) & 0xFFC
            if off < _EXT_CAP_START:
                break
        return bytes(buf)
