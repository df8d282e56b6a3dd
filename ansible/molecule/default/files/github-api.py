"""A stand-in for api.github.com in the molecule scenario, which has no GitHub: it answers `GET /user` as the
harness's user (id 999), the one call a receiver with GITHUB_AUTH_SOURCE=pat makes at boot."""

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server spelling
        found = self.path == "/user"
        body = json.dumps({"id": 999, "login": "pi-bot"} if found else {"message": "Not Found"}).encode()
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


ThreadingHTTPServer(("127.0.0.1", 8099), Handler).serve_forever()
