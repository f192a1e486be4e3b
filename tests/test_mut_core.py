"""Tests added to kill surviving mutants of the core formula modules (docs/mutation.md names each one).

Each test compares against an independent reference (closed forms on spectrum-built matrices, exact sympy or
mpmath), never against the function under test.
"""
