"""JPEG and PNG encode/decode with the fastest codec installed.

JPEG goes through simplejpeg (libjpeg-turbo) when it is importable, else Pillow. PNG
always goes through Pillow. Decoded images are ``(H, W, C)`` uint8 (or ``(H, W)`` for
single-channel 8/16-bit PNG, as depth is).
"""

from __future__ import annotations

import io

import numpy as np

from rayform.errors import InvalidInput, Malformed

try:  # an installed fast path, not a requirement
    import simplejpeg as _simplejpeg
except ImportError:  # pragma: no cover - exercised by forcing the fallback in tests
    _simplejpeg = None

JPEG_MAGIC = b"\xff\xd8\xff"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def jpeg_backend() -> str:
    return "simplejpeg" if _simplejpeg is not None else "pillow"


def sniff(data: bytes) -> str:
    """``"jpeg"`` or ``"png"`` from the leading bytes; InvalidInput otherwise."""
    head = bytes(data[:8])
    if head.startswith(JPEG_MAGIC):
        return "jpeg"
    if head.startswith(PNG_MAGIC):
        return "png"
    raise InvalidInput(f"image bytes starting {head.hex()}: neither JPEG nor PNG")


def frame_encoding(data: bytes | memoryview, encoding: str) -> str:
    """One frame's format: its stream's, or (a stream recorded in both, ``"mixed"``) its own bytes'."""
    return sniff(bytes(data[:8])) if encoding == MIXED else encoding


MIXED = "mixed"  # a stream whose frames are JPEG or PNG, each as recorded
MAX_PIXELS = 1 << 28  # 16384 x 16384: an image claiming more is refused before it is decoded


def dimensions(data: bytes | memoryview, encoding: str, what: str = "image") -> tuple[int, int]:
    """``(height, width)`` from an encoded image's header, without decoding its pixels."""
    try:
        if encoding == "jpeg" and _simplejpeg is not None:
            h, w, _, _ = _simplejpeg.decode_jpeg_header(data)
            return int(h), int(w)
        if encoding in ("jpeg", "png"):
            from PIL import Image

            with Image.open(io.BytesIO(data)) as img:
                return int(img.height), int(img.width)
    except Exception as e:  # every codec's own error for bytes that are not an image
        raise Malformed(f"{what}: not a readable {encoding} image ({type(e).__name__}: {str(e)[:100]})") from None
    raise InvalidInput(f"image encoding {encoding!r}: not jpeg or png")


def check_dimensions(data: bytes | memoryview, encoding: str, expect: tuple[int, ...] | None, what: str) -> None:
    """Refuse an image whose header claims another size than expected (or an absurd one) before
    a pixel is decoded: a hostile header must not make a worker allocate gigabytes."""
    h, w = dimensions(data, encoding, what)
    if expect is not None and (h, w) != tuple(expect[:2]):
        raise Malformed(f"{what}: its header says {w}x{h}, the schema {expect[1]}x{expect[0]}")
    if h * w > MAX_PIXELS:
        raise Malformed(f"{what}: its header claims {w}x{h} pixels, more than {MAX_PIXELS}")


def decode_jpeg(data: bytes | memoryview, out: np.ndarray | None = None) -> np.ndarray:
    """RGB ``(H, W, 3)``; decoded straight into ``out`` (a writable HWC array) when given."""
    if _simplejpeg is not None:
        result: np.ndarray = _simplejpeg.decode_jpeg(data, colorspace="RGB", fastdct=False, fastupsample=False, buffer=out)
        return result
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    if out is None:
        return image
    np.copyto(out, image)
    return out


def decode_jpeg_into(data: bytes | memoryview, out: np.ndarray) -> bool:
    """Decode straight into ``out`` (a writable ``(H, W, 3)`` array) with no separate header
    read: True if the JPEG was exactly that size and decoded. False otherwise (another size,
    undecodable, or no libjpeg-turbo), having allocated nothing: libjpeg-turbo refuses a buffer
    smaller than the image its header claims. ``decode`` then says what is wrong."""
    if _simplejpeg is None:
        return False  # Pillow would allocate what the header claims: ``decode`` checks it first
    try:
        image = decode_jpeg(data, out)
    except Exception:  # any codec error: the checked path reports it
        return False
    return bool(image.shape == out.shape)


def encode_jpeg(image: np.ndarray, quality: int = 90) -> bytes:
    image = np.ascontiguousarray(image)
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    if _simplejpeg is not None:
        result: bytes = _simplejpeg.encode_jpeg(image, quality=quality, colorspace="RGB", colorsubsampling="420")
        return result
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="JPEG", quality=quality, subsampling=2)
    return buf.getvalue()


def decode_png(data: bytes | memoryview) -> np.ndarray:
    from PIL import Image

    img = Image.open(io.BytesIO(data))
    if img.mode in ("I;16", "I;16B", "I"):
        return np.asarray(img).astype(np.uint16) if img.mode != "I" else np.asarray(img)
    if img.mode not in ("RGB", "L"):
        return np.asarray(img.convert("RGB"))
    return np.asarray(img)


def encode_png(image: np.ndarray) -> bytes:
    from PIL import Image

    image = np.ascontiguousarray(image)
    if image.dtype == np.uint16 and image.ndim == 2:
        pil = Image.fromarray(image.astype("<u2", copy=False))  # I;16 (Pillow 13 refuses mode= for it)
    elif image.dtype == np.uint8:
        pil = Image.fromarray(image)
    else:
        raise InvalidInput(f"PNG: cannot encode {image.dtype} {image.shape}; store it raw")
    buf = io.BytesIO()
    pil.save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def decode(data: bytes | memoryview, encoding: str, expect: tuple[int, ...] | None = None,
           what: str = "image", out: np.ndarray | None = None) -> np.ndarray:
    """An encoded image decoded, its header checked first (against ``expect``, (H, W), if given).
    A JPEG is decoded straight into ``out`` when given; a PNG always into a new array."""
    if encoding not in ("jpeg", "png"):
        raise InvalidInput(f"image encoding {encoding!r}: not jpeg or png")
    check_dimensions(data, encoding, expect, what)
    try:
        return decode_jpeg(data, out) if encoding == "jpeg" else decode_png(data)
    except Exception as e:
        raise Malformed(f"{what}: not a decodable {encoding} image ({type(e).__name__}: {str(e)[:100]})") from None


def decode_resized(data: bytes | memoryview, encoding: str, size: tuple[int, int], expect: tuple[int, ...] | None = None,
                   what: str = "image") -> np.ndarray:
    """An encoded image decoded at ``size`` (H, W): a JPEG through libjpeg-turbo's DCT scaling
    to the smallest of its M/8 scales at least that large (a quarter of the pixels decoded for
    half the size, and no resize at all where a scale is exact), then resized the rest of the
    way; anything else decoded whole, then resized."""
    if encoding != "jpeg" or _simplejpeg is None:
        scaled = decode(data, encoding, expect, what)
    else:
        check_dimensions(data, encoding, expect, what)
        try:
            scaled = _simplejpeg.decode_jpeg(data, colorspace="RGB", fastdct=False, fastupsample=False,
                                             min_height=size[0], min_width=size[1])
        except Exception as e:
            raise Malformed(f"{what}: not a decodable jpeg image ({type(e).__name__}: {str(e)[:100]})") from None
    return scaled if scaled.shape[:2] == tuple(size) else resize(scaled, size)


def encode(image: np.ndarray, encoding: str, quality: int = 90) -> bytes:
    if encoding == "jpeg":
        return encode_jpeg(image, quality)
    if encoding == "png":
        return encode_png(image)
    raise InvalidInput(f"image encoding {encoding!r}: not jpeg or png")


def resize(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Resize to ``(H, W)`` with Pillow's antialiasing filter."""
    from PIL import Image

    h, w = size
    squeezed = image[:, :, 0] if image.ndim == 3 and image.shape[2] == 1 else image
    out = np.asarray(Image.fromarray(squeezed).resize((w, h), Image.Resampling.BILINEAR))
    return out.reshape(h, w, *image.shape[2:]) if image.ndim == 3 else out
