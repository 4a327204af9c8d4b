"""Logs, metrics and traces, set up once at each entry point."""
