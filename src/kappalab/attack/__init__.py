"""``kappalab attack``: do immunized models resist the attackers people use, not only Eq. 2's gradient
descent? Registry (:mod:`.registry`), attackers on frozen features (:mod:`.probe_attackers`) and on a linear
extractor (:mod:`.extractor_attackers`), the measures (:mod:`.measures`), the features form of the command
(:mod:`.cli`)."""
