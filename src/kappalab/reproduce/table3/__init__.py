"""Table 3 and Figure 3: immunizing deep nets, and their CPU-scale analogue.

``kappalab reproduce table3`` (:mod:`kappalab.cli` runs :func:`.cli.main`). Modules: :mod:`.cli` (the command line,
checked without importing torch), :mod:`.config` (the config schema, :class:`~.config.Table3Config`),
:mod:`.constants` (the paper's reference numbers, each method's weights), :mod:`.call` (runs a checked command line),
:mod:`.proxy` (the CPU proxy's task), :mod:`.run` (the runs of a task: objective and training settings, calibration,
evaluation, run keys), :mod:`.search` (``--search``: Appendix C.2's selection of the lambdas and epochs),
:mod:`.report` (the table and Figure 3 from the records), :mod:`.real`, :mod:`.real_data` and :mod:`.real_report`
(``--arch efficientnet_lite0``: the rows on a real pretrained network).
"""
