"""Test-session settings shared by every test module."""

from __future__ import annotations

from botorch.acquisition.multi_objective import logei

# BoTorch 0.18.1 JIT-compiles a fused C++ kernel for qLogEHVI / qLogNEHVI on their
# first use in an environment (about 50 s of g++ on CI's fresh machine, inside
# whichever multi-objective test comes first). Marking the load as attempted keeps
# BoTorch on its pure-Python path, which computes the same values; the tests check
# our strategies, not BoTorch's kernel.
logei._load_attempted = True
