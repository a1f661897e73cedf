"""Start-up settings a model is known to need, checked when the server gets ready: a model
vLLM serves with prefix caching off by default although its traffic needs it, and not
enabled (block ``prefix_caching``; a warning, never a page)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from service.classify.events import Seen
from service.classify.judgements.judge import Blocks, Config, Judge, Kind
from service.classify.judgements.judgement import Judgement
from service.classify.rules import PlaybookRules
from service.classify.stream_state import StreamState


class PrefixCachingModel(Config):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")  # in the model name; names the rule
    name: str  # how the warning names the model


class PrefixCachingRules(Config):
    off_by_default: list[PrefixCachingModel]


class Startup(Judge):
    def __init__(self, rules: PrefixCachingRules) -> None:
        self.models = rules.off_by_default

    def line(self, st: StreamState, seen: Seen) -> Sequence[Judgement]:
        if not seen.ready or seen.line is None:
            return ()
        if st.facts.get("enable_prefix_caching") == "True":
            return ()
        model = st.facts.get("model", "").lower().replace("_", "-")
        return [
            Judgement(
                f"prefix-caching-off-{m.id}",
                "config_error",
                f"{m.name} runs without --enable-prefix-caching (off by default for it): "
                "shared prompts are recomputed",
                seen.line.text,
            )
            for m in self.models
            if m.id in model
        ]


def _judge(rules: PrefixCachingRules, _: Blocks, __: PlaybookRules) -> Judge:
    return Startup(rules)


KIND = Kind("prefix_caching", PrefixCachingRules, _judge, runs=20)
