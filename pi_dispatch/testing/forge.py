"""A stand-in forge on loopback, over HTTPS with a test CA, speaking GitHub's API: the App token endpoint (its JWT
verified with the App's public key), the repository, branch, protection and comment endpoints; and git's smart
HTTP served by `git http-backend`, which lets a fetch through only with a token minted for that repository (or the
operator's PAT). GitLab's, Forgejo's and Azure DevOps' API shapes over the same repositories are `forgeshapes.py`'s.

What it saw is kept for the tests to check: each token it minted and for which repository, each call with the token
it carried, each comment. Its repositories are real bare repositories under its folder.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import secrets
import socket
import ssl
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import jwt
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from pi_dispatch.testing.forgeshapes import other_forges

API: Final = "/api/v3"
ANY_REPOSITORY: Final = "*"  # what the operator's PAT reaches
GIT_IDENTITY: Final = {
    "GIT_AUTHOR_NAME": "stand-in",
    "GIT_AUTHOR_EMAIL": "stand-in@example.invalid",
    "GIT_COMMITTER_NAME": "stand-in",
    "GIT_COMMITTER_EMAIL": "stand-in@example.invalid",
}


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _certificate(
    subject: str, key: rsa.RSAPrivateKey, issuer: tuple[str, rsa.RSAPrivateKey] | None, *, ca: bool
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, signer = issuer if issuer is not None else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _git(*args: str, cwd: Path, env: Mapping[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), **GIT_IDENTITY, **(env or {})},
        capture_output=True,
        check=True,
        text=True,
    )
    return done.stdout.strip()


@dataclass
class StandInForge:
    """A GitHub App's installation over one account's repositories, on loopback (and the other forges' shapes)."""

    root: Path
    app_id: str = "4242"
    installation_id: str = "77"
    pat: str = field(default_factory=lambda: "ghp_" + secrets.token_hex(16))
    minted: dict[str, str] = field(default_factory=dict)  # token -> the repository it reaches (`*`: all)
    protected: set[str] = field(default_factory=set)  # repositories whose default branch is protected
    comments: list[tuple[str, int, str]] = field(default_factory=list)
    calls: list[tuple[str, str, str | None]] = field(default_factory=list)  # method, path, token
    mints: list[Mapping[str, Any]] = field(default_factory=list)  # each mint's request body
    port: int = 0
    stale: dict[str, str] = field(default_factory=dict)  # repository -> a commit its branch reports, gone from git
    project_ids: dict[str, str] = field(default_factory=dict)  # GitLab's numeric project id -> repository

    def __post_init__(self) -> None:
        self.repos = self.root / "repos"
        self.repos.mkdir(parents=True, exist_ok=True)
        self.app_key = _key()
        ca_key, server_key = _key(), _key()
        ca = _certificate("stand-in CA", ca_key, None, ca=True)
        server = _certificate("127.0.0.1", server_key, ("stand-in CA", ca_key), ca=False)
        self.ca_file = self.root / "ca.pem"
        self.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        self.key_file = self.root / "app.pem"
        self.key_file.write_bytes(_pem(self.app_key))
        self.key_file.chmod(0o600)
        (self.root / "server.pem").write_bytes(server.public_bytes(serialization.Encoding.PEM) + _pem(server_key))
        self.minted[self.pat] = ANY_REPOSITORY
        self._runner: web.AppRunner | None = None

    @property
    def api_url(self) -> str:
        return f"https://127.0.0.1:{self.port}{API}"

    def add_repository(self, full_name: str, files: Mapping[str, str], *, protected: bool = True) -> str:
        """A bare repository with one commit of files on `main`; its commit."""
        bare = self.repos / f"{full_name}.git"
        bare.parent.mkdir(parents=True, exist_ok=True)
        _git("init", "--quiet", "--bare", "--initial-branch=main", str(bare), cwd=self.root)
        _git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=bare)
        if protected:
            self.protected.add(full_name)
        self.project_ids[str(len(self.project_ids) + 1)] = full_name
        return self.commit(full_name, files)

    def commit(self, full_name: str, files: Mapping[str, str]) -> str:
        """A new commit of files on `main`; its sha."""
        work = self.root / "work" / full_name
        if not work.exists():
            work.mkdir(parents=True)
            _git("init", "--quiet", "--initial-branch=main", cwd=work)
            _git("remote", "add", "origin", str(self.repos / f"{full_name}.git"), cwd=work)
        for name, text in files.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_text(text)
        _git("add", "-A", cwd=work)
        _git("commit", "--quiet", "-m", "change", cwd=work)
        _git("push", "--quiet", "--force", "origin", "HEAD:main", cwd=work)
        return _git("rev-parse", "HEAD", cwd=work)

    def head(self, full_name: str) -> str:
        return _git("rev-parse", "main", cwd=self.repos / f"{full_name}.git")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post(API + "/app/installations/{installation}/access_tokens", self._mint)
        app.router.add_get(API + "/repos/{owner}/{name}", self._repository)
        app.router.add_get(API + "/repos/{owner}/{name}/branches/{branch}", self._branch)
        app.router.add_get(API + "/repos/{owner}/{name}/branches/{branch}/protection", self._protection)
        app.router.add_post(API + "/repos/{owner}/{name}/issues/{number}/comments", self._comment)
        app.router.add_route("*", "/{owner}/{name}.git/{rest:.*}", self._git_http)
        other_forges(app, self)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.root / "server.pem")
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listening.bind(("127.0.0.1", 0))
        self.port = listening.getsockname()[1]
        await web.SockSite(self._runner, listening, ssl_context=context).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def bearer(self, request: web.Request) -> str | None:
        """The token a call carries, in any forge's way: Bearer, `token`, PRIVATE-TOKEN or Basic's password."""
        value = request.headers.get("Authorization", "")
        token = request.headers.get("PRIVATE-TOKEN")
        if value.startswith("Basic "):
            token = base64.b64decode(value[6:]).decode().partition(":")[2]
        elif value:
            token = value.removeprefix("Bearer ").removeprefix("token ")
        self.calls.append((request.method, request.path, token))
        return token

    def reaches(self, token: str | None, full_name: str) -> bool:
        return token is not None and self.minted.get(token) in (full_name, ANY_REPOSITORY)

    async def _mint(self, request: web.Request) -> web.Response:
        presented = self.bearer(request) or ""
        try:
            claims = jwt.decode(
                presented, self.app_key.public_key(), algorithms=["RS256"], options={"require": ["iat", "exp", "iss"]}
            )
        except jwt.PyJWTError:
            return web.json_response({"message": "A JSON web token could not be decoded"}, status=401)
        if str(claims["iss"]) != self.app_id or request.match_info["installation"] != self.installation_id:
            return web.json_response({"message": "Not Found"}, status=404)
        body = await request.json()
        self.mints.append(body)
        names = body.get("repositories")
        owners = [path.name for path in self.repos.iterdir() if path.is_dir()]
        if not isinstance(names, list) or len(names) != 1 or not owners:
            return web.json_response({"message": "one repository, please"}, status=422)
        token = "ghs_" + secrets.token_hex(18)
        self.minted[token] = f"{owners[0]}/{names[0]}"
        return web.json_response({"token": token, "expires_at": "2099-01-01T00:00:00Z"}, status=201)

    def _full_name(self, request: web.Request) -> str:
        return f"{request.match_info['owner']}/{request.match_info['name']}"

    async def _repository(self, request: web.Request) -> web.Response:
        full_name = self._full_name(request)
        if not self.reaches(self.bearer(request), full_name):
            return web.json_response({"message": "Not Found"}, status=404)
        return web.json_response({"full_name": full_name, "default_branch": "main"})

    async def _branch(self, request: web.Request) -> web.Response:
        full_name = self._full_name(request)
        if not self.reaches(self.bearer(request), full_name) or request.match_info["branch"] != "main":
            return web.json_response({"message": "Not Found"}, status=404)
        sha = self.stale.get(full_name) or self.head(full_name)
        return web.json_response({"name": "main", "commit": {"sha": sha}})

    async def _protection(self, request: web.Request) -> web.Response:
        full_name = self._full_name(request)
        if not self.reaches(self.bearer(request), full_name) or full_name not in self.protected:
            return web.json_response({"message": "Branch not protected"}, status=404)
        return web.json_response({"required_pull_request_reviews": {"required_approving_review_count": 1}})

    async def _comment(self, request: web.Request) -> web.Response:
        full_name = self._full_name(request)
        if not self.reaches(self.bearer(request), full_name):
            return web.json_response({"message": "Not Found"}, status=404)
        body = await request.json()
        self.comments.append((full_name, int(request.match_info["number"]), str(body.get("body"))))
        return web.json_response({"id": len(self.comments)}, status=201)

    async def _git_http(self, request: web.Request) -> web.StreamResponse:
        return await self.git_http(request, self._full_name(request), request.path)

    async def git_http(self, request: web.Request, full_name: str, path: str) -> web.StreamResponse:
        """git's smart HTTP through `git http-backend` (path: under the repositories' root), for a token minted for
        this repository only."""
        password = self.bearer(request) if request.headers.get("Authorization", "").startswith("Basic ") else None
        if password is None:
            self.calls.append((request.method, request.path, None))
        if not self.reaches(password, full_name):
            return web.Response(status=401, headers={"WWW-Authenticate": 'Basic realm="stand-in"'})
        env = {
            "PATH": "/usr/bin:/bin",
            "GIT_PROJECT_ROOT": str(self.repos),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path,
            "QUERY_STRING": request.query_string,
            "REQUEST_METHOD": request.method,
            "CONTENT_TYPE": request.headers.get("Content-Type", ""),
            "REMOTE_USER": "token",
            "GIT_PROTOCOL": request.headers.get("Git-Protocol", ""),
        }
        process = await asyncio.create_subprocess_exec(
            "git", "http-backend", env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await process.communicate(await request.read())
        split = b"\r\n\r\n" if b"\r\n\r\n" in out else b"\n\n"
        head, _, payload = out.partition(split)
        status, headers = 200, {}
        for line in head.decode().splitlines():
            name, _, value = line.partition(": ")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers[name] = value
        return web.Response(status=status, body=payload, headers=headers)
