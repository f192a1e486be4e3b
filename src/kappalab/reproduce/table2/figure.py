"""Figure 2: the 10 x 10 heat maps of log10 RIR."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kappalab.atomic_io import save_figure

from .constants import METHOD_LABELS, METHODS, SUCCESS_THRESHOLD
from .tally import pair_log_rir, success_counts

def figure2(rows: list[dict[str, Any]], out: Path, protocol: str, title: str) -> list[Path]:
    """Figure 2: per method, the 10 x 10 heat map of log10 RIR (top row: a diverging map centred at RIR = 1) and the
    paper's two-colour view (bottom row: blue iff the seed-averaged RIR > :data:`SUCCESS_THRESHOLD`, the documented
    reading of the paper's "RIR >> 1", red otherwise); the diagonal and unfinished pairs blank."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    mats = {m: pair_log_rir(rows, m) for m in methods}
    finite = np.concatenate([M[np.isfinite(M)] for M in mats.values()]) if mats else np.zeros(1)
    lim = max(1.0, float(np.abs(finite).max()) if finite.size else 1.0)
    n = max(1, len(methods))
    fig, axes = plt.subplots(2, n, figsize=(3.6 * n + 0.8, 7.6), squeeze=False)
    counts = success_counts(rows)
    image = None
    two = ListedColormap(["#c0392b", "#2e6fb5"]).with_extremes(bad="#dddddd")
    for col, m in enumerate(methods):
        top, bottom = axes[0][col], axes[1][col]
        cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="#dddddd")
        image = top.imshow(np.ma.masked_invalid(mats[m]), cmap=cmap, vmin=-lim, vmax=lim)
        c = counts[m]
        top.set_title(f"{METHOD_LABELS[m]}\nRIR>{SUCCESS_THRESHOLD:g}: {c[f'RIR>{SUCCESS_THRESHOLD:g}']}/{c['pairs']}",
                      fontsize=9)
        blue = np.where(np.isfinite(mats[m]), (mats[m] > np.log10(SUCCESS_THRESHOLD)).astype(float), np.nan)
        bottom.imshow(np.ma.masked_invalid(blue), cmap=two, vmin=0, vmax=1)
        bottom.set_title(f"two-colour: blue iff RIR > {SUCCESS_THRESHOLD:g}", fontsize=8)
        for ax in (top, bottom):
            ax.set_xticks(range(10))
            ax.set_yticks(range(10))
            ax.set_xlabel("D_H digit")
            ax.set_ylabel("D_P digit")
    if image is not None:
        fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="log10 RIR (blue: RIR > 1)")
    fig.suptitle(title, fontsize=9)
    paths = [out / f"figure2_{protocol}.png", out / f"figure2_{protocol}.pdf"]
    for path in paths:
        save_figure(fig, path, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return paths
