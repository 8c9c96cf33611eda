"""Settings for every process (API, worker, CLI), read from the environment and `.env`."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """All runtime settings. Each field maps to an upper-case environment variable."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    database_url: str | None = Field(
        default=None,
        description="Postgres URL. Unset: an embedded Postgres lives in AGENT_RUNTIME_DATA_DIR.",
    )
    agent_runtime_data_dir: Path = Field(
        default=Path(".data"), description="Embedded Postgres data and generated secrets."
    )
    port: int = Field(default=8000, description="HTTP port of `agent-runtime serve`.")
    host: str = Field(default="127.0.0.1", description="HTTP bind address.")
    workers: int = Field(default=1, ge=0, description="Worker processes started by `serve`.")
    worker_concurrency: int = Field(default=8, ge=1, description="Runs one worker runs at once.")
    lease_seconds: float = Field(default=15.0, gt=0, description="Run lease length.")
    heartbeat_seconds: float = Field(
        default=2.0, gt=0, description="Lease renewal (and cancel/recovery check) interval."
    )
    shutdown_grace_seconds: float = Field(
        default=10.0, ge=0, description="On SIGTERM, how long runs may finish before hand-back."
    )
    poll_seconds: float = Field(default=5.0, gt=0, description="Fallback poll when NOTIFY is lost.")
    supabase_jwt_secret: str | None = Field(
        default=None, description="HS256 secret for Supabase-issued JWTs."
    )
    jwt_audience: str = Field(default="authenticated", description="Required `aud` claim.")
    default_model: str = Field(default="offline", description="Model for new default agents.")
    max_turns: int = Field(default=8, ge=1, description="Default model turns per run.")
    sse_keepalive_seconds: float = Field(default=10.0, gt=0, description="SSE keep-alive period.")
    workspace_max_file_bytes: int = Field(default=1_000_000, description="Per-file cap.")
    workspace_max_total_bytes: int = Field(default=20_000_000, description="Per-workspace cap.")
    log_level: str = Field(default="INFO", description="Log level.")
    log_json: bool = Field(default=False, description="Emit logs as JSON lines.")


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings (cached; tests build their own `Settings`)."""
    return Settings()
