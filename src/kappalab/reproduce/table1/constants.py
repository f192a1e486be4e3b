"""Table 1's fixed names and numbers: the paper's reference values, the methods' labels and order (one place, read by
the command, :mod:`kappalab.reproduce.table1.cli`, its report, :mod:`.report`, and its selection report,
:mod:`.selection`)."""

from __future__ import annotations

#: Table 1 of the paper (CLAIMS.md): REFERENCE ONLY, never used in any computation.
PAPER_TABLE1: dict[str, dict[str, tuple[float, float]]] = {
    "rill_only": {"term_i": (90.02, 3.773), "term_ii": (72.415, 3.545), "rir": (1.244, 0.021)},
    "imma": {"term_i": (7.053, 1.662), "term_ii": (3.545, 0.880), "rir": (2.001, 0.187)},
    "opt_kappa": {"term_i": (1.518, 0.027), "term_ii": (0.016, 0.001), "rir": (92.58, 4.492)},
    "ours": {"term_i": (18.92, 2.056), "term_ii": (0.053, 0.002), "rir": (356.20, 5.491)},
}
LABELS = {"ours": "Ours", "rill_only": "R_ill Only", "imma": "IMMA", "opt_kappa": "Opt kappa",
          "identity": "Identity", "opt_kappa_log": "Opt kappa (authors' kappa_loss)",
          "imma_bilevel30": "IMMA (30 inner steps, lr 1e-4)"}
ORDER = ("rill_only", "imma", "opt_kappa", "ours")
#: baselines built from the authors' unused helpers (configs ``table1_<protocol>_<name>.json``) -> the paper row
#: they stand for
HINTS = {"opt_kappa_log": "opt_kappa", "imma_bilevel30": "imma"}
ALL = ORDER + tuple(HINTS)
