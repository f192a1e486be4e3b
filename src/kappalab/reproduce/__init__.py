"""Table and figure reproductions: one package per table (``table1``, ``table2``, ``table3``), each in one shape.

Each package's ``cli`` (the command line, ``main(argv) -> int``: the only module that sees the parsed arguments)
builds a typed ``Plan`` (``plan``: what the call asks for and the ``RunSpec`` of each record, keyed by its run
identity), which ``sweep`` runs against the store (missing records only); ``run`` makes one record; ``report`` builds
the tables and figures from the records alone. :mod:`.identity` holds the run identity and its compatibility rules.
"""
