"""Bytes of a text format (Markdown, HTML) to str, or ParseError when they are not text.

The order, first that applies:

1. A byte-order mark names the encoding (UTF-8, UTF-16 LE/BE, UTF-32 LE/BE);
   bytes the encoding cannot read become U+FFFD.
2. Binary content is refused, as git decides it: a NUL byte in the first
   8 KiB (git reads 8,000 bytes, ``buffer_is_binary`` in xdiff-interface.c),
   or more than one control character per 128 printable bytes there (the
   ``gather_stats``/``convert_is_binary`` rule of git's convert.c: BS, HT, FF
   and ESC count as printable, LF and CR as neither).
3. The charset the caller read from the file (an HTML meta tag), if the bytes
   decode with it.
4. UTF-8, if the bytes are valid UTF-8: the common case costs one decode
   (and the binary check of 8 KiB).
5. charset-normalizer's guess among the code pages documents are written in
   (Windows, ISO-8859, KOI8 and the CJK ones; DOS, Mac and EBCDIC pages are left
   out: it picked them for English text with curly quotes), from up to 64 KiB
   starting at the first line that is not ASCII. Where windows-1252 fits the
   sample and reads at least as coherently as its pick, windows-1252 wins: the
   detector's pick among Latin code pages is close to arbitrary (cp1257 for
   French), and windows-1252 is what Western text that is not UTF-8 is written
   in. When the pick cannot decode the whole file, the whole file is examined.
   When nothing fits, ParseError.
"""

from __future__ import annotations

import codecs
import re
from encodings import normalize_encoding
from encodings.aliases import aliases

from mdrag.errors import ParseError

__all__ = ["decode_text"]

_SNIFF_BYTES = 8192  # how much the binary check reads
_DETECT_BYTES = 64 * 1024  # what charset-normalizer examines; the whole file only if its pick fails on the rest
# Longest first: the UTF-32 LE mark begins with the UTF-16 LE one. Each codec reads and drops its mark.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf_32"),
    (codecs.BOM_UTF32_BE, "utf_32"),
    (codecs.BOM_UTF8, "utf_8_sig"),
    (codecs.BOM_UTF16_LE, "utf_16"),
    (codecs.BOM_UTF16_BE, "utf_16"),
)
# git's "nonprintable" bytes: C0 controls but BS, HT, LF, FF, CR and ESC; and DEL.
_CONTROL = bytes([*range(0x00, 0x08), 0x0B, *range(0x0E, 0x1B), *range(0x1C, 0x20), 0x7F])
_NON_ASCII = re.compile(rb"[\x80-\xff]")
_CANDIDATES = [
    *(f"cp{n}" for n in range(1250, 1259)),
    *("iso8859_2", "iso8859_5", "iso8859_6", "iso8859_7", "iso8859_8", "iso8859_9", "iso8859_15"),
    *("koi8_r", "koi8_u", "cp874"),
    *("shift_jis", "cp932", "euc_jp", "iso2022_jp", "gb18030", "big5", "big5hkscs", "euc_kr", "cp949", "iso2022_kr"),
]


def decode_text(data: bytes, declared: str | None = None) -> tuple[str, str]:
    """The text in ``data`` and the name of the encoding it was read with.

    The name is "utf-8" for UTF-8 without a byte-order mark, else Python's
    codec name ("utf_8_sig", "utf_16", "cp1252", "shift_jis"...). ``declared``
    is a charset label the file states for itself, tried before UTF-8. Raises
    ParseError when the content is binary or no encoding fits; the module
    docstring gives the order of the checks.
    """
    for bom, codec in _BOMS:
        if data.startswith(bom):
            text = data.decode(codec, errors="replace")
            _refuse_binary(data[len(bom) : _SNIFF_BYTES] if codec == "utf_8_sig" else text[:_SNIFF_BYTES].encode())
            return text, codec
    _refuse_binary(data[:_SNIFF_BYTES])
    for label in (declared, "utf-8"):
        if label:
            try:
                return data.decode(label), _codec_name(label)
            except (LookupError, UnicodeDecodeError):
                continue
    return _detect(data)


def _refuse_binary(head: bytes) -> None:
    """Raise ParseError when ``head``, the start of a file, is binary by git's rules."""
    if b"\x00" in head:
        raise ParseError("binary content (NUL bytes): not a text file")
    controls = len(head) - len(head.translate(None, _CONTROL))
    printable = len(head) - controls - head.count(b"\n") - head.count(b"\r")
    if (printable >> 7) < controls:
        raise ParseError("binary content (control characters): not a text file")


def _codec_name(label: str) -> str:
    """Python's name for a codec label ("windows-1252" -> "cp1252"); UTF-8 is "utf-8"."""
    name = normalize_encoding(codecs.lookup(label).name).lower()
    name = aliases.get(name, name)
    return "utf-8" if name == "utf_8" else name


def _detect(data: bytes) -> tuple[str, str]:
    """Decode ``data``, which is not UTF-8, with the code page charset-normalizer finds for it."""
    first = _NON_ASCII.search(data)
    start = data.rfind(b"\n", 0, first.start()) + 1 if first else 0
    sample = data[start : start + _DETECT_BYTES]
    if start + _DETECT_BYTES < len(data) and b"\n" in sample:
        sample = sample[: sample.rindex(b"\n") + 1]  # whole lines: no multibyte character cut in two
    for examined in (sample, data) if len(sample) < len(data) else (data,):
        codec = _best_codec(examined)
        if codec is None:
            continue
        try:
            return data.decode(codec), _codec_name(codec)
        except UnicodeDecodeError:
            continue  # the sample lacked bytes this code page cannot decode
    raise ParseError(
        "unknown text encoding: not UTF-8, and no known code page decodes it cleanly; save the file as UTF-8"
    )


def _best_codec(sample: bytes) -> str | None:
    """charset-normalizer's pick for ``sample`` among _CANDIDATES, or windows-1252 where that reads as well."""
    from charset_normalizer import from_bytes  # only files that are not UTF-8 need it

    best = from_bytes(sample, cp_isolation=_CANDIDATES).best()
    if best is None:
        return None
    if best.encoding != "cp1252":
        western = from_bytes(sample, cp_isolation=["cp1252"]).best()
        if western is not None and western.coherence >= best.coherence:
            return "cp1252"
    return best.encoding
