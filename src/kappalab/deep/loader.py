"""The paper's ``CombinedLoader`` (Appendix C.2): paired batches from D_P and D_H.

Appendix C.2 says both "the longer dataset dictates training duration, while the shorter dataset cycles
continuously" and "the number of epochs reported in Tab. 4 corresponds to the epochs of D_H, i.e., the shorter
loader". With ImageNet as D_P these two sentences disagree by a factor ~150 (ImageNet has 1.28M images, Cars 8k).
:class:`CombinedLoader` implements both readings through ``epoch_on``:

* ``"harmful"`` (default, the Table 4 sentence): one epoch is one pass over the D_H loader; the D_P loader is
  *continued* from epoch to epoch (and restarted, i.e. reshuffled, only when it runs out), so three epochs see
  3 x len(D_H) D_P batches, never the same D_P prefix three times.
* ``"longer"``: one epoch is one pass over the longer loader; the shorter one cycles.

Either way, a loader that runs out is restarted (so a ``shuffle=True`` DataLoader reshuffles). A loader whose
sampler has ``set_epoch`` (a ``DistributedSampler``) gets ``set_epoch(n)`` before its n-th pass (n = 0, 1, ...),
so that every pass has a new order on every rank.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Literal, Sized

EpochOn = Literal["harmful", "longer"]


class _Cycler:
    """An endless iterator over a re-iterable loader (restarted when exhausted)."""

    def __init__(self, loader: Iterable[Any], name: str) -> None:
        self.loader, self.name, self._it, self.passes = loader, name, None, 0

    def _restart(self) -> None:
        set_epoch = getattr(getattr(self.loader, "sampler", None), "set_epoch", None)
        if callable(set_epoch):
            set_epoch(self.passes)
        self.passes += 1
        self._it = iter(self.loader)

    def next(self) -> Any:
        if self._it is None:
            self._restart()
        try:
            return next(self._it)
        except StopIteration:
            self._restart()
            try:
                return next(self._it)
            except StopIteration:
                raise ValueError(f"{self.name} yields no batches") from None


class CombinedLoader:
    """Iterate ``(batch_P, batch_H)`` pairs for one epoch per ``iter()`` call (see the module docstring).

    Args:
        loader_P: D_P loader (must have ``len``).
        loader_H: D_H loader (must have ``len``).
        epoch_on: ``"harmful"`` or ``"longer"``.
    """

    def __init__(self, loader_P: Iterable[Any], loader_H: Iterable[Any], epoch_on: EpochOn = "harmful") -> None:
        if epoch_on not in ("harmful", "longer"):
            raise ValueError(f"epoch_on must be 'harmful' or 'longer', got {epoch_on!r}")
        for name, loader in (("loader_P", loader_P), ("loader_H", loader_H)):
            if not isinstance(loader, Sized) or len(loader) == 0:
                raise ValueError(f"{name} must be a non-empty loader with len()")
        self.epoch_on = epoch_on
        self._P, self._H = _Cycler(loader_P, "loader_P"), _Cycler(loader_H, "loader_H")
        n_P, n_H = len(loader_P), len(loader_H)  # type: ignore[arg-type]
        self.steps = n_H if epoch_on == "harmful" else max(n_P, n_H)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        for _ in range(self.steps):
            yield self._P.next(), self._H.next()
