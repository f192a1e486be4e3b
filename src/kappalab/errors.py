"""Exceptions and warnings raised where the paper's formulas stop being defined."""


class KappalabError(ValueError):
    """Base class: an input on which a quantity of the paper is undefined."""


class DegenerateSpectrumError(KappalabError):
    """An extreme singular value needed for a gradient is not unique (within the documented gap tolerance).

    Thm A.1(3), Thm 4.1(3) and Thm 4.2 assume a unique s_max (R_well) or a unique smallest nonzero singular
    value s_min (R_ill); without it the regularizer has a subdifferential, not a gradient.
    """


class DegenerateSpectrumWarning(UserWarning):
    """Issued instead of :class:`DegenerateSpectrumError` under ``on_degenerate="warn"``."""


class UndefinedRegularizerError(KappalabError):
    """R_ill's denominator (1/(2k))||S||_F^2 - s_min^2/2 is zero: all nonzero singular values are equal."""


class RankZeroError(KappalabError):
    """A matrix whose kappa, R_well or R_ill is asked for is the zero matrix (rank zero)."""


class CollapsedFeaturesError(KappalabError):
    """An extractor's features are the zero matrix (a network whose activations all died): kappa, and so RIR, are
    undefined."""


class FloatRangeWarning(RuntimeWarning):
    """A result's magnitude lies outside the dtype's normal range: it was returned as inf, or as a subnormal
    number or 0 (see :mod:`kappalab.regularizers`, "Scale")."""
