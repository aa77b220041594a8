"""Website of an observation, from its URL, through a configurable alias table.

MiniWoB++ pages are one site wherever MiniWoB is installed or served: a ``file://`` path or a
served URL whose path ends in ``miniwob/<task>.html`` is site ``miniwob``, and its page is
``/<task>`` (so two machines' runs of one task, and search episodes, build one graph).
"""

from __future__ import annotations

import fnmatch
import functools
import re
from urllib.parse import unquote, urlsplit

# WebArena serves each site on its own port of one host.
WEBARENA_PORTS = {7770: "shopping", 7780: "shopping_admin", 9999: "reddit", 8023: "gitlab",
                  3000: "map", 8888: "wikipedia", 4399: "homepage"}
# Host glob -> site name.
HOST_ALIASES = {"*.service-now.com": "servicenow"}


MINIWOB_SITE = "miniwob"
# The task page of MiniWoB++ (``.../miniwob/html/miniwob/click-dialog.html``, or
# ``http://host:port/miniwob/click-dialog.html`` when served).
_MINIWOB_PAGE = re.compile(r"(?:^|/)miniwob/([A-Za-z0-9][A-Za-z0-9_.-]*)\.html$")

_SCHEMES = ("about:", "chrome:", "data:", "javascript:", "file:", "blob:", "view-source:")


def _split(url: str):
    """urlsplit that reads a scheme-less 'host:port/path' as a host, and never raises."""
    url = url.strip()
    if "://" not in url and not url.lower().startswith(_SCHEMES):
        url = f"http://{url}"
    try:
        return urlsplit(url)
    except ValueError:       # e.g. an unbalanced IPv6 bracket
        return urlsplit("http://invalid.url/")


def normalize_host(host: str) -> str:
    """A host name as one spelling: lower-cased, the trailing dot of a fully qualified name
    stripped, and an internationalized name in its IDNA (``xn--``) form, so ``bücher.example``,
    ``xn--bcher-kva.example`` and ``BÜCHER.example.`` are one host. A name IDNA cannot encode
    (an over-long label) stays lower-cased."""
    host = (host or "").strip().lower().rstrip(".")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            pass
    return host


def miniwob_task(url: str) -> str | None:
    """The MiniWoB++ task of a task page's URL (``file://`` or served), else None."""
    parts = _split(url or "")
    if parts.scheme.lower() not in ("file", "http", "https"):
        return None
    m = _MINIWOB_PAGE.search(unquote(parts.path))
    return m.group(1) if m else None


def _host(url: str) -> tuple[str, int | None]:
    parts = _split(url)
    host = normalize_host(parts.hostname or "")
    if host.startswith("www."):
        host = host[4:]
    try:
        port = parts.port
    except ValueError:
        port = None
    return host, port


def site_of(url: str, ports: dict[int, str] | None = None, hosts: dict[str, str] | None = None) -> str:
    """Site name of ``url``: a MiniWoB++ task page is ``miniwob``; then the WebArena port, then
    the host alias, else the host without ``www.`` (IDNA form, no trailing dot).

    Non-web pages (``about:blank``, ``chrome://``...) map to their scheme, e.g. ``about``.
    """
    ports = WEBARENA_PORTS if ports is None else ports
    hosts = HOST_ALIASES if hosts is None else hosts
    url = (url or "").strip()
    if miniwob_task(url):
        return MINIWOB_SITE
    scheme = _split(url).scheme.lower()
    if scheme and scheme not in ("http", "https"):
        return scheme
    host, port = _host(url)
    if port in ports:
        return ports[port]
    for pattern, name in hosts.items():
        if fnmatch.fnmatch(host, pattern):
            return name
    return host or "unknown"


# Remembered: a site's observations show the same few pages again and again (~0.3 ms a URL otherwise).
@functools.lru_cache(maxsize=4096)
def normalize_url_path(url: str) -> str:
    """The page part of a persistent element identity: host lower-cased, ``www.`` stripped,
    trailing slash removed, query and fragment dropped.

    ServiceNow's UI wraps the real page in ``/now/nav/ui/classic/params/target/<encoded path>``;
    the encoded target is unwrapped so both routes name the same page. A MiniWoB++ task page is
    ``/<task>``, wherever MiniWoB was installed or served.
    """
    task = miniwob_task(url)
    if task:
        return f"/{task}"
    parts = _split(url)
    host, port = _host(url)
    path = parts.path
    marker = "/params/target/"
    if marker in path:
        target = unquote(path.split(marker, 1)[1])
        path = "/" + target.split("?", 1)[0].lstrip("/")
    path = path.rstrip("/") or "/"
    netloc = host if port in (None, 80, 443) else f"{host}:{port}"
    return f"{netloc}{path}"
