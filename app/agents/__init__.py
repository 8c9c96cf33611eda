"""Agents of a tenant: the stored rows (`store`) every layer above the database looks up."""
