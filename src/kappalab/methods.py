"""The immunization methods and controls, one record each: the name configs, records and ``--methods`` use, the
label tables and figures print, the objective it trains, where it runs, and the weights it names.

Every module that lists methods derives its tuple from here in its own order (:data:`PAPER_ORDER` for the paper's
Tables 1 and 2 and their analyses, :data:`DEEP_METHODS` + :data:`CONTROLS` for Table 3, :data:`LINEAR_METHODS` for
the linear engine). Plain Python: the light modules (argument parsing, reports) import it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Objective = Literal["eq11", "kappa_gap", "bilevel", "log_kappa_ratio", "task"]
Engine = Literal["linear", "deep"]


@dataclass(frozen=True)
class MethodSpec:
    """One method or control.

    Attributes:
        name: the name in configs, records and on the command line.
        label: the name in tables and figures.
        objective: what it adds to the D_P task loss: ``"eq11"`` (Eq. 11's ``lambda_H R_ill``, plus
            ``lambda_P R_well`` when ``r_well``), ``"kappa_gap"`` (a difference of the two tasks' kappas),
            ``"bilevel"`` (IMMA: minus the harmful loss after an inner adaptation), ``"log_kappa_ratio"`` (the
            oracle control's ``log kappa_P - log kappa_H``) or ``"task"`` (nothing).
        r_well: the objective has Eq. 11's R_well term.
        engines: where it runs: ``"linear"`` (:mod:`kappalab.immunization`, Tables 1 and 2) and/or ``"deep"``
            (:mod:`kappalab.deep`, Table 3); under both protocols in each.
        paper: one of the paper's four methods.
        control: a control of Table 3's decision (what the measure can show), not a method of the paper.
        lambdas: the objective weights it trains with (Table 3's search grids and settings line).
        optimizer: the optimizer of the deep engine (``"sgd"``: the paper's, Appendix C.2).
    """

    name: str
    label: str
    objective: Objective
    r_well: bool = False
    engines: tuple[Engine, ...] = ("linear", "deep")
    paper: bool = False
    control: bool = False
    lambdas: tuple[str, ...] = ()
    optimizer: str = "sgd"


RILL_ONLY = MethodSpec("rill_only", "R_ill Only", "eq11", paper=True, lambdas=("lambda_H",))
IMMA = MethodSpec("imma", "IMMA", "bilevel", paper=True, lambdas=("lambda_imma",))
OPT_KAPPA = MethodSpec("opt_kappa", "Opt kappa", "kappa_gap", paper=True, lambdas=("lambda_kappa",))
OURS = MethodSpec("ours", "Ours", "eq11", r_well=True, paper=True, lambdas=("lambda_H", "lambda_P"))
#: the authors' unused ``kappa_loss`` helper as an Opt kappa baseline (Table 1)
OPT_KAPPA_LOG = MethodSpec("opt_kappa_log", "Opt kappa (authors' kappa_loss)", "kappa_gap", engines=("linear",))
ORACLE = MethodSpec("oracle", "Oracle (control)", "log_kappa_ratio", engines=("deep",), control=True,
                    lambdas=("lambda_oracle",), optimizer="adam")
TASK_ONLY = MethodSpec("task_only", "Task only (control)", "task", engines=("deep",), control=True)

#: every method and control by name
SPECS: dict[str, MethodSpec] = {m.name: m for m in (OURS, RILL_ONLY, IMMA, OPT_KAPPA, OPT_KAPPA_LOG, ORACLE,
                                                      TASK_ONLY)}
#: name -> label
LABELS: dict[str, str] = {m.name: m.label for m in SPECS.values()}


def _names(*specs: MethodSpec) -> tuple[str, ...]:
    return tuple(m.name for m in specs)


#: the paper's four methods in its tables' row order (Tables 1 and 2, their reports and analyses)
PAPER_ORDER: tuple[str, ...] = _names(RILL_ONLY, IMMA, OPT_KAPPA, OURS)
#: the paper's four methods in Table 3's order (the deep engine, its reports)
DEEP_METHODS: tuple[str, ...] = _names(OURS, RILL_ONLY, IMMA, OPT_KAPPA)
#: Table 3's controls, in its decision's order
CONTROLS: tuple[str, ...] = _names(ORACLE, TASK_ONLY)
#: what the linear engine (:mod:`kappalab.immunization`) trains
LINEAR_METHODS: tuple[str, ...] = tuple(m.name for m in SPECS.values() if "linear" in m.engines)
