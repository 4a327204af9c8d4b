"""Small asyncio building blocks shared by the components (no I/O of their own)."""
