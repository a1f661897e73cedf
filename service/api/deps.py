"""FastAPI dependencies that hand the service's parts to the routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from service.context import ServiceContext
from service.pipeline import Pipeline
from service.store import Store


def get_ctx(request: Request) -> ServiceContext:
    """The service context the app was created with (``create_app(ctx)``)."""
    ctx: ServiceContext = request.app.state.ctx
    return ctx


def get_store(ctx: Annotated[ServiceContext, Depends(get_ctx)]) -> Store:
    if ctx.store is None:
        raise HTTPException(status_code=503, detail="store not available")
    return ctx.store


def get_pipeline(ctx: Annotated[ServiceContext, Depends(get_ctx)]) -> Pipeline:
    if ctx.pipeline is None:
        raise HTTPException(status_code=503, detail="pipeline not available")
    return ctx.pipeline


Ctx = Annotated[ServiceContext, Depends(get_ctx)]
StoreDep = Annotated[Store, Depends(get_store)]
PipelineDep = Annotated[Pipeline, Depends(get_pipeline)]
