"""MAG's observation and executor on a live page: Set-of-Mark marks, the candidate menu, the
marked screenshot, and the seven verbs mapped onto BrowserGym actions.

    from search.mag.som import observe, to_code
    obs = observe(harness)                       # after harness.reset()/step() (a BrowserHarness)
    obs.menu                                     # "[1] LINK Home\n[2] INPUT Search products\n..."
    obs.screenshot_png                           # 1440x900 PNG with numbered boxes
    code, action = to_code(step, obs, grounding="som")  # step from search.mag.metrics.check_step
    harness.step(code)

One observation for both groundings (MAG §3.1: prompt, observation, budget and scoring are held
identical; only the action's grounding argument differs): the same marks, the same menu and the
same marked screenshot under Set-of-Mark and coordinate grounding.

Marks. Every rendered, interactive element of the page and its iframes: links with an href,
buttons, form fields (not hidden inputs), selects, text areas, summaries, elements with an
interactive ARIA role, ``contenteditable``, an ``onclick`` attribute, ``tabindex >= 0`` or a
pointer cursor that its parent does not already show; not an element inside a marked link or
button (the link is the target), not one hidden by ``display``/``visibility``/``opacity`` or with
a box under 20 px². Elements outside the viewport are marks too: the menu lists them, the
screenshot cannot show them. Marks are numbered from 1 in document order (the main page, then
each iframe) each step; an id means one element for the whole step.

Menu. One line per mark, ``[id] TYPE text``: TYPE from the tag or the explicit role, text the
accessible label, then a field's current value (``= "..."``), clipped to 80 characters. At most
130 lines: the marks overlapping the viewport first, then the nearest ones outside it, whose
lines end with `` (below)``, `` (above)``, `` (right)`` or `` (left)``.

Executor (``to_code``; the harness needs the ``coord`` subset, ``MAG_ACTION_SUBSETS``). Only the
element verbs use the grounding argument (App. C: the others take none):

    verb         Set-of-Mark (bid of the mark)        coordinates (x, y)
    click        click(bid)                           mouse_click(x, y)
    type         fill(bid, text)                      mouse_click(x, y); select all; keyboard_type(text)
    select       select_option(bid, label)            select_option(bid of the mark under (x, y), label)
    scroll       scroll(0, +-700)                     scroll(0, +-700)
    press_enter  keyboard_press('Enter')              keyboard_press('Enter')
    go_back      go_back()                            go_back()
    finish       send_msg_to_user(answer or '')       send_msg_to_user(answer or '')

``action`` is the step as the PRM sees it (Action-Only): verb, target and content, never the
think or the guide (``action_text``).
"""

from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass, field

VIEWPORT = {"width": 1440, "height": 900}
MAX_TEXT = 80
MAX_LINES = 130
MIN_AREA = 20
SCROLL_PX = 700
MAG_ACTION_SUBSETS = ["chat", "infeas", "bid", "coord", "nav", "tab"]

# Runs in one frame; returns the interactive elements that carry a BrowserGym id, in document order.
_COLLECT_JS = """() => {
  const ROLES = new Set(['button','link','checkbox','radio','tab','menuitem','menuitemcheckbox',
    'menuitemradio','option','combobox','textbox','searchbox','switch','slider','spinbutton',
    'treeitem','listbox']);
  const TAGS = new Set(['BUTTON','SELECT','TEXTAREA','SUMMARY']);
  const clean = s => (s || '').replace(/\\s+/g, ' ').trim();
  const interactive = el => {
    const role = (el.getAttribute('role') || '').toLowerCase();
    if (el.tagName === 'A' && el.hasAttribute('href')) return true;
    if (el.tagName === 'INPUT') return (el.getAttribute('type') || '').toLowerCase() !== 'hidden';
    if (TAGS.has(el.tagName) || ROLES.has(role)) return true;
    if (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable)) return true;
    if (el.hasAttribute('onclick')) return true;
    const ti = el.getAttribute('tabindex');
    if (ti !== null && parseInt(ti) >= 0) return true;
    if (getComputedStyle(el).cursor === 'pointer') {
      const p = el.parentElement;
      return !(p && getComputedStyle(p).cursor === 'pointer');
    }
    return false;
  };
  const kind = el => {
    const role = (el.getAttribute('role') || '').toLowerCase();
    if (role) return role.toUpperCase();
    const t = (el.getAttribute('type') || 'text').toLowerCase();
    switch (el.tagName) {
      case 'A': return 'LINK';
      case 'BUTTON': return 'BUTTON';
      case 'SELECT': return 'SELECT';
      case 'TEXTAREA': return 'TEXTAREA';
      case 'SUMMARY': return 'BUTTON';
      case 'INPUT':
        if (['button', 'submit', 'reset', 'image'].includes(t)) return 'BUTTON';
        if (t === 'checkbox') return 'CHECKBOX';
        if (t === 'radio') return 'RADIO';
        return 'INPUT';
    }
    return el.isContentEditable ? 'TEXTAREA' : 'CLICKABLE';
  };
  const label = el => {
    let t = clean(el.getAttribute('aria-label'));
    if (!t && el.labels && el.labels.length) {        // the label's own words, not the control's options
      const c = el.labels[0].cloneNode(true);
      c.querySelectorAll('select, textarea, input, option, script, style').forEach(n => n.remove());
      t = clean(c.textContent);
    }
    if (!t && !['INPUT', 'SELECT', 'TEXTAREA'].includes(el.tagName)) t = clean(el.innerText);
    if (!t && el.tagName === 'INPUT' && ['button', 'submit', 'reset'].includes((el.type || '').toLowerCase()))
      t = clean(el.value);
    for (const a of ['placeholder', 'title', 'alt']) if (!t) t = clean(el.getAttribute(a));
    if (!t) { const img = el.querySelector('img[alt]'); if (img) t = clean(img.getAttribute('alt')); }
    if (!t) t = clean(el.getAttribute('name'));
    return t;
  };
  const value = el => {
    if (el.tagName === 'SELECT') return el.selectedIndex >= 0 ? clean(el.options[el.selectedIndex].text) : '';
    if (el.tagName === 'TEXTAREA') return clean(el.value);
    if (el.tagName === 'INPUT') {
      const t = (el.type || '').toLowerCase();
      if (t === 'checkbox' || t === 'radio') return el.checked ? 'checked' : '';
      if (['button', 'submit', 'reset', 'image', 'password', 'file'].includes(t)) return '';
      return clean(el.value);
    }
    return '';
  };
  const marked = new Set();
  const out = [];
  let order = 0;
  for (const el of document.querySelectorAll('[bid]')) {
    order++;
    if (!interactive(el)) continue;
    const anc = el.parentElement && el.parentElement.closest('a[href], button');
    if (anc && marked.has(anc) && !['INPUT', 'SELECT', 'TEXTAREA'].includes(el.tagName)) continue;
    const st = getComputedStyle(el);
    if (st.display === 'none' || st.visibility !== 'visible' || parseFloat(st.opacity) === 0) continue;
    const r = el.getBoundingClientRect();
    if (r.width * r.height < %(min_area)d) continue;
    marked.add(el);
    out.push({bid: el.getAttribute('bid'), type: kind(el), label: label(el), value: value(el),
              select: el.tagName === 'SELECT', x: r.left, y: r.top, w: r.width, h: r.height, order: order});
  }
  return out;
}""" % {"min_area": MIN_AREA}


@dataclass(slots=True)
class Mark:
    """One interactive element of the page at this step."""

    id: int
    bid: str
    type: str
    text: str                     # the menu text, clipped
    box: tuple[float, float, float, float]      # x, y, width, height in viewport pixels
    is_select: bool = False

    @property
    def center(self) -> tuple[int, int]:
        """The centre of the box's visible part (of the whole box when it is off screen)."""
        x, y, w, h = self.box
        if self.where == "in":
            x0, y0 = max(x, 0), max(y, 0)
            x1, y1 = min(x + w, VIEWPORT["width"] - 1), min(y + h, VIEWPORT["height"] - 1)
            return round((x0 + x1) / 2), round((y0 + y1) / 2)
        return round(x + w / 2), round(y + h / 2)

    @property
    def where(self) -> str:
        """'in' when the box overlaps the viewport, else 'below', 'above', 'right' or 'left'."""
        x, y, w, h = self.box
        if y >= VIEWPORT["height"]:
            return "below"
        if y + h <= 0:
            return "above"
        if x >= VIEWPORT["width"]:
            return "right"
        if x + w <= 0:
            return "left"
        return "in"


@dataclass(slots=True)
class SomObservation:
    """What a MAG policy sees at one step (and the AXTree the PRM judges on)."""

    goal: str
    url: str
    marks: list[Mark]
    menu: str
    screenshot_png: bytes
    axtree: str = ""              # the page text the PRM judges on: the menu (MAG: it stands in the AXTree section)
    n_interactive: int = 0        # marks found before the 130-line cap
    last_action_error: str = ""
    settle_retries: int = 0       # re-observations because the page navigated after BrowserGym's
    by_id: dict[int, Mark] = field(default_factory=dict)
    start_url: str = ""           # the task's start URL (``harness.env.task_start_url``)

    def __post_init__(self):
        self.by_id = {m.id: m for m in self.marks}

    @property
    def menu_ids(self) -> list[int]:
        return [m.id for m in self.marks]

    def screenshot_data_url(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.screenshot_png).decode()


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with '...'."""
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


# Where an iframe's content starts inside its element: border and padding.
_CONTENT_OFFSET_JS = """e => { const s = getComputedStyle(e);
  return [e.clientLeft + parseFloat(s.paddingLeft), e.clientTop + parseFloat(s.paddingTop)]; }"""


def _frames(page):
    """(frame, x offset, y offset) for the page and every iframe that can be read; offsets are
    where the frame's content starts in main-viewport pixels."""
    yield page.main_frame, 0.0, 0.0
    for frame in page.frames:
        if frame is page.main_frame:
            continue
        try:
            elem = frame.frame_element()
            box = elem.bounding_box()       # relative to the main frame's viewport, nesting included
            if box is None or elem.get_attribute("bid") is None:
                continue
            dx, dy = elem.evaluate(_CONTENT_OFFSET_JS)
            yield frame, box["x"] + dx, box["y"] + dy
        except Exception:       # detached, sandboxed or cross-process frames are skipped
            continue


def collect_elements(page) -> list[dict]:
    """The raw interactive elements of ``page`` and its frames, boxes in main-viewport pixels.
    A failure in the main frame raises (the page is navigating); unreadable iframes are skipped."""
    out = []
    for k, (frame, dx, dy) in enumerate(_frames(page)):
        try:
            found = frame.evaluate(_COLLECT_JS)
        except Exception:
            if k == 0:
                raise
            continue
        for e in found:
            e["x"] += dx
            e["y"] += dy
            e["frame"] = k
        out.extend(found)
    return out


def _menu_text(e: dict) -> str:
    text = e["label"]
    if e["value"]:
        text = f'{text} = "{e["value"]}"' if text else f'"{e["value"]}"'
    return clip(text)


def number_marks(elements: list[dict], max_lines: int = MAX_LINES) -> tuple[list[Mark], int]:
    """Keep at most ``max_lines`` elements (in-viewport first, then the nearest outside) and
    number them from 1 in document order; returns (marks, elements before the cap)."""
    vh = VIEWPORT["height"]

    vw = VIEWPORT["width"]

    def outside(e):             # 0 when the box overlaps the viewport, else its distance to it
        return (max(0.0, e["y"] - vh + 1, -(e["y"] + e["h"]) + 1)
                + max(0.0, e["x"] - vw + 1, -(e["x"] + e["w"]) + 1))

    kept = sorted(elements, key=lambda e: (outside(e), e["frame"], e["order"]))[:max_lines]
    kept.sort(key=lambda e: (e["frame"], e["order"]))
    marks = [Mark(id=i, bid=e["bid"], type=e["type"], text=_menu_text(e),
                  box=(e["x"], e["y"], e["w"], e["h"]), is_select=bool(e["select"]))
             for i, e in enumerate(kept, 1)]
    return marks, len(elements)


def render_menu(marks: list[Mark]) -> str:
    """The candidate menu (see module docstring)."""
    return "\n".join(f"[{m.id}] {m.type} {m.text}" + ("" if m.where == "in" else f" ({m.where})") for m in marks)


_PALETTE = [(230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180),
            (0, 128, 128), (128, 0, 0), (0, 0, 128)]


def draw_marks(screenshot, marks: list[Mark]) -> bytes:
    """A PNG of ``screenshot`` (RGB array or PIL image) with a numbered box on every mark inside
    the viewport."""
    from PIL import Image, ImageDraw, ImageFont

    img = screenshot if isinstance(screenshot, Image.Image) else Image.fromarray(screenshot)
    img = img.convert("RGB")
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=14)
    for m in marks:
        if m.where != "in":
            continue
        x, y, w, h = m.box
        color = _PALETTE[m.id % len(_PALETTE)]
        draw.rectangle([x, y, x + w, y + h], outline=color, width=2)
        label = str(m.id)
        l, t, r, b = draw.textbbox((0, 0), label, font=font)
        lx, ly = max(0, x), max(0, y - (b - t) - 4) if y >= (b - t) + 4 else max(0, y)
        draw.rectangle([lx, ly, lx + (r - l) + 4, ly + (b - t) + 4], fill=color)
        draw.text((lx + 2 - l, ly + 2 - t), label, fill=(255, 255, 255), font=font)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


SETTLE_RETRIES = 2


def observe(harness, max_lines: int = MAX_LINES) -> SomObservation:
    """The MAG observation of the harness's current page, the same under both groundings (call
    after ``reset``/``step``: marks
    are read from the DOM that BrowserGym just numbered). A page that navigated after
    BrowserGym's observation (a late redirect) has no BrowserGym ids and an AXTree and screenshot
    of the old page: then the harness waits (``noop(500)``) and observes again, at most
    ``SETTLE_RETRIES`` times; a page still moving after that raises."""
    page = harness.env.page
    action_error = (harness.last_obs or {}).get("last_action_error") or ""     # the step's, not a noop's
    for retry in range(SETTLE_RETRIES + 1):
        raw = harness.last_obs or {}
        try:
            elements = collect_elements(page)
            if page.url == raw.get("url", page.url) or retry == SETTLE_RETRIES:
                break
        except Exception:
            if retry == SETTLE_RETRIES:
                raise
        harness.step("noop(500)")
    marks, found = number_marks(elements, max_lines)
    shot = raw.get("screenshot")
    if shot is None:
        from PIL import Image

        shot = Image.open(io.BytesIO(page.screenshot()))
    menu = render_menu(marks)
    return SomObservation(goal=raw.get("goal") or "", url=page.url, marks=marks, menu=menu,
                          screenshot_png=draw_marks(shot, marks), axtree=menu, n_interactive=found,
                          settle_retries=retry,
                          last_action_error=action_error, start_url=getattr(harness, "start_url", "") or "")


class UnexecutableStep(ValueError):
    """A valid step that cannot be run on this page (no select under the pixel, a pixel outside
    the viewport, a scroll without "up" or "down")."""


def _q(s: str) -> str:
    return repr(str(s))


def mark_at(obs: SomObservation, x: float, y: float) -> Mark | None:
    """The smallest in-viewport mark whose box holds the pixel (x, y)."""
    hits = [m for m in obs.marks if m.where == "in"
            and m.box[0] <= x <= m.box[0] + m.box[2] and m.box[1] <= y <= m.box[1] + m.box[3]]
    return min(hits, key=lambda m: m.box[2] * m.box[3], default=None)


def action_text(verb: str, target: Mark | tuple | None, content: str | None) -> str:
    """A step as the PRM sees it (Action-Only): its verb, its target (the mark as its menu line,
    or the pixel pair when a point hits no mark) and its content, JSON-quoted or null."""
    if isinstance(target, Mark):
        where = f"[{target.id}] {target.type} {target.text}"
    elif target is not None:
        where = f"pixel ({target[0]:g}, {target[1]:g})"
    else:
        where = "none"
    return f"action_type: {verb}; target: {where}; content: {json.dumps(content, ensure_ascii=False)}"


def to_code(step, obs: SomObservation, grounding: str = "som") -> tuple[str, str]:
    """(BrowserGym code, ``action_text``) for a valid step; raises ``UnexecutableStep`` when it
    cannot be run on this page. A coordinate target is shown as the mark the point hits."""
    verb, content = step.action_type, step.content
    target = xy = None
    if verb in ("click", "type", "select"):
        if grounding == "som":
            target = obs.by_id.get(step.candidate_id)
            if target is None:
                raise UnexecutableStep(f"id {step.candidate_id} is not in this step's menu")
        else:
            xy = step.coords
            if not (0 <= xy[0] < VIEWPORT["width"] and 0 <= xy[1] < VIEWPORT["height"]):
                raise UnexecutableStep(f"{xy} is outside the {VIEWPORT['width']}x{VIEWPORT['height']} viewport")
            xy = round(xy[0]), round(xy[1])
            target = mark_at(obs, *xy)
    if verb == "click":
        code = f"click({_q(target.bid)})" if xy is None else f"mouse_click({xy[0]}, {xy[1]})"
    elif verb == "type":
        code = (f"fill({_q(target.bid)}, {_q(content)})" if xy is None else
                f"mouse_click({xy[0]}, {xy[1]})\nkeyboard_press('ControlOrMeta+a')\nkeyboard_type({_q(content)})")
    elif verb == "select":
        if target is None or not target.is_select:
            raise UnexecutableStep(f"no select element at {xy}")
        code = f"select_option({_q(target.bid)}, {_q(content)})"
    elif verb == "scroll":
        direction = (content or "").strip().lower()
        if direction not in ("up", "down"):
            raise UnexecutableStep(f"scroll needs 'up' or 'down', got {content!r}")
        code = f"scroll(0, {SCROLL_PX if direction == 'down' else -SCROLL_PX})"
    elif verb == "press_enter":
        code = "keyboard_press('Enter')"
    elif verb == "go_back":
        code = "go_back()"
    else:       # finish
        code = f"send_msg_to_user({_q(content or '')})"
    return code, action_text(verb, target if target is not None else xy, content)
