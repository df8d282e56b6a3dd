"""The package declares what it imports: a library that only arrives through another one's dependencies may leave
with that one's next release."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def imported_top_level_modules() -> set[str]:
    found: set[str] = set()
    for path in (REPO / "pi_dispatch").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.partition(".")[0])
    return {name for name in found if name not in sys.stdlib_module_names and name != "pi_dispatch"}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_distributions() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"].values()
    requirements = [*project["dependencies"], *(requirement for extra in extras for requirement in extra)]
    return {normalized(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0]) for requirement in requirements}


def test_every_imported_library_is_a_declared_dependency() -> None:
    distributions = packages_distributions()
    declared = declared_distributions()
    undeclared = {
        module: distributions.get(module, ["(not installed)"])
        for module in imported_top_level_modules()
        if not {normalized(name) for name in distributions.get(module, [])} & declared
    }
    assert undeclared == {}
