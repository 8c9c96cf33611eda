"""The audit trail: append-only records of who changed what, written in the changing transaction."""
