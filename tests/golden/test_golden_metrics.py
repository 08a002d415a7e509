"""Golden ``/metrics`` of ``agentd run --simulate h100-ib`` (node_exporter's e2e-output style).

The real daemon runs on the simulated H100 InfiniBand node and is scraped over HTTP once
every collection tier has completed; the exposition, normalized (see MASKED_VALUES,
MASKED_LABELS and the temp-dir substitution below), must equal ``h100-ib.metrics`` byte
for byte. Every family's HELP/TYPE lines, every series' label set and every deterministic
value are in the golden file, so an exposition change shows up in review as a diff of it.

Regenerate after an intended change, then review ``git diff tests/golden/``:

    TEST_UPDATE_GOLDEN=1 .venv/bin/pytest -q -p no:cacheprovider tests/golden/test_golden_metrics.py

Two daemons (different PYTHONHASHSEEDs) are scraped twice each, one full round of tiers
apart; their normalized outputs must agree before anything is compared or written. So a
family whose values change between scrapes or runs (a timestamp, a duration, set-ordered
series) fails here, naming the family, instead of being written into the golden file: fix
agentd if the variation is a bug, or add the family to MASKED_VALUES with its reason.
"""

from __future__ import annotations

import difflib
import math
import os
import random
import re
from pathlib import Path

import pytest

from tests.support.daemon_harness import Agent, at_rest, poll, sample

pytestmark = [pytest.mark.e2e, pytest.mark.e2e]

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "h100-ib.metrics"
PROFILE = "h100-ib"
UPDATE_ENV = "TEST_UPDATE_GOLDEN"
REGENERATE = f"{UPDATE_ENV}=1 .venv/bin/pytest -q -p no:cacheprovider tests/golden/test_golden_metrics.py"
# Large enough that no probe turns stale on a loaded 2-core box while we wait for the tiers
# (the limits themselves are deterministic and stay in the golden file).
STALE_AFTER = 100.0
TIERS = ("fast", "medium", "slow")
TMP_TOKEN = "<tmp>"
MASK = "<masked>"

# The only families whose sample VALUES are not compared (label sets still are), with why.
MASKED_VALUES: dict[str, str] = {
    "agentd_probe_duration_seconds": "wall time of a probe run",
    "agentd_probe_last_success_timestamp_seconds": "Unix time",
    "agentd_collection_duration_seconds": "wall time of a collection",
    "agentd_collection_cpu_seconds": "CPU time of a collection",
    "agentd_last_collection_timestamp_seconds": "Unix time",
    "agentd_state_generated_timestamp_seconds": "Unix time",
    "agentd_nccl_file_last_write_timestamp_seconds": "Unix time",
    "agentd_start_time_seconds": "Unix time",
    "agentd_process_resident_memory_bytes": "process RSS",
    "agentd_process_cpu_seconds_total": "process CPU time",
    "agentd_process_open_fds": "process fds (HTTP keep-alive connections, executor state)",
    "agentd_process_threads": "process threads (executor threads start on demand)",
}
# The only label VALUES not compared, as (family, label): why.
MASKED_LABELS: dict[tuple[str, str], str] = {
    ("agentd_build_info", "python"): "the interpreter running the tests, not agentd's output",
}

_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def normalize(text: str, tmp: Path) -> str:
    """The exposition with the temp dir replaced by ``<tmp>``, masked values and labels
    replaced by ``<masked>``; everything else verbatim. Fails on a sample that no TYPE
    line announces, on a masked value that is not a finite number, and on a mask entry
    that matches nothing (a stale entry would hide a rename)."""
    text = text.replace(str(tmp), TMP_TOKEN)
    out: list[str] = []
    family: str | None = None
    used: set[object] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            family = line.split()[2]
        if line.startswith("#") or not line:
            out.append(line)
            continue
        m = _SAMPLE_RE.match(line)
        assert m, f"unparsable sample line: {line!r}"
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        assert family is not None and name.startswith(family), f"sample {name} outside its family (after TYPE {family})"
        for (fam, label) in MASKED_LABELS:
            if fam == family and labels:
                pattern = re.compile(rf'((?:^\{{|,){re.escape(label)}=")((?:[^"\\]|\\.)*)(")')
                labels, n = pattern.subn(lambda lm: lm.group(1) + MASK + lm.group(3), labels)
                assert n == 1, f"{family}: label {label} to mask is missing in {line!r}"
                used.add((fam, label))
        if family in MASKED_VALUES:
            got = float(value)
            assert math.isfinite(got) and got >= 0, f"{family}: masked value is not a finite non-negative number: {line!r}"
            value = MASK
            used.add(family)
        out.append(f"{name}{labels} {value}")
    stale = (set(MASKED_VALUES) | set(MASKED_LABELS)) - used
    assert not stale, f"mask entries that match nothing in /metrics (renamed or gone? drop them): {sorted(map(str, stale))}"
    return "\n".join(out) + "\n"


def _tier_times(text: str) -> dict[str, float] | None:
    got = {t: sample(text, "agentd_last_collection_timestamp_seconds", tier=t) for t in TIERS}
    return None if any(v is None for v in got.values()) else got  # type: ignore[return-value]


def scrape_twice(tmp: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """Run one daemon (PYTHONHASHSEED=seed); the normalized /metrics once every tier has
    completed at rest, and again after every tier has completed once more."""
    monkeypatch.setenv("PYTHONHASHSEED", str(seed))  # Agent copies os.environ for the child
    with Agent(tmp, profile=PROFILE, stale_after=STALE_AFTER) as a:
        assert poll(lambda: at_rest(a)), f"{PROFILE} daemon not at rest: {a.findings()}\n{a.logs()}"

        def settled() -> str | None:
            text = a.metrics()
            return text if _tier_times(text) and at_rest(a) else None

        first = poll(settled)
        assert first, f"not every tier completed a collection:\n{a.logs()}"
        before = _tier_times(first)
        assert before is not None

        def next_round() -> str | None:
            text = a.metrics()
            now = _tier_times(text)
            return text if now and all(now[t] > before[t] for t in TIERS) else None

        second = poll(next_round)
        assert second, f"the tiers did not complete another collection:\n{a.logs()}"
        assert at_rest(a), f"{PROFILE} daemon left rest: {a.findings()}\n{a.logs()}"
    return normalize(first, tmp), normalize(second, tmp)


def _families(text: str) -> dict[str, list[str]]:
    fams: dict[str, list[str]] = {}
    family = ""
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            family = line.split()[2]
        fams.setdefault(family, []).append(line)
    return fams


def _unstable(a: str, b: str) -> list[str]:
    fa, fb = _families(a), _families(b)
    return sorted(f for f in set(fa) | set(fb) if fa.get(f) != fb.get(f))


def _diff(expected: str, got: str, a: str, b: str, limit: int = 60) -> str:
    lines = list(difflib.unified_diff(expected.splitlines(), got.splitlines(), a, b, lineterm="", n=2))
    more = f"\n... {len(lines) - limit} more diff lines" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more


def test_golden_metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = random.SystemRandom().sample(range(1, 2**32 - 1), 2)
    scrapes: list[tuple[str, str]] = []
    for i, seed in enumerate(seeds):
        for j, text in enumerate(scrape_twice(tmp_path / f"run{i}", seed, monkeypatch)):
            scrapes.append((f"run{i} (PYTHONHASHSEED={seed}) scrape {j}", text))

    ref_name, ref = scrapes[0]
    for name, text in scrapes[1:]:
        if text != ref:
            pytest.fail(
                f"/metrics is not deterministic: families {_unstable(ref, text)} differ between {ref_name} and {name}.\n"
                "If agentd is at fault (e.g. set or dict iteration order) fix agentd; if the value truly varies "
                "(time, process state), add the family to MASKED_VALUES with its reason.\n" + _diff(ref, text, ref_name, name),
                pytrace=False,
            )

    if os.environ.get(UPDATE_ENV) == "1":
        GOLDEN.write_text(ref)
        return
    assert GOLDEN.exists(), f"{GOLDEN} is missing; create it with: {REGENERATE}"
    golden = GOLDEN.read_text()
    if ref != golden:
        pytest.fail(
            f"/metrics differs from {GOLDEN.name}. If the change is intended, regenerate with\n    {REGENERATE}\n"
            "and review the diff of the golden file.\n" + _diff(golden, ref, f"golden/{GOLDEN.name}", "/metrics (normalized)"),
            pytrace=False,
        )
