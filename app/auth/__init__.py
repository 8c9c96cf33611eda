"""Authentication: Supabase-style HS256 JWTs and the principal they identify."""
