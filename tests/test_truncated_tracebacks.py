"""A paste that stops inside a traceback still says where (its frames) and, with a low
confidence, what; a chained traceback keeps the frames of the block that raised first."""

from __future__ import annotations

from service.classify.engine import Classifier
from service.classify.loader import build_classifier
from service.classify.rulebook import RuleBook
from service.offline.report import classify_records
from service.records import LogRecord

RB = RuleBook()
SITE = "/usr/local/lib/python3.12/dist-packages"
TRUNCATED = f"""\
Traceback (most recent call last):
  File "{SITE}/vllm/v1/worker/gpu_worker.py", line 200, in determine_available_memory
    self.model_runner.profile_run()
  File "{SITE}/vllm/v1/worker/gpu_model_runner.py", line 2000, in profile_run
    hidden_states = self._dummy_run(self.max_num_tokens)
  File "{SITE}/torch/nn/modules/module.py", line 1736, in _call_impl
    return forward_call(*args, **kwargs)"""

CHAINED = f"""\
Traceback (most recent call last):
  File "{SITE}/vllm/model_executor/model_loader/default_loader.py", line 269, in load_weights
    loaded_weights = model.load_weights(self.get_all_weights(model_config, model))
ValueError: There is no module or parameter named 'lm_head.bias' in LlamaForCausalLM

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "{SITE}/vllm/entrypoints/cli/main.py", line 73, in main
    args.dispatch_function(args)
RuntimeError: Engine core initialization failed. See root cause above."""


def report(text: str, clf: Classifier) -> dict:
    return classify_records([LogRecord("t", t) for t in text.splitlines()], clf)[0]


def test_a_cut_traceback_says_where_with_a_low_confidence() -> None:
    for clf in (Classifier(RB), build_classifier()):
        inc = report(TRUNCATED, clf)["incidents"][0]
        assert inc["stage"] == "kv_cache_init" and inc["rule"] == "truncated-traceback"
        assert inc["confidence"] <= 0.5 and "_call_impl" in inc["line"]


def test_a_complete_traceback_is_not_called_truncated() -> None:
    text = TRUNCATED + "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    inc = report(text, Classifier(RB))["incidents"][0]
    assert (inc["category"], inc["stage"]) == ("oom_kv_cache", "kv_cache_init")
    assert inc["rule"] != "truncated-traceback"


def test_a_chained_traceback_keeps_the_first_blocks_frames() -> None:
    inc = report(CHAINED, Classifier(RB))["incidents"][0]
    assert inc["stage"] == "model_load", inc
