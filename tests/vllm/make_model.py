"""Build the `vllm` test tier's model: a tiny Llama with random weights and a byte-level BPE
tokenizer trained here (on CPython's own sources), with a ChatML template. Nothing is
downloaded; the same files come out every time (seeded).

    VLLM_VENV/bin/python tests/vllm/make_model.py OUT_DIR

Runs in vLLM's virtualenv (torch, transformers and tokenizers come with it), not the project's.
"""

from __future__ import annotations

import glob
import os
import sys
import sysconfig

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 2048
END, START, STOP = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
TEMPLATE = (
    "{% for m in messages %}"
    "{{ '<|im_start|>' + m['role'] + '\n' }}"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for part in m['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def tokenizer() -> PreTrainedTokenizerFast:
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.post_processor = processors.ByteLevel(trim_offsets=False)
    sources = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:200]
    bpe.train(
        sources,
        trainers.BpeTrainer(
            vocab_size=VOCAB,
            special_tokens=[END, START, STOP],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=END,
        eos_token=STOP,
        pad_token=END,
        unk_token=None,
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = TEMPLATE
    return fast


def main(out: str) -> None:
    torch.manual_seed(0)
    os.makedirs(out, exist_ok=True)
    tok = tokenizer()
    tok.save_pretrained(out)
    stop, end = tok.convert_tokens_to_ids(STOP), tok.convert_tokens_to_ids(END)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,  # head_dim 32: vLLM's CPU attention needs at least 32
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        bos_token_id=end,
        eos_token_id=stop,
        pad_token_id=end,
        torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    GenerationConfig(bos_token_id=end, eos_token_id=stop, pad_token_id=end).save_pretrained(out)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tiny-model")
