"""The AXTree cutter: an observation cut to a number of characters around the elements two
actions target, so a judge sees what matters when the page is long.

Long AXTrees are cut in characters (``budget_axtree``, linear in the tree): the root line,
both targets (a bid on several lines: its first line) and their ancestor chains are always kept;
the other lines are added in order of ``min(line index, 2 * distance to the nearest target
line)`` until the characters are spent, and each run of cut lines becomes one ``... (N lines cut)``
marker. Lines longer than ``MAX_LINE_CHARS`` are shortened first.
"""

from __future__ import annotations

import re

from data.actions import ActionParseError, parse_action

MAX_LINE_CHARS = 400

_BID_LINE = re.compile(r"^(\t*)\[([^\]\s]+)\]")


def target_bids(actions: list[str]) -> set[str]:
    bids = set()
    for a in actions:
        try:
            bid = parse_action(a).bid
        except ActionParseError:
            try:    # MAG candidates: the action's first line, then target and guide lines
                bid = parse_action(a.strip().split("\n", 1)[0]).bid
            except ActionParseError:
                continue
        if bid is not None:
            bids.add(bid)
    return bids


def _distance_to(targets: set[int], n: int) -> list[int]:
    """Each line's distance to the nearest line in ``targets`` (``n`` when there is none): two
    passes, not a scan of every target per line."""
    near, last = [n] * n, None
    for i in range(n):
        last = i if i in targets else last
        if last is not None:
            near[i] = i - last
    last = None
    for i in range(n - 1, -1, -1):
        last = i if i in targets else last
        if last is not None:
            near[i] = min(near[i], last - i)
    return near


def budget_axtree(axtree: str, targets: set[str], budget: int) -> tuple[str, dict]:
    """The AXTree cut to about ``budget`` characters around ``targets`` (see the module doc)."""
    lines = axtree.split("\n")
    stats = {"lines_total": len(lines), "chars_total": len(axtree), "long_lines_shortened": 0,
             "targets": sorted(targets), "targets_found": []}
    shown = []
    for line in lines:
        if len(line) > MAX_LINE_CHARS:
            stats["long_lines_shortened"] += 1
            line = line[:MAX_LINE_CHARS] + f"... ({len(line) - MAX_LINE_CHARS} chars cut)"
        shown.append(line)
    target_idx = [i for i, line in enumerate(lines) if (m := _BID_LINE.match(line)) and m.group(2) in targets]
    stats["targets_found"] = sorted({_BID_LINE.match(lines[i]).group(2) for i in target_idx})

    if sum(len(s) + 1 for s in shown) <= budget:
        keep = set(range(len(lines)))
    else:
        first: dict[str, int] = {}
        for i in target_idx:
            first.setdefault(_BID_LINE.match(lines[i]).group(2), i)
        targets = set(first.values())   # a bid on many lines (a broken or hostile tree): its first line
        required = {0} | targets
        # Each target's ancestor chain by indentation (the nearest earlier line indented less, and
        # so on), in one pass: ``open_`` holds the chain of the current line, indents increasing.
        # A chain is marked from the line up and stops at a line already marked, whose own chain
        # was marked before: linear however many lines share a target's bid.
        open_: list[tuple[int, int]] = []
        for i, line in enumerate(lines):
            d = len(line) - len(line.lstrip("\t"))
            while open_ and open_[-1][0] >= d:
                open_.pop()
            if i in targets:
                for _, j in reversed(open_):
                    if j in required:     # line 0, an earlier target, or a chain already marked
                        break
                    required.add(j)
            open_.append((d, i))
        keep = set(required)
        used = sum(len(shown[i]) + 1 for i in keep)
        near = _distance_to(targets, len(lines))

        def rank(i: int) -> tuple[int, int]:
            return (min(i, 2 * near[i]), i)

        for i in sorted(set(range(len(lines))) - keep, key=rank):
            cost = len(shown[i]) + 1
            if used + cost > budget:
                continue                          # a shorter line further on may still fit
            keep.add(i)
            used += cost
    out, gap = [], 0
    for i, line in enumerate(shown):
        if i in keep:
            if gap:
                out.append(f"... ({gap} lines cut)")
                gap = 0
            out.append(line)
        else:
            gap += 1
    if gap:
        out.append(f"... ({gap} lines cut)")
    text = "\n".join(out)
    # Characters of the original tree the judge does not see: cut lines (with their newline)
    # and the shortened tails of kept lines.
    chars_cut = sum(len(lines[i]) + 1 for i in range(len(lines)) if i not in keep) + \
        sum(len(lines[i]) - MAX_LINE_CHARS for i in keep if len(lines[i]) > MAX_LINE_CHARS)
    stats.update(lines_kept=len(keep), lines_cut=len(lines) - len(keep), chars_cut=min(chars_cut, len(axtree)),
                 chars_shown=len(text), truncated=chars_cut > 0)
    return text, stats


_ROOT_LINE = re.compile(r"^\t*(?:\[[^\]\s]+\] )?RootWebArea\b")


def drop_page_url(axtree: str, url: str) -> str:
    """``axtree`` without the ``, url='...'`` property of its ``RootWebArea`` lines whose URL is
    ``url``: the current page's URL, which its own section shows. BrowserGym writes the page's URL
    on the root line; the paper's AXTrees (WebPRM Collection rows) do not."""
    prop = f", url={url!r}"
    if not url or prop not in axtree:
        return axtree
    return "\n".join(line.replace(prop, "", 1) if _ROOT_LINE.match(line) else line for line in axtree.split("\n"))

