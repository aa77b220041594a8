"""The viewer as a Starlette application: the pair list, a pair page, ``/api/pairs`` and the blind
audit. Safe by construction: every string goes through Jinja2's autoescape; the pages carry a
Content-Security-Policy that allows only the viewer's own script and style files (no inline
script); requests naming a Host other than the loopback names (and ``--host``) are refused, which
keeps another web site from reaching the server by DNS rebinding; a form posted from another
origin is refused; static files are served from the package's own folder only, and the audit
writes only ``<run>/audit/human-<NAME>.parquet`` with a checked name."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from dataset.readable import describe, readable, visible
from dataset.viewer.audit import ANSWERS, AuditLog, answers_path, draw_sample, format_summary, summarize
from dataset.viewer.graphview import GraphCache, neighbourhood_layout
from dataset.viewer.source import PairSource, observation

HERE = Path(__file__).parent
LOCAL_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; "
       "base-uri 'none'; frame-ancestors 'none'")
FACETS = {"rule": "rule", "axis": "axis", "gmcp": "GMCP", "kept": "kept", "site": "site",
          "source": "verdict source", "replay": "replay outcome"}
API_FIELDS = ("pair_id", "kept", "rule", "axis", "gmcp", "site", "traj_id", "task_id", "step_idx", "label",
              "action_pos", "action_neg", "verdict_source", "teacher_choice", "replay_outcome", "pos_target",
              "neg_target", "why", "intent")
MAX_FORM_BYTES = 16_384


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, read as it streams in and refused (413) as soon as it passes ``limit``
    bytes, a declared ``Content-Length`` over it before any byte is read: a large body never
    sits in memory. (Starlette's own form limits, ``request.form(max_part_size=...)``, need
    python-multipart, which the viewer does not otherwise use.) How long the body may take is
    bounded by the server (``dataset.viewer.cli``'s request deadline)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise HTTPException(413, "form too large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, "form too large")
        chunks.append(chunk)
    return b"".join(chunks)


def pair_url(pair_id: str) -> str:
    """``/pair/<id>`` with every reserved character of the id escaped, ``/`` too (``%2F``: one path
    segment that no browser folds as ``..``); the route takes the decoded rest of the path."""
    return "/pair/" + urllib.parse.quote(pair_id, safe="")


def facet(pair: dict, key: str) -> str:
    """The value a list filter compares, as text."""
    if key == "kept":
        return "kept" if pair["kept"] else "discarded"
    if key == "gmcp":
        return {True: "yes", False: "no"}.get(pair.get("gmcp"), "n/a")
    if key == "source":
        return pair.get("verdict_source") or "none"
    if key == "replay":
        return pair.get("replay_outcome") or "none"
    return str(pair.get(key) or "")


class SecurityHeaders:
    """Adds the CSP and its companions to every response (a plain ASGI middleware). The referrer
    policy is ``same-origin``, not ``no-referrer``: under the latter Chromium posts a form with
    ``Origin: null``, which the audit's origin check refuses."""

    HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
               (b"referrer-policy", b"same-origin"), (b"x-frame-options", b"DENY")]

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        async def with_headers(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.HEADERS]}
            await send(message)
        await self.app(scope, receive, with_headers)


def make_app(source: PairSource, audit: str | None = None, sample: int = 100, seed: int = 42,
             host: str | None = None) -> Starlette:
    """The application for ``source``; ``audit`` (an annotator name) turns the audit on."""
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True))
    env.globals.update(describe=describe, readable=readable, visible=visible, pair_url=pair_url)
    graphs = GraphCache(source.path) if source.kind == "run" else None
    log = None
    if audit is not None:
        path = answers_path(source.audit_dir, audit)
        # checked before the audit's lock file is made: a symlinked audit/ writes nothing elsewhere
        if not path.resolve().is_relative_to(source.root.resolve()):
            raise ValueError(f"{path} is outside {source.root}")
        log = AuditLog(path, audit, draw_sample(source.pairs, sample, seed), seed)

    def page(name: str, request: Request, **context) -> HTMLResponse:
        html = env.get_template(name).render(source=source, audit=log, request=request, **context)
        return HTMLResponse(html)

    # the replay filter and column only where the run has a replay outcome (an LLM-verified run
    # would show a filter whose one choice is "none")
    replayed = any(p.get("replay_outcome") is not None for p in source.pairs)
    facets = {k: v for k, v in FACETS.items() if k != "replay" or replayed}

    def pair_list(request: Request) -> HTMLResponse:
        chosen = {k: request.query_params.get(k, "") for k in facets}
        shown = [p for p in source.pairs if all(not v or facet(p, k) == v for k, v in chosen.items())]
        options = {k: sorted({facet(p, k) for p in source.pairs}) for k in facets}
        counts = {k: {v: sum(facet(p, k) == v for p in source.pairs) for v in options[k]} for k in facets}
        return page("list.html", request, pairs=shown, facets=facets, chosen=chosen, options=options,
                    counts=counts, total=len(source.pairs), replayed=replayed)

    def api_pairs(request: Request) -> JSONResponse:
        return JSONResponse([{k: p.get(k) for k in API_FIELDS} for p in source.pairs])

    def pair_page(request: Request) -> HTMLResponse:
        pair_id = request.path_params["pair_id"]
        if pair_id not in source.by_id:
            raise HTTPException(404, f"no pair {pair_id}")
        d = source.detail(pair_id)
        pair = d["pair"]
        graph = None
        if graphs is not None:
            G = graphs.get(pair["site"])
            graph = neighbourhood_layout(G, pair.get("pos_node"), pair.get("neg_node")) if G is not None else None
        return page("pair.html", request, graph=graph, **d)

    def require_audit() -> AuditLog:
        if log is None:
            raise HTTPException(404, "no audit running (start the viewer with --audit NAME)")
        return log

    def audit_next(request: Request) -> Response:
        a = require_audit()
        nxt = a.next_position()
        if nxt is None:
            summary = summarize(source.audit_dir, source.replay_outcomes())
            return page("audit_done.html", request, summary=summary, text=format_summary(summary))
        return RedirectResponse(f"/audit/{nxt}", status_code=303)

    def audit_item(request: Request) -> HTMLResponse:
        a = require_audit()
        i = request.path_params["position"]
        if not 0 <= i < len(a.sample):
            raise HTTPException(404, f"no pair {i} in the sample")
        pair = a.sample[i]
        state, obs_format, _ = source.state(pair)
        order = ("pos", "neg") if pair["pos_shown"] == 1 else ("neg", "pos")
        shown = [pair[f"action_{k}"] for k in order]
        shown_targets = [pair.get(f"{k}_target") for k in order]
        # marked as Response 1 / 2 ("pos" / "neg" of observation() stand for the display order here)
        obs = observation(state.axtree, obs_format, shown[0], shown[1])
        return page("audit.html", request, position=i, pair=pair, state=state, obs=obs, shown=shown,
                    shown_targets=shown_targets,
                    answers=ANSWERS, given=a.rows.get(pair["pair_id"]), answered=len(a.rows))

    async def audit_answer(request: Request) -> Response:
        a = require_audit()
        origin = request.headers.get("origin")
        if origin and urllib.parse.urlsplit(origin).netloc != request.headers.get("host"):
            raise HTTPException(403, "a form from another origin")
        i = request.path_params["position"]
        if not 0 <= i < len(a.sample):
            raise HTTPException(404, f"no pair {i} in the sample")
        body = await read_body(request, MAX_FORM_BYTES)
        form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
        answer = (form.get("answer") or [""])[0]
        if answer not in ANSWERS:
            raise HTTPException(400, f"answer must be one of {', '.join(ANSWERS)}")
        a.answer(i, answer, (form.get("note") or [""])[0])
        # Post/redirect/get: reloading the next page resubmits nothing.
        return RedirectResponse("/audit", status_code=303)

    routes = [Route("/", pair_list), Route("/api/pairs", api_pairs), Route("/pair/{pair_id:path}", pair_page),
              Route("/audit", audit_next), Route("/audit/{position:int}", audit_item),
              Route("/audit/{position:int}", audit_answer, methods=["POST"]),
              Mount("/static", StaticFiles(directory=HERE / "static"), name="static")]
    hosts = LOCAL_HOSTS + ([host] if host and host not in LOCAL_HOSTS else [])
    middleware = [Middleware(SecurityHeaders), Middleware(TrustedHostMiddleware, allowed_hosts=hosts)]
    app = Starlette(routes=routes, middleware=middleware)
    app.state.audit = log        # its close() hands the audit file to another viewer
    return app
