"""Which packages the distribution holds; everything else is in pyproject.toml.

``service`` (every package under it, data-only directories included) plus the top-level
``rules/`` and ``models/`` directories, which stay where they are in the tree and ship as the
data packages ``vllm_sentinel_data.rules`` and ``vllm_sentinel_data.models`` (their files are
listed in pyproject's package-data). At run time ``service.shipped`` finds them with
importlib.resources, in a wheel and in an editable install alike. pyproject.toml cannot
combine a package search with mapped packages, hence this file."""

from setuptools import find_namespace_packages, setup

DATA = {"vllm_sentinel_data.rules": "rules", "vllm_sentinel_data.models": "models"}

setup(
    packages=[*find_namespace_packages(include=["service", "service.*"],
                                       exclude=["*.__pycache__"]), *DATA],
    package_dir=DATA,
)
