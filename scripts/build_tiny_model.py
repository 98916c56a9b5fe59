"""Builds a tiny random-weight Llama model that vLLM can load, entirely offline.

Usage: python build_tiny_model.py OUT_DIR

The model is for exercising the engine path (loading, scheduling, sampling, stats), not for
meaningful text: weights are random (seeded), and the byte-level BPE tokenizer is trained here on
pseudo-words generated from a seeded RNG. A marker file records the recipe version; a rerun with
the same version does nothing.

The model's chat template is `tiny_chat_template.jinja` (next to this script; batchlab's simulator
uses the same file), saved as the model's `chat_template.jinja`. It is kept apart from the recipe:
a model built before it, or with an older copy, gets the current template on the next run without
being rebuilt.
"""

import json
import os
import random
import shutil
import sys

# Bump when anything below changes, so existing models are rebuilt.
RECIPE_VERSION = 1
MARKER = "batchlab-model.json"
# The chat template: installed (not rebuilt) whenever the model's copy differs from this one.
TEMPLATE_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_chat_template.jinja")
TEMPLATE_FILE = "chat_template.jinja"

SEED = 1234
VOCAB_SIZE = 4096
HIDDEN = 128
HEADS = 4  # head size 32: one of the sizes vLLM's CPU attention supports
LAYERS = 2
INTERMEDIATE = 256
MAX_POSITIONS = 2048
SPECIAL = ["<unk>", "<s>", "</s>"]


def corpus(rng, words):
    """Deterministic pseudo-text: words of random syllables, with punctuation and newlines."""
    onsets = ["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "st", "tr", "ch"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou", "ee"]
    codas = ["", "n", "r", "s", "t", "l", "ng", "ck"]
    line = []
    for _ in range(words):
        word = "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(rng.randint(1, 3)))
        if rng.random() < 0.1:
            word = word.capitalize()
        line.append(word)
        if rng.random() < 0.08:
            line[-1] += rng.choice([".", ",", "!", "?", ";"])
        if len(line) >= 12:
            yield " ".join(line)
            line = []
    if line:
        yield " ".join(line)


def build_tokenizer(out_dir, rng):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(rng, 300_000), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", model_max_length=MAX_POSITIONS
    )
    fast.save_pretrained(out_dir)
    return fast


def build_model(out_dir, tokenizer):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    config.architectures = ["LlamaForCausalLM"]
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out_dir, safe_serialization=True)
    return config


def install_chat_template(model_dir):
    """Writes the chat template into `model_dir` unless it is already there, byte for byte, and
    records it in the marker. Returns whether anything changed."""
    with open(TEMPLATE_SOURCE) as f:
        template = f.read()
    path = os.path.join(model_dir, TEMPLATE_FILE)
    if os.path.exists(path):
        with open(path) as f:
            if f.read() == template:
                return False
    with open(path + ".partial", "w") as f:
        f.write(template)
    os.replace(path + ".partial", path)
    marker = os.path.join(model_dir, MARKER)
    info = {}
    if os.path.exists(marker):
        with open(marker) as f:
            info = json.load(f)
    info["chat_template"] = TEMPLATE_FILE
    with open(marker, "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    return True


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: build_tiny_model.py OUT_DIR")
    out_dir = sys.argv[1]
    marker = os.path.join(out_dir, MARKER)
    if os.path.exists(marker):
        with open(marker) as f:
            if json.load(f).get("recipe_version") == RECIPE_VERSION:
                if install_chat_template(out_dir):
                    print(f"build_tiny_model: {out_dir}: chat template installed ({TEMPLATE_FILE})")
                else:
                    print(f"build_tiny_model: {out_dir} is up to date (recipe {RECIPE_VERSION}), skipped")
                return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tmp = out_dir + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    rng = random.Random(SEED)
    tokenizer = build_tokenizer(tmp, rng)
    config = build_model(tmp, tokenizer)
    info = {
        "recipe_version": RECIPE_VERSION,
        "vocab_size": config.vocab_size,
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "seed": SEED,
    }
    with open(os.path.join(tmp, MARKER), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    install_chat_template(tmp)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    print(f"build_tiny_model: built {out_dir}: {json.dumps(info)}")


if __name__ == "__main__":
    main()
