"""vLLM's offline `LLM` as a batchlab protocol engine (docs/engines.md).

batchlab builds this class from `[engine.vllm]` (`engine.kind = "vllm"`): its keyword arguments are
`vllm.LLM(...)`'s, already merged from the typed settings and `engine_args`. It can also be named
directly: `engine.kind = "python"`, `class = "batchlab_engines.vllm_engine:VllmEngine"`. Keep vLLM
version quirks here.
"""

import gc
import multiprocessing
import os
import sys
import time

from batchlab_engines import chat

TIMESTAMPS = ("arrival_time", "queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")


class VllmEngine:
    def __init__(self, batchlab_admission="batch", **llm_kwargs):
        # `batchlab_admission` is batchlab's (`engine.vllm.admission`), the rest are `vllm.LLM`'s.
        if batchlab_admission not in ("batch", "continuous"):
            raise ValueError(f"batchlab_admission must be 'batch' or 'continuous', not {batchlab_admission!r}")
        self.admission = batchlab_admission
        self.kwargs = llm_kwargs
        # `engine_args = { runner = "pooling", convert = "embed" }`: a pooling model, `LLM.embed`.
        self.pooling = llm_kwargs.get("runner") == "pooling"
        if self.pooling and batchlab_admission == "continuous":
            raise ValueError(
                "engine_args' runner = 'pooling' embeds each batch with LLM.embed: it needs "
                "engine.vllm.admission = 'batch', not 'continuous'"
            )
        self.llm = None
        self.tokenizer = None
        self.stepper = None

    def start(self):
        from batchlab_engines import engine_step

        engine_step("importing vLLM")
        vllm = _import_vllm()
        model = str(self.kwargs.get("model", ""))
        if os.path.isabs(model) and not os.path.exists(os.path.join(model, "config.json")):
            raise FileNotFoundError(
                f"model {model} not found ({os.path.join(model, 'config.json')} is missing); "
                "`just setup-vllm` builds the tiny test model `tiny-llama`"
            )
        engine_step("building the engine")
        self.llm = vllm.LLM(**self.kwargs)
        # One token through the whole engine, so the first measured batch pays no first-call costs.
        engine_step("warming up")
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        warmup = [TokensPrompt(prompt_token_ids=[1, 2, 3])]
        if self.pooling:
            self.llm.embed(warmup, use_tqdm=False)
        else:
            self.llm.generate(warmup, SamplingParams(max_tokens=1), use_tqdm=False)
        self.tokenizer = self.llm.get_tokenizer()
        if self.admission == "continuous":
            self.stepper = _Stepper(self.llm.llm_engine)
        # vLLM's RequestStateStats timestamps are time.monotonic(): CLOCK_MONOTONIC, batchlab's clock.
        return {
            "name": "vllm",
            "version": vllm.__version__,
            "clock": "monotonic",
            "model_chat_template": chat.has_chat_template(self.tokenizer),
            "engine_config": resolved_config(self.llm),
            # The EngineCore and its workers (none in-process): batchlab watches them for death
            # and samples their CPU time for stalls; other processes (helpers, the resource
            # tracker) are not the engine.
            "processes": engine_processes(),
        }

    def _prompt_and_params(self, r):
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        tokens = r["prompt_token_ids"]
        if r.get("messages") is not None:
            # Templated here, where the tokenizer is: vLLM then counts exactly these ids.
            tokens = chat.prompt_ids(self.tokenizer, r)
        prompt = TokensPrompt(prompt_token_ids=tokens) if tokens is not None else r["prompt"]
        if r.get("images"):
            # batchlab's encoded images as PIL images; the template put one image token per
            # image part, which vLLM's processor expands to the model's image tokens.
            import io

            from PIL import Image

            images = [Image.open(io.BytesIO(b)).convert("RGB") for b in r["images"]]
            prompt = TokensPrompt(prompt_token_ids=tokens, multi_modal_data={"image": images})
        params = SamplingParams(
            max_tokens=r["max_tokens"],
            min_tokens=r["min_tokens"],
            ignore_eos=r["ignore_eos"],
            temperature=r["temperature"],
            seed=r["seed"],
        )
        return prompt, params

    def generate(self, requests):
        prompts = []
        params = []
        for r in requests:
            prompt, param = self._prompt_and_params(r)
            prompts.append(prompt)
            params.append(param)
        # In-process, a dead engine core makes this raise vllm's EngineDeadError, which batchlab
        # turns into an engine death (docs/engines.md). Multiprocess, a killed EngineCore makes it
        # block for ever: batchlab's watch of the processes named in `start()`'s info declares
        # that death, and a stopped one a stall (docs/vllm.md).
        if self.pooling:
            # A pooling model: one pass over each prompt, one vector each, nothing sampled.
            outputs = self.llm.embed(prompts, use_tqdm=False)
            _check_order(outputs)
            return [_flatten_embedding(r["id"], o) for r, o in zip(requests, outputs)]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        _check_order(outputs)
        # In input order (checked above), so each output answers the request at its position.
        return [_flatten(r["id"], o) for r, o in zip(requests, outputs)]

    # Continuous admission (`engine.vllm.admission = "continuous"`, docs/vllm.md): batchlab's
    # stepping thread calls `add` with the requests handed over since the last step, then `step`
    # while any is unfinished. Not part of the protocol: only this class has them.

    def add(self, requests):
        """Hands `requests` to vLLM's engine (`LLMEngine.add_request`); they are scheduled at the
        next step. Raises on the first request vLLM refuses, with the ones before it added."""
        for r in requests:
            prompt, params = self._prompt_and_params(r)
            self.stepper.add(r["id"], prompt, params)

    def step(self):
        """One engine step (`LLMEngine.step`). Returns the requests that finished in it, flattened
        as `generate` flattens them plus `token_ts`, what the step scheduled as far as its outputs
        show, and whether vLLM has unfinished requests left: `(finished, step, unfinished)`, `step`
        a dict of `ts` (the engine core's monotonic time of the step's outputs), `prefill`
        (requests that got their first token) and `decode` (the others that got one); `None` when no
        request got a token (a partial prefill, an idle step)."""
        return self.stepper.step()

    def unfinished(self):
        """How many added requests vLLM has not finished."""
        return self.stepper.engine.get_num_unfinished_requests()

    def bench_raw_generate(self, requests):
        """Bench only, not part of the protocol (benches/vllm_overhead.rs): what a raw vLLM script
        does with these requests, as scripts/bench_raw_vllm.py does it (token prompts,
        `SamplingParams` from the same fields, one `LLM.generate`), none of batchlab's own work.
        Returns the seconds of its own work, by `time.perf_counter()`."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        start = time.perf_counter()
        prompts = [TokensPrompt(prompt_token_ids=r["prompt_token_ids"]) for r in requests]
        params = [
            SamplingParams(
                max_tokens=r["max_tokens"],
                min_tokens=r["min_tokens"],
                ignore_eos=r["ignore_eos"],
                temperature=r["temperature"],
            )
            for r in requests
        ]
        self.llm.generate(prompts, params, use_tqdm=False)
        return time.perf_counter() - start

    def shutdown(self):
        """Stops the engine core, then reaps what vLLM leaves behind: child processes it
        terminated but never waited for (zombies), and the multiprocessing resource tracker its
        shared memory started. Safe on a half-built engine."""
        llm, self.llm = self.llm, None
        self.tokenizer = None
        try:
            stop = getattr(llm, "shutdown", None)
            if not callable(stop):
                # vLLM 0.32 has no LLM.shutdown().
                core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
                stop = getattr(core, "shutdown", None)
            if callable(stop):
                stop()
        finally:
            del llm
            gc.collect()
            _reap_children()


class _Stepper:
    """vLLM's `LLMEngine` driven one step at a time, with every new token's time.

    vLLM times a request's first and last token by the engine core's timestamp of the step that
    made it (`RequestStateStats.first_token_ts`/`last_token_ts`) but keeps no list. The engine's
    output processor sees every step's outputs with that timestamp before it builds the
    `RequestOutput`s, so its `process_outputs` is wrapped to append the timestamp once per new token
    of each request: `token_ts[0]` is then exactly `first_token_ts` and `token_ts[-1]`
    `last_token_ts`. The same outputs say which requests the step served (a version quirk: kept
    here)."""

    def __init__(self, engine):
        from vllm.sampling_params import RequestOutputKind

        self.engine = engine
        self.final_only = RequestOutputKind.FINAL_ONLY
        # vLLM's internal request id -> token times; the external id given to vLLM (batchlab's id
        # and a count, unique even if an id came twice) -> (batchlab's id, internal id).
        self.times = {}
        self.added = {}
        self.count = 0
        self.last_step = None
        processor = engine.output_processor
        original = processor.process_outputs

        def process_outputs(engine_core_outputs, *args, **kwargs):
            self._note(engine_core_outputs, kwargs.get("engine_core_timestamp", args[0] if args else None))
            return original(engine_core_outputs, *args, **kwargs)

        processor.process_outputs = process_outputs

    def add(self, request_id, prompt, params):
        # As `LLM.generate` does: only the finished output comes back.
        params.output_kind = self.final_only
        self.count += 1
        external = f"{request_id}-{self.count}"
        internal = self.engine.add_request(external, prompt, params)
        self.times[internal] = []
        self.added[external] = (request_id, internal)

    def _note(self, outputs, timestamp):
        ts = float(timestamp) if timestamp is not None else time.monotonic()
        prefill = decode = 0
        times = self.times
        for o in outputs:
            n = len(o.new_token_ids)
            seen = times.get(o.request_id)
            if not n or seen is None:
                continue
            if seen:
                decode += 1
            else:
                prefill += 1
            seen.extend([ts] * n)
        if prefill or decode:
            self.last_step = {"ts": ts, "prefill": prefill, "decode": decode}

    def step(self):
        self.last_step = None
        finished = []
        for o in self.engine.step():
            if not o.finished:
                continue
            ours, internal = self.added.pop(o.request_id, (None, None))
            if ours is None:
                continue
            token_ts = self.times.pop(internal, None)
            flat = _flatten(ours, o)
            if token_ts is not None and len(token_ts) == flat["output_tokens"]:
                flat["token_ts"] = token_ts
            finished.append(flat)
        return finished, self.last_step, self.engine.has_unfinished_requests()


def resolved_config(llm):
    """The scheduler and KV-cache configuration the engine resolved (docs/vllm.md): after vLLM
    filled in its platform defaults and profiled memory, not what was asked for. It is read from
    `llm.llm_engine.vllm_config`: in-process that object is the engine core's own; multiprocess,
    vLLM copies the core's post-start values (KV blocks, block size, max_model_len) back into it
    from the core's ready message. On CPU the KV blocks follow from `VLLM_CPU_KVCACHE_SPACE`."""
    config = llm.llm_engine.vllm_config
    scheduler = config.scheduler_config
    cache = config.cache_config
    # The scheduler's per-step token budget: `max_num_scheduled_tokens` when set, else
    # `max_num_batched_tokens` (vllm/v1/core/sched/scheduler.py).
    budget = getattr(scheduler, "max_num_scheduled_tokens", None) or scheduler.max_num_batched_tokens
    resolved = {
        "max_num_seqs": scheduler.max_num_seqs,
        "max_num_batched_tokens": budget,
        "num_kv_blocks": cache.num_gpu_blocks,
        "block_size": cache.block_size,
        "prefix_caching": bool(cache.enable_prefix_caching),
        "chunked_prefill": bool(scheduler.enable_chunked_prefill),
    }
    return {key: _plain(value) for key, value in resolved.items()}


def engine_processes():
    """The pids of vLLM's own processes among this process's descendants: those whose argv[0]
    vLLM set to `VLLM::EngineCore` or `VLLM::Worker…` (its process titles). Found by name, the one
    thing every vLLM version's multiprocess client, executor and engine-core manager share."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 1 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    found, frontier = [], [os.getpid()]
    while frontier:
        for pid in children.get(frontier.pop(), []):
            frontier.append(pid)
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv0 = f.read().split(b"\0")[0]
            except OSError:
                continue
            if argv0.startswith(b"VLLM::"):
                found.append(pid)
    return sorted(found)


def _plain(value):
    """A config value as a plain int or bool (vLLM's may be numpy or pydantic types); None stays."""
    if value is None or isinstance(value, bool):
        return value
    return int(value)


def _import_vllm():
    """`import vllm`, checked to come from this interpreter's venv (batchlab checked sys.prefix)."""
    try:
        import vllm
    except ImportError as e:
        raise RuntimeError(f"`import vllm` failed in {sys.prefix} (sys.path: {sys.path}): {e}") from e
    venv = os.path.realpath(sys.prefix)
    where = os.path.realpath(vllm.__file__)
    if not where.startswith(venv + os.sep):
        raise RuntimeError(f"`import vllm` resolved to {where}, outside the venv {venv}")
    return vllm


def _check_order(outputs):
    """`LLM.generate` numbers requests with a counter in input order and returns outputs sorted by
    it; a numeric id out of order would mean outputs answer the wrong requests."""
    try:
        ids = [int(o.request_id) for o in outputs]
    except (TypeError, ValueError):
        return
    if any(a >= b for a, b in zip(ids, ids[1:])):
        raise RuntimeError(f"vLLM returned outputs out of input order: request ids {ids}")


def _flatten(request_id, output):
    completion = output.outputs[0] if output.outputs else None
    metrics = getattr(output, "metrics", None)
    flat = {
        "request_id": request_id,
        "prompt_tokens": len(output.prompt_token_ids) if output.prompt_token_ids is not None else None,
        "output_token_ids": [int(t) for t in completion.token_ids] if completion is not None else [],
    }
    flat["output_tokens"] = len(flat["output_token_ids"])
    cached = getattr(output, "num_cached_tokens", None)
    if isinstance(cached, int) and cached >= 0:
        flat["cached_tokens"] = cached
    if completion is not None:
        flat["text"] = completion.text
        flat["finish_reason"] = completion.finish_reason
    if metrics is not None:
        for key in TIMESTAMPS:
            value = getattr(metrics, key, None)
            # RequestStateStats starts every timestamp at 0.0 and leaves it there when the event
            # never happened: that is "absent", not the clock's epoch.
            if isinstance(value, (int, float)) and value != 0.0:
                flat[key] = float(value)
    return flat


def _flatten_embedding(request_id, output):
    """An `EmbeddingRequestOutput` (vLLM 0.32): its prompt's tokens and its vector's length; no
    token is generated, and vLLM keeps no timestamps for it (no `metrics`)."""
    flat = {
        "request_id": request_id,
        "prompt_tokens": len(output.prompt_token_ids) if output.prompt_token_ids is not None else None,
        "output_tokens": 0,
        "output_token_ids": [],
        "finish_reason": "stop",
        "embedding_dims": len(output.outputs.embedding),
    }
    cached = getattr(output, "num_cached_tokens", None)
    if isinstance(cached, int) and cached >= 0:
        flat["cached_tokens"] = cached
    return flat


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
