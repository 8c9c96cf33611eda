"""Local fake servers speaking the model providers' wire formats (for the real SDKs in tests)."""
