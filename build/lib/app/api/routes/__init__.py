"""The API's routers, one module per resource; `app.api.main` mounts them under /api/v1."""
