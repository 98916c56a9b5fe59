"""batchlab's side of the vLLM boundary, run inside the embedded interpreter.

Rust calls these functions on the engine thread. They only translate: Rust values in, vLLM calls,
plain dicts out (the Rust side validates and maps them). Keep vLLM version quirks here.
"""

import multiprocessing
import os
import sys
import sysconfig


def prepare(venv, env):
    """Checks that this interpreter is the venv's and that vllm comes from it; applies `env`.

    Returns vllm's version. `env` values are final (Rust already let the user's values win); they
    are set again here because os.environ is a snapshot taken when the interpreter started.
    """
    for key, value in env.items():
        os.environ[key] = value
    venv = os.path.realpath(venv)
    prefix = os.path.realpath(sys.prefix)
    if prefix != venv:
        raise RuntimeError(
            f"the embedded Python is not the venv's: sys.prefix is {sys.prefix} "
            f"(Python {sys.version.split()[0]}, executable {sys.executable}), expected {venv}"
        )
    # The venv's packages first, so nothing from the base interpreter shadows them.
    purelib = sysconfig.get_paths()["purelib"]
    if purelib in sys.path:
        sys.path.remove(purelib)
    sys.path.insert(0, purelib)
    # vLLM's multiprocess mode spawns children with sys.executable.
    python = os.path.join(sys.prefix, "bin", "python")
    multiprocessing.set_executable(python)
    try:
        import vllm
    except ImportError as e:
        raise RuntimeError(f"`import vllm` failed in {sys.prefix} (sys.path: {sys.path}): {e}") from e
    where = os.path.realpath(vllm.__file__)
    if not where.startswith(venv + os.sep):
        raise RuntimeError(f"`import vllm` resolved to {where}, outside the venv {venv}")
    return vllm.__version__


def start(**kwargs):
    """Builds the `vllm.LLM`. `kwargs` are final (Rust merged the plan and engine_args)."""
    from vllm import LLM

    return LLM(**kwargs)


def generate(llm, requests):
    """Runs one batch. `requests` are dicts; returns one dict per output, in vLLM's order."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    prompts = []
    params = []
    for r in requests:
        tokens = r.get("prompt_token_ids")
        prompts.append(TokensPrompt(prompt_token_ids=tokens) if tokens is not None else r["prompt"])
        params.append(
            SamplingParams(
                max_tokens=r["max_tokens"],
                min_tokens=r["min_tokens"],
                ignore_eos=r["ignore_eos"],
                temperature=r["temperature"],
                seed=r["seed"],
            )
        )
    outputs = llm.generate(prompts, params, use_tqdm=False)
    return [_flatten(o) for o in outputs]


def _flatten(output):
    completion = output.outputs[0] if output.outputs else None
    metrics = getattr(output, "metrics", None)
    flat = {
        "request_id": str(output.request_id),
        "prompt_tokens": len(output.prompt_token_ids) if output.prompt_token_ids is not None else None,
        "token_ids": None,
        "text": None,
        "finish_reason": None,
        "arrival_time": None,
        "queued_ts": None,
        "scheduled_ts": None,
        "first_token_ts": None,
        "last_token_ts": None,
    }
    if completion is not None:
        flat["token_ids"] = [int(t) for t in completion.token_ids]
        # A lone surrogate cannot cross into Rust as UTF-8.
        flat["text"] = completion.text.encode("utf-8", "replace").decode("utf-8")
        flat["finish_reason"] = completion.finish_reason
    if metrics is not None:
        for key in ("arrival_time", "queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts"):
            value = getattr(metrics, key, None)
            flat[key] = float(value) if isinstance(value, (int, float)) else None
    return flat


def shutdown(llm):
    """Stops the engine core, then reaps what vLLM leaves behind: child processes it terminated but
    never waited for (zombies), and the multiprocessing resource tracker its shared memory started.
    Safe to call on a half-built engine."""
    try:
        stop = getattr(llm, "shutdown", None)
        if not callable(stop):
            core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
            stop = getattr(core, "shutdown", None)
        if callable(stop):
            stop()
    finally:
        _reap_children()


def _reap_children(timeout=10.0):
    from multiprocessing import resource_tracker

    # active_children() also waits for finished children, so no zombie is left.
    for child in multiprocessing.active_children():
        child.join(timeout)
        if child.is_alive():
            child.kill()
            child.join(timeout)
    # The tracker would otherwise live until this process exits. Stopping it unlinks any shared
    # memory vLLM leaked; a later engine starts a new one.
    stop = getattr(getattr(resource_tracker, "_resource_tracker", None), "_stop", None)
    if callable(stop):
        stop()
