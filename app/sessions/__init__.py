"""Reading sessions and their transcripts (for the HTTP API), under the caller's RLS scope."""
