"""The hybrid decision on a failure-looking line no signature matches: the model's answer
decides; when it abstains but leans to a failure class, the finding is ``unknown`` and still
names the failing line; when it leans to ``healthy``, an error line stays quiet."""

from __future__ import annotations

from service.classify.engine import Classifier
from service.classify.text_model import Prediction
from service.parse.line import parse_line

LINE = "[hccl_socket.cc:100] HcclSocket Listen on port 16666 failed, please check the port"


class FakeModel:
    threshold = 0.4

    def __init__(self, pred: Prediction) -> None:
        self.pred = pred

    def predict(self, text: str, context: object = None) -> Prediction:
        return self.pred


def finding_of(pred: Prediction):
    clf = Classifier(text_model=FakeModel(pred))
    st = clf.state("s")
    line = parse_line(LINE)
    return clf.findings.of_line(st, line, [], None)


def test_a_sure_model_decides_tier_and_category():
    f = finding_of(Prediction("nccl_error", "integration", 0.9, "t", "nccl_error"))
    assert (f.tier, f.category, f.method, f.line) == ("integration", "nccl_error", "model", LINE)


def test_an_unsure_model_leaning_to_a_failure_still_names_the_line():
    f = finding_of(Prediction("unknown", "other", 0.55, "t", "nccl_error"))
    assert (f.tier, f.category, f.line) == ("other", "unknown", LINE)


def test_below_the_floor_or_leaning_healthy_an_error_line_stays_quiet():
    assert finding_of(Prediction("unknown", "other", 0.3, "t", "nccl_error")) is None
    assert finding_of(Prediction("unknown", "other", 0.8, "t", "healthy")) is None
