"""Batched chat conversations: EmbeddingsChatUser with --batch-size N sends N conversations in one
request, `messages` as a list of conversations, and expects one embedding each (vLLM 0.34; WIRE.md).

With --batch-size 1 (the default) a request is one conversation, `messages` a list of messages: the
form every vLLM release with chat embeddings takes. Above 1 (a range too: its every draw), each request
is a batch, even a batch of one, so that one run speaks one form; so is a trace line's batch of several.
"""

from __future__ import annotations

from collections.abc import Sequence

from poolbench_locust.endpoints.spec import Inputs
from poolbench_locust.options import Settings


def batches(settings: Settings) -> bool:
    """Whether a chat request carries a list of conversations (--batch-size above 1)."""
    return settings.batch_size.hi > 1


def batch(conversations: Sequence[Inputs], settings: Settings) -> Inputs:
    """One request's inputs from `conversations` (each one conversation: its `messages`, or its `texts`
    as user messages): the one conversation unchanged, or the batch of them (`Inputs.conversations`)."""
    if len(conversations) == 1 and not batches(settings):
        return conversations[0]
    return Inputs(
        tuple(text for c in conversations for text in c.texts),
        conversations=tuple(
            c.messages or tuple({"role": "user", "content": text} for text in c.texts) for c in conversations
        ),
        # each conversation's images (a dataset record's), beside its last user message
        images=tuple(tuple(url for urls in c.images for url in urls) for c in conversations)
        if any(c.images for c in conversations)
        else (),
    )
