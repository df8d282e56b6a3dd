"""A stand-in for api.github.com in the molecule scenario, which has no GitHub: it answers `GET /user` as the
harness's user (id 999), the one call a receiver with GITHUB_AUTH_SOURCE=pat makes at boot, and a collaborator's
permission (`molecule` writes, anyone else reads), which the receiver asks before a delivery starts a job."""

import json
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PERMISSION = re.compile(r"^/repos/[^/]+/[^/]+/collaborators/([^/]+)/permission$")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server spelling
        asked = PERMISSION.match(self.path)
        if self.path == "/user":
            status, answer = 200, {"id": 999, "login": "pi-bot"}
        elif asked is not None:
            status, answer = 200, {"permission": "write" if asked.group(1) == "molecule" else "read"}
        else:
            status, answer = 404, {"message": "Not Found"}
        body = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


ThreadingHTTPServer(("127.0.0.1", 8099), Handler).serve_forever()
