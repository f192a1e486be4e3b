"""Join attack stores written by separate runs (e.g. one attacker per process) into one table store:
kappalab.attack.scope.merge (records verbatim with their provenance; an attack stored twice is refused).

    PYTHONPATH=src python experiments/attack_merge_parts.py OUT TABLE PART [PART ...]

e.g. ``experiments/attack_merge_parts.py docs/attacks table3 /tmp/probe /tmp/finetune /tmp/lora_r4``; bad input is
one line on stderr and exit status 2.
"""

import sys
from pathlib import Path

from kappalab.attack.scope import merge

if len(sys.argv) < 4:
    sys.exit(__doc__.strip().splitlines()[2].strip())
try:
    jsonl, npz = merge(Path(sys.argv[1]), sys.argv[2], [Path(p) for p in sys.argv[3:]])
except ValueError as error:
    print(f"attack_merge_parts: {error}", file=sys.stderr)
    sys.exit(2)
print(f"wrote {jsonl} and {npz} from {len(sys.argv) - 3} parts")
