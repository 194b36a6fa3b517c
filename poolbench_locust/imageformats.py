"""PNG and JPEG as the wire carries them: data URLs, and a reader that says whether bytes are a readable
image and of what size. Shared by the client (a dataset's image checked at start) and the bundled mock
(every image it is sent decoded, as a server's image loader would), with no image library.

Every size and length read is bounded before anything is allocated from it: an image is untrusted input
to the mock and a user's file to the client.
"""

from __future__ import annotations

import base64
import binascii
import struct
import zlib
from dataclasses import dataclass

MIME: dict[str, str] = {"png": "image/png", "jpeg": "image/jpeg"}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_SOI = b"\xff\xd8"
MAX_SIDE = 16384
"""The widest or tallest image read: more is a hostile header, not a picture."""
MAX_PIXELS = 64 * 1024 * 1024
"""The most pixels an image may decode to (a PNG's zlib data is inflated to check it)."""
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


class ImageError(ValueError):
    """Bytes that are not a readable PNG or JPEG; the text says what was wrong."""


@dataclass(frozen=True, slots=True)
class ImageInfo:
    format: str
    """png or jpeg"""
    width: int
    height: int


def data_url(image_format: str, data: bytes) -> str:
    return f"data:{MIME[image_format]};base64,{base64.b64encode(data).decode('ascii')}"


def from_data_url(url: str) -> bytes:
    """The bytes of a base64 data URL of an image; ImageError saying why not."""
    head, comma, payload = url.partition(",")
    if not url.startswith("data:") or not comma:
        raise ImageError("not a data URL (data:image/...;base64,...)")
    if not head.startswith("data:image/") or not head.endswith(";base64"):
        raise ImageError(f"data URL of {head[5:40]!r}: expected an image in base64")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("data URL is not valid base64") from None


def read_image(data: bytes) -> ImageInfo:
    """The format and size of a PNG (its chunks' CRCs checked, its pixels inflated to their exact length)
    or a JPEG (its markers walked to the frame header and its end); ImageError otherwise."""
    if data.startswith(PNG_SIGNATURE):
        return _png(data)
    if data.startswith(JPEG_SOI):
        return _jpeg(data)
    raise ImageError("not a PNG or JPEG (unknown signature)")


def _side(width: int, height: int) -> None:
    if not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE) or width * height > MAX_PIXELS:
        raise ImageError(f"implausible size {width}x{height}")


def _png(data: bytes) -> ImageInfo:
    pos, header, idat, ended = len(PNG_SIGNATURE), None, [], False
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if len(body) != length or pos + 12 + length > len(data):
            raise ImageError("PNG chunk runs past the end of the file")
        (crc,) = struct.unpack_from(">I", data, pos + 8 + length)
        if zlib.crc32(kind + body) != crc:
            raise ImageError(f"PNG chunk {kind.decode('latin-1')!r} fails its CRC")
        pos += 12 + length
        if kind == b"IHDR":
            if length != 13:
                raise ImageError("PNG IHDR is not 13 bytes")
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            ended = True
            break
    if header is None or not idat or not ended:
        raise ImageError("PNG lacks its IHDR, IDAT or IEND chunk")
    width, height, depth, colour, _, _, interlace = header
    _side(width, height)
    if colour not in _PNG_CHANNELS or depth not in (1, 2, 4, 8, 16) or interlace not in (0, 1):
        raise ImageError("PNG header has an unknown colour type, bit depth or interlace")
    if interlace == 0:
        expected = height * (1 + (width * _PNG_CHANNELS[colour] * depth + 7) // 8)
        inflater = zlib.decompressobj()
        try:
            pixels = inflater.decompress(b"".join(idat), expected + 1)
        except zlib.error as e:
            raise ImageError(f"PNG image data is not valid zlib: {e}") from None
        if len(pixels) != expected or not inflater.eof:
            raise ImageError(f"PNG image data inflates to {len(pixels)} bytes, not the {expected} of its header")
    return ImageInfo("png", width, height)


def _jpeg(data: bytes) -> ImageInfo:
    pos, size = 2, None
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            raise ImageError("JPEG marker expected")
        marker = data[pos + 1]
        (length,) = struct.unpack_from(">H", data, pos + 2)
        if length < 2 or pos + 2 + length > len(data):
            raise ImageError("JPEG segment runs past the end of the file")
        if marker in _SOF_MARKERS:
            if length < 8:
                raise ImageError("JPEG frame header too short")
            height, width = struct.unpack_from(">HH", data, pos + 5)
            size = (width, height)
        if marker == 0xDA:  # start of scan: entropy-coded data follows, to the end-of-image marker
            if size is None:
                raise ImageError("JPEG scan before its frame header")
            if not data.rstrip(b"\x00").endswith(b"\xff\xd9"):
                raise ImageError("JPEG does not end with its end-of-image marker")
            _side(*size)
            return ImageInfo("jpeg", *size)
        pos += 2 + length
    raise ImageError("JPEG ends before its image data")
