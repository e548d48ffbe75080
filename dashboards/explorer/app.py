"""The explorer as one Starlette application (:func:`explorer_app`).

Routes: ``/`` (overview), ``/sessions`` (a team's sessions), ``/session?id=ID`` (one session's
timeline), ``/report`` (the full HTML report of the view, :func:`traceflow.dashboards.render.render_html`),
``/api/mix``, ``/api/sessions``, ``/api/misses`` and ``/api/timeline/ID`` (:mod:`.api`), ``/version``
(the lake's fingerprint, polled by the report to reload on new data), ``/signin`` and ``/signout``
(:mod:`.access`), and ``/static/vega.js``. Without a viewer an API request gets 401 and a page the
sign-in form.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlsplit

from traceflow.dashboards.explorer import api, pages, views
from traceflow.dashboards.explorer.access import COOKIE, SESSION_S, Access, Viewer
from traceflow.errors import UsageError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from traceflow.store.lake import Lake
    from traceflow.store.selection import Selection

#: Reports kept rendered (per view and lake version), the least recently asked dropped first.
REPORTS_KEPT = 8
_SIGN_IN = "sign in: send 'Authorization: Bearer TOKEN' (a token of the dashboard's --tokens file)"
_ENDPOINTS = ", ".join((*api.ENDPOINTS, "timeline"))
_NO_STORE = {"Cache-Control": "no-store", "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin"}


def _safe_next(value: str | None) -> str:
    """Where to go after signing in: a path on this site, never another site (``//host``)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


def _same_site(request: Request) -> bool:
    """Whether a form was posted from this site: its ``Origin`` (sent by browsers with every POST)
    names the host it was sent to; a request without one (a script) is not a browser's."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    hosts = {request.headers.get("host"), request.headers.get("x-forwarded-host")} - {None}
    return urlsplit(origin).netloc in hosts


def explorer_app(
    lake: Lake,
    selection: Selection | None = None,
    access: Access | None = None,
    *,
    kv_bytes_per_token: float | None = None,
    kv_said: str | None = None,
    refresh_s: float = 5.0,
    fingerprint: Callable[[], str] = lambda: "",
) -> Any:
    """The explorer over ``lake``, within ``selection`` (the dashboard's selection options), for the
    viewers ``access`` signs in (None: no sign-in, every row to everyone)."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
    from starlette.routing import Route

    from traceflow.dashboards.explorer import charts

    gate = access or Access(None)
    specs = charts.specs()
    lock = threading.Lock()
    reports: OrderedDict[tuple[str, str], str] = OrderedDict()

    def viewer_of(request: Request) -> Viewer | None:
        return gate.viewer(request.headers.get("authorization"), request.cookies.get(COOKIE))

    def page(view: str) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            viewer = viewer_of(request)
            if viewer is None:
                here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"signin?next={quote(here, safe='')}", 303)
            session = request.query_params.get("id") if view == "session" else None
            if view == "session" and not session:
                return RedirectResponse("sessions", 303)
            text = pages.explorer(
                view,
                views.page_filters(request.query_params),
                specs,
                team=viewer.team,
                signed_in=gate.required and "authorization" not in request.headers,
                session=session,
            )
            return HTMLResponse(text, headers=_NO_STORE)

        return handle

    async def signin_form(request: Request) -> Response:
        return HTMLResponse(pages.signin(_safe_next(request.query_params.get("next"))), headers=_NO_STORE)

    async def signin(request: Request) -> Response:
        if not _same_site(request):
            return PlainTextResponse("sign in from the dashboard's own page", status_code=403)
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0]
        target = _safe_next((form.get("next") or ["/"])[0])
        if not gate.required:
            return RedirectResponse(target, 303)
        signed = gate.sign_in(token)
        if signed is None:
            text = pages.signin(target, "That token is not in the tokens file; check it and try again.")
            return HTMLResponse(text, status_code=401, headers=_NO_STORE)
        response = RedirectResponse(target, 303)
        secure = request.url.scheme == "https" or request.headers.get("x-forwarded-proto") == "https"
        response.set_cookie(
            COOKIE, signed[0], max_age=SESSION_S, httponly=True, samesite="strict", secure=secure, path="/"
        )
        return response

    async def signout(request: Request) -> Response:
        if not _same_site(request):
            return PlainTextResponse("sign out from the dashboard's own page", status_code=403)
        gate.sign_out(request.cookies.get(COOKIE))
        response = RedirectResponse("signin", 303)
        response.delete_cookie(COOKIE, path="/")
        return response

    def unauthorised() -> Response:
        return JSONResponse(
            {"error": _SIGN_IN},
            status_code=401,
            headers={"WWW-Authenticate": 'Bearer realm="traceflow"', **_NO_STORE},
        )

    async def answer(run: Callable[[], str]) -> Response:
        try:
            text = await run_in_threadpool(run)
        except UsageError as e:
            return JSONResponse({"error": str(e)}, status_code=400, headers=_NO_STORE)
        return Response(text, media_type="application/json", headers=_NO_STORE)

    def params_of(request: Request) -> dict[str, list[str]]:
        return {k: request.query_params.getlist(k) for k in request.query_params}

    async def endpoint(request: Request) -> Response:
        viewer = viewer_of(request)
        if viewer is None:
            return unauthorised()
        run = api.ENDPOINTS.get(request.path_params["name"])
        if run is None:
            return JSONResponse(
                {"error": f"no endpoint {request.path_params['name']!r}; try: {_ENDPOINTS}"},
                status_code=404,
            )
        params = params_of(request)
        return await answer(lambda: run(lake, params, api.selection_of(params, selection, viewer.team)))

    async def timeline(request: Request) -> Response:
        viewer = viewer_of(request)
        if viewer is None:
            return unauthorised()
        params, session = params_of(request), request.path_params["session"]
        return await answer(lambda: api.timeline(lake, params, session, viewer.team))

    def build_report(view: Selection) -> str:
        from traceflow.dashboards.render import render_html
        from traceflow.dashboards.report_data import ReportOptions

        with lock:
            key = (fingerprint(), repr(view))
            if key not in reports:
                text, _, _ = render_html(
                    lake.connect(),
                    view,
                    ReportOptions(kv_bytes_per_token=kv_bytes_per_token, kv_said=kv_said),
                    refresh_s=refresh_s,
                    version=key[0],
                    title="traceflow dashboard",
                )
                reports[key] = text
                while len(reports) > REPORTS_KEPT:
                    reports.popitem(last=False)
            reports.move_to_end(key)
            return reports[key]

    async def report(request: Request) -> Response:
        viewer = viewer_of(request)
        if viewer is None:
            return RedirectResponse(f"signin?next={quote('/report?' + request.url.query, safe='')}", 303)
        params: dict[str, list[str]] = {}
        for name, value in views.api_params(views.page_filters(request.query_params)):
            params.setdefault(name, []).append(value)
        try:
            view = api.selection_of(params, selection, viewer.team)
        except UsageError as e:
            return PlainTextResponse(str(e), status_code=400)
        return HTMLResponse(await run_in_threadpool(build_report, view), headers=_NO_STORE)

    async def version(request: Request) -> Response:
        if viewer_of(request) is None:
            return unauthorised()
        return PlainTextResponse(fingerprint(), headers=_NO_STORE)

    async def vega(request: Request) -> Response:
        from traceflow.dashboards.render import javascript_bundle

        text = await run_in_threadpool(javascript_bundle)
        return Response(text, media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})

    return Starlette(
        routes=[
            Route("/", page("overview")),
            Route("/sessions", page("sessions")),
            Route("/session", page("session")),
            Route("/report", report),
            Route("/version", version),
            Route("/signin", signin_form, methods=["GET"]),
            Route("/signin", signin, methods=["POST"]),
            Route("/signout", signout, methods=["POST"]),
            Route("/static/vega.js", vega),
            Route("/favicon.ico", lambda request: Response(status_code=204)),
            Route("/api/timeline/{session:path}", timeline),
            Route("/api/{name}", endpoint),
        ]
    )
