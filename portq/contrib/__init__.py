"""Integrations of portq with web frameworks (each imported only when used)."""
