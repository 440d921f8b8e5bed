"""The ``safecert`` command (Typer): one module per engine, wired together in :mod:`.main`."""
