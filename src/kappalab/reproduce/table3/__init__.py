"""Table 3 and Figure 3: immunizing deep nets, and their CPU-scale analogue.

``kappalab reproduce table3`` (:mod:`kappalab.cli` runs :func:`.cli.main`). Modules, in the order a call goes
through them:

* :mod:`.cli`: the command line, checked without importing torch, into a :class:`~.plan.Plan`;
* :mod:`.plan`: the :class:`~.plan.Plan` of a call and its records (:class:`~.plan.RunSpec`: key, identity,
  seed, method, config);
* :mod:`.sweep`: the one run loop of every mode (missing records only, provenance, the store) and the call's
  actions;
* :mod:`.run`: one record of the proxy's or the paper's networks (objective and training settings, calibration,
  training, evaluation); :mod:`.real`: one record of the real pretrained network (``--arch efficientnet_lite0``);
* :mod:`.report`: the call's tables and Figure 3 from the records alone.

Beside them: :mod:`.config` (the config schema, :class:`~.config.Table3Config`), :mod:`.constants` (the paper's
reference numbers, each method's weights), :mod:`.proxy` (the CPU proxy's task), :mod:`.real_data` (the real
network's data parts), :mod:`.measures` (what a real-network record keeps), :mod:`.grid` and :mod:`.decision` (the
selection of a setting and the verdict), :mod:`.search` (``--search``: Appendix C.2's selection on the proxy).
"""
