"""What a GPU run needs, checked on CPU: the training step reads nothing back from the device, and the
data-parallel path (2 processes, gloo) takes the same step as one process averaging the same per-rank gradients.

Host reads are counted by wrapping the tensor methods that copy a value to the host (``item``, ``cpu``,
``tolist``, ``numpy``, ``__bool__``, ``__float__``, ``__int__``, ``__index__``) and attributing each call to the
innermost kappalab module on the stack. A step's reads are the difference between a 4-step and a 2-step epoch (the
per-epoch reads, e.g. the DataLoader's seed draw and the end-of-epoch summary, cancel). With
``KAPPALAB_TEST_DEVICE=cuda`` the models run on the GPU and CUDA's own sync detector
(``torch.cuda.set_sync_debug_mode("warn")``) counts every synchronizing call as well, under the key ``cuda-sync``.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import traceback
import warnings
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing as mp  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from kappalab.deep import METHODS, CombinedLoader, ObjectiveConfig, SmallCNN, TrainConfig, immunize  # noqa: E402
from kappalab.deep import objective_terms, weighted_loss  # noqa: E402
from kappalab.distributed import process_group  # noqa: E402

torch.set_num_threads(1)
HOST_READS = ("item", "cpu", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__")
TIMM = importlib.util.find_spec("timm") is not None
DEVICE = os.environ.get("KAPPALAB_TEST_DEVICE", "cpu")
NEEDS_TIMM = pytest.mark.skipif(not TIMM, reason="timm is not installed (the deep environment, scripts/setup_deep.sh)")


@contextmanager
def count_host_reads() -> Iterator[Counter]:
    """Count host reads by the kappalab module (path below ``kappalab/``) nearest to the call."""
    counts: Counter = Counter()
    originals = {name: getattr(torch.Tensor, name) for name in HOST_READS}
    cuda = DEVICE.startswith("cuda")

    def wrap(name: str):
        def reader(self, *args, **kwargs):
            for frame in reversed(traceback.extract_stack()[:-1]):
                if "/kappalab/" in frame.filename.replace("\\", "/"):
                    counts[frame.filename.replace("\\", "/").split("/kappalab/")[-1]] += 1
                    break
            return originals[name](self, *args, **kwargs)
        return reader

    try:
        for name in HOST_READS:
            setattr(torch.Tensor, name, wrap(name))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if cuda:
                torch.cuda.set_sync_debug_mode("warn")
            yield counts
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)
    counts["cuda-sync"] += sum("synchroniz" in str(w.message) for w in caught)


def _loaders(steps: int, shape: tuple[int, ...], classes: tuple[int, int], batch: int = 8):
    g = torch.Generator().manual_seed(0)
    return [DataLoader(TensorDataset(torch.randn(batch * steps, *shape, generator=g, dtype=torch.float64),
                                     torch.randint(0, c, (batch * steps,), generator=g)), batch_size=batch)
            for c in classes]


def _small_model(check: bool = True):
    torch.manual_seed(0)
    return SmallCNN(3, width=2).split(), (1, 12, 12), (3, 2)


def _objective(host_checks: bool) -> ObjectiveConfig:
    return ObjectiveConfig(lambda_P=1e-6, lambda_H=1.0, lambda_kappa=1e-6, lambda_imma=0.1, harmful_classes=2,
                           reg_rtol=1e-10, on_degenerate="ignore" if not host_checks else "warn",
                           host_checks=host_checks)


def reads_per_step(model, method: str, shape, classes, obj: ObjectiveConfig) -> dict[str, float]:
    per_epoch = []
    for steps in (2, 4):
        m = copy.deepcopy(model).to(DEVICE)
        with count_host_reads() as counts:
            immunize(m, method, CombinedLoader(*_loaders(steps, shape, classes)), obj,
                     TrainConfig(lr=1e-3, epochs=1), device=DEVICE, progress=False)
        per_epoch.append(Counter(counts))
    keys = set(per_epoch[0]) | set(per_epoch[1])
    return {k: (per_epoch[1][k] - per_epoch[0][k]) / 2 for k in keys if per_epoch[1][k] != per_epoch[0][k]}


def _outside_convergence_tests(reads: dict[str, float]) -> dict[str, float]:
    """``reads`` without the tensor eigensolver's convergence test (``extremes.py``: one read, and so one CUDA
    synchronisation, per eigenproblem by design where the tensor path runs, i.e. on CUDA;
    tests/test_extremes_wiring.py counts them exactly with the tensor path forced on the CPU)."""
    designed = reads.get("extremes.py", 0)
    out = {k: v for k, v in reads.items() if k != "extremes.py"}
    if "cuda-sync" in out:
        out["cuda-sync"] -= designed
    return {k: v for k, v in out.items() if v}


@pytest.mark.parametrize("method", METHODS)
def test_training_step_reads_nothing_back(method: str) -> None:
    """The loop, objectives and model read nothing back per step; with ``host_checks=False`` (and the dummy
    layer's check off) nothing at all does. With the default checks the spectral core reads back its rank,
    validation and R_ill-definedness checks each step (Ours and R_ill Only only), which is what the switch is for."""
    model, shape, classes = _small_model()
    default = reads_per_step(model, method, shape, classes, _objective(True))
    assert not {k: v for k, v in default.items() if k.startswith("deep/")}, default
    if method in ("ours", "rill_only"):
        assert sum(default.values()) > 0, "the default core checks read back (the reason for host_checks)"
    else:
        assert default == {}, default
    model.dummy.check = False
    assert _outside_convergence_tests(reads_per_step(model, method, shape, classes, _objective(False))) == {}


@NEEDS_TIMM
@pytest.mark.parametrize("arch", ["resnet18", "vit"])
def test_timm_training_step_reads_nothing_back(arch: str) -> None:
    """The same on the timm models (random weights, 64 x 64 / 32 x 32 inputs: the count does not depend on size)."""
    from kappalab.deep.timm_models import build_timm_model

    torch.manual_seed(0)
    trainable = ["layer4.0", "layer4.1"] if arch == "resnet18" else ["blocks.-1"]
    model, _ = build_timm_model(arch, None, trainable=trainable, load=False, check=False,
                                timm_name="resnet18" if arch == "resnet18" else "vit_tiny_patch16_224",
                                img_size=None if arch == "resnet18" else 32)
    shape = (3, 64, 64) if arch == "resnet18" else (3, 32, 32)
    for method in METHODS:
        assert _outside_convergence_tests(reads_per_step(model, method, shape, (1000, 2), _objective(False))) == {}, \
            method


# ----------------------------------------------------------------------------------------- data parallel, gloo
WORLD = 2


def _rank_loaders(rank: int, steps: int, shape, classes, batch: int):
    """Rank ``rank``'s batches: rows ``rank::WORLD`` of the shared data (a DistributedSampler's split)."""
    g = torch.Generator().manual_seed(0)
    out = []
    for c in classes:
        X = torch.randn(WORLD * batch * steps, *shape, generator=g, dtype=torch.float64)
        y = torch.randint(0, c, (WORLD * batch * steps,), generator=g)
        out.append(DataLoader(TensorDataset(X[rank::WORLD], y[rank::WORLD]), batch_size=batch))
    return out


def _build(arch: str):
    if arch == "smallcnn":
        model, shape, classes = _small_model()
        return model, shape, classes
    from kappalab.deep.timm_models import build_timm_model

    torch.manual_seed(0)
    model, _ = build_timm_model("resnet18", None, trainable=["layer4.0", "layer4.1"], load=False)
    return model, (3, 224, 224), (1000, 2)


def _worker(rank: int, arch: str, methods: list[str], store: str, out: str, steps: int, batch: int) -> None:
    torch.set_num_threads(1)
    with process_group("gloo", f"file://{store}", rank, WORLD):
        for method in methods:
            model, shape, classes = _build(arch)
            immunize(model, method, CombinedLoader(*_rank_loaders(rank, steps, shape, classes, batch)),
                     _objective(True), TrainConfig(lr=1e-3, epochs=1), progress=False)
            torch.save({k: v.detach() for k, v in model.named_parameters()}, f"{out}/{method}_rank{rank}.pt")


def _one_process(arch: str, method: str, steps: int, batch: int) -> dict[str, torch.Tensor]:
    """One process: each step, the gradient of every rank's batch computed in turn and averaged, then the same
    SGD step (what DDP's gradient averaging means)."""
    from kappalab.deep.train import make_optimizer

    model, shape, classes = _build(arch)
    obj, cfg = _objective(True), TrainConfig(lr=1e-3, epochs=1)
    opt = make_optimizer(model, cfg)
    params = [p for g in opt.param_groups for p in g["params"]]
    iters = [iter(CombinedLoader(*_rank_loaders(r, steps, shape, classes, batch))) for r in range(WORLD)]
    model.train()
    for _ in range(steps):
        grads = []
        for it in iters:
            bP, bH = next(it)
            opt.zero_grad(set_to_none=True)
            weighted_loss(objective_terms(model, method, bP, bH, obj), obj).backward()
            grads.append([None if p.grad is None else p.grad.clone() for p in params])
        for p, *gs in zip(params, *grads):
            p.grad = None if gs[0] is None else sum(gs) / WORLD
        opt.step()
    return {k: v.detach() for k, v in model.named_parameters()}


@pytest.mark.parametrize("arch, methods", [("smallcnn", METHODS),
                                            pytest.param("resnet18", ("ours",), marks=NEEDS_TIMM)])
def test_two_gloo_processes_equal_one_process(arch: str, methods: tuple[str, ...], tmp_path: Path) -> None:
    """Parameters after 2 steps on 2 ranks (each rank its own half of the data) equal, on both ranks, those of one
    process that averages the two ranks' gradients each step. (For the batch regularizers this mean is not the
    gradient of R on the union of the batches: H~ is per rank, as in the paper's data-parallel training. Buffers,
    e.g. BatchNorm running statistics of the immunized blocks, follow each rank's own batches and are not
    compared; rank 0's are the ones checkpointed.)"""
    steps, batch = (2, 8) if arch == "smallcnn" else (2, 2)
    mp.spawn(_worker, args=(arch, list(methods), str(tmp_path / "store"), str(tmp_path), steps, batch),
             nprocs=WORLD, join=True)
    before = dict(_build(arch)[0].named_parameters())
    for method in methods:
        ranks = [torch.load(tmp_path / f"{method}_rank{r}.pt", weights_only=True) for r in range(WORLD)]
        reference = _one_process(arch, method, steps, batch)
        moved = 0
        for name, value in reference.items():
            for state in ranks:
                torch.testing.assert_close(state[name], value, rtol=1e-12, atol=1e-15, msg=f"{method} {name}")
            moved += not torch.equal(before[name], value)
        assert moved > 0, f"{method}: the step moved parameters"
        alone, shape, classes = _build(arch)  # rank 0's data without averaging: a different result
        immunize(alone, method, CombinedLoader(*_rank_loaders(0, steps, shape, classes, batch)), _objective(True),
                 TrainConfig(lr=1e-3, epochs=1), progress=False)
        assert any(not torch.allclose(p, reference[n], rtol=1e-9, atol=0) for n, p in alone.named_parameters())
