"""Figure 2: the 10 x 10 heat maps of log10 RIR."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .constants import METHOD_LABELS, METHODS, SUCCESS_THRESHOLD
from .tally import pair_log_rir, success_counts

def figure2(rows: list[dict[str, Any]], out: Path, protocol: str, title: str) -> list[Path]:
    """Figure 2: one 10 x 10 heat map of log10 RIR per method (diagonal and unfinished pairs blank)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    mats = {m: pair_log_rir(rows, m) for m in methods}
    finite = np.concatenate([M[np.isfinite(M)] for M in mats.values()]) if mats else np.zeros(1)
    lim = max(1.0, float(np.abs(finite).max()) if finite.size else 1.0)
    fig, axes = plt.subplots(1, max(1, len(methods)), figsize=(3.6 * max(1, len(methods)) + 0.8, 3.9),
                             squeeze=False)
    counts = success_counts(rows)
    image = None
    for ax, m in zip(axes[0], methods):
        cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="#dddddd")
        image = ax.imshow(np.ma.masked_invalid(mats[m]), cmap=cmap, vmin=-lim, vmax=lim)
        c = counts[m]
        ax.set_title(f"{METHOD_LABELS[m]}\nRIR>{SUCCESS_THRESHOLD:g}: {c[f'RIR>{SUCCESS_THRESHOLD:g}']}/{c['pairs']}",
                     fontsize=9)
        ax.set_xticks(range(10))
        ax.set_yticks(range(10))
        ax.set_xlabel("D_H digit")
        ax.set_ylabel("D_P digit")
    if image is not None:
        fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="log10 RIR (blue: RIR > 1)")
    fig.suptitle(title, fontsize=9)
    paths = [out / f"figure2_{protocol}.png", out / f"figure2_{protocol}.pdf"]
    for path in paths:
        fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return paths

