"""Untrusted text in a judgment prompt (page text, dataset fields, past actions): lookalikes folded,
anything that could pose as a response marker, an output tag or a section header escaped and
counted (``neutralize``), or fenced (``fence``), and long fields capped (``cap``). See
``judgment.format``'s module doc for why."""

from __future__ import annotations

import re

# Linear: each ``\s*`` either follows a literal or is followed by one that whitespace cannot be,
# and a line's leading blanks never span a newline (``[^\S\n]``), so no run of blank lines is
# scanned once per line.
_MARKER = re.compile(r"\[(?=\s*the\s*(?:begin|end)\s*of\s*response)", re.I)    # also "[TheEnd of..."
_TAG = re.compile(r"<(?=\s*(?:/\s*)?(?:answer|think|criteria|analysis)\s*>)", re.I)
_HEADER = re.compile(r"^([^\S\n]*)#(?=##)", re.M)
_FENCE = re.compile(r"<<<|>>>")
# Lookalikes of the markers' characters: full-width ASCII (U+FF01-FF5E), the ideographic space and
# the small forms of < > # [ ] become ASCII. Invisible characters are removed: zero-width spaces
# and joiners, soft hyphens, BOMs, fillers, bidi controls, variation selectors, and the Unicode
# tag characters (U+E0000-E007F), which can spell hidden ASCII that a model still reads.
_INVISIBLE = [0x00AD, 0x034F, 0x115F, 0x1160, 0x180E, 0x3164, 0xFEFF, 0xFFA0, *range(0x180B, 0x180E),
              *range(0x200B, 0x2010), *range(0x202A, 0x202F), *range(0x2060, 0x2070), *range(0xFE00, 0xFE10),
              *range(0xE0000, 0xE0080), *range(0xE0100, 0xE01F0)]
# The other line breaks (str.splitlines': CR, VT, FF, FS-RS, NEL, U+2028/9) become newlines, so a
# header after one is at a line start for the escaping as it is for a model.
_FOLD = {**{cp: cp - 0xFEE0 for cp in range(0xFF01, 0xFF5F)}, 0x3000: " ", 0xFE5F: "#", 0xFE64: "<",
         0xFE65: ">", 0xFE5D: "[", 0xFE5E: "]", **dict.fromkeys(_INVISIBLE),
         **dict.fromkeys([0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029], "\n")}


# The characters to fold: a text holding none (most page text) is returned as it is. The set of a
# text's characters is ~12x cheaper than the translate's per-character look-ups, which were 22% of
# teacher.verify's CPU at the paper's scale (bench/paper_scale.py, py-spy).
_FOLDED = frozenset(map(chr, _FOLD))


def fold_lookalikes(text: str) -> str:
    """``text`` with full-width and small-form lookalikes as ASCII, invisible characters removed
    and every line break a newline (see the module doc)."""
    if _FOLDED.isdisjoint(set(text)):
        return text
    return text.replace("\r\n", "\n").translate(_FOLD)


def cap(text: str, limit: int) -> tuple[str, int]:
    """``text`` cut to ``limit`` characters with a ``... (N chars cut)`` marker; returns (text,
    characters cut)."""
    if len(text) <= limit:
        return text, 0
    return text[:limit] + f"... ({len(text) - limit} chars cut)", len(text) - limit


def neutralize(text: str) -> tuple[str, int]:
    """``text`` with lookalikes folded and response markers, output tags and section headers
    escaped (see the module doc); returns (safe text, number of escapes)."""
    text = fold_lookalikes(text)
    text, a = _MARKER.subn("&#91;", text)
    text, b = _TAG.subn("&lt;", text)
    text, c = _HEADER.subn(r"\1&#35;", text)
    return text, a + b + c


def fence(name: str, text: str) -> tuple[str, int]:
    """``text`` between BEGIN/END markers, neutralized, with fence tokens inside defused; returns
    (block, number of escapes)."""
    safe, n = neutralize(text)
    safe, m = _FENCE.subn(lambda x: {"<<<": "‹‹‹", ">>>": "›››"}[x.group(0)], safe)
    return f"<<<BEGIN {name}>>>\n{safe}\n<<<END {name}>>>", n + m

