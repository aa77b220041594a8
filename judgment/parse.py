"""Reading judgment prompts and answers back: the fields of a pairwise prompt in the benchmark's
structure (``parse_prompt``, also from WebPRMBench's own rows), the two responses swapped
(``swap_responses``), a prompt rendered again in another format (``rerender_prompt``) and the
verdict of a judgment (``parse_verdict``: valid when it ends in exactly one
``<Answer>Response N</Answer>``)."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from judgment.format import (
    ANSWER_TAG,
    BEGIN,
    END,
    FIELDS,
    OUTPUT_SECTIONS,
    RESPONSES_HEADER,
    SECTIONS,
    JudgmentFormat,
    layout,
)
from judgment.untrusted import fence


@dataclass(slots=True)
class PromptParts:
    """The fields of a pairwise prompt in the benchmark's structure (as rendered, escapes kept).
    ``response_N`` is the action: the text after the block's ``ACTION:`` label (the whole block
    when it has none)."""

    intent: str
    axtree: str
    trajectory: str
    start_url: str
    current_url: str
    response_1: str
    response_2: str


_BEGIN = re.compile(r"\[The Begin of Response ([12])\]")
_ACTION_LABEL = re.compile(r"(?:^|\n)[^\S\n]*ACTION\s*:\s*", re.I)


def response_blocks(text: str) -> list[tuple[int, int, str, str]]:
    """The response blocks of ``text`` as (start, end, "1" or "2", inner text stripped): each
    ``[The Begin of Response N]`` with the first ``[The End of Response N]`` after it, left to
    right, without overlap. Linear in ``text`` (a lazy ``.*?`` between ``\\s*`` would rescan
    every run of blank lines once per character)."""
    ends = {k: [m.start() for m in re.finditer(re.escape(END.format(k)), text)] for k in "12"}
    out, pos = [], 0
    for m in _BEGIN.finditer(text):
        k = m.group(1)
        i = bisect.bisect_left(ends[k], m.end())
        if m.start() < pos or i == len(ends[k]):
            continue
        stop = ends[k][i]
        pos = stop + len(END.format(k))
        out.append((m.start(), pos, k, text[m.end():stop].strip()))
    return out
_FENCED = re.compile(r"\A<<<BEGIN \w+>>>\n(.*)\n<<<END \w+>>>\Z", re.S)


def _unfence(text: str) -> str:
    m = _FENCED.match(text.strip())
    return m.group(1) if m else text.strip()


def response_action(block: str) -> str:
    """The action of a response block: what follows its last ``ACTION:`` label, else the block."""
    labels = list(_ACTION_LABEL.finditer(block))
    return _unfence(block[labels[-1].end():] if labels else block)


def parse_prompt(messages: list[dict] | str) -> PromptParts | None:
    """The fields of a prompt in the benchmark's structure (this project's or WebPRMBench's own
    rows, given as chat messages or one string); None when it lacks the structure."""
    text = messages if isinstance(messages, str) else "\n\n".join(
        m["content"] for m in messages if m.get("role") != "system")
    blocks = {k: v for _, _, k, v in response_blocks(text)}
    if set(blocks) != {"1", "2"}:
        return None
    headers = [h for _, h, _ in SECTIONS] + [RESPONSES_HEADER]
    found = {}
    positions = sorted((m.start(), m.end(), h) for h in headers
                       for m in re.finditer(rf"^[^\S\n]*{re.escape(h)}[^\S\n]*$", text, re.M | re.I))
    for i, (_, end, header) in enumerate(positions):
        stop = positions[i + 1][0] if i + 1 < len(positions) else len(text)
        body = text[end:stop].strip("\n")
        name = next((n for n, h, _ in SECTIONS if h == header), None)
        note = next((nt for n, h, nt in SECTIONS if h == header), None)
        if name is None:
            continue
        lines = body.split("\n")
        if note and lines and (lines[0] == note or lines[0].lower().startswith("note:")):
            lines = lines[1:]                    # a section's note (ours or the benchmark's wording)
        elif name == "current_url" and lines and lines[0].startswith("The URL provides clues"):
            lines = lines[1:]                    # WebArbiter's note carries no "Note:" label
        found.setdefault(name, _unfence("\n".join(lines)))
    return PromptParts(found.get("intent", ""), found.get("axtree", ""), found.get("trajectory", ""),
                       found.get("start_url", ""), found.get("current_url", ""),
                       response_action(blocks["1"]), response_action(blocks["2"]))


def swap_responses(messages: list[dict]) -> list[dict] | None:
    """The same prompt with the contents of Response 1 and Response 2 exchanged; None when the
    prompt does not hold both blocks."""
    out, swapped = [], False
    for m in messages:
        content = m["content"]
        found = response_blocks(content)
        blocks = {k: v for _, _, k, v in found}
        if set(blocks) == {"1", "2"}:
            parts, pos = [], 0
            for start, end, k, _ in found:
                other = blocks["2" if k == "1" else "1"]
                parts += [content[pos:start], f"{BEGIN.format(k)}\n{other}\n{END.format(k)}"]
                pos = end
            content = "".join(parts) + content[pos:]
            swapped = True
        out.append({"role": m["role"], "content": content})
    return out if swapped else None


# -- answers --------------------------------------------------------------------------------------
_ANSWER = re.compile(r"<Answer>\s*Response\s*([12])\s*</Answer>", re.I)


def parse_verdict(text: str) -> int | None:
    """The response (1 or 2) a judgment prefers when it is valid: it ends in exactly one
    ``<Answer>Response N</Answer>`` (nothing but whitespace after it, no other answer tag before
    it); otherwise None (unparsed)."""
    if not isinstance(text, str):
        return None
    tags = _ANSWER.findall(text)
    if len(tags) != 1:
        return None
    last = list(_ANSWER.finditer(text))[-1]
    if text[last.end():].strip():
        return None
    return int(tags[0])


def judgment_sections(text: str) -> dict[str, bool]:
    """Which requested sections (``<think>``, ``<Criteria>``, ``<Analysis>``) a judgment holds,
    each as an opening and a closing tag in order."""
    low = (text or "").lower()
    found = {}
    for s in OUTPUT_SECTIONS:          # str.find, not a lazy regex: linear however many tags open
        i = low.find(f"<{s.lower()}>")
        found[s] = i >= 0 and low.find(f"</{s.lower()}>", i) >= 0
    return found


def answer_text(label: int) -> str:
    """The bare answer for ``label`` (a label-only completion)."""
    return ANSWER_TAG.format(label)


def rerender_prompt(messages: list[dict] | str, fmt: JudgmentFormat) -> list[dict] | None:
    """A prompt in the benchmark's structure (ours or WebPRMBench's) rendered again in ``fmt``
    (e.g. a user's template), its fields as they were (escapes kept, no AXTree budget applied);
    None when the prompt lacks the structure."""
    parts = parse_prompt(messages)
    if parts is None:
        return None
    values = {name: getattr(parts, name) for name in FIELDS}
    if fmt.untrusted == "fence":
        values = {name: fence(name.upper(), text)[0] for name, text in values.items()}
    return layout(values, fmt)

