"""Table and figure reproductions: one module per table, each with ``main(argv) -> int``."""
