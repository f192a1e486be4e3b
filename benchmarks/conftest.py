"""Benchmark options and fixtures.

* ``--large``: also run D >= 2048 (slow: minutes per method on one core). Without it those shapes are deselected.
* ``--device cuda``: torch methods run on that device (synchronized before timers stop; TF32 off).
* ``--bench-threads N``: BLAS/OpenMP threads for the timed region (default 1; see ``docs/benchmarks.md``).

Plain ``pytest`` runs only the accuracy tests of ``test_accuracy.py`` (the timed benchmarks are deselected, not
skipped); ``pytest --benchmark-only`` runs the timed benchmarks, each of which also checks its answer.
"""

from __future__ import annotations

import pytest

# Load every BLAS/LAPACK now: threadpoolctl limits only libraries already loaded when ``threadpool_limits`` is
# entered, and SciPy ships its own OpenBLAS (separate from NumPy's), imported lazily by kappalab. Without this,
# a SciPy routine first called inside a timed region ran with the default thread count (measured: 10x slower
# Cholesky on the loaded 2-core machine).
import scipy.linalg  # noqa: E402,F401
import scipy.sparse.linalg  # noqa: E402,F401

try:
    import torch  # noqa: F401
except ImportError:  # pragma: no cover - torch is optional
    pass


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kappalab benchmarks")
    group.addoption("--large", action="store_true", default=False, help="also benchmark D >= 2048 (slow)")
    group.addoption("--device", action="store", default="cpu", help="torch device for torch methods")
    group.addoption("--bench-threads", action="store", type=int, default=1, help="BLAS threads while timing")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "large: benchmark shapes with D >= 2048 (run with --large)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect timed benchmarks unless ``--benchmark-only``, and D >= 2048 shapes unless ``--large``."""
    timed = bool(config.getoption("benchmark_only", default=False))
    large = bool(config.getoption("--large"))

    def wanted(item: pytest.Item) -> bool:
        is_timed = "benchmark" in getattr(item, "fixturenames", ())
        if is_timed and not timed:
            return False
        return large or "large" not in item.keywords

    keep = [item for item in items if wanted(item)]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if not wanted(item)])
        items[:] = keep


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> str:
    dev = request.config.getoption("--device")
    if dev.startswith("cuda"):
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():  # asked for the GPU and there is none: an error, not a silent skip
            raise pytest.UsageError(f"--device {dev}: torch.cuda.is_available() is False (no CUDA device or a "
                                    "CPU-only torch build)")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return dev


@pytest.fixture(scope="session")
def threads(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--bench-threads"))
