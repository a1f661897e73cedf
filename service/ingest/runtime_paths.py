"""Container identity recovered from container-runtime log paths and Fluent tags.

Kubelet names container logs ``/var/log/containers/<pod>_<namespace>_<container>-<id>.log``
(a symlink to ``/var/log/pods/<namespace>_<pod>_<uid>/<container>/<restart>.log``); Fluent
Bit's tail input turns the path into the tag ``kube.var.log.containers.<pod>_<ns>_<container>-
<id>.log`` (``/`` → ``.``); the pod-name pattern follows Fluent Bit's ``kube_regex.h``. Docker's
json-file driver writes ``/var/lib/docker/containers/<id>/<id>-json.log``. Results are cached
because the same few paths and tags repeat on every record.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import cast

from service.records import Meta

_CONTAINERS = re.compile(
    r"(?:^|[/.])containers[/.]"
    r"(?P<pod>[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*)"
    r"_(?P<namespace>[^_/]+)_(?P<container>[^/]+)-(?P<container_id>[a-f0-9]{64})\.log$"
)
_PODS = re.compile(
    r"(?:^|[/.])pods[/.](?P<namespace>[^_/]+)_(?P<pod>[^_/]+)_(?P<pod_id>[0-9a-f-]{32,36})"
    r"[/.](?P<container>[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)[/.]\d+\.log(?:\.[\w.-]+)?$"
)
_DOCKER = re.compile(r"containers[/.](?P<container_id>[a-f0-9]{64})[/.][a-f0-9]{64}-json\.log")


# a kubelet path is at most ~420 characters (253 pod + 63 namespace + 63 container + 64 id);
# longer names are not container paths, and the patterns never see them
MAX_NAME = 1024


@lru_cache(maxsize=4096)
def _meta(name: str) -> tuple[tuple[str, str], ...]:
    if len(name) > MAX_NAME:
        return ()
    m = _CONTAINERS.search(name) or _PODS.search(name) or _DOCKER.search(name)
    return tuple((k, v) for k, v in m.groupdict().items() if v) if m else ()


def path_meta(name: str | None) -> Meta:
    """``namespace``/``pod``/``container`` (+ ``container_id`` or ``pod_id``), or just
    ``container_id`` for Docker's own files, encoded in a log path or a tail tag derived from
    one; ``{}`` when the name follows none of the conventions."""
    if not name or ("containers" not in name and "pods" not in name):
        return {}
    return cast(Meta, dict(_meta(name)))
