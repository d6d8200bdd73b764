"""Small shared helpers (file I/O)."""
