"""The floor for `just bench`'s time to report: raw vLLM doing what `batchlab run` makes it do.

Usage: venv/bin/python scripts/bench_raw_vllm.py INPUTS.json [--whole]

INPUTS comes from `cargo run --example bench_vllm_inputs -- SCENARIO [--set ...]`: the environment
and `LLM(...)` arguments batchlab would use, and the exact token prompts of the warmup and the
measured requests. This script imports vLLM, builds the same `LLM` and runs the same generates
(the warmup prompts, then the measured ones, in sequential `LLM.generate` calls of batch_size
prompts, as batchlab's batcher issues them), so its whole-process wall time is the least a tool
driving vLLM can take. It prints one JSON line with the engine start and generate seconds, and
the measured prompts' own generate seconds and output tokens.

`--whole`: the measured prompts in one `LLM.generate` (the warmup still in batches): the offline
ceiling of vLLM on this workload, and the floor of a run with continuous admission (section 10).
"""

import json
import os
import sys
import time


def main():
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--whole"):
        sys.exit("usage: bench_raw_vllm.py INPUTS.json [--whole]")
    whole = len(sys.argv) == 3
    with open(sys.argv[1]) as f:
        inp = json.load(f)
    # Before torch loads: OMP_NUM_THREADS and vLLM's switches are read once. A value already set
    # wins, as in batchlab.
    for key, value in inp["env"].items():
        os.environ.setdefault(key, value)

    t0 = time.monotonic()
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(**inp["kwargs"])
    started = time.monotonic() - t0

    def prepare(requests):
        prompts = [TokensPrompt(prompt_token_ids=r["prompt"]) for r in requests]
        params = [
            SamplingParams(
                max_tokens=r["max_tokens"],
                min_tokens=r["min_tokens"],
                ignore_eos=r["ignore_eos"],
                temperature=r["temperature"],
            )
            for r in requests
        ]
        return prompts, params

    bs = inp["batch_size"]
    t1 = time.monotonic()
    tokens = 0
    for phase in ("warmup", "measured"):
        prompts, params = prepare(inp[phase])
        step = len(prompts) if whole and phase == "measured" else bs
        if phase == "measured":
            t2, tokens_before = time.monotonic(), tokens
        for i in range(0, len(prompts), max(step, 1)):
            outs = llm.generate(prompts[i : i + step], params[i : i + step], use_tqdm=False)
            tokens += sum(len(o.outputs[0].token_ids) for o in outs)
    done = time.monotonic()
    print(
        json.dumps(
            {
                "start_s": round(started, 2),
                "generate_s": round(done - t1, 3),
                "output_tokens": tokens,
                "measured_s": round(done - t2, 4),
                "measured_tokens": tokens - tokens_before,
            }
        ),
        flush=True,
    )
    shutdown = getattr(llm, "shutdown", None)
    if callable(shutdown):
        shutdown()


if __name__ == "__main__":
    main()
