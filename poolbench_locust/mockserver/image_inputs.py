"""Images in the mock's requests: every image it is sent is decoded (its data URL, then the PNG or JPEG:
its header, a PNG's zlib data inflated to its exact size), as a server's image loader would, and one it
cannot read is a 400 saying why, as vLLM answers an image PIL cannot open. http(s) URLs are taken unread:
the mock fetches nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from poolbench_locust.imageformats import ImageError, ImageInfo, from_data_url, read_image
from poolbench_locust.mockserver.calls import BadRequest

MAX_IMAGES = 4096
"""Images one request may carry: the mock's bound, as vLLM's --limit-mm-per-prompt is the server's."""


def image(url: Any, where: str) -> ImageInfo | None:
    """One image URL decoded (None for an http(s) URL, taken unread); BadRequest when unreadable."""
    if not isinstance(url, str):
        raise BadRequest(f"{where}: image_url.url must be a string")
    if url.startswith(("http://", "https://")):
        return None
    try:
        return read_image(from_data_url(url))
    except ImageError as e:
        raise BadRequest(f"{where}: failed to load the image: {e}") from None


class Seen:
    """The images of one request, decoded, counted and bounded."""

    def __init__(self) -> None:
        self.images: list[ImageInfo | None] = []

    def add(self, url: Any, where: str) -> None:
        if len(self.images) >= MAX_IMAGES:
            raise BadRequest(f"more than {MAX_IMAGES} images in one request")
        self.images.append(image(url, where))

    def parts(self, parts: Any, where: str) -> str:
        """OpenAI content parts: their text (joined), every image part decoded; BadRequest on a bad part."""
        if not isinstance(parts, list) or not parts:
            raise BadRequest(f"{where}: content must be a non-empty list of content parts")
        texts = []
        for part in parts:
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind == "image_url" and isinstance(part.get("image_url"), Mapping):
                self.add(part["image_url"].get("url"), where)
            else:
                raise BadRequest(f"{where}: a content part must be text or image_url, got {str(kind)[:20]!r}")
        return " ".join(texts)

    def messages(self, messages: list[Any]) -> None:
        """A conversation's content parts decoded (a string content has none)."""
        for i, message in enumerate(messages):
            content = message.get("content") if isinstance(message, Mapping) else None
            if isinstance(content, list):
                self.parts(content, f"messages[{i}]")

    def tokens(self) -> int:
        """Image tokens as Cohere bills them in the mock: one per 32x32 tile of each image read (an
        unread URL: one tile)."""
        return sum(-(-i.width // 32) * -(-i.height // 32) if i is not None else 1 for i in self.images)


def document(value: Any, where: str, seen: Seen) -> str | None:
    """A rerank or score document with images, as text (for its score and count): vLLM's `{"content": [parts]}`
    or SGLang's bare list of parts; None when it is neither."""
    if isinstance(value, Mapping) and "content" in value:
        return seen.parts(value["content"], where)
    if isinstance(value, list):
        return seen.parts(value, where)
    return None
