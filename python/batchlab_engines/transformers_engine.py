"""Hugging Face transformers' `model.generate` as a batchlab protocol engine (docs/engines.md).

A scenario names it `batchlab_engines.transformers_engine:TransformersEngine`; its `engine.python.args`
are this class's keyword arguments. Each batch is padded on the left (with an attention mask) and
generated together; a streamer times every step, so each request gets its own first- and
last-token times (`time.monotonic()`, batchlab's clock).

Per-request settings in one batched `generate` (HF has one generation config per call):

- `max_tokens`: generate runs to the batch's largest `max_tokens`; a per-row stopping criterion
  marks a row finished once it has its own `max_tokens`, and HF pads it from then on. The row's
  output is exactly its first `max_tokens` tokens (fewer if it stopped at EOS).
- `ignore_eos` and `min_tokens`: a per-row logits processor forbids the EOS tokens for a row that
  ignores EOS, and for any row while it has fewer than `min_tokens` tokens. A row that may stop
  and samples EOS is finished (`finish_reason = "stop"`); the EOS token is counted in its output,
  as vLLM counts it.
- `temperature` and `seed`: requests are grouped by (temperature, seed) and each group is one
  batched `generate`, groups one after another in order of first appearance. Temperature 0 is
  greedy; a seed seeds torch's generator before its group. A request's `scheduled_ts` is when its
  group started, so a later group's wait shows as engine queueing.

The streamer follows each row's tokens step by step with the same rules (a row is done at its
`max_tokens` or at an allowed EOS), so the tokens it records are exactly the row's output and
the time of its last token is the step that produced it, never a later padding step.
"""

import os
import time

import torch
import transformers
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from batchlab_engines import chat


class TransformersEngine:
    def __init__(self, model, dtype="float32", device="cpu", threads=None):
        self.model_path = _resolve_model(str(model))
        self.dtype = dtype
        self.device = device
        self.threads = threads
        self.model = None
        self.tokenizer = None

    def start(self):
        if self.threads is not None:
            torch.set_num_threads(int(self.threads))
        # Its progress bars would draw over batchlab's.
        transformers.utils.logging.disable_progress_bar()
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(self.model_path, local_files_only=True)
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            self.model_path, dtype=getattr(torch, self.dtype), local_files_only=True
        ).to(self.device)
        self.model.eval()
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_ids = sorted({eos} if isinstance(eos, int) else set(eos or []))
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0)
        return {
            "name": "transformers",
            "version": transformers.__version__,
            "clock": "monotonic",
            "model_chat_template": chat.has_chat_template(self.tokenizer),
        }

    def generate(self, requests):
        arrival, queued = time.time(), time.monotonic()
        groups = {}
        for i, r in enumerate(requests):
            groups.setdefault((float(r["temperature"]), r["seed"]), []).append(i)
        outputs = [None] * len(requests)
        for (temperature, seed), rows in groups.items():
            group = [requests[i] for i in rows]
            for i, out in zip(rows, self._generate_group(group, temperature, seed)):
                out.update(request_id=requests[i]["id"], arrival_time=arrival, queued_ts=queued)
                outputs[i] = out
        return outputs

    def _generate_group(self, requests, temperature, seed):
        prompts = [self._prompt_ids(r) for r in requests]
        width = max(len(p) for p in prompts)
        input_ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts], device=self.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        rows = [_Row(r, self.eos_ids) for r in requests]
        streamer = _Streamer(rows)
        if temperature > 0:
            sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        else:
            sampling = {"do_sample": False}
        if seed is not None:
            torch.manual_seed(seed)
        scheduled = time.monotonic()
        with torch.inference_mode():
            self.model.generate(
                input_ids=input_ids,
                attention_mask=mask,
                max_new_tokens=max(r.max_tokens for r in rows),
                min_new_tokens=0,
                pad_token_id=self.pad_id,
                eos_token_id=self.eos_ids or None,
                logits_processor=LogitsProcessorList([_EosRules(rows, self.eos_ids, width)]),
                stopping_criteria=StoppingCriteriaList([_MaxTokens(rows, width)]),
                streamer=streamer,
                **sampling,
            )
        return [
            {
                "prompt_tokens": len(p),
                "output_token_ids": row.tokens,
                "text": self.tokenizer.decode(row.tokens, skip_special_tokens=True),
                "finish_reason": row.finish_reason,
                "scheduled_ts": scheduled,
                "first_token_ts": row.first_ts,
                "last_token_ts": row.last_ts,
                "token_ts": row.token_ts,
            }
            for p, row in zip(prompts, rows)
        ]

    def _prompt_ids(self, request):
        if request["prompt_token_ids"] is not None:
            return [int(t) for t in request["prompt_token_ids"]]
        if request.get("messages") is not None:
            return chat.prompt_ids(self.tokenizer, request)
        return self.tokenizer(request["prompt"])["input_ids"]

    def shutdown(self):
        self.model = None
        self.tokenizer = None


def _resolve_model(model):
    """Absolute paths stay; a relative one that does not exist here is taken under
    $BATCHLAB_HOME (default ~/.cache/batchlab), as `engine.vllm.model` is."""
    if os.path.isabs(model) or os.path.exists(model):
        return model
    home = os.environ.get("BATCHLAB_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "batchlab")
    return os.path.join(home, model)


class _Row:
    """One request's progress: its tokens, its rules and its times."""

    def __init__(self, request, eos_ids):
        self.max_tokens = int(request["max_tokens"])
        self.min_tokens = int(request["min_tokens"])
        self.ignore_eos = bool(request["ignore_eos"])
        self.eos_ids = set(eos_ids)
        self.tokens = []
        self.first_ts = None
        self.last_ts = None
        self.token_ts = []
        self.finish_reason = None

    def eos_allowed(self):
        return not self.ignore_eos and len(self.tokens) >= self.min_tokens

    def take(self, token, now):
        """One step's token for this row, unless the row is already done (then it is padding)."""
        if self.finish_reason is not None:
            return
        if self.max_tokens <= 0:
            self.finish_reason = "length"
            return
        allowed = self.eos_allowed()
        self.tokens.append(token)
        self.token_ts.append(now)
        if self.first_ts is None:
            self.first_ts = now
        self.last_ts = now
        if allowed and token in self.eos_ids:
            self.finish_reason = "stop"
        elif len(self.tokens) >= self.max_tokens:
            self.finish_reason = "length"


class _Streamer(BaseStreamer):
    """`generate` calls put() once with the prompts, then once per step with that step's token for
    every row; each row records its own tokens and the time of each (first, last, every one)."""

    def __init__(self, rows):
        self.rows = rows
        self.prompt_seen = False

    def put(self, value):
        now = time.monotonic()
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        for row, token in zip(self.rows, value.reshape(-1).tolist()):
            row.take(int(token), now)

    def end(self):
        for row in self.rows:
            if row.finish_reason is None:
                row.finish_reason = "length"


class _EosRules(LogitsProcessor):
    """Forbids EOS for rows that ignore it, and for every row below its `min_tokens`."""

    def __init__(self, rows, eos_ids, prompt_width):
        self.rows = rows
        self.eos_ids = list(eos_ids)
        self.prompt_width = prompt_width

    def __call__(self, input_ids, scores):
        if self.eos_ids:
            generated = input_ids.shape[1] - self.prompt_width
            for i, row in enumerate(self.rows):
                if row.ignore_eos or generated < row.min_tokens:
                    scores[i, self.eos_ids] = float("-inf")
        return scores


class _MaxTokens(StoppingCriteria):
    """Marks each row finished once it has its own `max_tokens` (HF then pads it)."""

    def __init__(self, rows, prompt_width):
        self.rows = rows
        self.prompt_width = prompt_width

    def __call__(self, input_ids, scores, **kwargs):
        generated = input_ids.shape[1] - self.prompt_width
        return torch.tensor([generated >= row.max_tokens for row in self.rows], device=input_ids.device)
