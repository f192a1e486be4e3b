"""Repository-wide pytest set-up: one BLAS thread for every test session.

On this project's 2-core machines OpenBLAS's multi-threaded eigensolvers were measured 10-50x slower than
single-threaded under load (docs/benchmarks.md); one thread also makes results independent of the core count.
The benchmarks choose their own thread count (``--bench-threads``) inside this limit's scope.
"""

from collections.abc import Iterator

import pytest
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True, scope="session")
def _one_blas_thread() -> Iterator[None]:
    with threadpool_limits(limits=1):
        yield
