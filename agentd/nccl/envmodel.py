"""The NCCL environment as agentd means it: ordered variables, each with its provenance.

An ``NcclEnv`` is what the renderers in ``env.py`` turn into text (nccl.env, nccl.conf /
EnvironmentFile form), what ``/metrics`` exports as an ``_info`` gauge and what
``agentd render --diff`` compares. It is immutable; ``with_var`` returns a new one.

Provenance is one line of prose saying which measurement or config key produced the
value ("measured: ...", "config: nccl.ib_tc", "override: nccl.overrides",
"profile: training"). It ends up in comment lines, so it must never contain a newline
or ``=`` (NCCL before 2.26 reads ``#`` lines as ``KEY=VALUE`` too; see env.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator, Literal

from agentd.judging.roles import RolesSource

Source = Literal["measured", "config", "override", "profile"]


def clean_comment(text: str) -> str:
    """One comment-safe line: no newlines, no ``=`` (see module docstring), no NUL."""
    text = " ".join(text.replace("\0", " ").split())
    return text.replace("=", " is ")


@dataclass(frozen=True)
class EnvVar:
    key: str
    value: str
    source: Source
    provenance: str  # one line, e.g. "measured: ACTIVE compute ports mlx5_0:1 mlx5_1:1"

    def __post_init__(self) -> None:
        object.__setattr__(self, "provenance", clean_comment(self.provenance))


@dataclass(frozen=True)
class Omitted:
    """A variable agentd deliberately did not set, and why (shown in the file header)."""

    key: str
    reason: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", clean_comment(self.reason))


@dataclass(frozen=True)
class NcclEnv:
    variables: tuple[EnvVar, ...] = ()
    omitted: tuple[Omitted, ...] = ()
    # Blocking: an override that NCCL would misread. A render with problems is not written.
    problems: tuple[str, ...] = ()
    # Non-blocking advice (e.g. an override sets a variable NCCL's docs say not to set).
    notes: tuple[str, ...] = ()
    measured_at: float | None = None  # snapshot.taken_at the values were derived from
    host_root: str | None = None
    hca_selection: RolesSource = ""  # where the compute HCA list came from

    def __iter__(self) -> Iterator[EnvVar]:
        return iter(self.variables)

    def __len__(self) -> int:
        return len(self.variables)

    def __contains__(self, key: object) -> bool:
        return any(v.key == key for v in self.variables)

    def get(self, key: str) -> str | None:
        for v in self.variables:
            if v.key == key:
                return v.value
        return None

    def var(self, key: str) -> EnvVar | None:
        for v in self.variables:
            if v.key == key:
                return v
        return None

    def as_dict(self) -> dict[str, str]:
        return {v.key: v.value for v in self.variables}

    def items(self) -> tuple[tuple[str, str], ...]:
        """(key, value) pairs in file order (State.nccl_env, the _info metric)."""
        return tuple((v.key, v.value) for v in self.variables)

    def with_var(self, var: EnvVar) -> "NcclEnv":
        """Set ``var``: replace a variable of the same key in place (its position in the
        file stays stable for diffs) or append it. A replaced value's origin is kept in
        the provenance so the comment says what the override displaced."""
        out: list[EnvVar] = []
        replaced = False
        for v in self.variables:
            if v.key == var.key:
                prov = f"{var.provenance} (replaces the {v.source} value)"
                out.append(replace(var, provenance=prov))
                replaced = True
            else:
                out.append(v)
        if not replaced:
            out.append(var)
        omitted = tuple(o for o in self.omitted if o.key != var.key)
        return replace(self, variables=tuple(out), omitted=omitted)

    def with_problem(self, problem: str) -> "NcclEnv":
        return replace(self, problems=self.problems + (problem,))

    def with_note(self, note: str) -> "NcclEnv":
        return replace(self, notes=self.notes + (note,))

    def with_omitted(self, key: str, reason: str) -> "NcclEnv":
        return replace(self, omitted=self.omitted + (Omitted(key, reason),))
