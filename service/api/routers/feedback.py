"""``/feedback``: every verdict on-call gave on a classification (export for retraining)."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.auth import ReadAuth
from service.api.deps import StoreDep
from service.api.schemas import Feedback
from service.store.views import FeedbackReview

router = APIRouter(prefix="/feedback", tags=["feedback"])


@router.get("", response_model=list[Feedback], dependencies=[ReadAuth])
def list_feedback(store: StoreDep) -> list[FeedbackReview]:
    return store.list_feedback()
