"""Images in the mock's requests: every image it is sent is decoded (its data URL, then the PNG or JPEG:
its header, a PNG's zlib data inflated to its exact size), as a server's image loader would, and one it
cannot read is a 400 saying why, as vLLM answers an image PIL cannot open. http(s) URLs are taken unread:
the mock fetches nothing. `DistinctImages` counts the images a server's cache of images would tell apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
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


DISTINCT_KEPT = 262_144
"""Images told apart at most (a 16-byte digest each, about 20 MB): past it, `distinct_images` stops growing and
`distinct_images_complete` says it is a lower bound."""
_DATA_URL = b'"data:image/'


def data_urls(body: bytes) -> Iterator[bytes]:
    """Every image data URL of a JSON body, as written (a JSON string that begins data:image/), unparsed: what
    a server hashes is the image, and one image is one data URL."""
    at = body.find(_DATA_URL)
    while at >= 0:
        end = body.find(b'"', at + 1)
        if end < 0:
            return
        yield body[at + 1 : end]
        at = body.find(_DATA_URL, end + 1)


class DistinctImages:
    """The data URL images of every pooling request received, and how many of them were distinct (by a digest
    of the URL, as vLLM's cache keys an image by a hash of it): /mock/stats' `images`, `distinct_images`."""

    def __init__(self) -> None:
        self.images = 0
        self._digests: set[bytes] = set()
        self.complete = True

    def add(self, body: bytes) -> None:
        digests = self._digests
        for url in data_urls(body):
            self.images += 1
            digest = hashlib.blake2b(url, digest_size=16).digest()
            if len(digests) < DISTINCT_KEPT:
                digests.add(digest)
            elif digest not in digests:
                self.complete = False

    def snapshot(self) -> dict[str, Any]:
        return {"images": self.images, "distinct_images": len(self._digests), "distinct_images_complete": self.complete}
