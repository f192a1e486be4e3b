"""kappalab.distributed.process_group on a one-process gloo group: the group exists inside the body and is gone
after it, whether the body returns or raises (and the error is not swallowed). The two-process paths are in
tests/test_deep_device.py, tests/test_immunization_data_parallel.py and tests/test_reproduce_table3.py."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from kappalab.distributed import finish_distributed, process_group  # noqa: E402


def test_the_group_lives_for_the_body(tmp_path: Path) -> None:
    with process_group("gloo", f"file://{tmp_path / 'store'}", 0, 1):
        assert dist.is_initialized() and dist.get_world_size() == 1
    assert not dist.is_initialized()


def test_an_error_in_the_body_destroys_the_group_and_propagates(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="in the body"):
        with process_group("gloo", f"file://{tmp_path / 'store'}", 0, 1):
            raise RuntimeError("in the body")
    assert not dist.is_initialized()


def test_finishing_without_a_group_does_nothing() -> None:
    assert not dist.is_initialized()
    finish_distributed()
    assert not dist.is_initialized()
