"""Table 1 and Figure 1: House Prices, a linear extractor, four methods, one protocol per call.

``kappalab reproduce table1`` (:mod:`kappalab.cli` runs :func:`.cli.main`). A call goes cli -> plan -> sweep -> run
-> report; the modules and their jobs:

* :mod:`.cli`: the parser, its help and ``main``: parse, check, build the :class:`~.plan.Plan`, run its sweep, write
  the reports (the only module that sees the parsed arguments),
* :mod:`.plan`: :class:`~.plan.Plan` (what one call asks for) and :class:`~.plan.RunSpec` (one run to make), the runs'
  keys and identities (:mod:`kappalab.reproduce.identity`),
* :mod:`.sweep`: the data folder, the plan's missing runs against its store (resumed, one progress display), theta =
  I's probe curves, the records,
* :mod:`.run`: one run (a :class:`~.plan.RunSpec` -> its record) and what it reads: config, task, probe curves,
* :mod:`.report`: records -> summary over seeds, markdown, CSV, Figure 1 (and the selection's report),
* :mod:`.selection`: ``--trajectory/--selection``: App. C.2's selection over a store's trajectories,
* :mod:`.constants`: the paper's reference numbers, the methods' labels and order.
"""
