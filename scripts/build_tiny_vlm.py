"""Builds a tiny random-weight LLaVA-style vision-language model that vLLM can load, offline.

Usage: python build_tiny_vlm.py TINY_LLAMA_DIR OUT_DIR

For exercising the image path (a `vllm serve` that takes `image_url` parts, counts their tokens and
caches them), not for meaningful output: a CLIP vision tower of one layer on 28 × 28 pixels
(patches of 14: 2 × 2 = 4 image tokens an image, the CLS feature dropped), a two-layer projector,
and the tiny Llama of `build_tiny_model.py` (its tokenizer, plus an `<image>` token), all random
(seeded). Its chat template puts each message's text, then one `<image>` per image part. So
`[workload.images] tokens_per_image = 4` is batchlab's rule for it. A marker file records the
recipe version; a rerun with the same version does nothing.
"""

import json
import os
import shutil
import sys

RECIPE_VERSION = 2
MARKER = "batchlab-model.json"
SEED = 4321
IMAGE_SIZE = 28
PATCH = 14
IMAGE_TOKENS = (IMAGE_SIZE // PATCH) ** 2

# Text first, then an `<image>` per image part: batchlab's order.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}\n<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}"
    "{% for part in message['content'] %}{% if part['type'] != 'text' %}<image>{% endif %}{% endfor %}{% endif %}"
    "{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}\n<|assistant|>\n{% endif %}"
)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: build_tiny_vlm.py TINY_LLAMA_DIR OUT_DIR")
    llama_dir, out_dir = sys.argv[1], sys.argv[2]
    marker = os.path.join(out_dir, MARKER)
    if os.path.exists(marker):
        with open(marker) as f:
            if json.load(f).get("recipe_version") == RECIPE_VERSION:
                print(f"build_tiny_vlm: {out_dir} is up to date (recipe {RECIPE_VERSION}), skipped")
                return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import (
        AutoTokenizer,
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    tmp = out_dir + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    tokenizer = AutoTokenizer.from_pretrained(llama_dir)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    image_token_id = tokenizer.convert_tokens_to_ids("<image>")
    with open(os.path.join(llama_dir, "config.json")) as f:
        llama = json.load(f)
    text = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=llama["hidden_size"],
        intermediate_size=llama["intermediate_size"],
        num_hidden_layers=llama["num_hidden_layers"],
        num_attention_heads=llama["num_attention_heads"],
        num_key_value_heads=llama["num_key_value_heads"],
        max_position_embeddings=llama["max_position_embeddings"],
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    vision = CLIPVisionConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH,
        projection_dim=64,
    )
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=image_token_id,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        image_seq_length=IMAGE_TOKENS,
    )
    config.architectures = ["LlavaForConditionalGeneration"]
    torch.manual_seed(SEED)
    model = LlavaForConditionalGeneration(config).to(torch.float32)
    model.save_pretrained(tmp, safe_serialization=True)
    # transformers 5 saves the CLIP tower's weights without its `vision_model.` level, which vLLM
    # 0.32's LLaVA loader expects (the layout of published LLaVA checkpoints): put it back.
    from safetensors.torch import load_file, save_file

    weights_path = os.path.join(tmp, "model.safetensors")
    weights = load_file(weights_path)
    renamed = {
        ("vision_tower.vision_model." + k[len("vision_tower."):] if k.startswith("vision_tower.")
         and not k.startswith("vision_tower.vision_model.") else k): v
        for k, v in weights.items()
    }
    save_file(renamed, weights_path, metadata={"format": "pt"})
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(
            size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}
        ),
        tokenizer=tokenizer,
        patch_size=PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
        image_token="<image>",
    )
    processor.save_pretrained(tmp)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(tmp)
    info = {"recipe_version": RECIPE_VERSION, "image_tokens": IMAGE_TOKENS, "image_size": IMAGE_SIZE, "seed": SEED}
    with open(os.path.join(tmp, MARKER), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    print(f"build_tiny_vlm: built {out_dir}: {json.dumps(info)}")


if __name__ == "__main__":
    main()
