"""``kappalab measure``: RIR_theta0 (Eq. 17) of anyone's model by the three estimators of :mod:`kappalab.estimators`.

Two forms:

* features: ``kappalab measure --p0 F --h0 F --pi F --hi F [--json FILE] [--seed S]``: each F an ``N x D`` ``.npy``
  of features, of theta_0 (``0``) or theta_I (``i``) on D_P (``p``) or D_H (``h``); row n of ``--p0`` and ``--pi``
  is the same D_P sample (likewise for D_H).
* images: ``kappalab measure --model NAME --weights0 F --weightsI F --p-images DIR --h-images DIR``: a timm model
  ``NAME`` loaded with each weights file, its pooled pre-logit features of every image under each folder
  (:mod:`kappalab.deep.measure_images`; needs timm: ``bash scripts/setup_deep.sh``). ``--save-features DIR``
  writes the four ``.npy`` files the features form reads.

Prints a table (estimator | term (i) | term (ii) | RIR | 95% CI) and the best RIR any linear map reaches on
theta_0's features (:func:`kappalab.alignment.best_rir` of ``K_P = p0^T p0``, ``K_H = h0^T h0``); ``--json FILE``
writes one object per estimator (``exact``, ``groups``, ``authors``: :meth:`Estimate.as_dict`), the alignment, the
inputs' sha256 and the provenance. One line on stderr warns when the group size is below D (the group estimators
then read a slice of the spectrum, and the authors' the features' scale: docs/measure.md). Bad input (a missing or
unreadable file, mismatched shapes, NaN/Inf, fewer samples than D or than the group size) is one line, status 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from kappalab.atomic_io import write_json
from kappalab.cli_options import Parser, UsageError, budget, command, positive_int, seed as seed_type
from kappalab.data.fetch import digest_of
from kappalab.estimators import EXACT_BOOT_BUDGET, Estimate, check_feature_shapes, estimate_all
from kappalab.provenance import provenance
from kappalab.results import to_jsonable

FEATURES = (("p0", "theta_0 on D_P"), ("h0", "theta_0 on D_H"), ("pi", "theta_I on D_P"), ("hi", "theta_I on D_H"))
IMAGES = ("model", "weights0", "weightsI", "p_images", "h_images")


#: what --help prints above the options (the module docstring and docs/measure.md hold the long account)
HELP = """RIR_theta0 (Eq. 17) of anyone's model from its features, by three estimators: exact (all samples at once),
ours by groups (the paper's Sec. 5.2 with the pseudo-inverse kappa) and the authors' (their code's kappa).

Features form: --p0 --h0 --pi --hi, each an N x D .npy of the features of theta_0 (0) or theta_I (i) on D_P (p) or
D_H (h); row n of --p0 and --pi is the same D_P sample (likewise for D_H). Images form: --model NAME --weights0 F
--weightsI F --p-images DIR --h-images DIR, a timm model's pooled pre-logit features of every image under each
folder (needs timm: bash scripts/setup_deep.sh); --save-features DIR writes the four .npy files.

Prints each estimator's term (i), term (ii), RIR and 95% interval, and the best RIR any linear map reaches on
theta_0's features; --json FILE also writes the inputs' sha256 and the provenance. A one-line warning says when the
group size is below D (the group estimators then read a slice of the spectrum). Details: docs/measure.md."""

EXAMPLES = """examples:
  kappalab measure --p0 P0.npy --h0 H0.npy --pi PI.npy --hi HI.npy --json rir.json
  kappalab measure --p0 docs/measure/p0.npy --h0 docs/measure/h0.npy --pi docs/measure/p0.npy \\
      --hi docs/measure/hi_x2.npy
  kappalab measure --model tf_efficientnet_lite0 --weights0 theta0.pth --weightsI thetaI.pth \\
      --p-images DP_DIR --h-images DH_DIR --save-features FEATURES"""


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="kappalab measure", description=HELP, epilog=EXAMPLES,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, what in FEATURES:
        p.add_argument(f"--{name}", metavar="F.npy", help=f"features of {what} (N x D .npy)")
    p.add_argument("--model", metavar="NAME", help="a timm model name (the images form)")
    p.add_argument("--weights0", metavar="FILE", help="theta_0's state dict for --model (.safetensors, .pth, ...)")
    p.add_argument("--weightsI", metavar="FILE", help="theta_I's state dict for --model")
    p.add_argument("--p-images", metavar="DIR", help="D_P images (every image file under DIR, sorted by path)")
    p.add_argument("--h-images", metavar="DIR", help="D_H images")
    p.add_argument("--save-features", metavar="DIR", help="images form: write p0/h0/pi/hi .npy files to DIR")
    p.add_argument("--batch-size", type=positive_int, default=32, help="images form: batch size (default 32)")
    p.add_argument("--json", metavar="FILE", help="write the estimates, alignment, inputs and provenance here")
    p.add_argument("--seed", type=seed_type, default=0, help="seed of the groups and the bootstraps (default 0)")
    p.add_argument("--groups", type=positive_int, default=20, help="groups per task (default 20, the paper's)")
    p.add_argument("--group-size", type=positive_int, default=100, help="samples per group (default 100)")
    p.add_argument("--n-boot", type=positive_int, default=1000,
                   help="the group estimators' bootstrap resamples (default 1000)")
    p.add_argument("--n-boot-exact", type=positive_int, default=200,
                   help="the exact estimator's bootstrap resamples over samples (default 200)")
    p.add_argument("--exact-budget", type=budget, default=EXACT_BOOT_BUDGET, metavar="MULADDS",
                   help="run the exact bootstrap only below this many multiply-adds (n_boot_exact x 4 SVDs of N x D; "
                        f"default {EXACT_BOOT_BUDGET:.0e}, of the order of a CPU-minute; 'inf': always)")
    return p


def load_array(path: str, argument: str, what: str = "an N x D matrix of features",
               ndims: tuple[int, ...] = (2,)) -> np.ndarray:
    """A finite real float64 array with ``ndim`` in ``ndims`` from a ``.npy`` file, or a one-line UsageError naming
    ``argument`` (``what`` says what the file should hold)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise UsageError(f"{argument}: {file} is not a file: pass a .npy of {what}")
    try:
        array = np.load(file, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise UsageError(f"{argument}: cannot read {file} as a .npy array ({str(error).splitlines()[0]})") from None
    if array.ndim not in ndims or not np.issubdtype(array.dtype, np.number) or np.iscomplexobj(array):
        raise UsageError(f"{argument}: {file} holds a {array.dtype} array of shape {array.shape}, not {what} (real)")
    bad = ~np.isfinite(array)
    if bad.any():
        raise UsageError(f"{argument}: {file} holds {int(bad.sum())} NaN/Inf entries; they must be finite")
    return array.astype(np.float64, copy=False)


def load_features(path: str, argument: str) -> np.ndarray:
    """A 2-D float64 array of features from a ``.npy`` file (:func:`load_array`, not all zeros), or a one-line
    UsageError naming ``argument``."""
    array = load_array(path, argument)
    if not array.any():
        file = Path(path).expanduser()
        raise UsageError(f"{argument}: {file} is all zeros: kappa of its H~ = F^T F is undefined")
    return array


def check_shapes(features: dict[str, np.ndarray], group_size: int) -> None:
    """The features form's contract (:func:`kappalab.estimators.check_feature_shapes`), as one-line UsageErrors
    naming the arguments."""
    try:
        check_feature_shapes({f"--{k}": features[k].shape for k, _ in FEATURES}, group_size,
                             group_size_name="--group-size")
    except ValueError as error:
        raise UsageError(str(error)) from None


def alignment_summary(p0: np.ndarray, h0: np.ndarray) -> dict[str, Any]:
    """:func:`kappalab.alignment.best_rir` of theta_0's ``K_P = p0^T p0`` and ``K_H = h0^T h0`` (no theta)."""
    from kappalab.alignment import best_rir

    b = best_rir(p0.T @ p0, h0.T @ h0)
    return {"best_rir": b.value if math.isfinite(b.value) else None, "bounded": math.isfinite(b.value),
            "kappa_K_P": b.kappa_K_P, "kappa_K_H": b.kappa_K_H, "rank_P": b.rank_P, "rank_H": b.rank_H,
            "escape_dim": b.escape_dim, "max_escape_sine": b.max_escape_sine}


def table(estimates: dict[str, Estimate]) -> str:
    """The estimates as a markdown table."""
    rows = ["| estimator | term (i) | term (ii) | RIR | 95% CI |", "|---|---|---|---|---|"]
    for name, e in estimates.items():
        ci = "-" if e.ci95 is None else f"[{e.ci95[0]:.4g}, {e.ci95[1]:.4g}]"
        rows.append(f"| {name} | {e.term_i:.4g} | {e.term_ii:.4g} | {e.rir:.4g} | {ci} |")
    return "\n".join(rows)


def _features_of_images(args: argparse.Namespace) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    try:
        from kappalab.deep.measure_images import extract_all
        from kappalab.deep.timm_models import require_timm

        require_timm()
    except ImportError as error:
        raise UsageError(f"--model: the images form needs timm ({str(error).splitlines()[0]}); "
                         "run bash scripts/setup_deep.sh, or pass --p0 --h0 --pi --hi feature files") from None
    try:
        return extract_all(args.model, args.weights0, args.weightsI, args.p_images, args.h_images,
                           batch_size=args.batch_size, save=args.save_features)
    except (ValueError, OSError) as error:  # messages name the argument (kappalab.deep.measure_images)
        raise UsageError(str(error).splitlines()[0]) from None


def _features_of_files(args: argparse.Namespace) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    features = {name: load_features(getattr(args, name), f"--{name}") for name, _ in FEATURES}
    inputs = {name: {"path": getattr(args, name), "sha256": digest_of(Path(getattr(args, name))),
                     "shape": list(features[name].shape)} for name, _ in FEATURES}
    return features, inputs


def _form(args: argparse.Namespace) -> str:
    given = {name for name in (*dict(FEATURES), *IMAGES) if getattr(args, name) is not None}
    features, images = given & set(dict(FEATURES)), given & set(IMAGES)
    if features and images:
        raise UsageError("pass either --p0 --h0 --pi --hi (features) or --model ... (images), not both")
    if images:
        missing = [f"--{n.replace('_', '-')}" for n in IMAGES if n not in images]
        if missing:
            raise UsageError(f"the images form also needs {' '.join(missing)}")
        return "images"
    missing = [f"--{n}" for n, _ in FEATURES if n not in features]
    if missing:
        raise UsageError(f"missing {' '.join(missing)} (each an N x D .npy of features)")
    return "features"


@command("kappalab measure")
def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    form = _form(args)
    json_path = None if args.json is None else json_output_path(args.json)
    features, inputs = _features_of_images(args) if form == "images" else _features_of_files(args)
    check_shapes(features, args.group_size)
    dim = features["p0"].shape[1]
    warnings = []
    if args.group_size < dim:
        warnings.append(f"group size {args.group_size} < D = {dim}: each group's H~ has >= {dim - args.group_size} "
                        "zero eigenvalues, so 'groups' sees a slice of the spectrum and 'authors' the features' "
                        "scale (see docs/measure.md); trust 'exact'")
        print(f"kappalab measure: warning: {warnings[-1]}", file=sys.stderr)
    try:
        estimates = estimate_all(features["p0"], features["h0"], features["pi"], features["hi"], seed=args.seed,
                                 groups=args.groups, group_size=args.group_size, n_boot=args.n_boot,
                                 n_boot_exact=args.n_boot_exact, exact_budget=args.exact_budget)
        alignment = alignment_summary(features["p0"], features["h0"])
    except ValueError as error:  # e.g. an all-zero feature matrix or group: kappa is undefined
        raise UsageError(f"the features: {str(error).splitlines()[0]}") from None
    print(table(estimates))
    for e in estimates.values():
        if e.ci95 is None:
            print(f"{e.name}: {e.ci_note}")
    best = "unbounded" if alignment["best_rir"] is None else f"{alignment['best_rir']:.4g}"
    print(f"best RIR any linear map reaches on theta_0's features (alignment.best_rir): {best}")
    if json_path is not None:
        settings = {k: getattr(args, k) for k in ("seed", "groups", "group_size", "n_boot", "n_boot_exact",
                                                  "exact_budget")}
        record = {**{name: e.as_dict() for name, e in estimates.items()}, "alignment": alignment,
                  "warnings": warnings, "form": form, "inputs": inputs,
                  "provenance": provenance(args.seed, settings, data_label=f"kappalab measure ({form})")}
        try:
            write_json(json_path, to_jsonable(record), indent=1)
        except OSError as error:
            raise UsageError(f"--json: cannot write {json_path} ({error.strerror})") from None
        print(f"wrote {json_path}")
    return 0


def json_output_path(name: str) -> Path:
    """``--json``'s file, its folder created now (before any work), or a UsageError."""
    path = Path(name).expanduser()
    if path.is_dir():
        raise UsageError(f"--json: {path} is a folder; pass a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--json: cannot create the folder {path.parent} ({error.strerror})") from None
    return path
