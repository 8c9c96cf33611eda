"""The model registry a run uses: its tenant's own provider keys first, the deployment's otherwise.

`TenantModels.for_run` reads the tenant's stored keys (decrypted, `app.tenants.provider_keys`) in
the run's tenant transaction. A tenant without keys gets the deployment's shared registry. A
tenant with keys gets a registry built from the deployment's settings with its providers replaced
(`app.llm.credentials`), cached per tenant under a fingerprint of its keys and endpoints: while
they stay the same, runs share that registry and its SDK clients; when they change (or are
removed), the old registry's clients are dropped and the next run builds new ones.

A tenant's base URLs are checked against the SSRF rule (`provider_endpoints`) whenever its
registry is built. A key that cannot be decrypted or an endpoint now refused fails the run with
`provider_keys_unavailable` / `provider_endpoint_refused`; neither message holds key material.
"""

from __future__ import annotations

import hashlib

from app.config import Settings
from app.llm.credentials import ProviderCredentials, with_credentials
from app.llm.registry import ModelRegistry
from app.queue.lease import LeasedRun
from app.runtime.provider_endpoints import EndpointRefusedError, check_endpoint
from app.runtime.run_state import RunFailed
from app.tenants.crypto import Keyring, SecretsKeyError, keyring_from_settings
from app.tenants.provider_keys import SecretsUnavailableError, StoredCredential, load_credentials

KEYS_UNAVAILABLE = "provider_keys_unavailable"
ENDPOINT_REFUSED = "provider_endpoint_refused"


def fingerprint(credentials: dict[str, StoredCredential]) -> str:
    """A digest of a tenant's keys and endpoints (what a cached registry was built from)."""
    digest = hashlib.sha256()
    for provider in sorted(credentials):
        stored = credentials[provider]
        for part in (provider, stored.api_key, stored.base_url or ""):
            digest.update(part.encode() + b"\0")
    return digest.hexdigest()


class TenantModels:
    """The deployment's registry plus a cached one per tenant that stores its own keys."""

    def __init__(self, settings: Settings, shared: ModelRegistry | None = None) -> None:
        self.settings = settings
        self.shared = shared if shared is not None else ModelRegistry.from_settings(settings)
        self._tenants: dict[str, tuple[str, ModelRegistry]] = {}
        self._keyring: Keyring | None = None
        self._keyring_loaded = False

    def keyring(self) -> Keyring | None:
        """The SECRETS_KEY keyring, read on first need (a deployment whose tenants store no
        keys never needs one); None without one."""
        if not self._keyring_loaded:
            try:
                self._keyring = keyring_from_settings(self.settings)
            except SecretsKeyError as exc:
                raise RunFailed(KEYS_UNAVAILABLE, f"SECRETS_KEY is invalid: {exc}") from None
            self._keyring_loaded = True
        return self._keyring

    async def for_run(self, leased: LeasedRun) -> ModelRegistry:
        """The registry for `leased`'s tenant (raises `RunFailed` as the module says)."""
        tenant = leased.run.tenant_id
        async with leased.db.tenant(leased.run.principal) as s:
            try:
                stored = await load_credentials(s, tenant, self.keyring)
            except SecretsUnavailableError as exc:
                raise RunFailed(KEYS_UNAVAILABLE, str(exc)) from None
        if not stored:
            self._drop(tenant)
            return self.shared
        digest = fingerprint(stored)
        cached = self._tenants.get(tenant)
        if cached is not None and cached[0] == digest:
            return cached[1]
        credentials: dict[str, ProviderCredentials] = {}
        for provider, entry in stored.items():
            base_url = entry.base_url
            if base_url is not None:
                try:
                    base_url = await check_endpoint(base_url, self.settings)
                except EndpointRefusedError as exc:
                    raise RunFailed(
                        ENDPOINT_REFUSED, f"the tenant's {provider} base URL is refused: {exc}"
                    ) from None
            credentials[provider] = ProviderCredentials(entry.api_key, base_url)
        cached = self._tenants.get(tenant)
        if cached is not None and cached[0] == digest:
            return cached[1]  # a concurrent run of the tenant built it meanwhile
        self._drop(tenant)
        registry = ModelRegistry.from_settings(with_credentials(self.settings, credentials))
        self._tenants[tenant] = (digest, registry)
        return registry

    def _drop(self, tenant: str) -> None:
        cached = self._tenants.pop(tenant, None)
        if cached is not None:
            cached[1].release()
