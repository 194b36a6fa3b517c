"""Images as inputs: generated from --seed (--images, --image-size, --image-format), or read from a dataset,
sent as data URLs.

A generated image is a mosaic of 8x8 blocks of colours drawn from --seed, and a number in its last pixels
(`Generator`): the same seed and number make the same bytes. Each request sent carries images of fresh
numbers (workload/pool.py's `FreshImages`), which hold the process's worker index, so that no server cache of
images (vLLM hashes each image's pixels) sees an image twice in a run, across users, processes and workers;
--image-pool N makes the numbers recur, N in all, for a study of such a cache. Both formats are written
without an image library: PNG with zlib, JPEG as a baseline JPEG whose blocks are flat (only their DC
coefficient), which any decoder reads. All but an image's last few dozen bytes are encoded once per process,
so a fresh image costs microseconds whatever its size.
"""

from __future__ import annotations

import base64
import random
import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from urllib.request import url2pathname

from poolbench_locust.endpoints.spec import Endpoint, Inputs
from poolbench_locust.imageformats import ImageError, data_url, from_data_url, read_image
from poolbench_locust.options import OptionError, Settings

BLOCK = 8
"""Pixels a side of a mosaic block: a JPEG block, so each is one flat 8x8 block."""
IMAGE_SUFFIXES = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg"}
MAX_FILE_BYTES = 64 * 1024 * 1024
"""The largest image file a dataset may name: more is not an input a pooling server takes."""
NUMBER_BYTES = 12
"""Bytes of an image's number: 96 bits, which no run uses up. A PNG narrower than 4 pixels, or a JPEG of fewer
than 24 blocks (a byte in half its blocks), holds fewer (`Generator.capacity`)."""


class Generator:
    """The images of one --seed, size and format: one mosaic, each image its own number in its last pixels.

    Everything before the number is encoded once (`head`); an image is the head and its `tail`, a few dozen
    bytes made anew for each number, so that a distinct image for every request costs microseconds, whatever
    its size. As a data URL, the head's base64 is made once too (`url_head`), and a number's image is that and
    `url_tail(number)`."""

    format: str
    capacity: int
    """Bytes of the number the image holds: 256**capacity distinct images, then they recur."""
    head: bytes

    def __init__(self, image_format: str, head: bytes, capacity: int) -> None:
        self.format, self.head, self.capacity = image_format, head, capacity
        cut = len(head) - len(head) % 3  # base64 of a whole number of 3-byte groups: unchanged by what follows
        self.url_head = data_url(image_format, head[:cut])
        self._rest = head[cut:]

    def tail(self, number: int) -> bytes:
        raise NotImplementedError

    def image(self, number: int) -> bytes:
        return self.head + self.tail(number)

    def url_tail(self, number: int) -> bytes:
        """What follows `url_head` in image `number`'s data URL, as ASCII bytes."""
        return base64.b64encode(self._rest + self.tail(number))

    def url(self, number: int) -> str:
        return self.url_head + self.url_tail(number).decode("ascii")

    def number_bytes(self, number: int) -> bytes:
        return (number % (1 << (8 * self.capacity))).to_bytes(self.capacity, "little")


# ---- PNG ---------------------------------------------------------------------------------------------


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _rows(colours: list[bytes], width: int, rows: int) -> bytes:
    """The filtered scanlines of one band of blocks: its first row in full (filter None), the others the
    same row again (filter Up: all zeros)."""
    line = b"".join(c * BLOCK for c in colours)[: width * 3]
    return b"\x00" + line + (b"\x02" + bytes(width * 3)) * (rows - 1)


_IEND = _chunk(b"IEND", b"")


class PngImages(Generator):
    """The image's last bytes of pixel data are its number (the last pixels of its last row: in a row of
    filter Up, the difference to the row above, so distinct numbers are distinct pixels too). They are a
    stored deflate block of their own after the compressed rest, so that an image's tail is that block, the
    zlib checksum and the chunk's CRC continued from the head's, and IEND."""

    def __init__(self, seed: int, width: int, height: int) -> None:
        rng = random.Random(f"png {seed} {width}x{height}")
        blocks = -(-width // BLOCK)
        raw = b"".join(
            _rows([rng.randbytes(3) for _ in range(blocks)], width, min(BLOCK, height - top))
            for top in range(0, height, BLOCK)
        )
        capacity = min(NUMBER_BYTES, 3 * width)
        before = raw[:-capacity]
        deflate = zlib.compressobj(6)
        compressed = deflate.compress(before) + deflate.flush(zlib.Z_SYNC_FLUSH)  # byte-aligned, not final
        self._stored = b"\x01" + struct.pack("<HH", capacity, capacity ^ 0xFFFF)  # the final block, stored
        self._adler = zlib.adler32(before)
        self._crc = zlib.crc32(b"IDAT" + compressed)
        idat = len(compressed) + len(self._stored) + capacity + 4
        ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
        head = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + struct.pack(">I", idat) + b"IDAT" + compressed
        super().__init__("png", head, capacity)

    def tail(self, number: int) -> bytes:
        pixels = self.number_bytes(number)
        data = self._stored + pixels + struct.pack(">I", zlib.adler32(pixels, self._adler))
        return data + struct.pack(">I", zlib.crc32(data, self._crc)) + _IEND


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


def _block_bits(diff: int) -> tuple[int, int]:
    """One flat block as (bits, how many): its DC difference's category and magnitude, then end-of-block."""
    category = abs(diff).bit_length()
    magnitude = diff if diff >= 0 else diff + (1 << category) - 1
    return ((category << category | magnitude) << 1), 4 + category + 1


_BLOCKS = [_block_bits(diff) for diff in range(-255, 256)]
"""A block's bits by its DC difference + 255: the tail's only encoding work is a look-up per block."""


class _Bits:
    """A JPEG entropy-coded segment being written: whole bytes (0xFF stuffed) and the bits not yet a byte."""

    __slots__ = ("acc", "nbits", "out")

    def __init__(self) -> None:
        self.out = bytearray()
        self.acc = 0
        self.nbits = 0

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


class JpegImages(Generator):
    """The image's number is the luma of its last blocks, one byte a block (grey: chroma 128, which every
    decoder turns back into the same pixels, where a number in the chroma could be clipped to the same RGB).
    The head is the entropy-coded data up to them; a tail codes those blocks (a look-up each), pads the last
    byte and ends the image."""

    def __init__(self, seed: int, width: int, height: int) -> None:
        rng = random.Random(f"jpeg {seed} {width}x{height}")
        mcus = -(-width // BLOCK) * -(-height // BLOCK)
        capacity = min(NUMBER_BYTES, max(1, mcus // 2))  # a small image keeps half its blocks the seed's
        bits, dc = _Bits(), [0, 0, 0]
        for _ in range(mcus - capacity):
            colour = rng.randbytes(3)
            for c in range(3):
                bits.put(*_BLOCKS[colour[c] - 128 - dc[c] + 255])
                dc[c] = colour[c] - 128
        # the first numbered block's chroma, grey, against the blocks before it; every later block's is 0, 0
        cb, cr = _BLOCKS[-dc[1] + 255], _BLOCKS[-dc[2] + 255]
        self._first_chroma = ((cb[0] << cr[1]) | cr[0], cb[1] + cr[1])
        grey, grey_bits = _BLOCKS[255]
        self._grey = ((grey << grey_bits) | grey, 2 * grey_bits)
        self._start = (bits.acc, bits.nbits, dc[0], True)
        self._cached: tuple[bytes, tuple[int, int, int, bool]] = (b"", self._start)
        """The state after the number's high bytes, which change once in 65,536 numbers: a tail codes two blocks."""
        frame = struct.pack(">HBHHB", 17, 8, height, width, 3) + b"\x01\x11\x00\x02\x11\x00\x03\x11\x00"
        head = b"\xff\xd8" + _DQT + b"\xff\xc0" + frame + _DHT + _SOS + bytes(bits.out)
        super().__init__("jpeg", head, capacity)

    def _coded(self, state: tuple[int, int, int, bool], data: bytes) -> tuple[int, int, int, bool]:
        """`state` (the bits so far, how many, the last luma, whether no number block is coded yet) after the
        blocks of `data`, a byte a block."""
        acc, nbits, previous, first = state
        for byte in data:
            luma, luma_bits = _BLOCKS[byte - 128 - previous + 255]
            previous = byte - 128
            chroma, chroma_bits = self._first_chroma if first else self._grey
            first = False
            acc = (((acc << luma_bits) | luma) << chroma_bits) | chroma
            nbits += luma_bits + chroma_bits
        return acc, nbits, previous, first

    def tail(self, number: int) -> bytes:
        data = (number % (1 << (8 * self.capacity))).to_bytes(self.capacity, "big")  # the high bytes first
        high, low = data[:-2], data[-2:]
        known, state = self._cached
        if high != known:
            state = self._coded(self._start, high)
            self._cached = (high, state)
        acc, nbits, _, _ = self._coded(state, low)
        pad = -nbits % 8  # the last byte padded with ones, as the standard asks
        acc = (acc << pad) | ((1 << pad) - 1)
        nbits += pad
        return acc.to_bytes(nbits // 8, "big").replace(b"\xff", b"\xff\x00") + b"\xff\xd9"


@lru_cache(maxsize=8)
def generator(image_format: str, seed: int, width: int, height: int) -> Generator:
    """The images of a seed, size and format (made once per process: the head is the costly part)."""
    return (PngImages if image_format == "png" else JpegImages)(seed, width, height)


def png(seed: int, number: int, width: int, height: int) -> bytes:
    return generator("png", seed, width, height).image(number)


def jpeg(seed: int, number: int, width: int, height: int) -> bytes:
    return generator("jpeg", seed, width, height).image(number)


ENCODERS = {"png": png, "jpeg": jpeg}


def generated(settings: Settings, number: int) -> str:
    """Image `number` of this run's --seed, --image-size and --image-format, as a data URL."""
    return generator_of(settings).url(number)


def generator_of(settings: Settings) -> Generator:
    width, height = settings.image_size
    return generator(settings.image_format, settings.seed, width, height)


WORKERS = 1 << 16
"""Processes told apart in an image's number (Locust's worker index, modulo this)."""


class _Sent:
    """Images sent by this process, every pool's: each takes the next number."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


SENT = _Sent()


class ImageNumbers:
    """The numbers of a pool's generated images, so that no two images a run sends are alike unless
    --image-pool N asks for N that recur.

    An image prepared in the pool takes the pool's next number; an image sent takes the process's next
    (`sent`). Each number holds which of the two it is and the process's worker index, so that no image of one
    process is an image of another's, and the same seed on the same worker prepares the same pool. With
    --image-pool N, a number is its count modulo N alone: every process sends the same N images."""

    def __init__(self, settings: Settings, worker: int = 0) -> None:
        self.settings = settings
        self.generator = generator_of(settings)
        self.recur = settings.image_pool
        self.worker = worker % WORKERS
        self.next = 0

    def _number(self, count: int, sent: int) -> int:
        if self.recur:
            return count % self.recur
        # the worker in the top bytes: an image too small to hold them all still tells its own images apart
        return self.worker << (8 * NUMBER_BYTES - 16) | count << 1 | sent

    def take(self, count: int) -> tuple[str, ...]:
        """`count` images for the pool, as data URLs."""
        first, self.next = self.next, self.next + count
        return tuple(self.generator.url(self._number(i, 0)) for i in range(first, first + count))

    def sent(self) -> bytes:
        """A fresh image's data URL after `generator.url_head`: what a request sent carries in place of one."""
        sent = SENT.count
        SENT.count = sent + 1
        return self.generator.url_tail(self._number(sent, 1))

    def distinct(self) -> int | None:
        """How many distinct images the numbers make before they recur: --image-pool's N, or the images' own
        bound (a tiny image holds a small number); None: more than any run sends."""
        bound = 1 << (8 * self.generator.capacity)
        if self.recur:
            return min(self.recur, bound)
        return None if self.generator.capacity >= NUMBER_BYTES else bound


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
