"""The service's one settings object. Values come from keyword arguments, then `QUANTA_*` environment
variables, then the defaults below. Nothing reads the environment at import time: build it with
`Settings()` where the app is created."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from quanta.allowlist import DEFAULT, Allowlist

# The shortest QUANTA_TOKEN accepted: the first admin's token is the one secret between the network and
# everything, and a short one can be guessed (the tokens Quanta makes have 43 random characters).
MIN_TOKEN_CHARS = 32


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="QUANTA_", extra="ignore")

    db_url: str = Field(default="sqlite:///quanta.db", description="database URL (QUANTA_DB_URL)")
    token: str | None = Field(
        default=None,
        description=f"API token to accept (QUANTA_TOKEN, at least {MIN_TOKEN_CHARS} characters); `quanta serve` "
        "makes one if unset",
    )
    trainable_allowlist: str = Field(
        default=DEFAULT,
        description="comma-separated module prefixes a posted trainable must start with (QUANTA_TRAINABLE_ALLOWLIST)",
    )
    import_check_s: float = Field(
        default=30.0,
        ge=0,
        description="longest a posted trainable's import check may take before the spec is accepted "
        "unchecked; 0: no check, for workers whose environment differs from the server's (QUANTA_IMPORT_CHECK_S)",
    )
    # `quanta serve`
    host: str = "127.0.0.1"
    port: int = 8000
    devices: str = "auto"
    workdir: str = ".quanta"
    # API behaviour
    max_spec_bytes: int = Field(default=1_000_000, description="largest accepted spec body")
    api_docs: bool = Field(default=False, description="serve /docs and /redoc (QUANTA_API_DOCS); they load CDN scripts")
    events_poll_s: float = Field(default=0.5, gt=0, description="how often /events looks for changes")
    events_max_s: float = Field(default=3600.0, gt=0, description="longest one /events stream lasts")
    events_keepalive_s: float = Field(default=15.0, gt=0)
    events_max_streams: int = Field(
        default=64, ge=1, description="open /events streams in all; more get 429 (QUANTA_EVENTS_MAX_STREAMS)"
    )
    events_max_streams_per_token: int = Field(
        default=32,
        ge=1,
        description="open /events streams per token; more get 429 (QUANTA_EVENTS_MAX_STREAMS_PER_TOKEN)",
    )
    delete_wait_s: float = Field(
        default=30.0, ge=0, description="how long DELETE waits for the controller to stop trials before 202"
    )
    metrics_window_s: float = Field(default=60.0, gt=0, description="window of the device busy fraction")

    @field_validator("token")
    @classmethod
    def _long_enough(cls, v: str | None) -> str | None:
        if not v:
            return None  # unset (an empty QUANTA_TOKEN too): `quanta serve` makes one
        if len(v) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"QUANTA_TOKEN has {len(v)} characters; it must have at least {MIN_TOKEN_CHARS} "
                "(make one with: openssl rand -hex 24), or leave it unset and `quanta serve` makes one"
            )
        return v

    @property
    def allowlist(self) -> list[str]:
        return list(Allowlist.parse(self.trainable_allowlist).prefixes)

    def allows(self, module: str) -> bool:
        """True when the trainable's module is an allowed package or lies inside one (`Allowlist.allows`:
        `examples` and `examples.` both admit `examples.mnist1d`, never `examples_evil`)."""
        return Allowlist.parse(self.trainable_allowlist).allows(module)
