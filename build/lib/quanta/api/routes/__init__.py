"""The API's routers, one module per resource; `quanta.api.main` mounts them under /api/v1."""
