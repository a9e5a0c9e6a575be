"""The OpenAPI docs page (/docs): Swagger UI from the package (static/vendor/), so it works offline
as the dashboard does. FastAPI's own /docs loads Swagger UI from a CDN, and /redoc loads ReDoc and
Google fonts from the internet: both are turned off in the app factory and this page replaces /docs."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

__all__ = ["DOCS_URL", "install_docs"]

DOCS_URL = "/docs"
VENDOR = "/dashboard/static/vendor"  # mounted by tirtune.api.dashboard


def install_docs(app: FastAPI) -> None:
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get(DOCS_URL, include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API docs",
            swagger_js_url=f"{VENDOR}/swagger-ui-bundle.js",
            swagger_css_url=f"{VENDOR}/swagger-ui.css",
            swagger_favicon_url=f"{VENDOR}/swagger-ui-favicon-32x32.png",
            oauth2_redirect_url=None,
            # Swagger UI would otherwise send the schema to validator.swagger.io for a badge.
            swagger_ui_parameters={"validatorUrl": None},
        )
