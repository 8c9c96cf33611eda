"""The shared vocabulary of the runtime: transcript items, run events, run states, errors, the
token estimate. Every package may import it; it imports nothing of ours (stdlib and pydantic
only)."""
