"""Stored state (responses, chats) in SQLite, surviving restarts."""
