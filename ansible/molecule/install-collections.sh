#!/usr/bin/env bash
# The collections molecule's docker driver needs, taken from the `ansible` wheel on PyPI (Galaxy is not
# reachable here): community.docker, ansible.posix and community.library_inventory_filtering_v1.
# Usage: install-collections.sh DEST PYTHON   (DEST becomes an ANSIBLE_COLLECTIONS_PATH entry)
set -euo pipefail
DEST="$1"; PYTHON="$2"
if [ -d "$DEST/ansible_collections/community/docker" ]; then exit 0; fi
WHEELS="$(mktemp -d)"; trap 'rm -rf "$WHEELS"' EXIT
"$PYTHON" -m pip download -q --no-deps -d "$WHEELS" 'ansible>=12,<13'
mkdir -p "$DEST"
"$PYTHON" - "$WHEELS"/ansible-*.whl "$DEST" <<'PY'
import sys, zipfile
wanted = ("ansible_collections/community/docker/", "ansible_collections/ansible/posix/",
          "ansible_collections/community/library_inventory_filtering_v1/")
with zipfile.ZipFile(sys.argv[1]) as wheel:
    wheel.extractall(sys.argv[2], [name for name in wheel.namelist() if name.startswith(wanted)])
PY
echo "collections installed in $DEST"
