"""Builds the cross-encoder and the classifiers the real servers serve, from all-MiniLM-L6-v2's config with
random weights: no download. A load test needs the model's shape and cost, not its training.

Run by devsupport/real/install.sh with the vllm venv's Python (it has transformers and torch):

    python build_models.py MINILM_DIR OUT_DIR

writes OUT_DIR/<name>/ for each model below: config.json and model.safetensors from transformers, and the
MiniLM's own tokenizer files copied byte for byte (vLLM's transformers 5 and Infinity's 4.57 both read
them; a tokenizer re-saved by one release is not always read alike by the other).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoConfig, BertForSequenceClassification, BertForTokenClassification

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")

# name: (head, labels). One label: a cross-encoder (vLLM's /rerank and /score, Infinity's reranker: Infinity
# picks its reranker for a SequenceClassification model with fewer than two labels); three: a classifier
# (vLLM's /classify, Infinity's classifier); a token-classification head: vLLM's /pooling token_classify.
MODELS = {
    "minilm-rerank": (BertForSequenceClassification, ["score"]),
    "minilm-classify": (BertForSequenceClassification, ["negative", "neutral", "positive"]),
    "minilm-token-classify": (BertForTokenClassification, ["O", "B-ENT", "I-ENT", "B-NUM", "I-NUM"]),
}


def build(minilm: Path, out: Path) -> None:
    for name, (head, labels) in MODELS.items():
        config = AutoConfig.from_pretrained(minilm)
        config.num_labels = len(labels)
        config.id2label = dict(enumerate(labels))
        config.label2id = {label: i for i, label in enumerate(labels)}
        torch.manual_seed(0)  # the same weights every build
        model = head(config)
        target = out / name
        if target.exists():
            shutil.rmtree(target)
        model.save_pretrained(target, safe_serialization=True)
        for file in TOKENIZER_FILES:
            shutil.copyfile(minilm / file, target / file)
        print(f"real: built {target} ({head.__name__}, {len(labels)} labels)")


if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[2]))
