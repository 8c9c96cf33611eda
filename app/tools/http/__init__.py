"""Tenant HTTP tools: endpoints a tenant admin defines, offered to the model as tools.

`definition.py` says what a valid definition is, `signing.py` how each call is signed,
`store.py` keeps the definitions (secrets sealed), `tool.py` calls one endpoint, and `source.py`
offers a run its tenant's tools (`app/tools/sources.py`). See docs/tools.md, "Tenant HTTP tools".
"""
