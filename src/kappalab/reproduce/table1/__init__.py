"""Table 1 and Figure 1: House Prices, a linear extractor, four methods, one protocol per call.

``kappalab reproduce table1`` (:mod:`kappalab.cli` runs :func:`.cli.main`). Modules: :mod:`.constants` (the paper's
reference numbers, the methods' labels and order), :mod:`.cli` (the command line and the call: configs, data, the
sweep, the reports), :mod:`.run` (one run: the sweep worker, its config, task, data identity, probe curves),
:mod:`.report` (summary over seeds, markdown, CSV, Figure 1), :mod:`.selection` (``--trajectory/--selection``: App.
C.2's selection over a store's trajectories).
"""
