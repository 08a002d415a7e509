"""Hypothesis profiles for the property tests: a fixed example budget, reproducible.

The profiles are registered here and applied only to the tests in this directory: each
module decorates its tests with ``@settings(PROFILE)`` (``PROFILE = settings.get_profile
("agentd")``), so loading this conftest never changes Hypothesis settings for tests in
other directories (they keep Hypothesis' defaults or their own ``@settings``).

``HYPOTHESIS_EXAMPLES`` sets examples per test (default 200; CI uses the default, ``make
test-fast`` 20). It is a test knob, so it stays out of ``AGENTD_*``: every ``AGENTD_*``
variable is agentd's own configuration, and an unknown one fails ``load_config``.
Tests that run a whole collection per example take a fraction of it (see their settings).
``derandomize=True`` makes every run try the same inputs, so CI failures reproduce
locally; ``deadline=None`` because a loaded CI runner must not turn slowness into failure.
Set ``HYPOTHESIS_PROFILE=explore`` for a randomized, 10x longer search when hunting bugs.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "200"))
_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], print_blob=True)

settings.register_profile("agentd-ci", max_examples=EXAMPLES, derandomize=True, database=None, **_COMMON)
settings.register_profile("explore", max_examples=EXAMPLES * 10, derandomize=False, **_COMMON)
# What the modules here use: one of the two above, by HYPOTHESIS_PROFILE. Registered,
# never loaded (load_profile would change the default for every test in the session).
settings.register_profile("agentd", parent=settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "agentd-ci")))
