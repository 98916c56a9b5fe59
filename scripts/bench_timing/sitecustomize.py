"""Independent generate timing for `just bench` (timing accuracy).

Put this directory on PYTHONPATH and set BATCHLAB_BENCH_GENERATE_LOG=FILE: every `vllm.LLM.generate`
call in the process appends "start end prompts" (time.monotonic() seconds, CLOCK_MONOTONIC on
Linux) to FILE. It wraps vLLM from outside batchlab, so batchlab's reported generate durations and
measured window can be checked against a clock reading batchlab does not take.
"""

import os

_log = os.environ.get("BATCHLAB_BENCH_GENERATE_LOG")
if _log:
    import time

    import vllm

    _generate = vllm.LLM.generate

    def _timed_generate(self, prompts, *args, **kwargs):
        start = time.monotonic()
        try:
            return _generate(self, prompts, *args, **kwargs)
        finally:
            end = time.monotonic()
            n = len(prompts) if hasattr(prompts, "__len__") else 1
            with open(_log, "a") as f:
                f.write(f"{start:.9f} {end:.9f} {n}\n")

    vllm.LLM.generate = _timed_generate
