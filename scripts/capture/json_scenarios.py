#!/usr/bin/env python3
"""Re-run scenarios of scenarios.py with vLLM's JSON log formatter, for the JSON fixtures.

vLLM 0.32 writes JSON logs with ``--logging-config.formatter json`` (vllm/config/logging.py
LoggingConfig.formatter; vllm/logger.py then configures
``pythonjsonlogger.jsonlogger.JsonFormatter`` with vllm/logging_utils/formatter.py
JSON_FORMAT = ``%(asctime)s %(levelname)s %(name)s %(processName)s %(process)d %(message)s``;
python-json-logger adds the record's extra attribute ``vllm_process_name`` and, for logged
exceptions, ``exc_info``). Only vLLM's own loggers change: uvicorn access lines, raw
tracebacks, warnings and other libraries' output stay text, so a JSON-log run is mixed.

Not for CI (needs the venv from setup_vllm_cpu.sh and the models from make_tiny_model.py):

    export HF_HUB_OFFLINE=1
    python3 scripts/capture/json_scenarios.py kv-cache-too-small [more names...]

writes tests/fixtures/real-json/<name>.log, <name>.cri.log and <name>.meta.json (the text
captures of the same scenarios are in tests/fixtures/real).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scenarios  # noqa: E402

OUT = scenarios.REPO / "tests" / "fixtures" / "real-json"
JSON_ARGS = ["--logging-config.formatter", "json"]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("names", nargs="+", help="scenario names of scenarios.py --list")
    ap.add_argument("--outdir", default=str(OUT))
    a = ap.parse_args()
    for name in a.names:
        sc = scenarios.SCENARIOS[name]
        sc["cmd"] = [*sc["cmd"], *JSON_ARGS]
        sc["what"] = f"{sc['what']} (vLLM JSON log formatter: {' '.join(JSON_ARGS)})"
        scenarios.run_scenario(name, Path(a.outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
