"""Merge the parts of a Table 3 sweep that ran into separate folders (``--methods`` split across processes, or
seeds added later) into one store: every record once, by key (the first part's). A key two parts both hold (the
``init`` record each part makes at every grid point and seed) must agree on every field but:

* the timings and provenance (``cpu_s``, ``wall_s``, ``provenance``, ``trunk_load``);
* how the trunk cache was made (``cpu_s``, ``wall_s``, ``threads`` and ``array_sha256`` of each part in
  ``trunk``): its float32 activations are a machine's own rounding. Its ``key`` (images, weights, cut) must agree;
* floats within :data:`REL` relative: theta_0's calibration is computed from those activations, so two machines'
  agree to their propagated float32 rounding only (measured: up to 2e-5 relative, the seed-1 and seed-2 ``init``
  records of the two grids remade on another machine), while a different setting or draw moves it by far more.

Otherwise nothing is written and the key and fields are named.

Usage: python experiments/table3_merge_parts.py OUT_DIR PART_DIR [PART_DIR ...]   (writes OUT_DIR/runs.jsonl)
"""

import json
import math
import sys
from pathlib import Path

from kappalab.atomic_io import write_text

VOLATILE = {"cpu_s", "wall_s", "provenance", "trunk_load"}
MADE = {"cpu_s", "wall_s", "threads", "array_sha256"}  #: how a trunk cache file was made, not what it holds
REL = 1e-4  #: 5x the largest cross-machine difference measured (module docstring)


def _comparable(record: dict) -> dict:
    """``record`` without what may differ between two makings of it (module docstring)."""
    out = {k: v for k, v in record.items() if k not in VOLATILE}
    if "trunk" in out:
        out["trunk"] = {part: {k: v for k, v in meta.items() if k not in MADE} for part, meta in out["trunk"].items()}
    return out


def _agree(a: object, b: object) -> bool:
    """Equal, floats within :data:`REL` relative (in nested dicts and lists too)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_agree(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_agree(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=REL)
    return a == b


def main(out: Path, parts: list[Path]) -> int:
    seen: dict[str, dict] = {}
    lines = []
    missing = [str(part / "runs.jsonl") for part in parts if not (part / "runs.jsonl").is_file()]
    if missing:
        print(f"table3_merge_parts: no store {', '.join(missing)}; give the parts' folders", file=sys.stderr)
        return 2
    for part in parts:
        for line in (part / "runs.jsonl").read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            first = seen.get(record["key"])
            if first is None:
                seen[record["key"]] = record
                lines.append(line)
                continue
            a, b = _comparable(first), _comparable(record)
            differ = sorted(k for k in set(a) | set(b) if not _agree(a.get(k), b.get(k)))
            if differ:
                print(f"table3_merge_parts: {record['key']}: the parts disagree on {differ}; nothing written",
                      file=sys.stderr)
                return 2
    write_text(out / "runs.jsonl", "".join(line + "\n" for line in lines))
    print(f"{out / 'runs.jsonl'}: {len(lines)} records from {len(parts)} parts")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    raise SystemExit(main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]))
