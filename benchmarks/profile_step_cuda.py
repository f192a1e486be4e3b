"""Profile one official-protocol step (Ours; R = 64 stacked runs and a single run) on CUDA: where the time goes.

    python benchmarks/profile_step_cuda.py   (needs CUDA; prints torch.profiler tables; see docs/gpu.md)
"""
import sys

import torch

sys.path.insert(0, "benchmarks")
from test_bench_batched import _setup  # noqa: E402  (the benchmark's setup: same tasks, configs, stacking)

from kappalab.immunization.methods import step_gradients  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False
for method, runs in (("ours", 64), ("ours", 1)):
    proto, p, batch, cfg, tasks = _setup(method, runs, "cuda")
    for _ in range(2):
        step_gradients(proto, p, batch.for_step(), cfg)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step_gradients(proto, p, batch.for_step(), cfg)
        torch.cuda.synchronize()
    print(f"==== {method} R={runs}: top ops by CUDA time (3 steps)")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=60))
    print(f"==== {method} R={runs}: top ops by CPU time (3 steps)")
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=8, max_name_column_width=60))
