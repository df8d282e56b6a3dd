"""The stand-in forge's GitLab, Forgejo and Azure DevOps API shapes over its repositories, each forge's own token
header, and git's smart HTTP at each forge's clone URL (`forge.py` is GitHub's, and the server).

GitLab's projects are numbered in the order they were added (`forge.project_ids`); Azure DevOps' organisation is
`/org`, its project the repository's owner and its repository id `id-<name>`. The operator's PAT reaches them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from aiohttp import web

if TYPE_CHECKING:
    from pi_dispatch.testing.forge import StandInForge

GITLAB: Final = "/api/v4/projects/{project}"
FORGEJO: Final = "/api/v1/repos/{owner}/{name}"
AZURE: Final = "/org/{project}/_apis"
NOT_FOUND: Final = {"message": "Not Found"}


def other_forges(app: web.Application, forge: StandInForge) -> None:
    """GitLab's, Forgejo's and Azure DevOps' routes on the forge's app."""
    shapes = _Shapes(forge)
    routes = app.router
    routes.add_get(GITLAB, shapes.gitlab_project)
    routes.add_get(GITLAB + "/repository/branches/{branch}", shapes.gitlab_branch)
    routes.add_get(GITLAB + "/protected_branches", shapes.gitlab_protected)
    routes.add_post(GITLAB + "/{items}/{number}/notes", shapes.gitlab_note)
    routes.add_get(FORGEJO, shapes.forgejo_repo)
    routes.add_get(FORGEJO + "/branches/{branch}", shapes.forgejo_branch)
    routes.add_get(FORGEJO + "/branch_protections", shapes.forgejo_protections)
    routes.add_post(FORGEJO + "/issues/{number}/comments", shapes.forgejo_comment)
    routes.add_get(AZURE + "/git/repositories/{repository}", shapes.azure_repository)
    routes.add_get(AZURE + "/git/repositories/{repository}/stats/branches", shapes.azure_branch)
    routes.add_get(AZURE + "/git/policy/configurations", shapes.azure_policies)
    routes.add_post(AZURE + "/wit/workItems/{number}/comments", shapes.azure_work_item_comment)
    routes.add_post(AZURE + "/git/repositories/{repository}/pullRequests/{number}/threads", shapes.azure_thread)
    routes.add_route("*", "/org/{project}/_git/{repository}/{rest:.*}", shapes.azure_git)


class _Shapes:
    def __init__(self, forge: StandInForge) -> None:
        self.forge = forge

    def _allowed(self, request: web.Request, full_name: str | None) -> bool:
        token = self.forge.bearer(request)
        return full_name is not None and self.forge.reaches(token, full_name)

    def _gitlab_name(self, request: web.Request) -> str | None:
        return self.forge.project_ids.get(request.match_info["project"])

    async def gitlab_project(self, request: web.Request) -> web.Response:
        name = self._gitlab_name(request)
        if not self._allowed(request, name):
            return web.json_response(NOT_FOUND, status=404)
        return web.json_response({"path_with_namespace": name, "default_branch": "main"})

    async def gitlab_branch(self, request: web.Request) -> web.Response:
        name = self._gitlab_name(request)
        if not self._allowed(request, name) or name is None:
            return web.json_response(NOT_FOUND, status=404)
        return web.json_response({"name": "main", "commit": {"id": self.forge.head(name)}})

    async def gitlab_protected(self, request: web.Request) -> web.Response:
        name = self._gitlab_name(request)
        if not self._allowed(request, name):
            return web.json_response(NOT_FOUND, status=404)
        return web.json_response([{"name": "ma*"}] if name in self.forge.protected else [{"name": "release/*"}])

    async def gitlab_note(self, request: web.Request) -> web.Response:
        name = self._gitlab_name(request)
        if not self._allowed(request, name) or name is None:
            return web.json_response(NOT_FOUND, status=404)
        return await self._commented(request, name)

    async def _commented(self, request: web.Request, name: str) -> web.Response:
        body = await request.json()
        text = body.get("body") or body.get("text") or body.get("comments", [{}])[0].get("content")
        self.forge.comments.append((name, int(request.match_info["number"]), str(text)))
        return web.json_response({"id": len(self.forge.comments)}, status=201)

    def _forgejo_name(self, request: web.Request) -> str:
        return f"{request.match_info['owner']}/{request.match_info['name']}"

    async def forgejo_repo(self, request: web.Request) -> web.Response:
        if not self._allowed(request, self._forgejo_name(request)):
            return web.json_response(NOT_FOUND, status=404)
        return web.json_response({"full_name": self._forgejo_name(request), "default_branch": "main"})

    async def forgejo_branch(self, request: web.Request) -> web.Response:
        name = self._forgejo_name(request)
        if not self._allowed(request, name):
            return web.json_response(NOT_FOUND, status=404)
        return web.json_response({"name": "main", "commit": {"id": self.forge.head(name)}})

    async def forgejo_protections(self, request: web.Request) -> web.Response:
        name = self._forgejo_name(request)
        if not self._allowed(request, name):
            return web.json_response(NOT_FOUND, status=404)
        return web.json_response([{"branch_name": "main"}] if name in self.forge.protected else [])

    async def forgejo_comment(self, request: web.Request) -> web.Response:
        name = self._forgejo_name(request)
        if not self._allowed(request, name):
            return web.json_response(NOT_FOUND, status=404)
        return await self._commented(request, name)

    def _azure_name(self, request: web.Request) -> str:
        repository = request.match_info.get("repository") or request.query.get("repositoryId", "")
        return f"{request.match_info['project']}/{repository.removeprefix('id-')}"

    async def azure_repository(self, request: web.Request) -> web.Response:
        name = self._azure_name(request)
        if not self._allowed(request, name):
            return web.json_response(NOT_FOUND, status=404)
        return web.json_response({"id": "id-" + name.split("/")[1], "defaultBranch": "refs/heads/main"})

    async def azure_branch(self, request: web.Request) -> web.Response:
        name = self._azure_name(request)
        if not self._allowed(request, name) or request.query.get("name") != "main":
            return web.json_response(NOT_FOUND, status=404)
        return web.json_response({"name": "main", "commit": {"commitId": self.forge.head(name)}})

    async def azure_policies(self, request: web.Request) -> web.Response:
        name = self._azure_name(request)
        if not self._allowed(request, name):
            return web.json_response(NOT_FOUND, status=404)
        scope = {"repositoryId": request.query.get("repositoryId"), "refName": "refs/heads/main", "matchKind": "Exact"}
        guarding = {"isEnabled": True, "isBlocking": True, "settings": {"scope": [scope]}}
        advisory = {**guarding, "isBlocking": False}
        return web.json_response({"value": [guarding] if name in self.forge.protected else [advisory]})

    async def azure_work_item_comment(self, request: web.Request) -> web.Response:
        owned = [
            name for name in self.forge.project_ids.values() if name.startswith(request.match_info["project"] + "/")
        ]
        if not owned or not self._allowed(request, owned[0]):
            return web.json_response(NOT_FOUND, status=404)
        return await self._commented(request, owned[0])

    async def azure_thread(self, request: web.Request) -> web.Response:
        name = self._azure_name(request)
        if not self._allowed(request, name):
            return web.json_response(NOT_FOUND, status=404)
        return await self._commented(request, name)

    async def azure_git(self, request: web.Request) -> web.StreamResponse:
        name = f"{request.match_info['project']}/{request.match_info['repository']}"
        return await self.forge.git_http(request, name, f"/{name}.git/{request.match_info['rest']}")
