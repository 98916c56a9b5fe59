"""Chat prompts for batchlab's protocol engines (docs/engines.md): the request's `messages`, through
the tokenizer's chat template or the request's own `chat_template`, as token ids.

batchlab sends a chat request with `messages` (a list of `{"role", "content"}` dicts) and
`chat_template` (a Jinja source batchlab already checked, or None for the model's own). An engine
that takes chat prompts says so in `start()`'s info with `model_chat_template`, whether the model
has a template of its own; when it has none, batchlab sends those requests as plain text instead
(and warns once), so `prompt_ids` never needs a fallback of its own.
"""


def has_chat_template(tokenizer):
    """Whether the model's tokenizer has a chat template of its own."""
    return bool(getattr(tokenizer, "chat_template", None))


def prompt_ids(tokenizer, request):
    """The token ids of a chat request: its messages templated with `add_generation_prompt=True`
    and tokenized, as Hugging Face's `apply_chat_template(..., tokenize=True)` does (the template
    writes any BOS itself; no special tokens are added)."""
    ids = tokenizer.apply_chat_template(
        request["messages"],
        chat_template=request.get("chat_template"),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    # Some tokenizer versions return a BatchEncoding whatever return_dict says.
    if hasattr(ids, "keys") and "input_ids" in ids:
        ids = ids["input_ids"]
    return [int(t) for t in ids]
