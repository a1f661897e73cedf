"""What a Fluent Bit / Fluentd record carries besides the envelope: which field holds the
line, the container it came from, and the stream key that names it.

* The line: ``log``, else ``message`` (classic CRI parser, JSON app logs), else ``MESSAGE``
  (journald); a vLLM JSON record a collector parsed into a key of its own counts as one.
* The meta: ``kubernetes`` (Fluent Bit's filter, Fluentd's ``kubernetes_metadata``) and
  ``docker`` maps, ``stream``, and the Fluent tag (a kubelet-path tag fills what the maps
  lack); see docs/log-formats.md §5.3.
* The stream key: ``namespace/pod/container`` when known (stable across container
  restarts), else the container id, else the tag, else the caller's fallback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.ingest.kube import is_kube_object
from service.ingest.runtime_paths import path_meta
from service.ingest.vllm_json import is_vllm_json
from service.records import Meta, MetaText, fill_meta

FD = {"stdout": "stdout", "stderr": "stderr"}  # the fd names, interned
# meta key ← the key of the ``kubernetes`` map (Fluent Bit's name, else another's)
_KUBERNETES: tuple[tuple[MetaText, str, str | None], ...] = (
    ("namespace", "namespace_name", "namespace"),
    ("pod", "pod_name", None),
    ("container", "container_name", None),
    ("container_id", "docker_id", "container_id"),
    ("pod_id", "pod_id", None),
    ("node", "host", None),
    ("image", "container_image", None),
    ("image_id", "container_hash", "container_image_id"),
)


def text_field(record: Mapping[str, Any]) -> Any:
    """The record's line: ``log``, else ``message``, else ``MESSAGE``; ``None`` when it has
    none (the value may be text, bytes or a parsed map)."""
    text = record.get("log")
    if text is None:
        text = record.get("message")
        if text is None:
            text = record.get("MESSAGE")
    return text


def merged_vllm_json(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A vLLM JSON record a collector parsed into a key of its own (Fluent Bit
    ``Merge_Log_Key``) when the record has no line field."""
    for value in record.values():
        if type(value) is dict and is_vllm_json(value):
            return value
    return None


def has_line(record: Mapping[str, Any]) -> bool:
    """Whether :func:`service.ingest.envelope.decode_record` can take ``record``: it has a
    line field (text or bytes; a vLLM JSON record parsed into a map), or it is a Kubernetes
    object."""
    text = text_field(record)
    if type(text) is str or isinstance(text, bytes | bytearray):
        return True
    if type(text) is dict:
        return is_vllm_json(text)
    return is_kube_object(record) or merged_vllm_json(record) is not None


def record_meta(record: Mapping[str, Any], tag: str | None, fd: object) -> Meta:
    """``LogRecord.meta`` from a record's ``kubernetes``/``docker`` maps, its ``stream`` and
    the Fluent tag (a kubelet-path tag fills what the maps lack)."""
    meta: Meta = {}
    kube = record.get("kubernetes")
    if type(kube) is dict:
        get = kube.get
        for key, name, alias in _KUBERNETES:
            v = get(name) or (get(alias) if alias else None)
            if type(v) is str and v:
                meta[key] = v
        v = get("labels")
        if type(v) is dict:
            meta["labels"] = v
    if "container_id" not in meta:
        docker = record.get("docker")
        if type(docker) is dict:
            v = docker.get("container_id") or docker.get("id")
            if type(v) is str and v:
                meta["container_id"] = v
    cid = meta.get("container_id")
    if cid is not None and "://" in cid:
        meta["container_id"] = cid.split("://", 1)[1]  # containerd://<id>, docker://<id>
    if fd == "stdout" or fd == "stderr":
        meta["fd"] = FD[fd]
    if tag:
        meta["tag"] = tag
        if "pod" not in meta:
            fill_meta(meta, path_meta(tag))
    return meta


def stream_key(meta: Meta, default: str) -> str:
    """``namespace/pod/container`` when known (stable across container restarts), else the
    container id, else the Fluent tag, else ``default``."""
    ns = meta.get("namespace")
    pod = meta.get("pod")
    container = meta.get("container")
    if ns and pod and container:
        return f"{ns}/{pod}/{container}"
    return meta.get("container_id") or meta.get("tag") or default
