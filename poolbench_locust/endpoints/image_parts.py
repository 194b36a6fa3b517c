"""Images in a request, in each server's form (WIRE.md): OpenAI content parts, the containers each server
wraps them in, and the chat conversation of a chat-form body.

Kept apart from each server's module so that the one way a text and its images become content parts is
written once: vLLM's chat embeddings and /pooling, its rerank and score documents, SGLang's rerank, vLLM's
and Cohere's /v2/embed `inputs` all send the same parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from poolbench_locust.endpoints.spec import Inputs


def content_parts(text: str, images: tuple[str, ...]) -> list[dict[str, Any]]:
    """A text (when not empty) and its images as OpenAI content parts: the text first, as vLLM's and
    SGLang's examples put it."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    parts.extend({"type": "image_url", "image_url": {"url": url}} for url in images)
    return parts


def images_of(inputs: Inputs, i: int) -> tuple[str, ...]:
    return inputs.images[i] if inputs.images else ()


def chat_messages(inputs: Inputs) -> list[dict[str, Any]]:
    """One conversation: a dataset's messages as given (the record's images beside its last user message),
    or a user message per text, its images beside it as content parts (a text alone stays a string, as
    every chat server takes it)."""
    if inputs.messages:
        return with_images(list(inputs.messages), images_alone(inputs))
    return [
        {"role": "user", "content": content_parts(text, images_of(inputs, i)) if inputs.images else text}
        for i, text in enumerate(inputs.texts)
    ]


def with_images(messages: list[Any], images: Sequence[str]) -> list[Any]:
    """A conversation with its images beside its last user message's text (unchanged without images)."""
    if not images:
        return messages
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=len(messages) - 1)
    message = messages[last]
    messages[last] = {**message, "content": content_parts(message.get("content", ""), tuple(images))}
    return messages


def vllm_documents(inputs: Inputs) -> list[Any]:
    """vLLM's rerank and score documents: a string, or `{"content": [parts]}` for one with images."""
    return [
        {"content": content_parts(text, images)} if (images := images_of(inputs, i)) else text
        for i, text in enumerate(inputs.texts)
    ]


def sglang_documents(inputs: Inputs) -> list[Any]:
    """SGLang's rerank documents: a string, or a bare list of content parts for one with images."""
    return [
        content_parts(text, images) if (images := images_of(inputs, i)) else text for i, text in enumerate(inputs.texts)
    ]


def cohere_inputs(inputs: Inputs) -> list[dict[str, Any]]:
    """Cohere's and vLLM's /v2/embed `inputs`: one `{"content": [parts]}` per input."""
    return [{"content": content_parts(text, images_of(inputs, i))} for i, text in enumerate(inputs.texts)]


def images_alone(inputs: Inputs) -> list[str]:
    """Every image of the inputs, in order: Infinity's `input` with `modality: "image"`."""
    return [url for images in inputs.images for url in images]
