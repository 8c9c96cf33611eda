"""Model providers behind one `Model` interface (`base.py`), resolved by name (`registry.py`)."""
