"""Raw vLLM, for `just bench`: the baseline batchlab's vLLM engine is compared against.

Usage: venv/bin/python scripts/bench_raw_vllm.py INPUTS.json [INPUTS.json ...]

Each INPUTS file comes from `cargo run --example bench_vllm_inputs -- SCENARIO --set ...`: the
environment and `LLM(...)` arguments batchlab would use, and the exact token prompts of the
warmup and measured requests. All files must share the engine settings; one `LLM` serves them all
(one vLLM engine per process). For each file this runs the warmup prompts in batches of
batch_size, then, timed with time.monotonic():
  (a) one `LLM.generate` over all measured prompts,
  (b) sequential `LLM.generate` calls of batch_size prompts each,
and prints one JSON line per file with output tokens/s of both.
"""

import json
import os
import sys
import time


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    inputs = [load(p) for p in sys.argv[1:]]
    if not inputs:
        sys.exit("usage: bench_raw_vllm.py INPUTS.json [INPUTS.json ...]")
    first = inputs[0]
    for other in inputs[1:]:
        if other["env"] != first["env"] or other["kwargs"] != first["kwargs"]:
            sys.exit("the inputs files differ in engine settings; run them in separate processes")
    # Before torch loads: OMP_NUM_THREADS and vLLM's switches are read once. A value already set
    # wins, as in batchlab.
    for key, value in first["env"].items():
        os.environ.setdefault(key, value)

    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    t0 = time.monotonic()
    llm = LLM(**first["kwargs"])
    print(json.dumps({"event": "started", "seconds": round(time.monotonic() - t0, 2)}), flush=True)

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

    def run(prompts, params, batch_size):
        """Sequential generates of batch_size prompts; returns (output tokens, seconds)."""
        tokens = 0
        start = time.monotonic()
        for i in range(0, len(prompts), batch_size):
            outs = llm.generate(prompts[i : i + batch_size], params[i : i + batch_size], use_tqdm=False)
            tokens += sum(len(o.outputs[0].token_ids) for o in outs)
        return tokens, time.monotonic() - start

    for inp in inputs:
        bs = inp["batch_size"]
        wp, wparams = prepare(inp["warmup"])
        if wp:
            run(wp, wparams, bs)
        prompts, params = prepare(inp["measured"])
        a_tokens, a_secs = run(prompts, params, len(prompts))
        b_tokens, b_secs = run(prompts, params, bs)
        print(
            json.dumps(
                {
                    "batch_size": bs,
                    "requests": len(prompts),
                    "a_output_tokens": a_tokens,
                    "a_seconds": round(a_secs, 4),
                    "a_output_tokens_per_s": round(a_tokens / a_secs, 1),
                    "b_output_tokens": b_tokens,
                    "b_seconds": round(b_secs, 4),
                    "b_output_tokens_per_s": round(b_tokens / b_secs, 1),
                }
            ),
            flush=True,
        )
    shutdown = getattr(llm, "shutdown", None)
    if callable(shutdown):
        shutdown()


if __name__ == "__main__":
    main()
