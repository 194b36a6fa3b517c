"""Images as inputs: generated from --seed (--images, --image-size, --image-format), or read from a dataset,
sent as data URLs.

A generated image is a mosaic of 8x8 blocks of colours drawn from --seed: the same seed makes the same
bytes. Every image of a run is distinct (its last band of blocks holds its own number and colours: 2**24
distinct numbers in an image 24 pixels wide or more, a JPEG's 256 a block below that), so
that no server cache of images (vLLM hashes each image it is sent) answers one it has seen. Both formats
are written without an image library: PNG with zlib, JPEG as a baseline JPEG whose blocks are flat (only
their DC coefficient), which any decoder reads. The part all images of a kind share is encoded once per
process (the PNG's deflate state and the JPEG's bit stream up to the last band), so an image costs the
encoding of its last band only, and what is held is the pool's bodies: each image is in one body.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.request import url2pathname

from poolbench_locust.endpoints.spec import Endpoint, Inputs
from poolbench_locust.imageformats import ImageError, data_url, from_data_url, read_image
from poolbench_locust.options import OptionError, Settings

BLOCK = 8
"""Pixels a side of a mosaic block: a JPEG block, so each is one flat 8x8 block."""
IMAGE_SUFFIXES = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg"}
MAX_FILE_BYTES = 64 * 1024 * 1024
"""The largest image file a dataset may name: more is not an input a pooling server takes."""


# ---- PNG ---------------------------------------------------------------------------------------------


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _rows(colours: list[bytes], width: int, rows: int) -> bytes:
    """The filtered scanlines of one band of blocks: its first row in full (filter None), the others the
    same row again (filter Up: all zeros)."""
    line = b"".join(c * BLOCK for c in colours)[: width * 3]
    return b"\x00" + line + (b"\x02" + bytes(width * 3)) * (rows - 1)


@dataclass(frozen=True)
class _PngBase:
    head: bytes
    deflate: Any
    """The deflate state after every band but the last: copied for each image."""
    last_rows: int


@lru_cache(maxsize=8)
def _png_base(seed: int, width: int, height: int) -> _PngBase:
    rng = random.Random(f"png {seed} {width}x{height}")
    blocks = -(-width // BLOCK)
    last_rows = height - BLOCK * ((height - 1) // BLOCK)
    deflate = zlib.compressobj(6)
    parts = []
    for _ in range((height - 1) // BLOCK):
        parts.append(deflate.compress(_rows([rng.randbytes(3) for _ in range(blocks)], width, BLOCK)))
    return _PngBase(b"".join(parts), deflate, last_rows)


def _band(seed: int, index: int, blocks: int, luma_only: bool = False) -> list[bytes]:
    """The colours of image `index`'s last band: its number in the first blocks (the low bytes first, so that
    a narrow image holds as much of it as fits), then colours drawn from the seed. A JPEG's blocks are YCbCr:
    its number goes in the luma alone (grey), which every decoder turns back into the same pixels, where a
    number in the chroma could be clipped to the same RGB."""
    number = index.to_bytes(9, "big")[::-1]
    grey = [bytes((b, 128, 128)) for b in number[:3]]
    colours = grey if luma_only else [number[i : i + 3] for i in range(0, 9, 3)]
    rng = random.Random(f"band {seed} {index}")
    return (colours + [rng.randbytes(3) for _ in range(blocks)])[:blocks]


def png(seed: int, index: int, width: int, height: int) -> bytes:
    base = _png_base(seed, width, height)
    deflate = base.deflate.copy()
    tail = _rows(_band(seed, index, -(-width // BLOCK)), width, base.last_rows)
    idat = base.head + deflate.compress(tail) + deflate.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


# ---- JPEG --------------------------------------------------------------------------------------------
# Baseline, three components (YCbCr) at full resolution: one MCU is one block of each. A flat block's
# only coefficient is its DC: 8 x (value - 128), quantised by 8 to value - 128. Two Huffman tables of our
# own: DC categories 0..11 as 4-bit codes, and AC with the one symbol every block needs, end-of-block, as
# the 1-bit code 0.

_DQT = b"\xff\xdb" + struct.pack(">H", 67) + b"\x00" + bytes([8] + [1] * 63)
_DHT = (
    b"\xff\xc4"
    + struct.pack(">H", 2 + 17 + 12 + 17 + 1)
    + b"\x00"  # DC table 0
    + bytes([0, 0, 0, 12] + [0] * 12)
    + bytes(range(12))
    + b"\x10"  # AC table 0
    + bytes([1] + [0] * 15)
    + b"\x00"
)
_SOS = b"\xff\xda" + struct.pack(">H", 12) + b"\x03" + b"\x01\x00\x02\x00\x03\x00" + b"\x00\x3f\x00"


class _Bits:
    """A JPEG entropy-coded segment being written: whole bytes (0xFF stuffed) and the bits not yet a byte."""

    __slots__ = ("acc", "nbits", "out")

    def __init__(self) -> None:
        self.out = bytearray()
        self.acc = 0
        self.nbits = 0

    def copy(self) -> _Bits:
        other = _Bits()
        other.out, other.acc, other.nbits = bytearray(self.out), self.acc, self.nbits
        return other

    def put(self, value: int, nbits: int) -> None:
        self.acc = (self.acc << nbits) | value
        self.nbits += nbits
        while self.nbits >= 8:
            self.nbits -= 8
            byte = (self.acc >> self.nbits) & 0xFF
            self.out.append(byte)
            if byte == 0xFF:
                self.out.append(0)
        self.acc &= (1 << self.nbits) - 1

    def block(self, diff: int) -> None:
        category = abs(diff).bit_length()
        self.put(category, 4)
        if category:
            self.put(diff if diff > 0 else diff + (1 << category) - 1, category)
        self.put(0, 1)  # end of block: every AC coefficient is zero

    def end(self) -> bytes:
        if self.nbits:  # pad the last byte with ones, as the standard asks
            self.put((1 << (8 - self.nbits)) - 1, 8 - self.nbits)
        return bytes(self.out)


@dataclass(frozen=True)
class _JpegBase:
    bits: _Bits
    dc: tuple[int, int, int]
    """Each component's last DC value: the first block of the last band is coded as a difference to it."""


def _mcus(bits: _Bits, dc: list[int], colours: list[bytes]) -> None:
    for colour in colours:
        for c in range(3):
            value = colour[c] - 128
            bits.block(value - dc[c])
            dc[c] = value


@lru_cache(maxsize=8)
def _jpeg_base(seed: int, width: int, height: int) -> _JpegBase:
    rng = random.Random(f"jpeg {seed} {width}x{height}")
    blocks = -(-width // BLOCK)
    bits, dc = _Bits(), [0, 0, 0]
    for _ in range((height - 1) // BLOCK):
        _mcus(bits, dc, [rng.randbytes(3) for _ in range(blocks)])
    return _JpegBase(bits, (dc[0], dc[1], dc[2]))


def jpeg(seed: int, index: int, width: int, height: int) -> bytes:
    base = _jpeg_base(seed, width, height)
    bits, dc = base.bits.copy(), list(base.dc)
    _mcus(bits, dc, _band(seed, index, -(-width // BLOCK), luma_only=True))
    frame = struct.pack(">HBHHB", 17, 8, height, width, 3) + b"\x01\x11\x00\x02\x11\x00\x03\x11\x00"
    return b"\xff\xd8" + _DQT + b"\xff\xc0" + frame + _DHT + _SOS + bits.end() + b"\xff\xd9"


ENCODERS = {"png": png, "jpeg": jpeg}


def generated(settings: Settings, index: int) -> str:
    """Image `index` of this run's --seed, --image-size and --image-format, as a data URL."""
    width, height = settings.image_size
    return data_url(settings.image_format, ENCODERS[settings.image_format](settings.seed, index, width, height))


class ImageNumbers:
    """Hands each generated image of a pool its own number, so that every image sent is distinct."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.next = 0

    def take(self, count: int) -> tuple[str, ...]:
        first, self.next = self.next, self.next + count
        return tuple(generated(self.settings, i) for i in range(first, first + count))


def with_generated(inputs: Inputs, numbers: ImageNumbers) -> Inputs:
    """`inputs` with --images generated images for each of its texts (documents of a query), or for each
    conversation of a batch of chats."""
    per = numbers.settings.images
    return replace(inputs, images=tuple(numbers.take(per) for _ in (inputs.conversations or inputs.texts)))


# ---- images of a dataset ---------------------------------------------------------------------------

DATASET_IMAGE_BYTES = 256 * 1024 * 1024
"""The most bytes of images a dataset's records hold inline (data URLs, a table's image bytes): reading stops
there, as it stops at the records a pool can use. Files are held as paths and cost nothing here."""


def inline_bytes(inputs: Inputs) -> int:
    """Bytes of the images `inputs` hold inline (data URLs), not as file paths or http(s) URLs."""
    return sum(len(url) for urls in inputs.images for url in urls if url.startswith("data:"))


def dataset_image(value: object, base: Path | None, where: str) -> str:
    """One image a dataset names: an http(s) URL, sent as is; a data URL, or a file (relative to the dataset's
    own folder), checked to be a readable PNG or JPEG (a file kept as a file: URL, sent as a data URL).
    OptionError of --dataset naming the place and the image otherwise."""
    if isinstance(value, Mapping):  # Hugging Face's Image feature: {"bytes", "path"}
        if isinstance(value.get("bytes"), bytes):
            try:
                info = read_image(value["bytes"])
            except ImageError as e:
                raise OptionError("--dataset", f"{where}: image bytes are not a readable PNG or JPEG: {e}") from None
            return data_url(info.format, value["bytes"])
        value = value.get("path")
    if not isinstance(value, str) or not value.strip():
        raise OptionError("--dataset", f"{where}: field 'image' holds something other than a path or URL")
    if value.startswith(("http://", "https://")):
        return value
    if value.startswith("data:"):
        try:
            read_image(from_data_url(value))
        except ImageError as e:
            raise OptionError("--dataset", f"{where}: image data URL is not a readable PNG or JPEG: {e}") from None
        return value
    path = Path(value) if base is None or Path(value).is_absolute() else base / value
    image_file(path, where)  # checked now; read again when its request is prepared
    return path.resolve().as_uri()


def image_file(path: Path, where: str) -> str:
    """A PNG or JPEG file as a data URL, checked; OptionError of --dataset naming it otherwise."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise OptionError("--dataset", f"{where}: image {path} is larger than {MAX_FILE_BYTES >> 20} MB")
        data = path.read_bytes()
    except OSError as e:
        raise OptionError("--dataset", f"{where}: image {path} cannot be read: {e.strerror or e}") from None
    try:
        info = read_image(data)
    except ImageError as e:
        raise OptionError("--dataset", f"{where}: image {path} is not a readable PNG or JPEG: {e}") from None
    return data_url(info.format, data)


def is_image_folder(path: Path) -> bool:
    """A folder of image files (file:DIR), not a `datasets` save_to_disk directory."""
    if (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists():
        return False
    return any(p.suffix.lower() in IMAGE_SUFFIXES for p in path.iterdir() if p.is_file())


def folder_images(path: Path, limit: int) -> Iterator[str]:
    """The folder's image files, in name order, each checked, as file: URLs (read when prepared)."""
    names = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    for file in names[:limit]:
        image_file(file, str(file))
        yield file.resolve().as_uri()


def sendable(endpoint: Endpoint, inputs: Inputs) -> Inputs:
    """`inputs` as the endpoint sends them: a dataset's image files (file: URLs, checked when the dataset
    was read) read now, as data URLs, so that a dataset holds paths and only the pool holds images."""
    if endpoint.images == "alone" and not all(inputs.images):
        raise OptionError("--dataset", f"{endpoint.route} takes images alone: every record needs an image")
    if not any(url.startswith("file:") for urls in inputs.images for url in urls):
        return inputs
    loaded = tuple(tuple(_loaded(url) for url in urls) for urls in inputs.images)
    return replace(inputs, images=loaded)


def _loaded(url: str) -> str:
    if not url.startswith("file:"):
        return url
    path = Path(url2pathname(url.removeprefix("file://")))
    return image_file(path, str(path))
