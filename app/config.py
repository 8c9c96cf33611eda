"""Settings for every process (API, worker, CLI), read from the environment and `.env`."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, IPvAnyNetwork, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    """All runtime settings. Each field maps to an upper-case environment variable."""

    # AGENT_RUNTIME_ENV_FILE names another file, or none when empty (the test suite uses that
    # so that a developer's .env never reaches a test).
    model_config = SettingsConfigDict(
        env_file=os.environ.get("AGENT_RUNTIME_ENV_FILE", ".env") or None, extra="ignore"
    )

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
    worker_concurrency: int = Field(
        default=32,
        ge=1,
        description="Runs one worker runs at once (most of the time a run waits on a model or "
        "a tool; see BENCHMARKS.md, Concurrency, for sizing it).",
    )
    worker_db_pool_size: int = Field(
        default=20,
        ge=1,
        description="Most pooled database connections a worker keeps (plus half as many "
        "overflow ones): a run uses one only while it writes, never while it waits on a model "
        "or a tool, so this need not grow with WORKER_CONCURRENCY.",
    )
    lease_seconds: float = Field(default=15.0, gt=0, description="Run lease length.")
    heartbeat_seconds: float = Field(
        default=2.0, gt=0, description="Lease renewal (and cancel/recovery check) interval."
    )
    shutdown_grace_seconds: float = Field(
        default=10.0, ge=0, description="On SIGTERM, how long runs may finish before hand-back."
    )
    poll_seconds: float = Field(default=5.0, gt=0, description="Fallback poll when NOTIFY is lost.")
    max_run_attempts: int = Field(
        default=5,
        ge=1,
        description="Times a run may be cut off by its worker stopping (died, froze: its lease "
        "expired) before it fails with `worker_crashed` instead of being taken over again "
        "(1: never taken over). Also: a run hit by a database error in its MAX_RUN_ATTEMPTS-th "
        "claim or later fails instead of being handed back.",
    )
    supabase_jwt_secret: str | None = Field(
        default=None,
        description="HS256 secret for Supabase-issued JWTs (the legacy JWT secret; it keeps "
        "working beside SUPABASE_URL's signing keys).",
    )
    jwt_audience: str = Field(default="authenticated", description="Required `aud` claim.")
    supabase_url: str | None = Field(
        default=None,
        description="Supabase project URL (e.g. https://abcd.supabase.co): accept its "
        "asymmetric access tokens (ES256, RS256, EdDSA), verified with the keys of its JWKS; "
        "`iss` must be `{SUPABASE_URL}/auth/v1`.",
    )
    supabase_anon_key: str | None = Field(
        default=None,
        description="The Supabase project's public anon key (safe in browsers). With "
        "SUPABASE_URL, the workbench page at `/` signs in with Supabase Auth (email + password "
        "or a magic link) and uses the session's access token.",
    )
    supabase_jwks_url: str | None = Field(
        default=None,
        description="JWKS to fetch the signing keys from instead of "
        "`{SUPABASE_URL}/auth/v1/.well-known/jwks.json` (needs SUPABASE_URL).",
    )
    supabase_jwks_cache_seconds: float = Field(
        default=600.0, gt=0, description="How long fetched signing keys are used before a refetch."
    )
    supabase_jwks_min_refetch_seconds: float = Field(
        default=30.0,
        ge=0,
        description="Least time between two JWKS fetches (a token with an unknown `kid` refetches "
        "at most this often; a flood of made-up `kid`s cannot hammer the endpoint).",
    )
    jwt_leeway_seconds: float = Field(
        default=30.0, ge=0, le=300, description="Clock skew allowed on `exp` (and `nbf`, `iat`)."
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated origins browsers may call the API from, exactly as sent "
        "(e.g. `https://app.example.com,http://localhost:3000`); `*` for any (only with "
        "CORS_ALLOW_CREDENTIALS=false). Unset: no cross-origin access.",
    )
    cors_allow_credentials: bool = Field(
        default=True,
        description="Allow credentialed cross-origin requests (cookies, `credentials: "
        "'include'`) from CORS_ORIGINS; must be false with CORS_ORIGINS=*.",
    )
    cors_allow_localhost: bool = Field(
        default=False,
        description="Also allow any `http://localhost:<port>` and `http://127.0.0.1:<port>` "
        "origin (local frontend dev servers). `serve` turns it on for its API on the embedded "
        "database when CORS_ORIGINS is unset.",
    )
    workbench_dev_sign_in: bool = Field(
        default=False,
        description="Let the workbench page at `/` sign in as the dev user by itself. `serve` "
        "turns it on for its API on the embedded database with a generated secret; it only "
        "takes effect when the JWT secret in use is the generated one in AGENT_RUNTIME_DATA_DIR "
        "and HOST is a loopback address (see `app/api/workbench.py`).",
    )
    default_model: str = Field(
        default="offline",
        description="Model of new default agents, and what the model name `default` means "
        "(e.g. `gemini-2.5-flash` or `openai:gpt-4o-mini`; that provider must be configured). "
        "Unset or empty: `gemini-2.5-flash` when Gemini is configured (GEMINI_API_KEY, "
        "GOOGLE_API_KEY or Vertex AI), else `offline`.",
    )

    @model_validator(mode="after")
    def _default_model_from_providers(self) -> Settings:
        """DEFAULT_MODEL not set (or empty): `gemini-2.5-flash` if Gemini is configured, else
        `offline`. An explicit DEFAULT_MODEL always wins."""
        if "default_model" not in self.model_fields_set or not self.default_model.strip():
            self.default_model = "gemini-2.5-flash" if self.gemini_configured() else "offline"
        return self

    def gemini_configured(self) -> bool:
        """Whether `gemini-*` models can be served: a (non-empty) GEMINI_API_KEY or
        GOOGLE_API_KEY, or GOOGLE_GENAI_USE_VERTEXAI with project and location."""
        if self.google_genai_use_vertexai:
            return bool(self.google_cloud_project and self.google_cloud_location)
        keys = (self.gemini_api_key, self.google_api_key)
        return any(k is not None and k.get_secret_value().strip() for k in keys)

    max_turns: int = Field(default=8, ge=1, description="Default model turns per run.")
    run_timeout_seconds: float = Field(
        default=600.0,
        gt=0,
        description="Wall-clock limit of a run (from its first start, across resumptions) for "
        "agents that set no `timeoutSeconds`; a run over it fails with `run_timeout`.",
    )
    context_window_tokens: int = Field(
        default=128_000,
        ge=1024,
        description="Context window (tokens) of models whose window is not known "
        "(app/llm/windows.py: most OpenAI-compatible servers, `offline`); an agent's "
        "`contextWindow` overrides it.",
    )
    context_reserve_tokens: int = Field(
        default=8192,
        ge=0,
        description="Tokens kept free for the answer: a context over window - reserve is "
        "compacted first (the reserve is capped at a quarter of the window).",
    )
    context_tool_result_max_chars: int = Field(
        default=20_000,
        ge=1000,
        description="Tool results longer than this are sent to the model as head + tail with a "
        "marker (the stored result is unchanged).",
    )
    memory_flush_on_compaction: bool = Field(
        default=True,
        description="Before compacting, let the model store durable notes with memory_store "
        "(each message is offered once; only when the agent's policy allows memory_store).",
    )
    sse_keepalive_seconds: float = Field(
        default=10.0,
        gt=0,
        le=15,
        description="SSE keep-alive period (at most 15 s: the stream contract promises one "
        "at least every 15 s).",
    )
    mcp_run_wait_seconds: float = Field(
        default=900.0,
        gt=0,
        description="How long the `/mcp` tool `run_agent` waits for its run to finish; a run "
        "still going then is left running and answered with its runId (docs/tools.md).",
    )
    # Stream tickets (app/auth/stream_ticket.py): EventSource cannot send Authorization.
    stream_ticket_seconds: int = Field(
        default=300,
        ge=10,
        le=86_400,
        description="Lifetime of a stream ticket (`POST /api/agent-runtime/stream-tickets`); "
        "it stays valid across an EventSource's reconnects until then.",
    )
    stream_ticket_secret: SecretStr | None = Field(
        default=None,
        description="Key that signs stream tickets; every API replica needs the same one. "
        "Unset: derived (HKDF) from SUPABASE_JWT_SECRET / the generated JWT secret.",
    )
    workspace_max_file_bytes: int = Field(default=1_000_000, description="Per-file cap.")
    workspace_max_total_bytes: int = Field(default=20_000_000, description="Per-workspace cap.")
    # --- long-term memory (app/memory) ---------------------------------------------------------
    memory_embedder: str = Field(
        default="offline",
        pattern=r"^(offline|gemini:[A-Za-z0-9._/-]+|openai:[A-Za-z0-9._/:-]+)$",
        description="Embedder of memory entries: `offline` (built-in feature hashing; lexical "
        "overlap, not meaning), `gemini:<model>` (e.g. gemini:gemini-embedding-001) or "
        "`openai:<model>` (e.g. openai:text-embedding-3-small, any OpenAI-compatible server). "
        "Changing it re-embeds existing entries in the background. Keys and endpoints: "
        "GEMINI_API_KEY (or Vertex AI) / GOOGLE_GEMINI_BASE_URL, OPENAI_API_KEY / OPENAI_BASE_URL.",
    )
    memory_embedding_dim: Literal[256, 768, 1536] | None = Field(
        default=None,
        description="Vector dimension (the indexed ones: 256, 768, 1536). Unset: the embedder's "
        "default (offline 256, gemini 768, openai 1536).",
    )
    memory_chunk_chars: int = Field(
        default=2000, ge=200, description="Documents longer than this are split into chunks."
    )
    memory_chunk_overlap_chars: int = Field(
        default=200, ge=0, description="Text repeated from the end of one chunk in the next."
    )
    memory_search_candidates: int = Field(
        default=50, ge=1, le=1000, description="Candidates taken from each of vector and text."
    )
    memory_rrf_k: int = Field(default=60, ge=1, description="Reciprocal-rank-fusion constant k.")
    memory_importance_weight: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Share of the score set by importance: factor = 1 - w + w * importance.",
    )
    memory_recency_weight: float = Field(
        default=0.3,
        ge=0,
        le=1,
        description="Share of the score set by recency: factor = 1 - w + w * 0.5^(age/half-life).",
    )
    memory_recency_half_life_days: float = Field(
        default=30.0, gt=0, description="Age (since last update) at which recency decay is 0.5."
    )
    memory_mmr_lambda: float = Field(
        default=0.8,
        ge=0,
        le=1,
        description="MMR trade-off: 1 = relevance only, lower = more diversity.",
    )
    memory_hnsw_ef_search: int = Field(
        default=300,
        ge=1,
        le=1000,
        description="pgvector `hnsw.ef_search` for memory search (higher: better recall, slower; "
        "see BENCHMARKS.md).",
    )
    memory_reembed_batch: int = Field(
        default=64, ge=1, le=1000, description="Entries re-embedded per transaction."
    )
    memory_reembed_interval_seconds: float = Field(
        default=60.0, gt=0, description="How often the re-embed task looks for stale entries."
    )
    subagent_max_depth: int = Field(
        default=3,
        ge=1,
        le=10,
        description="Default spawn depth limit: a child of depth N may not spawn when N reaches "
        "it (agent setting maxSpawnDepth overrides).",
    )
    subagent_max_children_per_run: int = Field(
        default=5,
        ge=1,
        le=100,
        description="Default number of sub-agents one run may spawn (agent setting "
        "maxChildrenPerRun overrides).",
    )
    subagent_max_concurrent_per_tenant: int = Field(
        default=8,
        ge=1,
        le=10_000,
        description="Sub-agent runs of one tenant that may be live (queued, running or parked) "
        "at once; a spawn past it is a tool error.",
    )
    agent_message_max_exchanges: int = Field(
        default=5,
        ge=1,
        le=100,
        description="Default ping-pong cap: sessions_send messages between two sessions per "
        "originating run (agent setting maxExchanges overrides).",
    )
    collect_window_seconds: float = Field(
        default=2.0,
        gt=0,
        le=600,
        description="ifBusy=collect: messages arriving within this window of the previous one "
        "are merged into one queued run, claimed once the window has passed.",
    )
    quota_runs_per_minute: int = Field(
        default=0,
        ge=0,
        description="Runs a tenant may create per minute (a sliding 60-second window); over it "
        "a post is answered 429 quota_exceeded. 0: unlimited. Per tenant: PUT /quotas.",
    )
    quota_active_runs: int = Field(
        default=0,
        ge=0,
        description="Runs a tenant may have running or parked (awaiting approval, waiting) when "
        "it posts a new one; over it: 429. 0: unlimited. Per tenant: PUT /quotas.",
    )
    quota_queued_runs: int = Field(
        default=0,
        ge=0,
        description="Runs a tenant may have queued (not yet claimed); over it a post is answered "
        "429. 0: unlimited. Per tenant: PUT /quotas.",
    )
    quota_tokens_per_day: int = Field(
        default=0,
        ge=0,
        description="Model tokens (input + output) a tenant may use per UTC day: posts are "
        "refused (429) once it is used up, and a run that finds it used up before a model call "
        "fails with quota_exceeded. 0: unlimited. Per tenant: PUT /quotas.",
    )
    approval_ttl_seconds: int = Field(
        default=3600,
        ge=1,
        le=30 * 86400,
        description="How long a tool approval waits for a decision; then it expires (= deny).",
    )
    log_level: str = Field(default="INFO", description="Log level.")
    log_json: bool = Field(default=False, description="Emit logs as JSON lines.")
    metrics_token: SecretStr | None = Field(
        default=None,
        description="Bearer token `GET /metrics` requires (`Authorization: Bearer …`). Unset, "
        "and without METRICS_PORT: `/metrics` answers loopback clients only (404 to others, "
        "and to any request carrying proxy headers).",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Serve `/metrics` on this separate port (on METRICS_HOST) instead of the "
        "API's; a worker run on its own (`agent-runtime worker`) serves its metrics there too.",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        description="Bind address of METRICS_PORT (`0.0.0.0` for a scraper on another host; "
        "keep it on a private network, or set METRICS_TOKEN).",
    )
    otel_exporter_otlp_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP collector base URL (e.g. `http://otel-collector:4318`): traces "
        "are exported when set (the standard OTEL_* variables are honoured too). Unset: no "
        "tracing at all.",
    )
    otel_service_name: str | None = Field(
        default=None,
        description="`service.name` of the traces (default `agent-runtime-api` / "
        "`agent-runtime-worker`).",
    )

    # Web tools (`app/tools/web/`): web_fetch limits and address policy, web_search provider.
    web_fetch_max_bytes: int = Field(
        default=2_000_000,
        ge=1,
        description="web_fetch: most body bytes read (after decompression); the rest is not read.",
    )
    web_fetch_timeout_seconds: float = Field(
        default=20.0,
        gt=0,
        description="Total time of one web_fetch (every redirect and the body) or web_search call.",
    )
    web_fetch_max_redirects: int = Field(
        default=5, ge=0, description="web_fetch: redirects followed (each hop is re-checked)."
    )
    web_fetch_max_chars: int = Field(
        default=50_000, ge=1, description="web_fetch: default `max_chars` of returned content."
    )
    web_allow_private_networks: bool = Field(
        default=False,
        description=(
            "web_fetch may reach private, loopback, link-local and CGNAT addresses (intranet "
            "deployments only). Cloud metadata addresses stay refused unless listed in "
            "WEB_ALLOWED_NETWORKS."
        ),
    )
    web_allowed_networks: list[IPvAnyNetwork] = Field(
        default_factory=list,
        description=(
            'Dev/test: networks web_fetch may reach although not public, e.g. ["127.0.0.1/32"] '
            "for a local test server. Leave empty in production."
        ),
    )
    web_search_provider: Literal["brave", "tavily", "serper"] = Field(
        default="brave", description="web_search provider (needs WEB_SEARCH_API_KEY)."
    )
    web_search_api_key: SecretStr | None = Field(
        default=None, description="API key of the web_search provider; unset: no web_search tool."
    )
    web_search_base_url: str | None = Field(
        default=None,
        description="Base URL of the search provider's API (tests, proxies); unset: its public API.",
    )
    web_user_agent: str = Field(
        default="agent-runtime/0.1 (web_fetch)", description="User-Agent of web tool requests."
    )
    # Tenant HTTP tools (`app/tools/http/`): reached under the web tools' address policy above.
    http_tools_max_response_bytes: int = Field(
        default=100_000,
        ge=1,
        description="Tenant HTTP tools: most response body bytes read (after decompression) and "
        "given to the model; the rest is not read and the result says it was cut.",
    )

    # Code execution (`run_python`, `run_shell`): see `app/tools/sandbox/`.
    sandbox_mode: Literal["bubblewrap", "unsafe-subprocess", "disabled"] = Field(
        default="bubblewrap",
        description=(
            "bubblewrap: run code in a bubblewrap sandbox, and refuse when bwrap is missing or "
            "unusable; unsafe-subprocess: a plain subprocess (rlimits, own process group, empty "
            "env, temp dir) with NO filesystem or network isolation; disabled: always refuse."
        ),
    )
    sandbox_timeout_seconds: int = Field(
        default=30, ge=1, description="Wall-clock limit of a call that names no timeout."
    )
    sandbox_max_timeout_seconds: int = Field(
        default=300, ge=1, description="Largest wall-clock limit a call may ask for."
    )
    sandbox_memory_mb: int = Field(
        default=1024, ge=64, description="Address-space limit of each sandboxed process."
    )
    sandbox_max_processes: int = Field(
        default=64, ge=4, description="Processes and threads a sandbox may have at once."
    )
    sandbox_max_file_mb: int = Field(
        default=64, ge=1, description="Largest file a sandboxed process may write."
    )
    sandbox_max_open_files: int = Field(
        default=256, ge=16, description="Open file descriptors per sandboxed process."
    )
    sandbox_tmp_mb: int = Field(
        default=256, ge=1, description="Size of the sandbox's private /tmp (memory-backed)."
    )
    sandbox_output_max_chars: int = Field(
        default=20_000, ge=200, description="Kept characters of stdout and of stderr, each."
    )
    sandbox_network: bool = Field(
        default=False, description="Give sandboxes the host's network (default: none at all)."
    )
    sandbox_uid: int = Field(
        default=65534,
        ge=1,
        description="Unprivileged uid and gid sandboxes run as when the server runs as root.",
    )

    # MCP servers tenants attach as tool sources: see `app/tools/mcp/` and docs/tools.md.
    mcp_stdio_enabled: bool = Field(
        default=False,
        description="Tenants may attach stdio MCP servers: commands the workers start inside "
        "the code sandbox (bubblewrap; see SANDBOX_*). Off: only streamable HTTP servers.",
    )
    mcp_stdio_readonly_paths: list[str] = Field(
        default_factory=list,
        description="Host paths mounted read-only (at the same path) into stdio MCP servers' "
        'sandboxes, e.g. ["/opt/mcp-servers"] where their programs are installed; /usr is '
        "always there.",
    )
    mcp_connect_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How long connecting to an MCP server (and listing its "
        "tools) may take before it counts as unavailable.",
    )
    mcp_call_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Limit of one MCP tool call when its server sets no timeoutSeconds.",
    )
    mcp_idle_seconds: float = Field(
        default=300.0,
        gt=0,
        description="A worker closes an MCP connection (and stops a stdio "
        "server) unused for this long.",
    )

    # Tenant secrets at rest (app/tenants/crypto.py): tenants' own provider keys.
    secrets_key: SecretStr | None = Field(
        default=None,
        description="AES-256-GCM keys that encrypt tenants' provider keys: `kid:base64` entries "
        "(32 random bytes each, e.g. `openssl rand -base64 32`), comma-separated; the first "
        "encrypts, all decrypt (rotation: put the new key first, run `agent-runtime secrets "
        "reencrypt`, then drop the old one). A bare base64 key gets an id from its hash. Unset: "
        "generated into AGENT_RUNTIME_DATA_DIR/secrets-key on the embedded database; with "
        "DATABASE_URL, tenants cannot store keys until it is set.",
    )

    # Model providers (app/llm). Keys are SecretStr: never printed, logged or put in errors.
    gemini_api_key: SecretStr | None = Field(
        default=None, description="Gemini API key: enables `gemini-*` models (AI Studio)."
    )
    google_api_key: SecretStr | None = Field(
        default=None, description="Alternative name for the Gemini API key."
    )
    google_genai_use_vertexai: bool = Field(
        default=False,
        description="Serve `gemini-*` through Vertex AI (needs GOOGLE_CLOUD_PROJECT and "
        "GOOGLE_CLOUD_LOCATION, and Application Default Credentials) instead of an API key.",
    )
    google_cloud_project: str | None = Field(default=None, description="Vertex AI project id.")
    google_cloud_location: str | None = Field(
        default=None, description="Vertex AI location, e.g. `us-central1` or `global`."
    )
    google_gemini_base_url: str | None = Field(
        default=None, description="Gemini API endpoint override (proxies, tests)."
    )
    google_vertex_base_url: str | None = Field(
        default=None,
        description="Vertex AI endpoint override (proxies, tests); used instead of "
        "GOOGLE_GEMINI_BASE_URL when GOOGLE_GENAI_USE_VERTEXAI is on.",
    )
    openai_api_key: SecretStr | None = Field(
        default=None, description="API key for `openai:<model>` models."
    )
    openai_base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible endpoint for `openai:<model>` (vLLM, Ollama, llama.cpp, "
        "NIM, …), e.g. `http://localhost:11434/v1`; setting it alone enables the provider.",
    )
    openai_structured_output: bool = Field(
        default=True,
        description="Send plan requests' JSON schema to `openai:` models as `response_format` "
        "(`json_schema`). Turn off for servers that reject it (a 400 about `response_format` "
        "also makes the model retry once without it).",
    )
    model_max_retries: int = Field(
        default=4, ge=0, description="Retries of a model call after transient failures."
    )
    model_retry_initial_delay_seconds: float = Field(
        default=1.0, ge=0, description="First retry delay; doubles per retry (plus jitter)."
    )
    model_retry_max_delay_seconds: float = Field(
        default=30.0, ge=0, description="Cap on any retry delay, `Retry-After` included."
    )
    model_request_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        description="Longest wait to connect and for each chunk of a model's streamed answer.",
    )
    gemini_include_thoughts: bool = Field(
        default=True,
        description="Stream thought summaries (`thinking.delta` events) from Gemini models "
        "that think (2.5 and later).",
    )

    @field_validator("supabase_url", "supabase_jwks_url", mode="before")
    @classmethod
    def _http_url_or_unset(cls, value: object) -> object:
        """Empty means unset; a URL must be http(s) with a host (a trailing `/` is dropped)."""
        if not isinstance(value, str):
            return value
        url = value.strip().rstrip("/")
        if not url:
            return None
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL")
        return url

    @field_validator("metrics_token", "otel_exporter_otlp_endpoint", "metrics_port", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        """An empty value (`METRICS_TOKEN=` in compose) means unset."""
        if isinstance(value, str) and not value.strip():
            return None
        return value

    @field_validator("supabase_anon_key", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        """An empty or blank value means unset."""
        if isinstance(value, str):
            return value.strip() or None
        return value

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _origins(cls, value: object) -> object:
        """A comma-separated string (the environment) or a list; each item an exact origin."""
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            return value
        return [_origin(str(item)) for item in items if str(item).strip()]

    @model_validator(mode="after")
    def _web_auth_consistent(self) -> Settings:
        if "*" in self.cors_origins and self.cors_allow_credentials:
            raise ValueError(
                "CORS_ORIGINS=* cannot be combined with credentials (CORS_ALLOW_CREDENTIALS=true, "
                "the default): list the exact origins, or set CORS_ALLOW_CREDENTIALS=false to "
                "let any origin call the API without credentials"
            )
        if self.supabase_jwks_url and not self.supabase_url:
            raise ValueError(
                "SUPABASE_JWKS_URL needs SUPABASE_URL (tokens' `iss` must be {SUPABASE_URL}/auth/v1)"
            )
        if self.supabase_anon_key and not self.supabase_url:
            raise ValueError("SUPABASE_ANON_KEY needs SUPABASE_URL (the project it belongs to)")
        return self

    def supabase_issuer(self) -> str | None:
        """The `iss` of the project's access tokens, when SUPABASE_URL is set."""
        return f"{self.supabase_url}/auth/v1" if self.supabase_url else None

    def jwks_url(self) -> str | None:
        """Where the project's signing keys are published (None: no SUPABASE_URL)."""
        if not self.supabase_url:
            return None
        return self.supabase_jwks_url or f"{self.supabase_url}/auth/v1/.well-known/jwks.json"

    @model_validator(mode="after")
    def _heartbeat_well_inside_lease(self) -> Settings:
        # Under half the lease, a lease survives one missed or late heartbeat.
        if self.heartbeat_seconds >= self.lease_seconds / 2:
            raise ValueError(
                f"HEARTBEAT_SECONDS ({self.heartbeat_seconds:g}) must be less than half of "
                f"LEASE_SECONDS ({self.lease_seconds:g}), so that one late heartbeat does not "
                "lose a run's lease"
            )
        return self


def _origin(text: str) -> str:
    """`text` as a browser sends it in `Origin` (scheme://host[:port], lower case), or `*`."""
    origin = text.strip()
    if origin == "*":
        return origin
    parts = urlsplit(origin.lower())
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        raise ValueError(
            f"CORS origin {origin!r} is not an origin like https://app.example.com or "
            "http://localhost:3000 (scheme, host and optional port; no path)"
        )
    return f"{parts.scheme}://{parts.netloc}"


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings (cached; tests build their own `Settings`)."""
    return Settings()
