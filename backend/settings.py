"""Configuration from the environment (and `.env`), checked once at start-up."""

import os
import secrets
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, PrivateAttr, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

# Values that ship in .env.example or docs; production refuses them.
PLACEHOLDER_SECRETS = frozenset({"", "change-me", "changeme", "secret", "dev-secret"})
MIN_PRODUCTION_SECRET_LENGTH = 32
ASYMMETRIC_ALGORITHMS = ("RS256", "ES256", "EdDSA")


class ConfigError(RuntimeError):
    """The configuration cannot run; the message says what to set."""


def _comma_list(value: object) -> object:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", populate_by_name=True
    )

    environment: Literal["development", "production"] = "development"
    database_url: str | None = None
    # Straight to PostgreSQL, for what a transaction-mode pooler in front of DATABASE_URL
    # cannot carry (LISTEN, migrations); unset: DATABASE_URL. Set to another URL, it also
    # says that DATABASE_URL is such a pooler (`behind_pooler`).
    database_direct_url: str | None = None
    data_dir: Path = Field(default=Path(".todo-agent"), alias="TODO_AGENT_DATA_DIR")
    # No overflow by default: under load an overflow connection was opened and closed every
    # few turns, each costing a TLS handshake, type introspection and preparing the hot
    # statements again; a turn holds a connection for one statement at a time, so waiting a
    # moment for a pooled one is cheaper (and 20 leave room for other servers' connections).
    db_pool_size: int = Field(default=20, ge=1)
    db_max_overflow: int = Field(default=0, ge=0)

    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None
    openai_timeout_s: float = Field(default=30.0, gt=0)
    openai_max_retries: int = Field(default=2, ge=0)
    openai_retry_budget_s: float = Field(default=20.0, ge=0)
    agent_model_name: str = "gpt-4o-mini"
    # The models a user may choose in their settings; empty: AGENT_MODEL_NAME only.
    agent_models: Annotated[list[str], NoDecode] = Field(default_factory=list)
    agent_temperature: float | None = Field(default=0.2, ge=0, le=2)
    agent_max_tokens: int = Field(default=1024, ge=1)
    agent_history_messages: int = Field(default=20, ge=1)
    agent_max_tool_rounds: int = Field(default=5, ge=1)
    agent_daily_token_budget: int = Field(default=0, ge=0)
    # Which of the agent's tool calls wait for the person's yes, for users who have not
    # chosen (their setting `confirm`); how long a held call can still be answered.
    agent_confirm_default: Literal["deletes", "changes", "never"] = "deletes"
    agent_approval_ttl_s: float = Field(default=86400.0, gt=0)
    # How many tokens of a person's memories each model call carries (services/memory).
    agent_memory_tokens: int = Field(default=600, ge=0)
    # Days a deleted task stays restorable in the trash before it is purged for good.
    trash_retention_d: float = Field(default=30.0, gt=0)

    jwt_secret: SecretStr | None = None
    jwt_jwks_url: str | None = None
    jwt_algorithms: Annotated[list[str], NoDecode] = Field(default_factory=list)
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_leeway_s: int = Field(default=30, ge=0)
    # The floor between two JWKS fetches; an unknown kid refetches as soon as it allows.
    jwt_jwks_refresh_s: float = Field(default=1.0, ge=0)
    jwt_jwks_cache_s: float = Field(default=3600.0, gt=0)

    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # The URL clients reach the service at: names the MCP resource, and its host is an
    # allowed Host header at /mcp (besides loopback ones).
    public_base_url: str | None = None
    max_request_bytes: int = Field(default=64 * 1024, ge=1024)
    # POST /api/{user_id}/import takes a whole export document: its own, larger cap.
    import_max_bytes: int = Field(default=50 * 1024 * 1024, ge=1024)
    # Documents (docs/documents.md): the largest file, and the bytes of documents a list
    # owner's lists may hold together, whoever uploaded them.
    document_max_bytes: int = Field(default=5 * 1024 * 1024, ge=1024)
    document_quota_bytes: int = Field(default=100 * 1024 * 1024, ge=1024)
    # CalDAV (docs/caldav.md): the largest request body a client may send.
    dav_max_bytes: int = Field(default=1024 * 1024, ge=1024)

    chat_rate_limit_per_minute: int = Field(default=30, ge=0)
    chat_busy_policy: Literal["wait", "reject"] = "wait"
    chat_busy_wait_s: float = Field(default=30.0, ge=0)
    chat_session_lease_s: float = Field(default=120.0, gt=0)
    chat_stream_keepalive_s: float = Field(default=15.0, gt=0)
    idempotency_ttl_s: int = Field(default=24 * 3600, gt=0)

    mcp_enabled: bool = True
    # The audience MCP tokens must carry (default `<PUBLIC_BASE_URL>/mcp`); checked when
    # this or JWT_AUDIENCE is set.
    mcp_jwt_audience: str | None = None
    # The key that seals the `requestState` of an MCP call that asks the user first, so any
    # replica can read the answer; and how long an answer may take.
    mcp_state_secret: SecretStr | None = None
    mcp_state_ttl_s: float = Field(default=600.0, gt=0)

    # Search by meaning (docs/documents.md): unset, documents are searched by words only.
    # The model is served at EMBEDDINGS_BASE_URL with EMBEDDINGS_API_KEY (default: the chat
    # model's OPENAI_BASE_URL and OPENAI_API_KEY), any OpenAI-compatible `/v1/embeddings`.
    embeddings_model: str | None = None
    embeddings_base_url: str | None = None
    embeddings_api_key: SecretStr | None = None
    # A search waits this long for its query's vector, then answers by words alone.
    embeddings_query_timeout_s: float = Field(default=2.0, gt=0)
    # The background worker's calls: their timeout, how many passages each carries, and the
    # first delay before a failed batch is tried again (doubling, up to 10 minutes).
    embeddings_timeout_s: float = Field(default=30.0, gt=0)
    embeddings_batch: int = Field(default=64, ge=1, le=2048)
    embeddings_retry_s: float = Field(default=5.0, gt=0)

    # Events: the outbox's replay window, stream keep-alives, reminders and webhooks.
    events_retention_h: float = Field(default=24.0, gt=0)
    events_keepalive_s: float = Field(default=15.0, gt=0)
    # The longest each replica's reminder clock sleeps without asking (it wakes at the next
    # reminder's time, and when any replica writes an earlier one), and after how long one
    # that fires is "late" (the contract: more than 5 s after its time; the service was
    # not running when it came due).
    reminder_poll_s: float = Field(default=60.0, gt=0)
    reminder_late_after_s: float = Field(default=5.0, ge=0)
    webhook_url: str | None = None
    webhook_secret: SecretStr | None = None
    webhook_retry_schedule_s: Annotated[list[float], NoDecode] = Field(
        default_factory=lambda: [5.0, 30.0, 120.0, 600.0, 3600.0, 10800.0, 36000.0]
    )
    webhook_timeout_s: float = Field(default=10.0, gt=0)
    # The identity provider's user-deletion webhook (POST /hooks/identity), Standard
    # Webhooks signed; unset: that route answers 404.
    identity_webhook_secret: SecretStr | None = None

    # Reminders that reach people (docs/notifications.md): the Web Push key pair's private
    # key (PEM or base64url; made in the data dir in development) and its tokens' subject;
    # where mail goes (unset: no email) and its From; hosts on private networks that push
    # endpoints and ntfy URLs may still reach; Snooze's delay; an action token's life.
    vapid_private_key: SecretStr | None = None
    vapid_subject: str | None = None
    smtp_url: SecretStr | None = None
    mail_from: str | None = None
    notify_allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    notify_snooze_min: float = Field(default=60.0, gt=0)
    notify_action_ttl_h: float = Field(default=24.0, gt=0)

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    # On SIGTERM, how long turns in flight may run on before they are handed to another
    # replica (the platform's termination grace must be longer; docs/operations.md).
    shutdown_grace_s: float = Field(default=20.0, ge=0)
    # Where worker processes share Prometheus samples; `serve` exports it to the workers.
    prometheus_multiproc_dir: Path | None = None
    # The chat page at `/`; None: on in development, off in production.
    web_ui: bool | None = None
    # Not from the environment: set only when the secret is the one made in the data dir.
    _own_dev_secret: bool = PrivateAttr(default=False)

    _split_lists = field_validator(
        "jwt_algorithms", "cors_origins", "agent_models", "webhook_retry_schedule_s", mode="before"
    )(_comma_list)
    _split_hosts = field_validator("notify_allowed_hosts", mode="before")(_comma_list)

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_name(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("embeddings_model")
    @classmethod
    def _blank_is_unset(cls, value: str | None) -> str | None:
        return value.strip() or None if value else None

    @field_validator("public_base_url")
    @classmethod
    def _no_trailing_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") or None if value else None

    @field_validator("database_url", "database_direct_url")
    @classmethod
    def _asyncpg_url(cls, value: str | None) -> str | None:
        return normalize_database_url(value) if value else None

    @property
    def direct_database_url(self) -> str | None:
        """Where a connection of its own goes (LISTEN, migrations): past any pooler."""
        return self.database_direct_url or self.database_url

    @property
    def behind_pooler(self) -> bool:
        """Whether DATABASE_URL is a pooler that may hand each transaction another server
        connection: DATABASE_DIRECT_URL names another way to the database."""
        direct = self.database_direct_url
        return direct is not None and direct != self.database_url

    @property
    def is_production(self) -> bool:
        return self.environment == "production"

    @property
    def allowed_models(self) -> list[str]:
        return self.agent_models or [self.agent_model_name]

    def model_for(self, choice: str | None) -> str:
        """The model for a user's turns: their choice while the operator still allows it."""
        return choice if choice in self.allowed_models else self.agent_model_name

    @property
    def embeddings_url(self) -> str | None:
        return self.embeddings_base_url or self.openai_base_url

    @property
    def embeddings_key(self) -> SecretStr | None:
        return self.embeddings_api_key or self.openai_api_key

    @property
    def web_ui_enabled(self) -> bool:
        return self.web_ui if self.web_ui is not None else not self.is_production

    @property
    def dev_sign_in(self) -> bool:
        """Anyone may get a token for any name: only with the secret this dev server made."""
        return self._own_dev_secret and not self.is_production

    @property
    def development_secret_path(self) -> Path:
        return self.data_dir / "jwt_secret"

    @property
    def development_mcp_secret_path(self) -> Path:
        return self.data_dir / "mcp_state_secret"

    @property
    def development_vapid_key_path(self) -> Path:
        return self.data_dir / "vapid_private_key"

    @property
    def allowed_algorithms(self) -> frozenset[str]:
        """The explicit allowlist; derived from what is configured when not set."""
        if self.jwt_algorithms:
            return frozenset(self.jwt_algorithms)
        derived = ["HS256"] if self.jwt_secret else []
        if self.jwt_jwks_url:
            derived.extend(ASYMMETRIC_ALGORITHMS)
        return frozenset(derived)

    @property
    def webhooks_enabled(self) -> bool:
        return bool(self.webhook_url)

    @field_validator("identity_webhook_secret")
    @classmethod
    def _standard_webhooks_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None
        from standardwebhooks import Webhook

        try:
            Webhook(value.get_secret_value())
        except Exception as error:
            raise ValueError("must be a Standard Webhooks secret: whsec_ + base64") from error
        return value

    @model_validator(mode="after")
    def _webhook_needs_secret(self) -> "Settings":
        if self.webhook_url and not self.webhook_secret:
            raise ValueError("WEBHOOK_URL needs WEBHOOK_SECRET (whsec_ + base64) to sign with")
        return self

    def check_production(self) -> None:
        """Refuse to run in production with anything a development default would fill in."""
        if not self.is_production:
            return
        problems = []
        if not self.database_url:
            problems.append("DATABASE_URL (postgresql+asyncpg://user:pass@host/db)")
        if self.jwt_secret is None and not self.jwt_jwks_url:
            problems.append("JWT_SECRET (at least 32 random characters) or JWT_JWKS_URL")
        if self.jwt_secret is not None and not _real_secret(self.jwt_secret):
            problems.append("JWT_SECRET: " + _REAL_SECRET)
        if self.mcp_enabled:
            if self.mcp_state_secret is None:
                problems.append(
                    "MCP_STATE_SECRET (at least 32 random characters) or MCP_ENABLED=false"
                )
            elif not _real_secret(self.mcp_state_secret):
                problems.append("MCP_STATE_SECRET: " + _REAL_SECRET)
        if problems:
            raise ConfigError(
                "ENVIRONMENT=production refuses to start; set " + "; ".join(problems) + "."
            )

    def with_development_secret(self, *, create: bool = True, serving: bool = False) -> "Settings":
        """In development, the secrets not configured are kept in the data dir (created once,
        unless `create` is false): the JWT secret when there are no JWT settings (so that
        `token` and `serve` agree), and for a server (`serving`) with MCP on, the MCP state
        secret (so that its workers agree)."""
        if self.is_production:
            return self
        update: dict[str, SecretStr] = {}
        if not (self.jwt_secret or self.jwt_jwks_url):
            jwt_secret = _data_dir_secret(self.development_secret_path, create=create)
            if jwt_secret is not None:
                update["jwt_secret"] = jwt_secret
        if serving and self.mcp_enabled and not self.mcp_state_secret:
            mcp_secret = _data_dir_secret(self.development_mcp_secret_path, create=create)
            if mcp_secret is not None:
                update["mcp_state_secret"] = mcp_secret
        settings = self.model_copy(update=update)
        if "jwt_secret" in update:
            settings._own_dev_secret = True
        return settings


_REAL_SECRET = (
    "a real secret of at least 32 characters, not the example value"
    " (python -c 'import secrets; print(secrets.token_urlsafe(48))')"
)


def _real_secret(secret: SecretStr) -> bool:
    value = secret.get_secret_value()
    return value.lower() not in PLACEHOLDER_SECRETS and len(value) >= MIN_PRODUCTION_SECRET_LENGTH


def _data_dir_secret(path: Path, *, create: bool) -> SecretStr | None:
    """The secret in `path`; made first when missing (unless `create` is false), whole or
    not at all, so that processes starting together read the same one."""
    if not path.exists():
        if not create:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
        draft.touch(mode=0o600)
        try:
            draft.write_text(secrets.token_urlsafe(48))
            os.link(draft, path)
        except FileExistsError:
            pass  # another process made it first: theirs is the one
        finally:
            draft.unlink()
    return SecretStr(path.read_text().strip())


def normalize_database_url(url: str) -> str:
    """Accept postgres:// and postgresql:// and use the asyncpg driver."""
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    raise ConfigError(f"DATABASE_URL must be a PostgreSQL URL, got {url.split(':', 1)[0]}://...")


def load_settings(*, serving: bool = False) -> Settings:
    """Settings for a process that serves (`serving`: checked for production) or for a
    command, which asks only for what it uses (`token` a JWT secret, `migrate` a database),
    with the dev secrets it needs resolved."""
    settings = Settings()
    if serving:
        settings.check_production()
    return settings.with_development_secret(serving=serving)
