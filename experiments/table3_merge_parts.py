"""Merge the parts of a Table 3 sweep that ran into separate folders (``--methods`` split across processes) into
one store: every record once, by key. A key two parts both hold (the ``init`` record each part makes at every grid
point) must agree on every field but the timings and provenance (``cpu_s``, ``wall_s``, ``provenance``,
``trunk_load``, and the trunk cache's own ``cpu_s``/``wall_s`` in ``trunk``: a cache file two processes both made
holds the same activations, its ``array_sha256``, made at different speeds); otherwise nothing is written and the key
and fields are named.

Usage: python experiments/table3_merge_parts.py OUT_DIR PART_DIR [PART_DIR ...]   (writes OUT_DIR/runs.jsonl)
"""

import json
import sys
from pathlib import Path

from kappalab.atomic_io import write_text

VOLATILE = {"cpu_s", "wall_s", "provenance", "trunk_load"}


def _comparable(record: dict) -> dict:
    """``record`` without what may differ between two makings of it (module docstring)."""
    out = {k: v for k, v in record.items() if k not in VOLATILE}
    if "trunk" in out:
        out["trunk"] = {part: {k: v for k, v in meta.items() if k not in ("cpu_s", "wall_s")}
                        for part, meta in out["trunk"].items()}
    return out


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
            differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
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
