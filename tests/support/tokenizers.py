"""Small tokenizer files written for a test, so token counts are known without downloading a model."""

from __future__ import annotations

from pathlib import Path

import pytest


def write_tokenizer(path: Path) -> Path:
    """A small WordLevel tokenizer with [CLS] ... [SEP], as BERT-like embedding models count."""
    tokenizers = pytest.importorskip("tokenizers")
    from poolbench_locust.workload.datasets import VOCABULARY

    vocab = {w: i for i, w in enumerate(["[UNK]", "[CLS]", "[SEP]", *VOCABULARY])}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
    )
    tok.save(str(path))
    return path
