"""A fake of the part of GitHub's REST API `evalbench comment` uses (stdlib only, 127.0.0.1, port 0):
list, create and update an issue's comments. It checks the bearer token and keeps every request; `scripted`
makes it a hostile GitHub, answering a method with any status and raw body."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

_LIST = re.compile(r"^/repos/([^/]+/[^/]+)/issues/(\d+)/comments$")
_ONE = re.compile(r"^/repos/([^/]+/[^/]+)/issues/comments/(\d+)$")


class FakeGitHub:
    """`with FakeGitHub(token="t") as gh:` then GITHUB_API_URL=gh.url; `gh.comments[(repo, number)]` holds
    the comments, `gh.requests` (method, path, Authorization header) every request."""

    def __init__(self, token: str = "ghs_fake") -> None:
        self.token = token
        self.comments: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.requests: list[tuple[str, str, str]] = []
        self.scripted: dict[str, tuple[int, bytes]] = {}
        """Method -> (status, raw body) answered to every request of that method instead of the fake's own."""
        self._next_id = 1000
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> FakeGitHub:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: Any) -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                parts = urlsplit(self.path)
                auth = self.headers.get("Authorization", "")
                length = int(self.headers.get("Content-Length") or 0)
                payload = json.loads(self.rfile.read(length) or b"null") if length else None
                with fake._lock:
                    fake.requests.append((method, parts.path, auth))
                    if auth != f"Bearer {fake.token}":
                        self._answer(401, {"message": "Bad credentials"})
                        return
                    if method in fake.scripted:
                        self._answer(*fake.scripted[method])
                        return
                    self._answer(*fake._route(method, parts.path, parse_qs(parts.query), payload))

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # a short poll: `shutdown` waits for the serving loop's next look, once per test
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def _route(self, method: str, path: str, query: dict[str, list[str]], payload: Any) -> tuple[int, Any]:
        listed = _LIST.match(path)
        if listed:
            comments = self.comments.setdefault((listed.group(1), int(listed.group(2))), [])
            if method == "GET":
                per_page, page = int(query.get("per_page", ["30"])[0]), int(query.get("page", ["1"])[0])
                return 200, comments[(page - 1) * per_page: page * per_page]
            if method == "POST" and isinstance(payload, dict):
                self._next_id += 1
                comment = {"id": self._next_id, "body": payload.get("body", "")}
                comments.append(comment)
                return 201, comment
        one = _ONE.match(path)
        if one and method == "PATCH" and isinstance(payload, dict):
            for comments in self.comments.values():
                for comment in comments:
                    if comment["id"] == int(one.group(2)):
                        comment["body"] = payload.get("body", "")
                        return 200, comment
        return 404, {"message": "Not Found"}
