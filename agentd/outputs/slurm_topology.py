"""Slurm's topology/block input from each node's placement: ``topology.conf`` lines, and
the ``topology.yaml`` of Slurm 25.05 and later.

topology/block (topology.conf(5), topology.yaml(5)) groups nodes into blocks with fast
links between them and places jobs inside a block first; a GB200/GB300 NVL rack's NVLink
domain is such a block. Per node:

- ``agentd topology --slurm`` prints the node's topology.conf line,
  ``BlockName=<block> Nodes=<node>``;
- ``agentd topology --slurm-yaml`` prints its topology.yaml block entry on one line, in
  YAML flow style, ``- {block: "<block>", nodes: "<node>"}``: one line a node, so pdsh's
  interleaving of many nodes' output cannot split an entry.

``agentd topology --slurm-merge [--yaml]`` reads many nodes' lines of either kind (pdsh
output included: its ``host: `` prefixes are stripped), and its own merged output of
either kind, and writes one file: topology.conf, or with ``--yaml`` a topology.yaml with
one block topology (``cluster_default: true``)::

    pdsh -w 'gpu[001-288]' agentd topology --slurm-yaml | agentd topology --slurm-merge --yaml > topology.yaml

Node lists are Slurm hostlists (agentd.outputs.slurm_hostlist): read expanded, so
``Nodes=gpu[001-004]`` and a later ``Nodes=gpu003`` are the same node; written compressed.

Block names: ``nvl-<cluster uuid>-<clique id>`` for a node in a multi-node NVLink domain
(the domain's whole identity, so two racks never share a name; 51 characters at most,
within the 64 Slurm allows a switch name), ``node-<node name>`` for a node outside one (an
HGX board is an NVLink domain of its own): every node is in exactly one block, so the
plugin can place jobs on every node; a comment line before it says why it stands alone.
Every block name and node name is a plain name (letters, digits, ``-``, ``_``, ``.``):
Slurm's parsers read ``#`` as a comment and brackets and commas as hostlists, and
aggregate block names through its hostlist parser (topology/block/block_record.c), so
anything else would change the file's meaning.

Block order: blocks of more than one node first, then single-node blocks, each in the
natural order of their first node. Without BlockSizes Slurm takes the node count of the
first block as the planning base block size (block_record.c), which should be a rack's,
not a lone node's; and it pairs adjacent blocks into the larger levels. BlockSizes is left
to the site (each block must hold at least the smallest size; each larger size is the
smallest times a power of two, at most 2^15: Slurm refuses to start otherwise, so the
merge refuses such lines); the merged file ends with a comment counting blocks by size.

Pure: no I/O here (agentd.cli reads the files and stdin).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Iterable, NamedTuple

import yaml

from agentd.base.ids import natural_key
from agentd.judging.placement import Placement
from agentd.outputs.slurm_hostlist import MAX_HOSTS, HostlistError, compress, expand

BLOCK_NAME_MAX = 64  # topology.conf(5) gives SwitchName this limit; block names stay within it too
MAX_BLOCK_LEVELS = 16  # topology/block/block_record.h: BlockSizes span at most 2^15 base blocks
TOPOLOGY_NAME = "nvlink"  # the topology.yaml name partitions choose with Topology=
MAX_LINE = 1 << 20  # a merged line of 64 Ki nodes compresses far below this
# Slurm node names as agentd prints them: a hostname's characters (no hostlist brackets,
# commas, '=' or spaces, which would change the line's meaning).
NODE_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9_])?$")
# pdsh's "host: " prefix (a name without spaces, ':', '=' or '#', then ": ")
_PDSH_PREFIX = re.compile(r"^[^\s:=#]+:\s")
_CONF_LINE = re.compile(r"^[A-Za-z]+=")


class MergeError(ValueError):
    """The lines do not make one consistent topology file (every problem, one a line)."""


class Topology(NamedTuple):
    """What a topology.conf or a topology.yaml block topology says: blocks in file order,
    each with its nodes in natural order; BlockSizes, () when the site gave none."""

    name: str
    blocks: tuple[tuple[str, tuple[str, ...]], ...]
    block_sizes: tuple[int, ...] = ()


def short_hostname(hostname: str | None) -> str | None:
    if not hostname:
        return None
    return hostname.split(".", 1)[0] or None


def valid_node_name(node: str) -> bool:
    return bool(NODE_NAME_RE.match(node))


def valid_block_name(name: str) -> bool:
    return len(name) <= BLOCK_NAME_MAX and valid_node_name(name)


def single_node_block(node: str) -> str:
    name = f"node-{node}"
    if len(name) <= BLOCK_NAME_MAX:
        return name
    return "node-" + hashlib.sha256(node.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def block_name(p: Placement, node: str) -> str:
    if p.domain is not None:
        return f"nvl-{p.domain.cluster_uuid}-{p.domain.clique_id}"
    return single_node_block(node)


def _node_block(p: Placement, node: str) -> tuple[str | None, str]:
    """(the comment saying why the node stands alone, or None; its block name).
    ValueError: a node or block name Slurm would not read back as one name."""
    if not valid_node_name(node):
        raise ValueError(f"node name {node!r} is not a plain Slurm node name (letters, digits, '-', '_', '.'); give --node-name")
    name = block_name(p, node)
    if not valid_block_name(name):
        # The domain's identity comes from NVML (or a recording of it): never write a
        # name that is not plain, whatever it says.
        raise ValueError(f"block name {name[:100]!r} is not a plain Slurm name of at most {BLOCK_NAME_MAX} characters")
    comment = None
    if p.domain is None:
        why = ("a multi-node NVLink domain is expected, but its GPUs report none (see `agentd check`)" if p.multi_node
               else "no multi-node NVLink domain")
        comment = f"# {node}: {why}; a block of its own"
    return comment, name


def slurm_block_lines(p: Placement, node: str) -> list[str]:
    """The node's topology.conf lines: a comment when it has no multi-node domain, then
    its BlockName line. ValueError: ``node`` is not a name Slurm reads back as one node."""
    comment, name = _node_block(p, node)
    return [*([comment] if comment else []), f"BlockName={name} Nodes={node}"]


def _yaml_entry(name: str, nodes: str) -> str:
    # Plain ASCII names (validated): JSON strings are YAML double-quoted scalars.
    return f"- {{block: {json.dumps(name)}, nodes: {json.dumps(nodes)}}}"


def slurm_yaml_lines(p: Placement, node: str) -> list[str]:
    """The node's topology.yaml block entry, one line in flow style (what a topology's
    ``block.blocks`` list holds), after the same comment as slurm_block_lines."""
    comment, name = _node_block(p, node)
    return [*([comment] if comment else []), _yaml_entry(name, node)]


# ---------------------------------------------------------------------------
# reading lines


class _Line(NamedTuple):
    kind: str  # block | sizes | topology | skip
    block: str = ""
    nodes: str = ""
    sizes: tuple[int, ...] = ()
    problem: str = ""


def _sizes(text: str) -> tuple[int, ...] | None:
    parts = text.split(",")
    if not all(re.fullmatch(r"\d{1,9}", s.strip()) for s in parts):
        return None
    return tuple(int(s) for s in parts)


def _conf_line(line: str) -> _Line | None:
    fields: dict[str, str] = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if not sep or not value or key.lower() in fields:
            return None
        fields[key.lower()] = value  # parameter names are case insensitive (topology.conf(5))
    if set(fields) == {"blocksizes"}:
        sizes = _sizes(fields["blocksizes"])
        return None if sizes is None else _Line("sizes", sizes=sizes)
    if set(fields) == {"blockname", "nodes"}:
        return _Line("block", block=fields["blockname"], nodes=fields["nodes"])
    return None


def _yaml_line(line: str) -> _Line | None:
    """One line of a topology.yaml as agentd writes it: a flow-style block entry, or a
    line of the structure around the entries."""
    try:
        doc = yaml.safe_load(line)
    except (yaml.YAMLError, RecursionError):
        return None
    if isinstance(doc, list) and len(doc) == 1 and isinstance(doc[0], dict):
        (entry,) = doc
        if set(entry) == {"block", "nodes"} and all(isinstance(v, str) for v in entry.values()):
            return _Line("block", block=entry["block"], nodes=entry["nodes"])
        if set(entry) == {"topology"} and isinstance(entry["topology"], str):
            return _Line("topology", block=entry["topology"])
        return None
    if not isinstance(doc, dict) or len(doc) != 1:
        return None
    ((key, value),) = doc.items()
    if (key == "cluster_default" and isinstance(value, bool)) or (key in ("block", "blocks") and value is None):
        return _Line("skip")
    if key == "block_sizes" and isinstance(value, list) and value and all(type(v) is int for v in value):
        return _Line("sizes", sizes=tuple(value))
    return None


def _classify(line: str) -> _Line | None:
    if not line or line.startswith("#") or line == "---":
        return _Line("skip")
    if _CONF_LINE.match(line):
        return _conf_line(line)
    return _yaml_line(line)


def _read_line(raw: str) -> _Line:
    line = raw.strip()
    if len(line) > MAX_LINE:
        return _Line("bad", problem=f"a line of {len(line)} characters")
    parsed = _classify(line)
    if parsed is None:
        m = _PDSH_PREFIX.match(line)
        if m:
            parsed = _classify(line[m.end():].strip())
    if parsed is None:
        return _Line("bad", problem=f"not a topology/block line (BlockName=NAME Nodes=NODES, or - {{block: NAME, nodes: NODES}}): {line[:200]!r}")
    return parsed


def _size_problem(sizes: tuple[int, ...]) -> str | None:
    """Why Slurm would refuse these BlockSizes (block_record.c), or None."""
    base = sizes[0]
    if base <= 0:
        return "the base block size must be positive"
    for prev, size in zip(sizes, sizes[1:]):
        if size <= prev:
            return "each block size must be larger than the one before"
    for size in sizes:
        ratio, rest = divmod(size, base)
        if rest or ratio & (ratio - 1) or ratio >= 1 << MAX_BLOCK_LEVELS:
            return f"{size} is not {base} times a power of two up to 2^{MAX_BLOCK_LEVELS - 1}"
    return None


def read_topology(lines: Iterable[str]) -> Topology:
    """One topology from many nodes' lines and merged files of either kind (module
    docstring); merging is idempotent. Comments and blank lines are dropped; BlockSizes
    are kept when all agree. MergeError: a line of neither kind, a name that is not plain,
    a hostlist Slurm would not read, a node in two blocks, BlockSizes that differ or that
    Slurm refuses, two topology names, more than MAX_HOSTS nodes, or no block at all."""
    blocks: dict[str, set[str]] = {}
    owner: dict[str, str] = {}
    sizes: set[tuple[int, ...]] = set()
    names: set[str] = set()
    problems: list[str] = []
    for number, raw in enumerate(lines, 1):
        line = _read_line(raw)
        if line.kind == "bad":
            problems.append(f"line {number}: {line.problem}")
        elif line.kind == "sizes":
            sizes.add(line.sizes)
        elif line.kind == "topology":
            if valid_block_name(line.block):
                names.add(line.block)
            else:
                problems.append(f"line {number}: topology name {line.block[:100]!r} is not a plain name")
        elif line.kind == "block":
            if not valid_block_name(line.block):
                problems.append(f"line {number}: block name {line.block[:100]!r} is not a plain Slurm name of at most {BLOCK_NAME_MAX} characters")
                continue
            try:
                nodes = expand(line.nodes)
            except HostlistError as e:
                problems.append(f"line {number}: block {line.block}: {e}")
                continue
            odd = [n for n in nodes if not valid_node_name(n)]
            if odd:
                problems.append(f"line {number}: block {line.block}: {odd[0][:100]!r} is not a plain Slurm node name")
                continue
            for node in nodes:
                first = owner.setdefault(node, line.block)
                if first != line.block:
                    problems.append(f"line {number}: node {node} is in block {first} and in block {line.block}")
                    continue
                blocks.setdefault(line.block, set()).add(node)
            if len(owner) > MAX_HOSTS:
                problems.append(f"line {number}: more than {MAX_HOSTS} nodes (Slurm's limit)")
                break
    if len(sizes) > 1:
        problems.append(f"BlockSizes lines differ: {'; '.join(','.join(map(str, s)) for s in sorted(sizes))}")
    elif sizes and (why := _size_problem(next(iter(sizes)))):
        problems.append(f"BlockSizes {','.join(map(str, next(iter(sizes))))}: {why} (Slurm would not start)")
    if len(names) > 1:
        problems.append(f"more than one topology: {', '.join(sorted(names))}")
    if not blocks and not problems:
        problems.append("no blocks in the input (Slurm's topology/block refuses a file without one)")
    if problems:
        raise MergeError("\n".join(problems))

    def order(item: tuple[str, set[str]]) -> tuple[object, ...]:
        name, nodes = item
        return (len(nodes) == 1, min(natural_key(n) for n in nodes), name)

    ordered = tuple((name, tuple(sorted(nodes, key=natural_key))) for name, nodes in sorted(blocks.items(), key=order))
    return Topology(name=next(iter(names), TOPOLOGY_NAME), blocks=ordered, block_sizes=next(iter(sizes), ()))


# ---------------------------------------------------------------------------
# writing


def _summary(t: Topology) -> list[str]:
    counts: dict[int, int] = {}
    for _, nodes in t.blocks:
        counts[len(nodes)] = counts.get(len(nodes), 0) + 1
    summary = ", ".join(f"{n} node{'s' if n != 1 else ''} x {c}" for n, c in sorted(counts.items(), reverse=True))
    out = [f"# blocks by size: {summary} (BlockSizes: each block must hold at least the smallest size)"]
    if t.block_sizes:
        small = [f"{name} ({len(nodes)})" for name, nodes in t.blocks if len(nodes) < t.block_sizes[0]]
        if small:
            more = f" and {len(small) - 10} more" if len(small) > 10 else ""
            out.append(f"# {len(small)} block(s) below the base size {t.block_sizes[0]}: {', '.join(small[:10])}{more}")
    return out


def render_conf(t: Topology) -> str:
    """topology.conf for topology/block."""
    out = [
        "# topology.conf for Slurm's topology/block plugin, assembled by `agentd topology --slurm-merge`",
        "# from each node's `agentd topology --slurm` (docs/topology.md): one block per NVLink domain.",
        *(f"BlockName={name} Nodes={compress(nodes)}" for name, nodes in t.blocks),
    ]
    if t.block_sizes:
        out.append(f"BlockSizes={','.join(map(str, t.block_sizes))}")
    return "\n".join(out + _summary(t)) + "\n"


def render_yaml(t: Topology) -> str:
    """topology.yaml (Slurm 25.05+): one block topology, the cluster default."""
    out = [
        "# topology.yaml for Slurm 25.05+ (topology.yaml(5)), assembled by `agentd topology --slurm-merge --yaml`",
        "# from each node's `agentd topology --slurm-yaml` (docs/topology.md): one block per NVLink domain.",
        "# Slurm reads it instead of topology.conf; a partition names it with Topology=" + t.name + ".",
        f"- topology: {t.name}",
        "  cluster_default: true",
        "  block:",
    ]
    if t.block_sizes:
        out.append(f"    block_sizes: [{', '.join(map(str, t.block_sizes))}]")
    out.append("    blocks:")
    out += [f"      {_yaml_entry(name, compress(nodes))}" for name, nodes in t.blocks]
    return "\n".join(out + _summary(t)) + "\n"


def merge_block_lines(lines: Iterable[str], *, yaml_out: bool = False) -> str:
    """read_topology, written as topology.conf (or topology.yaml with ``yaml_out``)."""
    t = read_topology(lines)
    return render_yaml(t) if yaml_out else render_conf(t)
