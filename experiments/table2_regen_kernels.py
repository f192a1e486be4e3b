"""Does a Table 2 run's theta_I depend on the CPU kernels it rounds with? Regenerates one run
(:func:`kappalab.attack.table2.regenerate`) in a subprocess per kernel setting and prints its RIR beside the
committed one: the machine's own kernels, then torch's vector kernels and MKL forced down to the generic/AVX paths
(``ATEN_CPU_CAPABILITY=default``, ``MKL_ENABLE_INSTRUCTIONS=AVX``) and OpenBLAS to Sandybridge. One BLAS thread.

    PYTHONPATH=src python experiments/table2_regen_kernels.py official opt_kappa 7-9 0
"""

import json
import os
import subprocess
import sys

SETTINGS = {"native": {},
            "generic": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX",
                        "OPENBLAS_CORETYPE": "Sandybridge"}}
CHILD = """
import json, sys
from kappalab.attack.table2 import regenerate
from kappalab.provenance import linear_algebra
from kappalab.reproduce.table2.data import mnist_task
protocol, method, a, b, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
task = mnist_task(a, b, seed, None, 1, "mnist")
*_, record = regenerate(protocol, method, {}, task, seed, a, b, lambda line: None)
la = linear_algebra()
print(json.dumps({**record, "torch_cpu_capability": la["torch_cpu_capability"],
                  "blas": [p.get("architecture") for p in la["threadpools"]]}))
"""

if len(sys.argv) != 5:
    sys.exit(__doc__.strip().splitlines()[-1].strip())
protocol, method, pair, seed = sys.argv[1:]
a, b = pair.split("-")
for name, env in SETTINGS.items():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", **env}
    out = subprocess.run([sys.executable, "-c", CHILD, protocol, method, a, b, seed], env=env, check=True,
                         capture_output=True, text=True).stdout
    print(name, {k: v for k, v in env.items() if k in SETTINGS["generic"]}, json.loads(out.splitlines()[-1]),
          flush=True)
