"""Table 1's fixed names and numbers: the paper's reference values, the methods' labels and order (one place, read by
the command, :mod:`kappalab.reproduce.table1.cli`, its report, :mod:`.report`, and its selection report,
:mod:`.selection`)."""

from __future__ import annotations

from kappalab.methods import DEEP_METHODS, IMMA, LABELS as METHOD_LABELS, OPT_KAPPA, OPT_KAPPA_LOG, PAPER_ORDER

#: Table 1 of the paper (CLAIMS.md): REFERENCE ONLY, never used in any computation.
PAPER_TABLE1: dict[str, dict[str, tuple[float, float]]] = {
    "rill_only": {"term_i": (90.02, 3.773), "term_ii": (72.415, 3.545), "rir": (1.244, 0.021)},
    "imma": {"term_i": (7.053, 1.662), "term_ii": (3.545, 0.880), "rir": (2.001, 0.187)},
    "opt_kappa": {"term_i": (1.518, 0.027), "term_ii": (0.016, 0.001), "rir": (92.58, 4.492)},
    "ours": {"term_i": (18.92, 2.056), "term_ii": (0.053, 0.002), "rir": (356.20, 5.491)},
}
#: the methods' labels (:mod:`kappalab.methods`), the identity theta's and the hint rows'
LABELS = {**{m: METHOD_LABELS[m] for m in DEEP_METHODS}, "identity": "Identity",
          OPT_KAPPA_LOG.name: OPT_KAPPA_LOG.label, "imma_bilevel30": "IMMA (30 inner steps, lr 1e-4)"}
ORDER = PAPER_ORDER
#: baselines built from the authors' unused helpers (configs ``table1_<protocol>_<name>.json``) -> the paper row
#: they stand for
HINTS = {OPT_KAPPA_LOG.name: OPT_KAPPA.name, "imma_bilevel30": IMMA.name}
ALL = ORDER + tuple(HINTS)
