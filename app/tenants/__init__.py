"""Per-tenant settings an admin manages: quotas and usage, provider keys."""
